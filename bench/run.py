"""The one entry point of the benchmarks: runs every section, writes the report and BENCHMARKS.md.

    python -m bench.run --quick      # scaled down: minutes on 2 cores
    python -m bench.run --full       # the paper-sized settings: weeks on 2 cores (--resume)

Sections (each writes its part of bench/reports/report.json as soon as it is done, so a
timeout still leaves the finished ones; BENCHMARKS.md is regenerated from that JSON after
every step, never written by hand):
1. compile: compile time and network performance on unseen simulated GPUs (bench/compile_time.py)
2. offline: the offline transfer table (bench/offline_transfer.py, on the same fleet data)
3. federation: round time and bytes per node for 4, 16, 64 nodes (bench/federation_overhead.py)
4. cpu: tuned kernels on this machine's CPU against numpy and PyTorch (bench/cpu_kernels.py)
5. budget: one task, MetaSchedule at a realistic budget (1,000 trials) against SiMoE fast's 32
   (bench/compile_time.py; in --full, or on request: --quick --sections budget)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench import prepare

ROOT = Path(__file__).resolve().parent.parent
REPORTS = Path("bench") / "reports"
SECTIONS = ("compile", "offline", "federation", "cpu", "budget")
QUICK_SECTIONS = ("compile", "offline", "federation", "cpu")  # budget (~15 min): on request
CPU_QUICK_TRIALS = 16
QUICK_TARGET_MIN = 15.0
TARGET_COMPILE_SPEEDUP = 61.0
GOAL_COMPILE_SPEEDUP = 100.0
TARGET_PERF_SHARE = 0.95
TARGET_TLM_SPEEDUP = 1.25


# -- machine -----------------------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpu_model": model,
        "logical_cores": os.cpu_count(),
        "python": platform.python_version(),
        "system": platform.system(),
        "load_average_at_start": [round(x, 2) for x in load],
    }


# -- report ------------------------------------------------------------------------------------
class Report:
    """The report JSON and the markdown generated from it, rewritten after every step."""

    def __init__(self, out: Path, markdown_path: Path, mode: str, argv: list[str]) -> None:
        self.out = out
        self.markdown_path = markdown_path
        self.started = time.perf_counter()
        self.data: dict[str, Any] = {
            "mode": mode,
            "command": " ".join(["python", "-m", "bench.run", *argv]),
            "machine": machine_info(),
            "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "sections": {},
            "section_seconds": {},
            "errors": {},
        }
        out.mkdir(parents=True, exist_ok=True)

    def save(self) -> None:
        self.data["elapsed_s"] = time.perf_counter() - self.started
        self.data["machine"]["load_average_now"] = [round(x, 2) for x in os.getloadavg()]
        path = self.out / "report.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=_jsonable))
        tmp.replace(path)
        self.markdown_path.write_text(markdown(self.data))


def _jsonable(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


# -- sections ----------------------------------------------------------------------------------
def section_compile(report: Report, args: argparse.Namespace, say: Callable[[str], None]) -> None:
    from bench import compile_time

    settings = compile_time.FULL if args.full else compile_time.QUICK

    def on_row(partial: dict[str, Any]) -> None:
        partial["summary"] = compile_time.summarize(partial["rows"], settings.tlm_budget)
        report.data["sections"]["compile"] = partial
        report.save()

    done: list[dict[str, Any]] = []
    if args.previous is not None:
        section = args.previous.get("sections", {}).get("compile", {})
        if section.get("settings") == settings.model_dump():
            done = section.get("rows", [])
            say(f"resuming: {len(done)} finished run(s) of the compile section kept")
        else:
            say("--resume: the earlier compile section has other settings; starting afresh")
    result = compile_time.run_section(settings, args.work, say=say, on_row=on_row, done=done)
    report.data["sections"]["compile"] = result


def section_budget(report: Report, args: argparse.Namespace, say: Callable[[str], None]) -> None:
    """One task, MetaSchedule at a realistic budget (1,000 trials) against SiMoE fast's 32."""
    from bench import compile_time

    settings = compile_time.FULL if args.full else compile_time.QUICK_BUDGET
    full_method = f"ms-xgb-{settings.long_budget}"

    def on_row(partial: dict[str, Any]) -> None:
        partial["summary"] = compile_time.summarize(
            partial["rows"], settings.tlm_budget, full_method=full_method
        )
        report.data["sections"]["budget"] = partial
        report.save()

    result = compile_time.run_budget_section(settings, args.work, say=say, on_row=on_row)
    report.data["sections"]["budget"] = result


def section_offline(report: Report, args: argparse.Namespace, say: Callable[[str], None]) -> None:
    """bench/offline_transfer.py on the compile section's fleet stores (synthetic otherwise)."""
    from bench import compile_time

    settings = compile_time.FULL if args.full else compile_time.QUICK
    fleet = args.work / "fleet" / "suite"
    out = report.out / "offline"
    command = [sys.executable, "bench/offline_transfer.py", "--out", str(out)]
    if fleet.exists() and any(fleet.glob("*.sqlite")):
        command += ["--data", str(fleet), "--held-out", ",".join(settings.unseen_gpus)]
        data = f"fleet stores of the tuned tasks of {', '.join(settings.networks)} (simulated GPUs)"
    else:
        command += ["--synthetic", "--synthetic-size", "12,8,120"]
        data = "synthetic fleet (the compile section's stores were missing)"
    if not args.full:
        command += ["--budgets", "0,16,64", "--expert-epochs", "10", "--shared-epochs", "10"]
        command += ["--adapt-epochs", "10", "--mlp-epochs", "10"]
    else:
        command += ["--ablations"]
    say(f"offline transfer: {data}")
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"offline_transfer.py exited {proc.returncode}: {' | '.join(tail)}")
    stem = "offline_transfer_synthetic" if "--synthetic" in command else "offline_transfer"
    result = json.loads((out / f"{stem}.json").read_text())
    shown = [
        c if not c.startswith(str(args.work)) else "<work>" + c[len(str(args.work)) :]
        for c in command[1:]
    ]
    report.data["sections"]["offline"] = {
        "command": " ".join(["python", *shown]).replace(str(ROOT) + os.sep, ""),
        "data": data,
        "wall_s": time.perf_counter() - started,
        "markdown": (out / f"{stem}.md").read_text(),
        "plot": f"offline/{stem}.png",
        "result": {k: result[k] for k in ("held_out", "train_gpus", "budgets", "results")},
    }


