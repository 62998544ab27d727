"""Schedule sharing on vs off, through the product's own path, on simulated validation units.

    python -m bench.federation.sharing_onoff                 # defaults below; writes docs/results/
    python -m bench.federation.sharing_onoff --units t4-cool,l4-u1 --seeds 0 --budgets 4   # smaller
    python -m bench.federation.sharing_onoff --reserve 0.25,0.5,1   # sharing on at 3 reserves

Donors (training units of the protocol, `--donors`) each tune every workload with
MetaSchedule's XGB at `--donor-trials` into their own node store, opt in to schedule
sharing and share (agent.sharing.schedule_share: top 3 traces per workload) into a
server registry. For each validation unit (a newcomer with no records and no federation
model), the server's offer (server.strategy.SiMoEStrategy.schedule_offer: the 3 donors most
similar to it by the starter model's hardware encoder, server.similarity) seeds its tune
(agent.tuner.tune_workload, `--cost-model simoe`: the shipped starter model, trained on
training units only), at each budget and seed, against the same tune without it. The
workloads are not in the starter model's training data.

Validation units only (bench/protocol.py): this is a design check, not the test split.
Simulated: every latency is the simulator's model of the unit (`sim:<unit>`), labelled so,
never a measurement. Each tune re-measures its best schedule the same way
(`best_measured_during_tuning_s`); the ratio off/on > 1 means sharing found faster.

`--reserve R[,R2..]`: sharing on is tuned once per reserve (the share of the first batch kept
for the offered traces in offer order, `tune_workload(shared_reserve=...)`), each against the
same sharing-off tune, donors, offer, seeds and newcomers; the choice among them follows
bench.protocol.SHARED_RESERVE_RULE.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

import bench
from bench import protocol
from schemas import BadInputError

DONORS = ("v100-sxm2", "a100-pcie-250w", "3090-fe", "a40-ecc-on", "l40s-u1")
WORKLOADS = ("matmul:256,256,256", "conv2d:1,64,28,28,64,3,3,1,1")


def _node(root: Path, name: str, device: str, share: bool) -> Any:
    from agent.enroll import create_node_key
    from agent.node_state import NodeState
    from schemas import AgentConfig

    node = NodeState(root / name)
    if not node.config_path.exists():
        node.save_config(AgentConfig(name=name, device=device, share_schedules=share))
        create_node_key(node.dir)
    return node


def _tune(node: Any, device: Any, workload: str, trials: int, cost_model: str, seed: int,
          shared: Any = None, reserve: float | None = None,
          population: int | None = None) -> dict[str, Any]:  # fmt: skip
    from agent.tuner import tune_workload
    from agent.workloads import parse_workload

    with node.open_store() as store:
        result = tune_workload(
            parse_workload(workload), device, store, trials=trials, cost_model=cost_model,
            node=node, seed=seed, baseline=False, shared=shared, population=population,
            **({} if reserve is None else {"shared_reserve": reserve}),
        )  # fmt: skip
    task = result.tasks[0]
    return {
        "best_s": task.best_measured_during_tuning_s,
        "search_wall_s": result.search_wall_s,
        "shared_schedules": result.shared_schedules,
        "shared_skipped": result.shared_skipped,
    }


def _donor_tune(node: Any, device: Any, workload: str, trials: int) -> dict[str, Any]:
    """The donor's XGB tune of one workload, once: its summary is written beside the node
    after the tune committed, so a rerun on the same `--work` reuses it. (Counting the
    store's records instead mistook one workload's records for another's.)"""
    name = re.sub(r"[^A-Za-z0-9]+", "-", workload)
    done = node.dir / f"donor-tune-{name}-{trials}.json"
    if done.exists():
        return json.loads(done.read_text())
    summary = _tune(node, device, workload, trials, "xgb", 0)
    done.write_text(json.dumps(summary))
    return summary


def _population_tag(population: int | None) -> str:
    """The scratch directories' tag of a `--population` run (none: the product's own)."""
    return "" if population is None else f"p{population}-"


def _off_dir(seed: int, budget: int, population: int | None = None) -> str:
    return f"off-{_population_tag(population)}{seed}-{budget}"


def _on_dir(reserve: float, seed: int, budget: int, population: int | None = None) -> str:
    return f"on-{_population_tag(population)}r{reserve:g}-{seed}-{budget}"


def parse_reserves(text: str) -> list[float]:
    """`--reserve`'s comma-separated shares of the first batch, each in [0, 1]; ValueError
    (one line) otherwise."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--reserve takes numbers in [0, 1], got {text!r}") from None
    bad = [v for v in values if not 0.0 <= v <= 1.0]
    if bad or len(set(values)) != len(values):
        raise ValueError(f"--reserve takes distinct numbers in [0, 1], got {text!r}")
    return values


def run(args: argparse.Namespace, save: Any = None) -> dict[str, Any]:
    from agent.devices import get_device
    from agent.model_choice import starter_model_path
    from agent.search_start import SharedSeeds
    from agent.sharing import schedule_share
    from server.registry import Registry
    from server.similarity import model_similarity
    from server.strategy import SiMoEStrategy
    from simoe_model.model import load_model, shared_arrays

    root = args.work
    root.mkdir(parents=True, exist_ok=True)
    registry = Registry(root / "registry.sqlite")
    strategy = SiMoEStrategy(registry, model_similarity, share_units=3)
    arrays = shared_arrays(load_model(starter_model_path()))
    donors: dict[str, Any] = {}
    for unit in args.donors:
        device = get_device(protocol.device_of(unit))
        node = _node(root, f"donor-{unit}", device.name, share=True)
        for workload in args.workloads:
            donors[f"{unit} {workload}"] = _donor_tune(node, device, workload, args.donor_trials)
        registry.upsert_node(node.hello(), len(donors))
        share = schedule_share(node)
        assert share is not None
        registry.put_share(node.fingerprint(), share, round_=1)
        print(f"donor {unit}: shared {len(share.schedules)} traces", flush=True)
    rows: list[dict[str, Any]] = []
    offers: dict[str, tuple[Any, Any, list[str]]] = {}
    for i, unit in enumerate(args.units):
        device = get_device(protocol.device_of(unit))
        newcomer = _node(root, f"new-{unit}", device.name, share=True)
        newcomer.profile(device)
        registry.upsert_node(newcomer.hello(), 1000 + i)
        offer = strategy.schedule_offer(newcomer.fingerprint(), arrays, [], 1)
        offers[unit] = (device, offer, sorted({o.source for o in offer.schedules}))
    # workloads outermost: a run cut short by the clock has whole workloads, every unit and seed
    for workload in args.workloads:
        for unit, (device, offer, sources) in offers.items():
            newcomer = _node(root, f"new-{unit}", device.name, share=True)
            for budget in args.budgets:
                for seed in args.seeds:
                    row: dict[str, Any] = {
                        "unit": unit, "workload": workload, "budget": budget, "seed": seed,
                        "offered_sources": sources,
                    }  # fmt: skip
                    off_dir = _off_dir(seed, budget, args.population)
                    scratch = _node(root / off_dir, unit, device.name, False)
                    scratch.save_profile(newcomer.profile(device))
                    row["off"] = _tune(scratch, device, workload, budget, "simoe", seed,
                                       population=args.population)  # fmt: skip
                    row["on"] = {}  # by reserve: the same offer, seed and newcomer
                    for reserve in args.reserve:
                        on_dir = _on_dir(reserve, seed, budget, args.population)
                        scratch = _node(root / on_dir, unit, device.name, False)
                        scratch.save_profile(newcomer.profile(device))
                        row["on"][str(reserve)] = _tune(
                            scratch, device, workload, budget, "simoe", seed,
                            shared=SharedSeeds(offer.by_workload()), reserve=reserve,
                            population=args.population,
                        )  # fmt: skip
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    if save is not None:  # a partial run still leaves its report
                        save({"donors": donors, "rows": rows}, partial=True)
    return {"donors": donors, "rows": rows}


def _on(row: dict[str, Any], reserve: str) -> dict[str, Any] | None:
    """The sharing-on tune of `row` at `reserve` (a run before `--reserve`: its one "on")."""
    on = row["on"]
    if "best_s" in on:
        return on if reserve == "0.5" else None
    return on.get(reserve)


def summarise(
    rows: list[dict[str, Any]], budgets: list[int], reserve: str = "0.5"
) -> dict[str, Any]:
    """Per budget, sharing on at `reserve` against off: geometric mean of off/on best
    latency and a bootstrap interval that resamples GPU models (units of one model rank
    alike), 2000 draws, seed 0; "all": every budget's cases pooled (the reserve rule's)."""
    out: dict[str, Any] = {}
    model_of = {u: u.split("-")[0] for u in {r["unit"] for r in rows}}
    groups = {str(b): {b} for b in budgets} | ({"all": set(budgets)} if len(budgets) > 1 else {})
    for label, group in groups.items():
        ratios: dict[str, list[float]] = {}
        for r in rows:
            on = _on(r, reserve)
            if r["budget"] not in group or not (on and r["off"]["best_s"] and on["best_s"]):
                continue
            ratio = math.log(r["off"]["best_s"] / on["best_s"])
            ratios.setdefault(model_of[r["unit"]], []).append(ratio)
        if not ratios:
            continue
        geomean, low, high, every = clustered_geomean(ratios)
        out[label] = {
            "cases": len(every),
            "geomean_off_over_on": geomean,
            "interval_95": [low, high],
            "on_faster": sum(x > 1e-9 for x in every),
            "off_faster": sum(x < -1e-9 for x in every),
        }
    return out


def clustered_geomean(
    log_ratios: dict[str, list[float]],
) -> tuple[float, float, float, list[float]]:
    """Geometric mean of the ratios (given as logs, by GPU model) with a 95% bootstrap
    interval that resamples GPU models (units of one model rank alike), 2000 draws, seed 0;
    and every log ratio."""
    models = sorted(log_ratios)
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(2000):
        pick = rng.choice(len(models), size=len(models), replace=True)
        draws.append(np.mean([x for i in pick for x in log_ratios[models[i]]]))
    every = [x for m in models for x in log_ratios[m]]
    return (
        float(np.exp(np.mean(every))),
        float(np.exp(np.percentile(draws, 2.5))),
        float(np.exp(np.percentile(draws, 97.5))),
        every,
    )


def search_breadth(small: dict[str, Any], large: dict[str, Any], reserve: str) -> dict[str, Any]:
    """bench.protocol.SEARCH_BREADTH_RULE on two runs that differ in `--population` only:
    per case (unit, workload, budget, seed), sharing off and on at `reserve`, best(small) /
    best(large) (>1: the larger population found faster), off and on apart and pooled,
    each with its interval clustered by GPU model; and the rule's verdict."""
    key = ("unit", "workload", "budget", "seed")
    theirs = {tuple(r[k] for k in key): r for r in large["rows"]}
    model_of = {r["unit"]: r["unit"].split("-")[0] for r in small["rows"]}
    ratios: dict[str, dict[str, list[float]]] = {"off": {}, "on": {}, "pooled": {}}
    for r in small["rows"]:
        other = theirs.get(tuple(r[k] for k in key))
        if other is None:
            continue
        for side, a, b in (
            ("off", r["off"], other["off"]),
            ("on", _on(r, reserve), _on(other, reserve)),
        ):
            if a and b and a["best_s"] and b["best_s"]:
                value = math.log(a["best_s"] / b["best_s"])
                for group in (side, "pooled"):
                    ratios[group].setdefault(model_of[r["unit"]], []).append(value)
    out: dict[str, Any] = {}
    for group, by_model in ratios.items():
        if by_model:
            geomean, low, high, every = clustered_geomean(by_model)
            out[group] = {
                "cases": len(every), "geomean_small_over_large": geomean,
                "interval_95": [low, high], "large_faster": sum(x > 1e-9 for x in every),
                "small_faster": sum(x < -1e-9 for x in every),
            }  # fmt: skip
    pooled = out.get("pooled")
    met = bool(
        pooled
        and pooled["geomean_small_over_large"] > protocol.SEARCH_BREADTH_MARGIN
        and pooled["interval_95"][0] > 1.0
    )
    out["rule_met"] = met
    return out


