"""How differently two units of one GPU model rank the same candidates (SIMULATED fleet).

    python -m bench.transfer.protocol_pairs      # docs/results/protocol_unit_pairs.md

For every pair of units that share a model (same spec sheet, different unit state: power
limit, factory clock, ECC, power mode), the measured rank agreement of their latencies:
mean per-task Spearman over the candidates both measured (simoe_model.train's
`_agreements`, the quantity the hardware encoder's similarity is trained to reproduce),
and the ratio of their geometric-mean latencies. Agreement near 1 means the unit state
scales latencies without reordering candidates: there is then nothing for the probes to
tell apart in a top-1 ranking, whatever the representation.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from bench import protocol

OUT = Path(__file__).resolve().parents[2] / "docs" / "results" / "protocol_unit_pairs.md"


def model_pairs() -> list[tuple[str, str, str]]:
    """(split, unit a, unit b) for the first two units of every model with two or more."""
    from agent.devices.sim.catalog import resolve

    out = []
    for split in ("train", "validation", "test"):
        by_model: dict[str, list[str]] = {}
        for unit in protocol.units(split):  # type: ignore[arg-type]
            spec = resolve(protocol.device_of(unit).removeprefix("sim:"))
            by_model.setdefault(spec.model or spec.key, []).append(unit)
        out += [(split, v[0], v[1]) for v in by_model.values() if len(v) >= 2]
    return out


def pair_rows(labels: protocol.UnitLabels) -> list[dict]:
    from simoe_model.train import _agreements

    purpose = {"train": "train", "validation": "select", "test": "test"}
    rows = []
    for split, a, b in model_pairs():
        da, db = (labels.load(u, purpose[split]) for u in (a, b))  # type: ignore[arg-type]
        _, values = _agreements([da, db])
        lat_a = {
            (t.task_name, c): x
            for t in da.tasks
            for c, x in zip(t.candidate_ids or [], t.latencies, strict=bool(t.candidate_ids))
        }
        lat_b = {
            (t.task_name, c): x
            for t in db.tasks
            for c, x in zip(t.candidate_ids or [], t.latencies, strict=bool(t.candidate_ids))
        }
        both = sorted(lat_a.keys() & lat_b.keys())
        ratio = float(np.exp(np.mean([np.log(lat_b[k] / lat_a[k]) for k in both])))
        rows.append({"split": split, "a": a, "b": b, "agreement": float(values[0]),
                     "latency_ratio": ratio, "shared": len(both)})  # fmt: skip
    return rows


def markdown(rows: list[dict], run: str = "") -> str:
    lines = [
        "# Units of one model: how differently they rank candidates (SIMULATED)",
        "",
        "Command: `python -m bench.transfer.protocol_pairs`. Agreement = mean per-task "
        "Spearman of the "
        "two units' latencies over the candidates both measured; latency ratio = geometric "
        "mean of b/a over them. No training, no seed: every unit's labels as built.  ",
        run,
        "",
        "| split | unit a | unit b | rank agreement | latency ratio b/a | shared candidates |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['split']} | {r['a']} | {r['b']} | {r['agreement']:.4f} | "
        f"{r['latency_ratio']:.3f} | {r['shared']} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=protocol.DATA_DIR)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    started = time.perf_counter()
    rows = pair_rows(protocol.UnitLabels(args.data))
    digest = protocol.fleet_hashes(args.data)["digest"]
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    run = f"Fleet digest {digest[:12]}...; {time.perf_counter() - started:.0f} s; load {load}."
    text = markdown(rows, run)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    from bench import prepare

    prepare()
    main()
