"""The public probe set a server distils on and fits the similarity to (`probes build`).

For each public workload, candidates of MetaSchedule's design space are sampled with the
fleet datasets' own sampling (`agent.fleet_dataset.sample_workload`, seed + workload index,
one thread: the same sample on every run) and only their program features are kept: no
candidate is built or measured, so the file carries no latency of any device. The file's
format is `simoe_model.probe_file`'s, which the server's `--probes` reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from schemas import BadInputError

# Fewer than two candidates rank nothing: such a task is left out of the file.
MIN_CANDIDATES = 2


class ProbeSetSummary(BaseModel):
    """What `probes build` wrote; the `--json` output of the command."""

    model_config = ConfigDict(extra="forbid")

    out: str
    target: str
    seed: int
    per_task: int
    candidates: dict[str, int]  # workload -> distinct candidates written (0: left out)


def probe_target(device: str | None) -> Any:
    """The cuda target candidates are sampled for: `sim:<gpu>` or `cuda:N`'s, or (None) a
    cuda target with the loosest limits of the simulated catalog, as fleet datasets sample."""
    if device is None:
        from agent.devices.sim.catalog import load_catalog
        from agent.fleet_dataset import generic_target

        return generic_target(list(load_catalog().values()))
    if not device.strip().startswith(("sim:", "cuda")):
        raise BadInputError(f"--device {device}: probes are GPU programs; use sim:<gpu> or cuda:N")
    from agent.devices import get_device

    return get_device(device).target()


def build_probe_set(
    out: Path,
    workloads: Sequence[str],
    *,
    per_task: int,
    seed: int,
    target: Any,
    progress: Callable[[str, int, int], None] = lambda _name, _done, _total: None,
) -> ProbeSetSummary:
    """Sample `per_task` candidates of each workload (seed + its index), keep their features,
    write the probe file; BadInputError when no workload yields two distinct candidates."""
    from agent.fleet_dataset import sample_workload
    from simoe_model.features import extract_features, pack_rows
    from simoe_model.probe_file import save_probes

    if per_task < MIN_CANDIDATES:
        raise BadInputError(f"--per-task {per_task}: at least {MIN_CANDIDATES} candidates a task")
    if out.is_dir():
        raise BadInputError(f"--out {out} is a directory: name the probe file to write")
    tasks = []
    counts: dict[str, int] = {}
    for index, workload in enumerate(workloads):
        progress(workload, index, len(workloads))
        sampled = sample_workload(workload, target, per_task, seed=seed + index)
        kept = len(sampled.candidates) >= MIN_CANDIDATES
        counts[workload] = len(sampled.candidates) if kept else 0
        if not kept:
            continue
        tasks.append(pack_rows(extract_features(sampled.context, sampled.candidates)))
    progress("", len(workloads), len(workloads))
    if not tasks:
        raise BadInputError("no workload yielded two distinct candidates: no probe file written")
    out.parent.mkdir(parents=True, exist_ok=True)
    save_probes(out, tasks)
    return ProbeSetSummary(
        out=str(out), target=str(target), seed=seed, per_task=per_task, candidates=counts
    )