def markdown(result: dict[str, Any], command: str) -> str:
    lines = [
        "# Schedule sharing on vs off (simulated validation units)",
        "",
        f"Command: `{command}` ({result['wall_s']:.0f} s wall, {result['cpu_s']:.0f} CPU s"
        + (
            "; PARTIAL: the run stopped before every case was done)."
            if result.get("partial")
            else ")."
        ),
        "SIMULATED: every latency is the simulator's model of a unit, not a measurement. "
        "Validation units only; the newcomer tunes with the shipped starter model "
        "(`--cost-model simoe`), with and without the offer of the 3 donors most similar to "
        "it (the server's own `schedule_offer`).",
        "",
        f"Donors: {', '.join(result['args']['donors'])} (XGB, "
        f"{result['args']['donor_trials']} trials per workload). Workloads: "
        f"{', '.join(result['args']['workloads'])}. Seeds: {result['args']['seeds']}. "
        f"Sharing on at reserve {', '.join(str(r) for r in result['args']['reserve'])} (share "
        "of the first batch kept for the offered traces in offer order), each against the same "
        "sharing-off tunes.",
        "",
        "| reserve | budget | cases | geomean off/on | 95% interval (by model) | on faster "
        "| off faster | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for reserve, summary in result["summary"].items():
        for budget, s in summary.items():
            lo, hi = s["interval_95"]
            verdict = (
                "sharing faster" if lo > 1 else "sharing slower" if hi < 1 else "no effect shown"
            )
            lines.append(
                f"| {reserve} | {budget} | {s['cases']} | {s['geomean_off_over_on']:.3f} | "
                f"[{lo:.3f}, {hi:.3f}] | {s['on_faster']} | {s['off_faster']} | {verdict} |"
            )
    lines += [
        "",
        'off/on > 1: with sharing the tune\'s best schedule was faster; budget "all": every '
        "budget's cases pooled. Per case (unit, workload, budget, seed): `sharing_onoff.json` "
        "beside this file.",
    ]
    choice = result.get("choice")
    if choice:
        lines += ["", f"Reserve rule (bench.protocol.SHARED_RESERVE_RULE): {choice}"]
    explained = result.get("explained") or {}
    if explained:
        command = next(iter(explained.values()))["command"]
        lines += [
            "",
            f"Read back from the run's stores (`{command}`), sharing on:",
            "",
            "| reserve | cases | candidates measured | of them shared traces | cases whose best "
            "was a shared trace |",
            "|---|---|---|---|---|",
            *(
                f"| {reserve} | {seen['cases']} | {seen['measured']} | "
                f"{seen['measured_shared']} | {seen['best_was_shared']} |"
                for reserve, seen in explained.items()
            ),
        ]
    spread = result.get("spread")
    if spread:
        lines += [
            "",
            f"Run-to-run spread (`{spread['command']}`): the same tunes with sharing off, "
            f"run again, differ in {spread['differ']} of {spread['cases']} cases; geomean "
            f"this run / the other {spread['geomean']:.3f}, per case from "
            f"{spread['min']:.3f} to {spread['max']:.3f} (MetaSchedule's search threads do "
            "not repeat exactly).",
        ]
    return "\n".join(lines + [""])


# The rule's "current 0.5" (SHARED_RESERVE when the rule was written), fixed here so that a
# report read back after the choice still applies the same rule.
RULE_INCUMBENT = 0.5


def choose(summary: dict[str, dict[str, Any]]) -> str | None:
    """bench.protocol.SHARED_RESERVE_RULE applied to `summary` (by reserve, then budget);
    None when the run lacks the current reserve or a pooled ("all") figure."""
    current = str(RULE_INCUMBENT)
    pooled = {r: s["all"]["geomean_off_over_on"] for r, s in summary.items() if "all" in s}
    if current not in pooled or len(pooled) < 2:
        return None
    best = max(pooled, key=lambda r: (pooled[r], -abs(float(r) - RULE_INCUMBENT)))
    if best != current and pooled[best] > pooled[current] + protocol.SHARED_RESERVE_MARGIN:
        return (
            f"reserve {best} (pooled geomean off/on {pooled[best]:.3f}) beats the current "
            f"{current} ({pooled[current]:.3f}) by more than "
            f"{protocol.SHARED_RESERVE_MARGIN}: {best} is chosen."
        )
    return (
        f"the best pooled geomean off/on is reserve {best} ({pooled[best]:.3f}); the current "
        f"{current} ({pooled[current]:.3f}) is not beaten by more than "
        f"{protocol.SHARED_RESERVE_MARGIN}: {current} stays."
    )


def write_breadth(small_path: Path, large_path: Path, out: Path) -> str:
    """SEARCH_BREADTH_RULE on two runs, written to `out`/search_breadth.{json,md}."""
    missing = [str(p) for p in (small_path, large_path) if not p.is_file()]
    if missing:
        raise BadInputError(f"--breadth: no such report: {', '.join(missing)}")
    small, large = (json.loads(p.read_text()) for p in (small_path, large_path))
    sizes = [run["args"].get("population") for run in (small, large)]
    same = {k: v for k, v in small["args"].items() if k not in ("population", "work", "out")}
    if None in sizes or same != {k: large["args"].get(k) for k in same}:
        raise BadInputError("--breadth: two runs that differ in --population only")
    if len(small["args"]["reserve"]) != 1:
        raise BadInputError("--breadth: runs with one --reserve")
    reserve = str(small["args"]["reserve"][0])
    result = search_breadth(small, large, reserve)
    result |= {"populations": sizes, "runs": [str(small_path), str(large_path)]}
    result["commands"] = [small["command"], large["command"]]
    result["cost_s"] = [[run["wall_s"], run["cpu_s"]] for run in (small, large)]
    lines = [
        "# Search breadth at a small budget (SIMULATED validation units)",
        "",
        f"bench.protocol.SEARCH_BREADTH_RULE: {protocol.SEARCH_BREADTH_RULE}",
        "",
        *(
            f"- `{c}`: {w:.0f} s wall, {cpu:.0f} CPU s"
            for c, (w, cpu) in zip(result["commands"], result["cost_s"], strict=True)
        ),
        "",
        f"best at population {sizes[0]} / best at {sizes[1]} (>1: the larger found faster), "
        f"per case (unit, workload, budget, seed); sharing on at reserve {reserve}:",
        "",
        "| tunes | cases | geomean | 95% interval (by GPU model) | larger faster "
        "| smaller faster |",
        "|---|---|---|---|---|---|",
    ]
    for group in ("off", "on", "pooled"):
        if group in result:
            g = result[group]
            lo, hi = g["interval_95"]
            lines.append(
                f"| sharing {group} | {g['cases']} | {g['geomean_small_over_large']:.3f} | "
                f"[{lo:.3f}, {hi:.3f}] | {g['large_faster']} | {g['small_faster']} |"
            )
    lines += ["", f"Rule: {'MET' if result['rule_met'] else 'not met'}.", ""]
    out.mkdir(parents=True, exist_ok=True)
    (out / "search_breadth.json").write_text(json.dumps(result, indent=1))
    (out / "search_breadth.md").write_text("\n".join(lines))
    return "\n".join(lines)


def explain(
    work: Path, rows: list[dict[str, Any]], reserve: float, population: int | None = None
) -> dict[str, Any]:
    """For each case with sharing on at `reserve`: how many of the measured candidates were
    shared traces, and whether the best was one (read back from the scratch stores and the
    registry of `work`)."""
    from agent.store import Store, canonical_json
    from server.registry import Registry

    with Registry(work / "registry.sqlite") as registry:
        shared: dict[str, set[str]] = {}
        for key in registry.schedule_sharers():
            for workload, traces in registry.shared_schedules(key).items():
                shared.setdefault(workload, set()).update(traces)
    measured = shared_measured = best_shared = cases = 0
    for r in rows:
        on_dir = _on_dir(reserve, r["seed"], r["budget"], population)
        path = work / on_dir / r["unit"] / "store.sqlite"
        if not path.exists():
            continue
        with Store(path) as store:
            records = [x for x in store.records() if x.task_name == r["workload"]]
        if not records:
            continue
        cases += 1
        hits = [canonical_json(x.trace) in shared.get(x.workload_key, set()) for x in records]
        measured += len(records)
        shared_measured += sum(hits)
        ok = [(x.latency_s, h) for x, h in zip(records, hits, strict=True) if x.latency_s]
        best_shared += bool(ok) and min(ok)[1]
    return {
        "cases": cases,
        "measured": measured,
        "measured_shared": shared_measured,
        "best_was_shared": best_shared,
    }


def spread(rows: list[dict[str, Any]], other: list[dict[str, Any]]) -> dict[str, Any]:
    """Sharing off in this run against sharing off in another run of the same cases."""
    key = ("unit", "workload", "budget", "seed")
    theirs = {tuple(r[k] for k in key): r["off"]["best_s"] for r in other}
    ratios = [
        r["off"]["best_s"] / theirs[tuple(r[k] for k in key)]
        for r in rows
        if theirs.get(tuple(r[k] for k in key)) and r["off"]["best_s"]
    ]
    return {
        "cases": len(ratios),
        "differ": sum(abs(x - 1.0) > 1e-9 for x in ratios),
        "geomean": float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan"),
        "min": min(ratios, default=float("nan")),
        "max": max(ratios, default=float("nan")),
    }


def main() -> None:
    bench.prepare()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", default=",".join(protocol.VALIDATION_UNITS))
    parser.add_argument("--donors", default=",".join(DONORS))
    parser.add_argument("--workloads", default=";".join(WORKLOADS), help="';'-separated")
    parser.add_argument("--budgets", default="4")
    parser.add_argument(
        "--reserve", default="0.5", help="share(s) of the first batch kept for the offer, e.g. "
        "0.25,0.5,1 (each in [0, 1])",
    )  # fmt: skip
    parser.add_argument("--seeds", default=",".join(str(s) for s in protocol.SEEDS))
    parser.add_argument("--donor-trials", type=int, default=32)
    parser.add_argument("--work", type=Path, default=Path("runs/sharing_onoff"))
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument(
        "--explain", action="store_true", help="read a finished run back: shared picks, exit"
    )
    parser.add_argument(
        "--against", type=Path, help="with --explain: another run's JSON, for the spread"
    )
    parser.add_argument(
        "--population", type=int, help="every newcomer tune's search population (default: the "
        "product's, agent.tuner.search_population)",
    )  # fmt: skip
    parser.add_argument(
        "--breadth", nargs=2, type=Path, metavar=("SMALL", "LARGE"), help="two runs' JSON that "
        "differ in --population only: bench.protocol.SEARCH_BREADTH_RULE, written to --out; exit",
    )  # fmt: skip
    args = parser.parse_args()
    if args.breadth:
        print(write_breadth(*args.breadth, args.out))
        return
    try:
        args.reserve = parse_reserves(args.reserve)
    except ValueError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    if args.explain:
        import sys

        command = ("python -m bench.federation.sharing_onoff " + " ".join(sys.argv[1:])).strip()
        result = json.loads((args.out / "sharing_onoff.json").read_text())
        if "command" not in result:  # a run written before the JSON kept it: the report has it
            report = (args.out / "sharing_onoff.md").read_text()
            result["command"] = report.split("Command: `", 1)[1].split("`", 1)[0]
        result["explained"] = {
            str(r): explain(args.work, result["rows"], r, result["args"].get("population"))
            | {"command": command}
            for r in result["args"]["reserve"]
        }
        result["choice"] = choose(result["summary"])
        if args.against is not None:
            other = json.loads(args.against.read_text())["rows"]
            result["spread"] = spread(result["rows"], other) | {"command": command}
        (args.out / "sharing_onoff.json").write_text(json.dumps(result, indent=1))
        (args.out / "sharing_onoff.md").write_text(markdown(result, result["command"]))
        print(markdown(result, result["command"]))
        return
    args.units = args.units.split(",")
    args.donors = args.donors.split(",")
    args.workloads = args.workloads.split(";")
    args.budgets = [int(b) for b in args.budgets.split(",")]
    args.seeds = [int(s) for s in args.seeds.split(",")]
    bad = [u for u in args.units if protocol.split_of(u) != "validation"]
    if bad:
        parser.exit(2, f"error: validation units only, not {bad}\n")
    import resource

    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    import sys

    command = ("python -m bench.federation.sharing_onoff " + " ".join(sys.argv[1:])).strip()

    def save(result: dict[str, Any], partial: bool = False) -> str:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        result["wall_s"] = time.perf_counter() - started
        result["cpu_s"] = usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime
        result["summary"] = {
            str(r): summarise(result["rows"], args.budgets, str(r)) for r in args.reserve
        }
        result["choice"] = choose(result["summary"])
        result["partial"] = partial
        result["args"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        result["command"] = command
        text = markdown(result, command)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sharing_onoff.json").write_text(json.dumps(result, indent=1))
        (args.out / "sharing_onoff.md").write_text(text)
        return text

    print(save(run(args, save)))


if __name__ == "__main__":
    from schemas.errors import run_cli

    run_cli(main, "sharing_onoff")
