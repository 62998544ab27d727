"""How the demo's newcomer ranked the schedules it was offered (schedule sharing, opt-in).

From a `simoe-server demo --share-schedules --out DIR` run: per workload the newcomer was
offered and measured, the newcomer's SiMoE model (as enrolment left it, before any of its
own measurement) scores the offered traces and the candidates its demo tune measured, and
each offered trace is modelled once on the newcomer's simulated GPU (its latency there,
min of 5 modelled repeats; the measured ones: their recorded mean). SiMoE's first batch
takes the best-scored of both (`agent.tune_harness.SeededSearch`), so this shows why an
offered schedule was or was not measured, and what it would have given. SIMULATED.

With `--fleet`, per workload also: how the newcomer's model (the gate's mixture with each
fleet unit's hardware vector) and each of its experts alone rank every simulated fleet
unit's own measured records (the data the experts were trained on) and the newcomer's 16
candidates (Spearman of score with speed), and how the simulator ranks those 16 on each
fleet unit against the newcomer's GPU: whether a poor ranking on the newcomer is the
model's, or the hardware's.

With `--seeds WORK` (a `bench.federation.demo_newcomer --work` directory), instead: each
seed's SiMoE tune's measured candidates in the order measured, their latency (recorded
mean, per run of the task) and, for an offered trace, its number in the offer. Then the
sharing ceiling, per seed: the best SiMoE measured, the best of MetaSchedule's searches at
the two budgets (their stores under the seed's `baselines/`), and the best of every trace
offered for the tuned workload, each modelled once on the newcomer's simulated GPU (min of 5
modelled repeats): whether measuring every offered schedule could have matched MetaSchedule
at the larger budget.

    python -m bench.federation.demo_shared_ranking --data runs/demo_share [--fleet]
    python -m bench.federation.demo_shared_ranking --seeds WORK
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from schemas import BadInputError

if TYPE_CHECKING:
    from simoe_model.model import SiMoE


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="a demo's --out directory")
    parser.add_argument("--seeds", type=Path, help="a demo_newcomer --work directory")
    parser.add_argument(
        "--fleet", action="store_true", help="also the experts on the fleet units' own records"
    )
    args = parser.parse_args(argv)
    if args.seeds is not None:
        seed_view(args.seeds)
        return
    if args.data is None:
        raise BadInputError("give --data DIR (a demo's --out) or --seeds WORK")
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
        if args.fleet:
            fleet_view(args.data, demo.new_gpu, key, mod, [c for _, c, _ in rows], model.model)


def seed_view(work: Path) -> None:
    """Each seed's SiMoE measured candidates, in order; offered traces marked (exact trace)."""
    from agent.node_state import NodeState
    from agent.sharing import received_schedules

    seeds = sorted(work.glob("seed-*/newcomer"))
    if not seeds:
        raise BadInputError(f"--seeds {work}: no seed-*/newcomer (demo_newcomer --work WORK)")
    print("each seed's SiMoE measured candidates, us per run (SIMULATED; #n: offered trace n)")
    for state in seeds:
        node = NodeState(state)
        offered = [
            (json.loads(text), i) for traces in received_schedules(node).values()
            for i, text in enumerate(traces, start=1)
        ]  # fmt: skip
        with node.open_store() as store:
            records = store.records()
        cells = []
        for record in records:
            index = next((i for trace, i in offered if trace == record.trace), 0)
            mark = f" (#{index})" if index else ""
            cells.append(f"{np.mean(record.run_secs) * 1e6:.1f}{mark}")
        print(f"  {state.parent.name}: {', '.join(cells)}")
    print("the sharing ceiling, us per run of the tuned task (SIMULATED):")
    print("  seed    SiMoE  MS small  MS large  best offered (#place of n, modelled)")
    for state in seeds:
        simoe, offered_best, count, place = offer_ceiling(NodeState(state))
        baselines = sorted(
            (state.parent / "baselines").glob("xgb-*"), key=lambda p: int(p.name.split("-")[1])
        )
        ms_best = [best_recorded(NodeState(b)) for b in baselines]
        cells = [f"{v * 1e6:8.1f}" if v is not None else "       -" for v in [simoe, *ms_best]]
        best = f"{offered_best * 1e6:8.1f} (#{place} of {count})" if count else "       - (none)"
        print(f"  {state.parent.name}  {'  '.join(cells)}  {best}")


def fastest_run(records: Sequence[Any]) -> float | None:
    """The fastest successful record's mean run, seconds (None: none succeeded)."""
    runs = [float(np.mean(r.run_secs)) for r in records if r.run_secs]
    return min(runs) if runs else None


