"""Tuning on GPUs outside the catalog, the way a user does it: `simoe-agent tune` with a
user's spec file (`--device sim:FILE.json`) and operators of networks outside the suite
(`--model FILE.py:FUNCTION`). SIMULATED GPUs: every latency is modelled, not measured.

    python -m bench.compile.user_spec_tune --out bench/reports/user_spec   # user_spec.json

Each (GPU, operator, method, trials) is one `simoe-agent tune ... --largest-tasks 1 --json`
in a fresh state directory (no record of an earlier run steers it; only the device's cached
profile is copied in), and the row keeps what the CLI reports for the operator's task:
TVM's default (DLight) latency, the best tuned one re-measured, which one the never-worse
rule kept (`kept`) and the candidates measured. Methods, as the docs show them:

- simoe-fast: `--cost-model simoe --model-rounds 5` (the shipped starter model, fast mode);
- ms-xgb: `--cost-model xgb` (MetaSchedule's default; at 32 trials or fewer it is one
  search with XGB's warm-up of 100 not reached, so XGB never ranks a candidate);
- simoe (on request): `--cost-model simoe`, SiMoE scoring MetaSchedule's own search.

Rows are written after every call; a rerun keeps the finished ones (same command).

Development variants (issue 23): `--cli-args "..."` appends options to every call (e.g.
`--hedge-spearman 2`), `--import-model FILE` makes FILE each fresh state's imported model
(`simoe-agent model import`), so a candidate starter model is tried before it ships; both
are in the row's command.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pydantic import ValidationError

from bench.report.report_model import UserSpecReport, UserSpecRow

ROOT = Path(__file__).resolve().parents[2]
INPUTS = Path("bench") / "inputs"
GPUS = [INPUTS / "user_gpus" / "rtx4060.json", INPUTS / "user_gpus" / "rtxa4000.json"]
OPS = ["llama_q_proj", "llama_mlp_up", "vit_patch_embed"]
OPS_FILE = INPUTS / "outside_ops.py"
METHODS = {
    "simoe-fast": ["--cost-model", "simoe", "--model-rounds", "5"],
    "ms-xgb": ["--cost-model", "xgb"],
    # on request (--methods): SiMoE scoring MetaSchedule's own search, no fast mode
    "simoe": ["--cost-model", "simoe"],
}
DEFAULT_METHODS = ["simoe-fast", "ms-xgb"]
TRIALS = [8, 16, 32]
CALL_TIMEOUT_S = 1800


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def spec_key(spec: Path) -> str:
    return str(json.loads((ROOT / spec).read_text())["key"])


def tune_once(
    spec: Path,
    op: str,
    method: str,
    trials: int,
    seed: int,
    profiles: Path,
    extra: list[str] | None = None,
    model_file: Path | None = None,
) -> UserSpecRow:
    """One CLI call in a fresh state directory (the device profile copied in; `model_file`
    imported first); `extra`: more options for the call."""
    args = [
        "tune", "--model", f"{OPS_FILE}:{op}", "--device", f"sim:{spec}",
        *METHODS[method], "--trials", str(trials), "--seed", str(seed),
        "--largest-tasks", "1", *(extra or []), "--json",
    ]  # fmt: skip
    cli = str(Path(sys.executable).parent / "simoe-agent")
    with tempfile.TemporaryDirectory(prefix="simoe-user-spec-") as tmp:
        state = Path(tmp) / "agent"
        if profiles.exists():
            shutil.copytree(profiles, state / "profiles")
        env = {**os.environ, "SIMOE_HOME": tmp}
        cpu0, t0 = _children_cpu_s(), time.perf_counter()
        if model_file is not None:
            subprocess.run(
                [cli, "model", "import", str(model_file), "--state-dir", str(state)],
                cwd=ROOT, env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
        proc = subprocess.run(
            [cli, *args, "--state-dir", str(state)], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=CALL_TIMEOUT_S,
        )  # fmt: skip
        wall, cpu = time.perf_counter() - t0, _children_cpu_s() - cpu0
        if not profiles.exists() and (state / "profiles").exists():
            shutil.copytree(state / "profiles", profiles)  # profiled once per GPU
    imported = f"simoe-agent model import {model_file}; " if model_file is not None else ""
    row = UserSpecRow(
        gpu=spec_key(spec), spec_file=str(spec), operator=op, method=method, trials=trials,
        seed=seed, command=imported + "simoe-agent " + " ".join(args), wall_s=wall, cpu_s=cpu,
    )  # fmt: skip
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        row.error = f"exit {proc.returncode}: {lines[-1] if lines else ''}"[:300]
        return row
    result = json.loads(proc.stdout)
    [task] = [t for t in result["tasks"] if t["task_name"] in result["selection"]["tuned"]]
    row.task = task["task_name"]
    row.measured = task["trials"]
    row.default_s = task["untuned_latency_s"]
    row.tuned_s = task["tuned_latency_s"]
    row.kept = task["kept"]
    row.model_used = (result.get("model_used") or {}).get("source")
    if result.get("hedge_spearman") is not None:
        row.hedge_spearman = result["hedge_spearman"].get(row.task)
        row.hedged = row.task in result.get("hedged", [])
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/reports/user_spec"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ops", default=",".join(OPS), help="factories of outside_ops.py")
    parser.add_argument(
        "--methods", default=",".join(DEFAULT_METHODS), help=f"of {', '.join(METHODS)}"
    )
    parser.add_argument("--trials", default=",".join(map(str, TRIALS)))
    parser.add_argument("--gpus", default=",".join(map(str, GPUS)), help="spec files")
    parser.add_argument("--work", type=Path, default=Path(".simoe") / "user-spec-work")
    parser.add_argument(
        "--label", help="which code the rows come from (e.g. 'range fix'), kept in the report"
    )
    parser.add_argument("--cli-args", default="", help="more options for every call")
    parser.add_argument(
        "--import-model", type=Path, help="a SiMoE model file each call imports first"
    )
    args = parser.parse_args(argv)
    extra = shlex.split(args.cli_args)
    if args.import_model is not None and not (ROOT / args.import_model).is_file():
        parser.error(f"--import-model: no file {args.import_model}")
    ops = [x for x in args.ops.split(",") if x]
    methods = [x for x in args.methods.split(",") if x]
    gpus = [Path(x) for x in args.gpus.split(",") if x]
    if bad := [m for m in methods if m not in METHODS]:
        parser.error(f"--methods: unknown {', '.join(bad)}; known: {', '.join(METHODS)}")
    try:
        trials = [int(x) for x in args.trials.split(",") if x]
    except ValueError:
        parser.error(f"--trials: whole numbers, comma-separated, not {args.trials!r}")
    if missing := [str(g) for g in gpus if not (ROOT / g).is_file()]:
        parser.error(f"--gpus: no spec file {', '.join(missing)}")
    out = args.out / f"user_spec_seed{args.seed}.json"
    command = "python -m bench.compile.user_spec_tune " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    note = (
        "SIMULATED GPUs from user spec files (bench/inputs/user_gpus/); operators of networks "
        "outside the suite (bench/inputs/outside_ops.py); each row one `simoe-agent tune` call"
    )
    rows: list[UserSpecRow] = []
    commands = [command]
    if out.exists():
        try:
            earlier = UserSpecReport.model_validate_json(out.read_text())
            rows, commands = earlier.rows, [*earlier.commands, command]
            if earlier.label != args.label:
                parser.error(f"{out} holds rows labelled {earlier.label!r}, not {args.label!r}")
        except ValidationError:
            rows = []
    done = {(r.gpu, r.operator, r.method, r.trials) for r in rows if r.error is None}
    rows = [r for r in rows if r.error is None]
    out.parent.mkdir(parents=True, exist_ok=True)
    for spec in gpus:
        profiles = args.work / "profiles" / spec_key(spec)
        for op in ops:
            for method in methods:
                for k in trials:
                    if (spec_key(spec), op, method, k) in done:
                        continue
                    row = tune_once(
                        spec, op, method, k, args.seed, profiles, extra, args.import_model
                    )
                    rows.append(row)
                    print(
                        f"{row.gpu} {op} {method} {k}: measured {row.measured}, default "
                        f"{row.default_s}, tuned {row.tuned_s}, kept {row.kept}, "
                        f"{row.wall_s:.0f} s wall, {row.cpu_s:.0f} CPU s, hedge rho "
                        f"{row.hedge_spearman} hedged {row.hedged} {row.error or ''}",
                        flush=True,
                    )
                    report = UserSpecReport(
                        commands=commands, note=note, rows=rows, label=args.label
                    )
                    out.write_text(report.model_dump_json(indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
