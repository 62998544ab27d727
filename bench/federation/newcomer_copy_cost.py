"""What the newcomers' distilled copy costs the server (`--newcomer-distill-steps`).

    python -m bench.federation.newcomer_copy_cost [--teachers 30] [--steps 600] [--threads 1]

`server.distillation.distill_to_scores` on the probe set SiMoE ships, from a fresh global
toward `--teachers` experts' scores (random experts and random scores: the cost does not
depend on what they say), as `SiMoEStrategy.newcomer_arrays` runs it once per global version.
Prints one JSON line: wall and CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teachers", type=int, default=30)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from server.distillation import distill_to_scores
    from simoe_model.model import Expert, SiMoE, SiMoEConfig, shared_arrays
    from simoe_model.probe_file import SUITE_PROBES, load_probes

    probes = load_probes(str(SUITE_PROBES))
    torch.manual_seed(0)
    global_arrays = shared_arrays(SiMoE())
    rng = np.random.default_rng(0)
    teachers = [
        (
            {k: v.numpy().copy() for k, v in Expert(SiMoEConfig()).state_dict().items()},
            [rng.normal(size=t.n).astype(np.float32) for t in probes],
        )
        for _ in range(args.teachers)
    ]
    cpu, wall = time.process_time(), time.perf_counter()
    distill_to_scores(global_arrays, teachers, probes, steps=args.steps, seed=0)
    result = {
        "teachers": args.teachers,
        "steps": args.steps,
        "probe_programs": sum(t.n for t in probes),
        "threads": args.threads,
        "wall_s": round(time.perf_counter() - wall, 2),
        "cpu_s": round(time.process_time() - cpu, 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