def section_federation(
    report: Report, args: argparse.Namespace, say: Callable[[str], None]
) -> None:
    from bench import compile_time, federation_overhead

    settings = compile_time.FULL if args.full else compile_time.QUICK
    gpus = settings.train_gpus[:6]
    profiles = list(compile_time.profile_vectors(gpus, args.work / "profiles").values())
    counts = [4, 16, 64]
    rounds = 5 if args.full else 3
    say(f"federation overhead: {counts} nodes, {rounds} rounds each")
    report.data["sections"]["federation"] = federation_overhead.run_section(
        counts, rounds, profiles
    )


def section_cpu(report: Report, args: argparse.Namespace, say: Callable[[str], None]) -> None:
    from bench import cpu_kernels

    ops = cpu_kernels.FULL_OPS if args.full else cpu_kernels.QUICK_OPS
    trials = 256 if args.full else CPU_QUICK_TRIALS
    report.data["sections"]["cpu"] = cpu_kernels.run_section(ops, trials, say=say)


RUNNERS = {
    "compile": section_compile,
    "offline": section_offline,
    "federation": section_federation,
    "cpu": section_cpu,
    "budget": section_budget,
}


# -- markdown ----------------------------------------------------------------------------------
def _f(value: Any, fmt: str = ".3g", none: str = "n/a") -> str:
    if value is None:
        return none
    try:
        return format(float(value), fmt)
    except (TypeError, ValueError):
        return str(value)


def _verdict(value: float | None, target: float, higher_is_better: bool = True) -> str:
    if value is None:
        return "not reached"
    ok = value >= target if higher_is_better else value <= target
    if ok:
        return "met"
    return f"MISSED by {abs(target - value) / target * 100:.0f}%"


def markdown(data: dict[str, Any]) -> str:
    m = data["machine"]
    s = data["sections"]
    lines = [
        "# SiMoE benchmarks",
        "",
        "Generated by `bench/run.py` from `bench/reports/report.json`; do not edit by hand. "
        "Every number below comes from the command that produced this file:",
        "",
        f"    {data['command']}",
        "",
        f"Mode: **{data['mode']}**. Started {data['started_utc']} UTC; "
        f"this run took **{data.get('elapsed_s', 0) / 60:.1f} min** of wall time"
        + (
            f" (target for --quick: under {QUICK_TARGET_MIN} min on 2 cores: "
            f"{_verdict(data.get('elapsed_s', 0) / 60, QUICK_TARGET_MIN, higher_is_better=False)}"
            "; where the time went: section timings at the end)."
            if data["mode"] == "quick"
            else "."
        ),
        "",
        *[
            f"Section(s) {', '.join(o['sections'])} came from another invocation "
            f"(load average at its start {o['load_average_at_start']}, "
            f"{(o['elapsed_s'] or 0) / 60:.1f} min): `{o['command']}`; merged with "
            "`python -m bench.run --merge <its report.json>`.\n"
            for o in data.get("other_runs", [])
        ],
        f"Machine: {m['cpu_model']}, {m['logical_cores']} logical cores, Python {m['python']}. "
        f"Load average at start {m['load_average_at_start']}, at the end "
        f"{m.get('load_average_now')} (the machine was shared with other jobs: every wall "
        "time here is inflated by that load, by a factor that is not known).",
        "",
        "**Sections 1, 2 and 5 are SIMULATED**: the GPUs are `sim:<gpu>`, the analytical "
        "latency model of agent/devices/sim; no GPU was used. Section 4 is measured on the "
        "real CPU.",
        "",
    ]
    if data["errors"]:
        lines += ["## Sections that failed", ""]
        lines += [f"- {name}: `{err}`" for name, err in data["errors"].items()]
        lines += [""]
    if "compile" in s:
        lines += _compile_md(s["compile"], data.get("compile_repeats", []))
        lines += _mlp_why(s["compile"], s.get("offline"))
    if "offline" in s:
        o = s["offline"]
        lines += [
            "## 2. Offline transfer to unseen GPUs (SIMULATED)",
            "",
            f"`{o['command']}` (data: {o['data']}; {o['wall_s']:.0f} s)",
            "",
            "Ranking quality on the held-out GPUs' test candidates (higher is better); budget = "
            "measurements per task on the held-out GPU.",
            "",
            o["markdown"].split("\n", 1)[1] if "\n" in o["markdown"] else o["markdown"],
            f"![offline transfer](bench/reports/{o['plot']})",
            "",
        ]
    if "federation" in s:
        lines += _federation_md(s["federation"])
    if "cpu" in s:
        lines += _cpu_md(s["cpu"])
    if "budget" in s:
        lines += _budget_md(s["budget"], data.get("budget_repeats", []))
    lines += [
        "## Section timings",
        "",
        "| section | wall s |",
        "|---|---|",
        *[f"| {k} | {v:.0f} |" for k, v in data["section_seconds"].items()],
        "",
    ]
    return "\n".join(lines) + "\n"


