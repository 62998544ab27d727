"""How many of a probe file's candidates are programs of the protocol fleet (SIMULATED fleet).

    python -m bench.federation.probe_overlap --probes FILE [FILE ...] [--unit 1080-u1]

A probe candidate counts as a fleet candidate when its log-transformed feature rows
(`simoe_model.features.pack_rows`, the probe file's form), rounded to 3 decimals, equal
those of one of the unit's candidates (every unit of the fleet holds the same sample but a
few a GPU could not run). The bench's own probe file (`federation_helps.write_probe_file`)
is drawn from those candidates; `simoe-agent probes build` samples the suite anew.
Reads features only, no latency.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np


def _key(rows: np.ndarray) -> str:
    return hashlib.sha1(np.round(np.asarray(rows, np.float32), 3).tobytes()).hexdigest()


def overlap(probe_files: list[Path], unit: str) -> dict:
    from bench import protocol
    from bench.federation.fleet import load_gpus
    from simoe_model.features import pack_rows
    from simoe_model.probe_file import load_probes

    gpu = load_gpus([protocol.DATA_DIR], [unit], [])[unit]
    fleet: set[str] = set()
    for task in gpu.dataset.tasks:
        rows, offsets = pack_rows(list(task.features))
        fleet |= {_key(rows[offsets[c] : offsets[c + 1]]) for c in range(len(offsets) - 1)}
    out: dict = {"simulated": True, "unit": unit, "fleet_candidates": len(fleet), "files": {}}
    for path in probe_files:
        total = same = 0
        for task in load_probes(path):
            rows, segment = task.rows.numpy(), task.segment.numpy()
            for c in range(task.n):
                total += 1
                same += _key(rows[segment == c]) in fleet
        out["files"][str(path)] = {"probe_candidates": total, "fleet_candidates_among_them": same}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=Path, nargs="+", required=True)
    parser.add_argument("--unit", default="1080-u1", help="a protocol fleet unit")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    text = json.dumps(overlap(args.probes, args.unit), indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    from schemas.errors import run_cli

    run_cli(main, "probe_overlap")