def best_recorded(node: Any) -> float | None:
    """The fastest successful record in a node state's store (mean run, seconds)."""
    with node.open_store() as store:
        return fastest_run(store.records())


def offer_ceiling(node: Any) -> tuple[float | None, float | None, int, int]:
    """The node's best measured run, the best of the traces offered for the workloads it
    measured (modelled once each on its simulated GPU; seconds), how many there were, and
    the best one's place in its workload's offer (1: offered first; 0: none offered)."""
    import tvm
    from tvm.s_tir.schedule import Trace

    from agent.devices import get_device
    from agent.sharing import received_schedules

    device = get_device(node.config().device)
    offered = received_schedules(node)
    modelled: list[tuple[float, int]] = []  # (latency, place in its workload's offer)
    with node.open_store() as store:
        records = store.records()
        keys = {r.workload_key for r in records}
        for key in sorted(keys & offered.keys()):
            row = store.workload(key)
            if row is None:
                continue
            mod = tvm.ir.load_json(row["mod_json"])
            for place, text in enumerate(offered[key], start=1):
                sch = tvm.s_tir.Schedule(mod)
                Trace.apply_json_to_schedule(json.loads(text), sch)
                modelled.append((min(device.measure(sch.mod)), place))
    best, place = min(modelled) if modelled else (None, 0)
    return fastest_run(records), best, len(modelled), place


def fleet_view(
    data: Path, new_gpu: str, key: str, mod: Any, candidates: list[Any], model: SiMoE
) -> None:
    """The experts on each simulated fleet unit's own records of workload `key`, and the
    simulator's ranking of the newcomer's candidates on each unit against the newcomer's."""
    import tvm
    from scipy.stats import spearmanr
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace

    from agent.devices import get_device
    from agent.node_state import NodeState
    from simoe_model.features import extract_features
    from simoe_model.hardware import hardware_vector
    from simoe_model.train import predict, predict_expert

    args_info = ms.arg_info.ArgInfo.from_prim_func(mod["main"])

    def rhos(features: list[np.ndarray], speed: np.ndarray, vector: np.ndarray) -> str:
        parts = [f"mixture {spearmanr(predict(model, features, vector), speed).statistic:+.2f}"]
        parts += [
            f"{name} {spearmanr(predict_expert(model, name, features), speed).statistic:+.2f}"
            for name in model.expert_names
        ]
        return ", ".join(parts)

    print("  Spearman(score, speed) on each simulated fleet unit's own records:")
    units = []
    for unit_dir in sorted((data / "nodes").iterdir()):
        unit = NodeState(unit_dir)
        name = unit.config().device
        if not name.startswith("sim:") or name == f"sim:{new_gpu}":
            continue
        device = get_device(name)
        units.append(device)
        with unit.open_store() as store:
            records = [r for r in store.records(workload_key=key, device=name) if r.run_secs]
        profile = unit.cached_profile(name)
        if not records or profile is None:
            continue
        context = ms.TuneContext(
            mod=mod, target=device.target(), space_generator="post-order-apply", task_name=key
        )
        measured = []
        for record in records:
            sch = tvm.s_tir.Schedule(mod)
            Trace.apply_json_to_schedule(record.trace, sch)
            measured.append(ms.MeasureCandidate(sch, args_info))
        speed = -np.asarray([np.mean(r.run_secs) for r in records])
        features = extract_features(context, measured)
        vector = hardware_vector(profile)
        print(f"    {unit_dir.name} ({len(records)}): {rhos(features, speed, vector)}")
        if unit_dir.name in model.expert_names:  # its own expert on its own records
            own = predict_expert(model, unit_dir.name, features)
            pairs = sorted(zip(-speed * 1e6, own, strict=True))
            text = " ".join(f"{u:.0f}:{v:+.2f}" for u, v in pairs)
            print(f"      its own expert, fastest first (us:score): {text}")
    target = get_device(f"sim:{new_gpu}")
    modelled = {
        d.name: np.asarray([min(d.measure(c.sch.mod)) for c in candidates])
        for d in [target, *units]
    }
    print(f"  the simulator: the {len(candidates)} candidates above, Spearman of each unit's")
    print(f"  latencies with {target.name}'s (SIMULATED):")
    for device in units:
        rho = spearmanr(modelled[device.name], modelled[target.name]).statistic
        print(f"    {device.name}: {rho:+.2f}")


if __name__ == "__main__":
    from bench import prepare

    prepare()
    from schemas.errors import run_cli

    run_cli(main, "demo_shared_ranking")