def _repeats_md(rows: list[dict[str, Any]], repeats: list[dict[str, Any]]) -> list[str]:
    """The same section run again (same settings, same seed): how far the results move."""
    if not repeats:
        return []
    lines = [
        "**Run-to-run spread.** The same settings and seed were run again "
        + "; ".join(f"(`{r['command']}`)" for r in repeats)
        + ". Network latency in ms, this report's run first; the evolutionary search is not "
        "deterministic across runs (threads, timing), and XGB scores at random in its warm-up:",
        "",
        "| network | GPU | method | "
        + " | ".join(f"run {i + 1}" for i in range(len(repeats) + 1))
        + " |",
        "|---|---|---|" + "---|" * (len(repeats) + 1),
    ]
    for r in rows:
        values = [r["network_latency_s"]]
        for rep in repeats:
            match = [
                x for x in rep["rows"]
                if (x["network"], x["gpu"], x["method"]) == (r["network"], r["gpu"], r["method"])
            ]  # fmt: skip
            values.append(match[0]["network_latency_s"] if match else None)
        cells = " | ".join(_f(v and v * 1e3, ".4f") for v in values)
        lines.append(f"| {r['network']} | {r['gpu']} | {r['method']} | {cells} |")
    return [*lines, "", *_repeat_claims(rows, repeats)]


def _repeat_claims(rows: list[dict[str, Any]], repeats: list[dict[str, Any]]) -> list[str]:
    """The claims at TLM's budget (geometric means over the pairs) in every run."""
    from bench import compile_time

    k = next((r["trials_per_task"] for r in rows if r["method"] == "simoe-fast"), 32)
    lines = []
    for i, run_rows in enumerate([rows, *(rep["rows"] for rep in repeats)]):
        summary = compile_time.summarize(run_rows, k)
        parts = []
        for peer in (f"ms-xgb-{k}", f"ms-mlp-pretrained-{k}", "mlp-fast"):
            if not any(e.get(f"speedup_vs_{peer}") for e in summary):
                continue  # a run without that peer
            value = _geomean([e[f"speedup_vs_{peer}"] for e in summary
                              if e.get(f"speedup_vs_{peer}")])  # fmt: skip
            verdict = _verdict(value, TARGET_TLM_SPEEDUP)
            parts.append(f"{_f(value, '.3f')}x as fast as {peer}'s ({verdict})")
        lines.append(
            f"- Run {i + 1}: at {k} measurements per task SiMoE fast's networks are "
            + " and ".join(parts)
            + " (geometric means; target >= 1.25x)."
        )
    return [*lines, ""]


