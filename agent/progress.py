"""The one progress-callback type of the agent's long steps: profiling, tuning, datasets."""

from __future__ import annotations

from collections.abc import Callable

# Called as progress(what, done, total): the probe, task or workload being worked on,
# the steps of it done so far and its total (probes measured, candidates measured within
# the task's trial budget, workloads sampled). The CLIs turn it into a rich progress bar.
ProgressCallback = Callable[[str, int, int], None]
