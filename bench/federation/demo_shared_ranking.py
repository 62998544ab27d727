"""How the demo's newcomer ranked the schedules it was offered (schedule sharing, opt-in).

From a `simoe-server demo --share-schedules --out DIR` run: per workload the newcomer was
offered and measured, the newcomer's SiMoE model (as enrolment left it, before any of its
own measurement) scores the offered traces and the candidates its demo tune measured, and
each offered trace is modelled once on the newcomer's simulated GPU (its latency there,
min of 5 modelled repeats; the measured ones: their recorded mean). SiMoE's first batch
takes the best-scored of both (`agent.tune_harness.SeededSearch`), so this shows why an
offered schedule was or was not measured, and what it would have given. SIMULATED.

    python -m bench.federation.demo_shared_ranking --data runs/demo_share
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from schemas import BadInputError


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a demo's --out directory")
    args = parser.parse_args(argv)
    import tvm
    from scipy.stats import spearmanr
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace

    from agent.cost_models import make_cost_model
    from agent.devices import get_device
    from agent.node_state import NodeState
    from agent.sharing import received_schedules
    from server.demo_report import DemoReport

    if not (args.data / "demo.json").is_file():
        raise BadInputError("--data: give a `simoe-server demo --out` directory (its demo.json)")
    demo = DemoReport.model_validate_json((args.data / "demo.json").read_text())
    node = NodeState(args.data / "nodes" / f"new-{demo.new_gpu}")
    offered = received_schedules(node)
    if not offered:
        raise BadInputError(f"{node.dir}: no offered schedules (a demo with --share-schedules?)")
    device = get_device(f"sim:{demo.new_gpu}")
    model = make_cost_model("simoe", device, node)
    with node.open_store() as store:
        tasks = [
            (key, tvm.ir.load_json(row["mod_json"]), store.records(workload_key=key,
                                                                    device=device.name))
            for key in offered
            if (row := store.workload(key)) is not None
        ]  # fmt: skip
    for key, mod, records in tasks:
        if not records:
            continue
        context = ms.TuneContext(
            mod=mod, target=device.target(), space_generator="post-order-apply", task_name=key
        )
        args_info = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        rows: list[tuple[str, object, float]] = []
        for index, text in enumerate(offered[key], start=1):
            sch = tvm.s_tir.Schedule(mod)
            Trace.apply_json_to_schedule(json.loads(text), sch)
            latency = min(device.measure(sch.mod))
            rows.append((f"offered #{index}", ms.MeasureCandidate(sch, args_info), latency))
        for record in records:
            sch = tvm.s_tir.Schedule(mod)
            Trace.apply_json_to_schedule(record.trace, sch)
            rows.append(
                ("measured", ms.MeasureCandidate(sch, args_info), float(np.mean(record.run_secs)))
            )
        scores = np.asarray(model.predict(context, [c for _, c, _ in rows]), dtype=np.float64)
        print(f"workload {key} on sim:{demo.new_gpu} (SIMULATED latencies), best score first:")
        ranked = sorted(zip(rows, scores, strict=True), key=lambda x: -x[1])
        for (label, _, latency), score in ranked:
            print(f"  {label:12s} score {score:+.3f}  latency {latency * 1e6:8.1f} us")
        rho = spearmanr(scores, [-lat for _, _, lat in rows]).statistic
        print(f"  Spearman(score, speed) over all {len(rows)}: {rho:+.3f}")


if __name__ == "__main__":
    from bench import prepare

    prepare()
    from schemas.errors import run_cli

    run_cli(main, "demo_shared_ranking")