def _compile_md(c: dict[str, Any], repeats: list[dict[str, Any]] | None = None) -> list[str]:
    st = c["settings"]
    prep = c.get("prep_seconds", {})
    lines = [
        "## 1. Compile time and network performance on unseen GPUs (SIMULATED)",
        "",
        f"Training GPUs (the federation's data; never the target): {', '.join(st['train_gpus'])}. "
        f"Unseen target GPUs: {', '.join(st['unseen_gpus'])}. Budgets are measurements per "
        f"task; full budget {st['full_budget']}, TLM's budget {st['tlm_budget']}. "
        f"MetaSchedule's evolutionary search: population {st['population']}, "
        f"{st['genetic_iters']} genetic iterations. SiMoE fast mode (simoe_model/model_search.py): "
        f"{st.get('simoe_fast_rounds', 1)} chained model-only searches of "
        f"{st.get('simoe_fast_per_round', 32)} candidates each (population "
        f"{st['simoe_fast_population']}, {st['simoe_fast_genetic_iters']} iterations), each "
        "starting from the best the model has scored so far as MetaSchedule's searches start "
        f"from the best measured; then the model's top {st['tlm_budget']} per task are measured"
        + (
            f"; each search first samples random valid schedules until it holds "
            f"{compile_time_init_min(st, st['population'])} (MetaSchedule) or "
            f"{compile_time_init_min(st, st['simoe_fast_population'])} (SiMoE fast): "
            "MetaSchedule's default of 50 for its population of 512, scaled with the population"
            if st.get("scale_init_min")
            else ""
        )
        + ". "
        "Tasks scheduled round-robin so every method measures exactly its budget per task. "
        f"Each evolutionary search proposes {st.get('trials_per_iter', 64)} candidates to "
        "measure"
        + (
            f"; XGB's scores are used after {st['xgb_warmup']} measurements (MetaSchedule's "
            "default: 100)"
            if st.get("xgb_warmup", 100) != 100
            else ""
        )
        + ". "
        + (
            f"ms-xgb-{st['tlm_budget']} is the first search of ms-xgb-full (the same "
            "computation, taken as a snapshot). "
            if st["tlm_budget"] % st.get("trials_per_iter", 64) == 0
            else ""
        )
        + (
            "mlp-fast is the fair peer of SiMoE fast: the pre-trained MLP (the same training "
            "data) through exactly SiMoE fast's model-only search, then its top "
            f"{st['tlm_budget']} measured. Training budgets as chosen on the protocol's "
            f"validation units (bench/protocol_choices.json): SiMoE {st['expert_epochs']} "
            f"expert and {st['shared_epochs']} shared epochs, the MLP {st['mlp_epochs']}. "
            if any(r["method"] == "mlp-fast" for r in c["rows"])
            else ""
        )
        + (
            "Never worse than the default (as `tune` does it): every method first measures "
            "each task's default schedule (DLight's GPU rules) once, in its compile time, and "
            "a task keeps it unless a tuned schedule beats it. "
            if any(r.get("task_kept") for r in c["rows"])
            else ""
        )
        + "SiMoE full mode = SiMoE fast's measurements continued by MetaSchedule's search with "
        "SiMoE learning online (its own expert, few-shot) up to the full budget; its compile "
        "time includes fast mode's. "
        + f"Training data: per task, {st['samples_per_task']} random candidates plus the "
        "training GPUs' tuning records (candidates of "
        f"{st.get('fleet_rounds', 0)} chained searches of {st.get('fleet_per_round', 0)} "
        "steered by the training GPUs' simulated latencies, never by an unseen GPU's), labelled "
        "on each training GPU; SiMoE and the MLP peer are trained once on all the tuned tasks "
        f"of all networks (SiMoE {_f(prep.get('simoe_train_offline'), '.0f')} s, MLP "
        f"pre-training {_f(prep.get('mlp_pretrain_offline'), '.0f')} s).",
        "",
        "Compile time = real search wall time on this machine + modelled measurement time "
        "(what each measurement would cost on the real GPU: a ~1 s CUDA compile plus the runs). "
        "Network latency = sum over the tuned tasks of weight x best measured latency "
        "(simulated). SiMoE's and the MLP's offline training on the other GPUs is one-off and "
        "is listed separately, not in the compile time.",
        "",
    ]
    per_net = max((len(i["tasks_tuned"]) for i in c.get("networks", {}).values()), default=1)
    searches = -(-st["full_budget"] // st.get("trials_per_iter", 64))
    lines += [
        f"Caveat: MetaSchedule-full gets {st['full_budget']} measurements per task here, "
        f"{searches} search(es) per task, its model trained on at most "
        f"{st['full_budget'] * per_net} measurements of the network: far from the paper's "
        "full budget of thousands, where MetaSchedule's own model has learnt the task. It is a "
        "weak reference in this mode; section 5 (--full, or `--sections budget`) measures the "
        "compile-time claim against a realistic budget.",
        "",
    ]
    lines += [
        f"Limits of this run: {len(st['networks'])} network(s) ({', '.join(st['networks'])}), "
        f"{len(st['unseen_gpus'])} unseen GPU(s), one seed, a full budget of "
        f"{st['full_budget']} against TLM's {st['tlm_budget']} per task (so the measurement "
        f"ratio, and with it the compile-time ratio, is about "
        f"{st['full_budget'] / st['tlm_budget']:.0f}x at most apart from search time). "
        + (
            "Differences smaller than the run-to-run spread below are not evidence either way."
            if repeats
            else "One run of each: the evolutionary search is not deterministic across runs "
            "(its threads), so small differences are not evidence either way."
        ),
        "",
    ]
    for network, info in c.get("networks", {}).items():
        share = info.get("flops_share_tuned")
        lines += [
            f"**{network}**: {len(info['tasks_tuned'])} of {info['tasks_total']} tasks tuned "
            f"(the top ones by weight x FLOPs, {_f(share and share * 100, '.0f')}% of the "
            f"network's FLOPs): "
            + ", ".join(t["name"] for t in info["tasks_tuned"])
            + f". Task extraction {info['seconds']['extract']:.0f} s; sampling and labelling "
            f"{info['seconds']['sample_and_label']:.0f} s.",
            "",
        ]
    if c.get("rows"):
        lines += [
            "| network | GPU | method | trials/task | measured | search wall s "
            "| modelled measure s | compile s | network latency ms | perf vs MS-full "
            "| compile speedup vs MS-full |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        full = {(r["network"], r["gpu"]): r for r in c["rows"] if r["method"] == "ms-xgb-full"}
        for r in sorted(c["rows"], key=_row_order):
            ref = full.get((r["network"], r["gpu"]))
            perf = (
                ref["network_latency_s"] / r["network_latency_s"]
                if ref and ref["network_latency_s"] and r["network_latency_s"]
                else None
            )
            speed = ref["compile_s"] / r["compile_s"] if ref else None
            lat = r["network_latency_s"] * 1e3 if r["network_latency_s"] else None
            lines.append(
                f"| {r['network']} | {r['gpu']} | {r['method']} | {r['trials_per_task']} "
                f"| {r['measured']} | {r['search_wall_s']:.0f} | {r['modelled_measure_s']:.0f} "
                f"| {r['compile_s']:.0f} | {_f(lat, '.4f')} | {_f(perf, '.3f')} "
                f"| {_f(speed, '.1f')}x |"
            )
        lines.append("")
    for f in c.get("failed", []):
        lines += [f"- FAILED: {f['method']} on {f['network']} / sim:{f['gpu']}: `{f['error']}`"]
    lines += [""] if c.get("failed") else []
    rows = c.get("rows", [])
    if rows:
        wall: dict[str, float] = {}
        for r in rows:
            wall[r["method"]] = wall.get(r["method"], 0.0) + r["search_wall_s"]
        lines += [
            "Search wall time per method, summed over the pairs (a snapshot counts its part of "
            "the run it comes from; simoe-full includes simoe-fast's): "
            + ", ".join(f"{m} {wall[m]:.0f} s" for m in sorted(wall))
            + ".",
            "",
        ]
    lines += _claims_table(c.get("summary", []), c["settings"]["tlm_budget"])
    lines += _repeats_md(c["rows"], repeats or [])
    if data_curves := c.get("curves_png"):
        lines += [
            f"![performance relative to the best MetaSchedule run against compile time]"
            f"({data_curves})",
            "",
            "Performance = the reference's network latency / the method's (1.0 = the "
            "reference, higher is better) against compile time on a log axis, every method's "
            "whole curve (`python -m bench.curves`). The reference of each panel is the best "
            "MetaSchedule (XGB) run of that network and GPU in this report or its repeats, "
            "named above the panel: MetaSchedule-20K, issue 12's reference, is not run here "
            "(about 9.4 h per network and GPU on 2 cores).",
            "",
        ]
    return lines


def compile_time_init_min(st: dict[str, Any], population: int) -> int:
    from bench import compile_time

    return compile_time.init_min(compile_time.CompileSettings(**st), population)


def _row_order(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["gpu"], r["network"], r["trials_per_task"], not r["method"].startswith("simoe"),
            r["method"])  # fmt: skip


def _geomean(values: list[float]) -> float | None:
    return float(np.exp(np.mean(np.log(values)))) if values else None


def _claims_table(summary: list[dict[str, Any]], k: int) -> list[str]:
    """The paper's claims per network x GPU, then their geometric means with verdicts."""
    if not summary:
        return []
    peers = [p for p in (f"ms-xgb-{k}", f"ms-mlp-pretrained-{k}", "mlp-fast")
             if any(e.get(f"speedup_vs_{p}") for e in summary)]  # fmt: skip
    lines = [
        "**Claims** (targets from the paper; compile-time ratio = MetaSchedule-full's compile "
        "time / SiMoE fast's; perf kept = MetaSchedule-full's network latency / SiMoE fast's; "
        f"SiMoE fast vs a peer at {k} measurements per task = the peer's latency / SiMoE "
        "fast's; 'to 95%' = compile time at which the method first held a network latency "
        "within 95% of MetaSchedule-full's final one):",
        "",
        "| network | GPU | compile ratio | perf kept | vs " + " | vs ".join(peers)
        + " | simoe-fast to 95% s | simoe-full to 95% s | MS-full s |",
        "|---" * (7 + len(peers)) + "|",
    ]  # fmt: skip
    for e in summary:
        perf = e.get("simoe-fast_perf_vs_ms_full")
        lines.append(
            f"| {e['network']} | {e['gpu']} | {_f(e.get('simoe_fast_compile_speedup'), '.2f')}x "
            f"| {_f(perf and perf * 100, '.1f')}% "
            + " ".join(f"| {_f(e.get(f'speedup_vs_{p}'), '.3f')}x" for p in peers)
            + f" | {_f(e.get('simoe-fast_compile_s_to_95pct'), '.0f', 'never')} "
            f"| {_f(e.get('simoe-full_compile_s_to_95pct'), '.0f', 'never')} "
            f"| {_f(e.get('ms_full_compile_s'), '.0f')} |"
        )
    lines.append("")

    def gm(key: str) -> float | None:
        return _geomean([e[key] for e in summary if e.get(key)])

    speed, perf = gm("simoe_fast_compile_speedup"), gm("simoe-fast_perf_vs_ms_full")
    n = len(summary)
    lines += [
        f"Geometric means over the {n} network x GPU pair(s):",
        "",
        f"- Compile-time ratio MetaSchedule-full / SiMoE fast: {_f(speed, '.2f')}x (target >= "
        f"{TARGET_COMPILE_SPEEDUP:.0f}x, goal {GOAL_COMPILE_SPEEDUP:.0f}x: "
        f"{_verdict(speed, TARGET_COMPILE_SPEEDUP)}), keeping {_f(perf and perf * 100, '.1f')}% "
        f"of its performance (target >= 95%: {_verdict(perf, TARGET_PERF_SHARE)}); "
        f"{sum(1 for e in summary if (e.get('simoe-fast_perf_vs_ms_full') or 0) >= 0.95)} of "
        f"{n} pair(s) kept >= 95%.",
    ]
    ms = [e for e in summary if e.get("ms_full_measured") and e.get("simoe_fast_measured")]
    if ms:
        m_full = sum(e["ms_full_measured"] for e in ms)
        m_fast = sum(e["simoe_fast_measured"] for e in ms)
        lines.append(
            f"- Where the compile time goes (summed over the pairs): MetaSchedule-full measured "
            f"{m_full} candidates ({sum(e['ms_full_search_wall_s'] for e in ms):.0f} s search + "
            f"{sum(e['ms_full_modelled_measure_s'] for e in ms):.0f} s modelled measurement), "
            f"SiMoE fast {m_fast} ({sum(e['simoe_fast_search_wall_s'] for e in ms):.0f} s "
            f"search + {sum(e['simoe_fast_modelled_measure_s'] for e in ms):.0f} s modelled "
            f"measurement). The measurement ratio alone is {m_full / m_fast:.1f}x, so with these "
            "budgets the compile-time ratio cannot reach much more than that whatever the "
            "method, and SiMoE fast's own search time lowers it further: the paper's 61x is "
            "against MetaSchedule's full budget of thousands of trials per network (section 5)."
        )
    for peer in peers:
        value = gm(f"speedup_vs_{peer}")
        met = sum(1 for e in summary if (e.get(f"speedup_vs_{peer}") or 0) >= TARGET_TLM_SPEEDUP)
        lines.append(
            f"- At {k} measurements per task, SiMoE fast's networks are {_f(value, '.3f')}x as "
            f"fast as {peer}'s (target >= {TARGET_TLM_SPEEDUP}x: "
            f"{_verdict(value, TARGET_TLM_SPEEDUP)}; met on {met} of {n} pair(s))."
        )
    return [*lines, ""]


def _budget_md(b: dict[str, Any], repeats: list[dict[str, Any]] | None = None) -> list[str]:
    """Section 5: one task, MetaSchedule at a realistic budget against SiMoE fast."""
    st = b["settings"]
    long = f"ms-xgb-{st['long_budget']}"
    lines = [
        "## 5. The compile-time claim at a realistic MetaSchedule budget (SIMULATED)",
        "",
        f"One task (the top one of {', '.join(b.get('networks', {}))} by weight x FLOPs) on "
        f"sim:{st['unseen_gpus'][0]}: MetaSchedule with its XGB model and its defaults (64 "
        f"measurements per search, XGB warm-up 100) for {st['long_budget']} trials, against "
        f"SiMoE fast ({st.get('simoe_fast_rounds', 1)} chained model-only searches of "
        f"{st.get('simoe_fast_per_round', 32)}, population {st['simoe_fast_population']}, "
        f"{st['simoe_fast_genetic_iters']} genetic iterations; then {st['tlm_budget']} "
        "measurements); MetaSchedule's search population "
        f"{st['population']}, {st['genetic_iters']} genetic iterations. SiMoE is trained on the "
        f"training GPUs' data of this task only: {st['samples_per_task']} random candidates and "
        f"their tuning records ({st.get('fleet_rounds', 0)} x {st.get('fleet_per_round', 0)} "
        "candidates of a search steered by their simulated latencies). Compile time as in "
        "section 1.",
        "",
        "| method | trials | measured | search wall s | modelled measure s | compile s "
        "| latency ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in b.get("rows", []):
        lat = r["network_latency_s"] * 1e3 if r["network_latency_s"] else None
        lines.append(
            f"| {r['method']} | {r['trials_per_task']} | {r['measured']} "
            f"| {r['search_wall_s']:.0f} "
            f"| {r['modelled_measure_s']:.0f} | {r['compile_s']:.0f} | {_f(lat, '.4f')} |"
        )
    lines.append("")
    for e in b.get("summary", []):
        speed = e.get("simoe_fast_compile_speedup")
        perf = e.get("simoe-fast_perf_vs_ms_full")
        reach = e.get("simoe-fast_compile_s_to_95pct")
        lines += [
            f"- This run: compile-time ratio {long} / SiMoE fast: {_f(speed, '.1f')}x (target >= "
            f"{TARGET_COMPILE_SPEEDUP:.0f}x, goal {GOAL_COMPILE_SPEEDUP:.0f}x: "
            f"{_verdict(speed, TARGET_COMPILE_SPEEDUP)}), keeping "
            f"{_f(perf and perf * 100, '.1f')}% of its performance (target >= 95%: "
            f"{_verdict(perf, TARGET_PERF_SHARE)}).",
            (
                f"- SiMoE fast reached 95% of {long}'s performance after {reach:.0f} s of compile "
                f"time ({_f(e.get('simoe-fast_speedup_to_95pct'), '.1f')}x less than {long}'s "
                f"{e['ms_full_compile_s']:.0f} s)."
                if reach
                else f"- SiMoE fast never reached 95% of {long}'s performance."
            ),
        ]
        full_reach = e.get("simoe-full_compile_s_to_95pct")
        full_perf = e.get("simoe-full_perf_vs_ms_full")
        if full_perf is not None:
            lines.append(
                f"- SiMoE full mode (fast mode's measurements continued to "
                f"{st.get('long_simoe_budget', '?')} trials with online updates) kept "
                f"{full_perf * 100:.1f}% of {long}'s performance; "
                + (
                    f"it reached 95% after {full_reach:.0f} s of compile time, "
                    f"{_f(e.get('simoe-full_speedup_to_95pct'), '.1f')}x less than {long}'s "
                    f"{e['ms_full_compile_s']:.0f} s (the paper's ratio at 95%)."
                    if full_reach
                    else "it never reached 95%."
                )
            )
        ms_row = next((r for r in b["rows"] if r["method"] == long), None)
        fast = next((r for r in b["rows"] if r["method"] == "simoe-fast"), None)
        if ms_row and fast and fast["network_latency_s"]:
            t = _first_at(ms_row["curve"], fast["network_latency_s"])
            n = sum(1 for sec, _ in ms_row["curve"] if t is not None and sec <= t)
            lines.append(
                f"- {long} first matched SiMoE fast's latency after {t:.0f} s of compile time "
                f"(about its first {n} measurements)."
                if t
                else f"- {long} never matched SiMoE fast's latency within its budget."
            )
            if t and n <= 100:
                lines.append(
                    f"- Why the performance is what it is: {long} matched SiMoE fast within its "
                    "XGB warm-up (the first 100 measurements, scored at random), so on this task "
                    "and GPU the zero-shot model's picks were no better than random picks "
                    "from MetaSchedule's evolutionary search."
                )
            cap = ms_row["modelled_measure_s"] / fast["modelled_measure_s"]
            share = fast["search_wall_s"] / fast["compile_s"]
            lines.append(
                f"- Why the ratio is what it is: the measurements alone ({ms_row['measured']} "
                f"against {fast['measured']}) give {cap:.1f}x; SiMoE fast's model-only search "
                f"took {fast['search_wall_s']:.0f} s on this machine, {share * 100:.0f}% of its "
                f"compile time, against {ms_row['search_wall_s']:.0f} s of search for "
                f"{long}. A 61x ratio needs both a budget of more than 61 x "
                f"{fast['measured']} measurements for MetaSchedule and a SiMoE search that "
                "costs less than its measurements."
            )
    lines += _budget_spread(b, repeats or [], long)
    if b.get("curves_png"):
        lines += ["", f"The curves of this section: the last panel of {b['curves_png']}."]
    return [*lines, ""]


def _budget_spread(b: dict[str, Any], repeats: list[dict[str, Any]], long: str) -> list[str]:
    """Every method's latency in each run of this section (run to run), and the claims
    against MetaSchedule's best run (the conservative reading). A repeat's SiMoE rows count
    only if it ran the same SiMoE settings (an earlier fast mode is not this one)."""
    simoe_keys = ("simoe_fast_rounds", "simoe_fast_population", "fleet_rounds")

    def same_simoe(rep: dict[str, Any]) -> bool:
        return all(rep.get("settings", {}).get(k) == b["settings"].get(k) for k in simoe_keys)

    def latency(rep: dict[str, Any], method: str) -> float | None:
        if method.startswith("simoe") and not same_simoe(rep):
            return None
        row = next((r for r in rep["rows"] if r["method"] == method), None)
        return row["network_latency_s"] if row else None

    mine = next((r for r in b.get("rows", []) if r["method"] == long), None)
    if not repeats or mine is None:
        return []
    lines = [
        "",
        "**Run to run.** The same section (same settings for MetaSchedule, same seed) in "
        "other invocations; latency in ms, this run first. MetaSchedule's search is not "
        "deterministic across runs (threads, XGB's random warm-up): one run can stall far from "
        "another. n/a: that run did not have the method (or had an earlier SiMoE fast mode).",
        "",
        "| method | this run | " + " | ".join(f"run {i + 2}" for i in range(len(repeats))) + " |",
        "|---|---|" + "---|" * len(repeats),
    ]
    for r in b["rows"]:
        cells = [_f(r["network_latency_s"] and r["network_latency_s"] * 1e3, ".4f")]
        cells += [_f((v := latency(rep, r["method"])) and v * 1e3, ".4f") for rep in repeats]
        lines.append(f"| {r['method']} | " + " | ".join(cells) + " |")
    lines += [""]
    lines += [
        f"- run {i + 2}: `{rep['command']}` (load average {rep['load_average_at_start'][0]:.1f} "
        "at its start)"
        for i, rep in enumerate(repeats)
    ]
    longs = [v for v in [mine["network_latency_s"], *(latency(x, long) for x in repeats)] if v]
    best = min(longs)
    for method in ("simoe-fast", "simoe-full"):
        values = [
            v
            for v in [
                next((x["network_latency_s"] for x in b["rows"] if x["method"] == method), None),
                *(latency(x, method) for x in repeats),
            ]
            if v
        ]
        if values:
            keep = best / float(np.median(values))
            lines.append(
                f"- Against the best {long} run ({best * 1e3:.4f} ms), {method}'s median over "
                f"its {len(values)} run(s) keeps {keep * 100:.1f}% of the performance (target "
                f">= 95%: {_verdict(keep, TARGET_PERF_SHARE)})."
            )
    return lines


def _mlp_why(c: dict[str, Any], offline: dict[str, Any] | None) -> list[str]:
    """Why SiMoE fast beats (or not) the pre-trained MLP: their rankings on the same data."""
    k = c["settings"]["tlm_budget"]
    values = [e.get(f"speedup_vs_ms-mlp-pretrained-{k}") for e in c.get("summary", [])]
    value = _geomean([v for v in values if v])
    if value is None or value >= TARGET_TLM_SPEEDUP or not offline:
        return []
    res = offline.get("result", {}).get("results", {})
    simoe, mlp = res.get("simoe", {}).get("0"), res.get("mlp-finetune", {}).get("0")
    if not simoe or not mlp:
        return []
    return [
        f"Why SiMoE fast is not {TARGET_TLM_SPEEDUP}x the pre-trained MLP: both learn from the "
        "same training GPUs' data, and on the held-out GPUs (section 2, budget 0) their "
        f"rankings are close: top-1 {simoe['top1']:.3f} (SiMoE) against {mlp['top1']:.3f} "
        f"(MLP), pairwise accuracy {simoe['pairwise']:.3f} against {mlp['pairwise']:.3f}. "
        f"Picking {k} candidates from a search of the same space, close rankings give close "
        "networks.",
        "",
    ]


def _first_at(curve: list[Any], latency: float) -> float | None:
    return next((s for s, lat in curve if lat <= latency), None)


def _federation_md(f: dict[str, Any]) -> list[str]:
    lines = [
        "## 3. Federation overhead",
        "",
        f"Engine: {f['engine']}. Stand-in nodes answer at once with real-sized payloads "
        f"(SiMoE shared arrays {f['shared_arrays_bytes'] / 1024:.0f} KiB, model "
        f"{f['model_parameters']} parameters, one expert, a hardware profile): the round time is "
        "the federation's own overhead (aggregation, expert registry, similarity, message "
        "copies) on this machine, without node-side training or network transfer.",
        "",
        "| nodes | rounds | median round s | steady round s | KiB down / node / round "
        "| KiB up / node / round |",
        "|---|---|---|---|---|---|",
    ]
    for r in f["results"]:
        lines.append(
            f"| {r['nodes']} | {r['rounds']} | {_f(r['median_round_s'], '.2f')} "
            f"| {_f(r['steady_round_s'], '.2f')} | {r['bytes_down_per_node_per_round'] / 1024:.0f} "
            f"| {r['bytes_up_per_node_per_round'] / 1024:.0f} |"
        )
    return [*lines, ""]


def _cpu_md(c: dict[str, Any]) -> list[str]:
    lines = [
        "## 4. Real CPU: tuned kernels against numpy and PyTorch (MEASURED)",
        "",
        f"{c['hardware']}, {c['threads']} threads, target `{c['target']}`. Peak FP32 "
        f"{c['peak_fp32_gflops']:.0f} GFLOP/s ({c['peak_from']}). PyTorch {c['torch_version']}, "
        f"numpy {c['numpy_version']}. TVM tuned with MetaSchedule's XGB model"
        + (
            " (with fewer than its 100 warm-up measurements per op, XGB scores at random: the "
            "tuned figures are those of the evolutionary search's first batches)"
            if c["rows"] and max(r["trials"] for r in c["rows"]) < 100
            else ""
        )
        + "; TVM latencies are the median of the tuned kernel's re-measurement, numpy/PyTorch "
        "the best of 5 timings (threads that lose their core to other jobs slow BLAS calls "
        "many-fold).",
        "",
        "| op | trials | tune wall s | TVM untuned ms | TVM tuned ms | numpy ms | PyTorch ms "
        "| TVM GFLOP/s | TVM share of peak | PyTorch share of peak |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in c["rows"]:

        def ms(v: float | None) -> str:
            return _f(v * 1e3 if v else None, ".3f")

        def pct(v: float | None) -> str:
            return _f(v * 100 if v else None, ".1f") + "%"

        lines.append(
            f"| {r['op']} | {r['trials']} | {r['tune_wall_s']:.0f} | {ms(r['tvm_untuned_s'])} "
            f"| {ms(r['tvm_tuned_s'])} | {ms(r['numpy_s'])} | {ms(r['pytorch_s'])} "
            f"| {_f(r['tvm_gflops'], '.1f')} | {pct(r['peak_share'])} "
            f"| {pct(r['pytorch_peak_share'])} |"
        )
    if c.get("failed"):
        lines += ["", *[f"- FAILED: {f['op']}: `{f['error']}`" for f in c["failed"]]]
    return [*lines, ""]


def _adopt_plots(plots: list[str], source: Path, out: Path) -> list[str]:
    """Copy a merged section's plots next to this report; their paths relative to the repo."""
    import shutil

    adopted = []
    for plot in plots:
        src = Path(plot) if Path(plot).is_absolute() else ROOT / plot
        if not src.exists():
            src = source / Path(plot).name
        if src.exists() and src.resolve() != (out / src.name).resolve():
            shutil.copyfile(src, out / src.name)
        dest = out / src.name
        adopted.append(dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else plot)
    return adopted


def merge_reports(out: Path, others: list[Path]) -> None:
    """Sections run by other invocations (e.g. in parallel) join the main report."""
    path = out / "report.json"
    data = json.loads(path.read_text())
    for other in others:
        extra = json.loads(other.read_text())
        merged = []
        for name, section in extra["sections"].items():
            if name in ("compile", "offline", "budget") and name in data["sections"]:
                if name in ("compile", "budget"):  # a repeat: kept to show the spread
                    data.setdefault(f"{name}_repeats", []).append(
                        {"command": extra["command"], "rows": section["rows"],
                         "settings": section.get("settings", {}),
                         "load_average_at_start": extra["machine"]["load_average_at_start"]}
                    )  # fmt: skip
                continue
            merged.append(name)
            if name == "budget":  # its plots join this report's directory
                section["plots"] = _adopt_plots(section.get("plots", []), other.parent, out)
            data["sections"][name] = section
            data["section_seconds"][name] = extra["section_seconds"].get(name)
            data["errors"].pop(name, None)
            if name in extra["errors"]:
                data["errors"][name] = extra["errors"][name]
        if not merged:
            continue
        data.setdefault("other_runs", []).append(
            {
                "command": extra["command"],
                "sections": sorted(merged),
                "elapsed_s": extra.get("elapsed_s"),
                "load_average_at_start": extra["machine"]["load_average_at_start"],
            }
        )
    path.write_text(json.dumps(data, indent=1, default=_jsonable))


def render_only(out: Path, markdown_path: Path) -> int:
    """Regenerate the markdown (and the compile summary) from the numbers in report.json."""
    from bench import compile_time

    data = json.loads((out / "report.json").read_text())
    c = data["sections"].get("compile")
    if c:
        c["summary"] = compile_time.summarize(c["rows"], c["settings"]["tlm_budget"])
    plot_curves(data, out)
    (out / "report.json").write_text(json.dumps(data, indent=1, default=_jsonable))
    markdown_path.write_text(markdown(data))
    return 0


def plot_curves(data: dict[str, Any], out: Path) -> None:
    """The one curve figure (bench.curves) of the compile and budget sections."""
    from bench.curves import plot

    path = plot(data, out / "curves.png")
    if path is None:
        return
    path = path.resolve()
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for name in ("compile", "budget"):
        if name in data["sections"]:
            data["sections"][name]["curves_png"] = shown.as_posix()


# -- main --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="scaled-down settings (default)")
    mode.add_argument(
        "--full", action="store_true", help="the paper-sized settings (weeks on 2 cores)"
    )
    parser.add_argument(
        "--sections",
        default=None,
        help=f"comma list of sections of {','.join(SECTIONS)} (default: {','.join(QUICK_SECTIONS)} "
        "in --quick, all in --full)",
    )
    parser.add_argument("--out", type=Path, default=REPORTS, help="report directory")
    parser.add_argument("--markdown", type=Path, default=Path("BENCHMARKS.md"))
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(".simoe") / "bench-work",
        help="scratch directory (fleet stores, cached profiles, MetaSchedule logs)",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="only regenerate the markdown from an existing report.json (no benchmark runs)",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        help="add the sections of these report.json files (runs of other --sections) to the "
        "report in --out, then regenerate the markdown",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the compile section's finished runs from --out's report.json (same "
        "settings) and run only the rest: --full takes weeks on 2 cores",
    )
    args = parser.parse_args(argv)
    if args.merge:
        merge_reports(ROOT / args.out, [ROOT / p for p in args.merge])
    if args.render_only or args.merge:
        return render_only(ROOT / args.out, ROOT / args.markdown)
    chosen = args.sections or ",".join(SECTIONS if args.full else QUICK_SECTIONS)
    sections = [x.strip() for x in chosen.split(",") if x.strip()]
    unknown = [x for x in sections if x not in RUNNERS]
    if unknown:
        parser.error(f"unknown sections {unknown}; known: {', '.join(SECTIONS)}")
    os.chdir(ROOT)

    args.work.mkdir(parents=True, exist_ok=True)
    args.previous = None  # read before the new report overwrites it
    if args.resume:
        path = args.out / "report.json"
        if not path.exists():
            parser.error(f"--resume: no {path} to resume from")
        args.previous = json.loads(path.read_text())
    console = Console(stderr=True)
    report = Report(args.out, args.markdown, "full" if args.full else "quick", argv)
    report.save()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} sections"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        bar = progress.add_task("benchmarks", total=len(sections))

        def say(text: str) -> None:
            progress.console.log(text)
            progress.update(bar, description=text[:60])

        for name in sections:
            started = time.perf_counter()
            try:
                RUNNERS[name](report, args, say)
            except Exception as exc:  # noqa: BLE001 - one failed section must not lose the rest
                report.data["errors"][name] = f"{type(exc).__name__}: {str(exc)[:300]}"
                console.print(traceback.format_exc(limit=5))
            report.data["section_seconds"][name] = time.perf_counter() - started
            report.save()
            progress.advance(bar)
    plot_curves(report.data, report.out)
    report.save()
    console.print(f"report: {args.out / 'report.json'}, {args.markdown}")
    return 1 if report.data["errors"] else 0


if __name__ == "__main__":
    prepare()
    sys.exit(main())
