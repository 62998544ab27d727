"""The weight each node's teacher would get with `--teacher-balance` (SIMULATED fleets).

    python -m bench.federation.teacher_weights --registry DIR/registry.sqlite [--out FILE.json]

From a finished federation's registry (its latest global and every node's expert):
`server.distillation.cluster_weights` over the experts' hardware in the global's z (1 / the
summed positive cosine to all teachers, mean 1), per node, and the share of the total weight
held by each hardware family named in `FAMILIES` (by unit-name prefix), beside its share
with all teachers alike. Says whether the balance would move the distillation's targets at
all on that run (a z in which every node is alike gives every node weight 1).
"""

from __future__ import annotations

import argparse
from pathlib import Path

# unit-name prefixes of the embedded (Jetson) units of the protocol fleet: the family the
# sixth round's teachers pulled the encoder away from
FAMILIES: dict[str, tuple[str, ...]] = {
    "embedded": ("tx2-", "nano-", "orin-", "xavier-"),
}


def weights(registry_path: Path) -> dict:
    import torch

    from bench.federation.saved_run import read_saved_run
    from server.distillation import cluster_weights
    from simoe_model.model import SiMoE, load_shared_arrays

    run = read_saved_run(registry_path)
    experts = run.experts
    model = SiMoE()
    load_shared_arrays(model, run.global_arrays)
    model.eval()
    names = sorted(n for n, arrays in experts.items() if arrays is not None)
    hardware = [torch.as_tensor(experts[n]["hardware"]) for n in names]  # type: ignore[index]
    w = cluster_weights(model, hardware).tolist()
    units = [n.split(":")[-1] for n in names]
    shares = {}
    for family, prefixes in FAMILIES.items():
        members = [i for i, u in enumerate(units) if u.startswith(prefixes)]
        shares[family] = {
            "units": [units[i] for i in members],
            "balanced_share": sum(w[i] for i in members) / sum(w),
            "equal_share": len(members) / len(w),
        }
    return {
        "simulated": True,
        "registry": str(registry_path),
        "global_version": run.version,
        "weights": dict(zip(units, w, strict=True)),
        "families": shares,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from bench.reporting import print_json

    print_json(weights(args.registry), args.out)


if __name__ == "__main__":
    from schemas.errors import run_cli

    run_cli(main, "teacher_weights")
