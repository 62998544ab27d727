"""Federation helps, the report: the rows and the per-seed report (pydantic, saved as JSON),
their Markdown, and the summary over seeds with paired bootstrap intervals.

Everything it shows is SIMULATED (the fleet's latencies come from the analytical GPU model).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from bench.reporting import load_text
from bench.transfer.offline_transfer_report import read as read_offline

GOAL_NEWCOMER_GAP = 0.03
GOAL_SIMILARITY = 0.7  # issue 23: learned similarity against measured agreement, rank corr.
# SiMoE's zero-shot top-1 per held-out GPU, offline: what the newcomers are compared with
OFFLINE_REPORT = Path(__file__).resolve().parents[2] / "docs/results/offline_transfer.json"


class NodeRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: str
    train_tasks: int
    held_out_tasks: int
    train_candidates: int
    held_out_candidates: int
    experts: list[str]  # what the server sent it in the last round
    own_only_top1: float
    federated_top1: float  # what the node tunes with: its personal model where it holds one
    # with a personal fine-tune: the averaged model's score (before it), and the local CPU s
    # of the fine-tune (in its ClientApp) and of the own-only model (None: not recorded)
    federated_global_top1: float | None = None
    personal_cpu_s: float | None = None
    own_only_cpu_s: float | None = None

    @property
    def difference(self) -> float:
        return self.federated_top1 - self.own_only_top1


class NewcomerRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: str
    experts: list[str]
    test_tasks: int
    zero_shot_top1: float  # on the offline benchmark's test split
    zero_shot_top1_all: float  # on every candidate of every task
    offline_top1: float | None  # bench/transfer/offline_transfer.py's SiMoE zero-shot, same GPU
    central_top1: float | None = None  # SiMoE trained in one process on the nodes' train data
    # the final model's cos(z_newcomer, z_node) and the measured rank agreement per node, and
    # the Spearman between them over the nodes (issue 23's goal >= 0.7); None: not measured
    similarity_to_nodes: dict[str, float] | None = None
    agreement_with_nodes: dict[str, float] | None = None
    similarity_rank_correlation: float | None = None


class FederationHelpsReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    simulated: bool = True
    command: str
    data: str
    grid: str = "in-process Grid: ServerApp round loop + SiMoEStrategy + registry, agent ClientApp"
    nodes: list[NodeRow]
    newcomers: list[NewcomerRow]
    rounds: int
    epochs: int
    k_experts: int
    seed: int
    split: str
    held_out_fraction: float
    offline_zero_shot_top1: float | None  # the offline mean over the same newcomers
    central_epochs: int = 0  # 0: no central reference was trained
    # the federation's training variant (TrainInstruction / SiMoEStrategy settings)
    local_batch: int = 8  # tasks per optimizer step in a node's local round
    prox_mu: float = 0.0  # FedProx proximal term on the shared parts (0: plain FedAvg)
    # the node's cross-node loss on the encoder: the delivered experts' mixture on its records
    transfer_weight: float = 0.0
    server_lr: float = 1.0  # server learning rate on the averaged change (1: FedAvg)
    server_optimizer: str = "sgd"  # sgd: FedAvg(M without momentum); adam: FedAdam
    matched_global: bool = False  # newcomers get the global their experts were trained on
    # the own-only baseline's epochs (one per round) as chosen on validation
    # (bench/federation_own_only.json); None: the federation's rounds x epochs (not chosen)
    own_only_epochs: int | None = None
    # the server's similarity fit steps after each average; None: a run from before the fit
    # existed (so none)
    similarity_steps: int | None = None
    fleet: str | None = None  # the protocol fleet's digest; None: not recorded
    # epochs of each node's personal fine-tune in the last round (0: none; then federated is
    # the averaged model)
    personal_epochs: int = 0
    # FedDF steps on public probes after each average (0: off) and the similarity fit's
    # agreements' source (reported by the nodes, or the experts' rankings of the probes)
    distill_steps: int = 0
    similarity_source: str = "reported"
    # the public probe file given with --probe-file and its sha256 (empty: the bench's own,
    # federation_helps.write_probe_file, drawn from the fleet's candidates)
    probe_file: str = ""
    probe_file_sha256: str = ""
    # each node's own-records teacher, epochs per round, and the server's distillation
    # toward its probe scores, steps per round (0: off)
    teacher_epochs: int = 0
    teacher_distill_steps: int = 0
    teacher_balance: bool = False  # the teachers weighted so each hardware cluster counts alike
    newcomer_distill_steps: int = 0  # the newcomers' copy distilled toward the teachers (0: off)
    newcomer_teachers: str = "all"  # every node's teachers, or the sent experts' ("sent")
    bytes_per_node_last_round: dict[str, dict[str, int]]
    federation_wall_s: float
    own_only_wall_s: float
    total_wall_s: float
    load_average_start: list[float]
    load_average_end: list[float]
    threads: int


# -- the report -----------------------------------------------------------------------------------
def markdown(report: FederationHelpsReport) -> str:
    nodes = report.nodes
    better = sum(r.difference > 0 for r in nodes)
    mean_own = float(np.mean([r.own_only_top1 for r in nodes]))
    mean_fed = float(np.mean([r.federated_top1 for r in nodes]))
    lines = [
        "# Federation helps (SIMULATED GPUs)",
        "",
        f"Command: `{report.command}`  ",
        f"Data: {report.data}. All latencies are SIMULATED (analytical GPU model).  ",
        f"Federation: {report.grid}; {len(nodes)} nodes, {report.rounds} rounds, "
        f"{report.epochs} epochs per round, k = {report.k_experts} experts sent per node, "
        f"seed {report.seed}; held-out tasks: {report.held_out_fraction:.0%} of each node's "
        f"tasks, split {report.split}.  ",
        f"Wall time: {report.total_wall_s:.0f} s (federation {report.federation_wall_s:.0f} s, "
        f"own-only models and scoring {report.own_only_wall_s:.0f} s), {report.threads} torch "
        f"thread(s); load average at start {load_text(report.load_average_start)}, "
        f"at end {load_text(report.load_average_end)}.",
        "",
        "## Each node's held-out tasks: top-1 score (SIMULATED)",
        "",
        "federated = the node's model after the rounds (global shared parts, the experts the "
        "server sent it, its own expert); own-only = same architecture, trained on the "
        "node's own train tasks alone, "
        + (
            f"for {report.own_only_epochs} epochs (its budget chosen on validation, "
            "bench/federation_own_only.json)."
            if report.own_only_epochs is not None
            else f"for the federation's {report.rounds} x {report.epochs} epochs (a budget not "
            "chosen on validation)."
        ),
        "",
        _split_note(report.split),
        "",
        "| node (simulated GPU) | train tasks | held-out tasks | experts sent | own-only top-1 "
        "| federated top-1 | difference |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in nodes:
        lines.append(
            f"| {r.gpu} | {r.train_tasks} | {r.held_out_tasks} | {', '.join(r.experts)} | "
            f"{r.own_only_top1:.3f} | {r.federated_top1:.3f} | {r.difference:+.3f} |"
        )
    lines += [
        f"| **mean** | | | | {mean_own:.3f} | {mean_fed:.3f} | {mean_fed - mean_own:+.3f} |",
        "",
        f"Federated better on {better} of {len(nodes)} nodes.",
        "",
        "## Newcomers: zero-shot top-1 (SIMULATED)",
        "",
        "GPUs that are none of the nodes join at the last round with no measurements; the "
        "server sends them the global model and their nearest experts. Scored on the test "
        "split of bench/transfer/offline_transfer.py (same seed), next to that benchmark's SiMoE "
        "zero-shot figure for the same GPU (trained offline on 22 GPUs' full data).",
        "",
        "| newcomer (simulated GPU) | experts sent | zero-shot top-1 (test split) "
        "| all candidates | central, same data | offline SiMoE top-1 |",
        "|---|---|---|---|---|---|",
    ]
    for r in report.newcomers:
        lines.append(
            f"| {r.gpu} | {', '.join(r.experts)} | {r.zero_shot_top1:.3f} | "
            f"{r.zero_shot_top1_all:.3f} | {_num(r.central_top1)} | {_num(r.offline_top1)} |"
        )
    if report.newcomers:
        mean_new = float(np.mean([r.zero_shot_top1 for r in report.newcomers]))
        centrals = [r.central_top1 for r in report.newcomers if r.central_top1 is not None]
        mean_central = float(np.mean(centrals)) if centrals else None
        lines.append(
            f"| **mean** | | {mean_new:.3f} | | {_num(mean_central)} | "
            f"{_num(report.offline_zero_shot_top1)} |"
        )
        lines.append("")
        if report.central_epochs:
            lines.append(
                f"central, same data = one SiMoE trained in one process ({report.central_epochs} "
                "epochs, as bench/transfer/offline_transfer.py trains it) on exactly the nodes' "
                "train "
                "tasks: what the same data gives without federation."
            )
            lines.append("")
        if report.offline_zero_shot_top1 is not None:
            gap = report.offline_zero_shot_top1 - mean_new
            verdict = "met" if gap <= GOAL_NEWCOMER_GAP else "MISSED"
            lines.append(
                f"Goal (within {GOAL_NEWCOMER_GAP} of the offline figure): {verdict} "
                f"(offline - federated = {gap:+.3f})."
            )
    lines += [
        "",
        "## Bytes per node in the last round (payload, from the registry)",
        "",
        "| node | down | up |",
        "|---|---|---|",
    ]
    for name, row in sorted(report.bytes_per_node_last_round.items()):
        lines.append(f"| {name} | {row['down']:,} | {row['up']:,} |")
    return "\n".join(lines) + "\n"


def _split_note(split: str) -> str:
    if split == "per node":
        return (
            "Split per node: each node holds out its own random third of its tasks, so other "
            "nodes may have trained on a node's held-out tasks (on their hardware), as in a "
            "fleet whose GPUs tune different workloads; that knowledge is what the "
            "federation can pass on. `--same-split` holds out the same tasks on every node."
        )
    return (
        "Same split on every node: no node trained on the held-out tasks; the federation "
        "can only help through what the fleet's other tasks teach."
    )


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


# -- over seeds ---------------------------------------------------------------------------------
class FederationHelpsSeeds(BaseModel):
    """One federation_helps run per seed, with the same settings; the summary is computed."""

    model_config = ConfigDict(extra="forbid")

    simulated: bool = True
    command: str
    runs: list[FederationHelpsReport]
    # the runs this report's file held before (a report adds runs, it never drops one)
    earlier_runs: list[FederationHelpsSeeds] = Field(default_factory=list)


def _interval(ours: dict[str, float], theirs: dict[str, float]) -> tuple[float, float, float]:
    """Mean unit difference (ours - theirs) and its 95 % paired bootstrap interval (GPU models
    resampled, each with all its units: units of one model rank alike; each unit's value is
    its mean over the seeds)."""
    from bench.transfer.protocol_report import paired_interval

    wrap = {u: np.array([v]) for u, v in ours.items()}
    return paired_interval(wrap, {u: np.array([theirs[u]]) for u in ours})


def _seed_means(runs: list[FederationHelpsReport], rows: str, field: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for run in runs:
        for row in getattr(run, rows):
            value = getattr(row, field)
            if value is not None:
                values.setdefault(row.gpu, []).append(float(value))
    return {gpu: float(np.mean(v)) for gpu, v in values.items() if len(v) == len(runs)}


def summary(report: FederationHelpsSeeds) -> dict[str, object]:
    """Nodes: federated - own-only; newcomers: central - federated (the gap); each a mean
    over units of the seed means, with a 95 % paired bootstrap interval over units."""
    runs = report.runs
    own = _seed_means(runs, "nodes", "own_only_top1")
    fed = _seed_means(runs, "nodes", "federated_top1")
    out: dict[str, object] = {
        "seeds": [r.seed for r in runs],
        "nodes": len(own),
        "own_only": float(np.mean(list(own.values()))),
        "federated": float(np.mean(list(fed.values()))),
        "node_difference": _interval(fed, own),
        "nodes_better": sum(fed[g] > own[g] for g in own),
        "node_difference_per_seed": [
            float(np.mean([r.difference for r in run.nodes])) for run in runs
        ],
    }
    zero = _seed_means(runs, "newcomers", "zero_shot_top1")
    central = _seed_means(runs, "newcomers", "central_top1")
    if zero and len(central) == len(zero):
        gap = _interval(central, zero)
        out |= {
            "newcomers": len(zero),
            "newcomer_zero_shot": float(np.mean(list(zero.values()))),
            "central": float(np.mean(list(central.values()))),
            "newcomer_gap": gap,
            "newcomer_gap_per_seed": [
                float(np.mean([c.central_top1 - c.zero_shot_top1 for c in run.newcomers]))
                for run in runs
            ],
            "goal_met": gap[0] <= GOAL_NEWCOMER_GAP,
        }
    rho = _seed_means(runs, "newcomers", "similarity_rank_correlation")
    if rho:  # a mean over newcomers, clustered by GPU model (its difference from 0)
        out |= {
            "similarity_rank_correlation": _interval(rho, dict.fromkeys(rho, 0.0)),
            "similarity_rank_correlation_per_seed": [
                float(np.mean([r.similarity_rank_correlation for r in run.newcomers]))
                for run in runs
            ],
        }
    return out


def _fit_text(report: FederationHelpsReport) -> str:
    if report.similarity_steps is None:
        return "none (the run predates the server's similarity fit)"
    if report.similarity_steps == 0:
        return "off"
    source = ", probe agreements" if report.similarity_source == "probes" else ""
    if source and report.probe_file:
        source += f" ({Path(report.probe_file).name}, sha256 {report.probe_file_sha256[:8]})"
    return f"{report.similarity_steps} steps{source}"


def _teacher_text(report: FederationHelpsReport) -> str:
    if not report.teacher_epochs:
        return ""
    balance = " cluster-balanced" if report.teacher_balance else ""
    newcomers = (
        f", newcomers' copy distilled {report.newcomer_distill_steps}"
        + (" toward the sent experts' teachers" if report.newcomer_teachers == "sent" else "")
        if report.newcomer_distill_steps
        else ""
    )
    return (
        f" + teachers {report.teacher_epochs} ep/round, distil {report.teacher_distill_steps}"
        f"{balance}{newcomers}"
    )


def _fleet_text(report: FederationHelpsReport) -> str:
    return report.fleet[:8] if report.fleet else "not recorded"


def _variant_text(report: FederationHelpsReport) -> str:
    """The local-training and aggregation settings the run used (the deployment's own)."""
    return (
        f"local batch {report.local_batch} tasks per step, proximal term mu = "
        f"{report.prox_mu:g}, cross-node transfer loss weight {report.transfer_weight:g}, "
        f"server optimizer {report.server_optimizer} at learning rate "
        f"{report.server_lr:g}; server similarity fit after each average: {_fit_text(report)}; "
        "newcomers get "
        + ("the global their experts were trained on" if report.matched_global else "the latest")
    )


def _ci(values: tuple[float, float, float]) -> str:
    mean, low, high = values
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"


def _personal_lines(runs: list[FederationHelpsReport]) -> list[str]:
    """With a personal fine-tune: what it costs each node beside own-only, and what the
    averaged model alone scores."""
    first = runs[0]
    if not first.personal_epochs:
        return []
    rows = [r for run in runs for r in run.nodes]
    glob = [r.federated_global_top1 for r in rows if r.federated_global_top1 is not None]
    pers = [r.personal_cpu_s for r in rows if r.personal_cpu_s is not None]
    own = [r.own_only_cpu_s for r in rows if r.own_only_cpu_s is not None]
    cpu = (
        f"CPU s per node, mean over nodes and seeds: personal fine-tune {np.mean(pers):.2f} "
        f"(in its ClientApp), own-only {np.mean(own):.2f} (from scratch)"
        if pers and own
        else "CPU s not recorded"
    )
    return [
        "",
        f"Personalised (FedAvg + local fine-tuning): in the run's last round each node "
        f"fine-tunes a personal, never-sent copy of the program encoder and its own expert "
        f"on its own train tasks for {first.personal_epochs} epochs, on top of its "
        f"{first.rounds} x {first.epochs} federated epochs (own-only: "
        f"{first.own_only_epochs or first.rounds * first.epochs} epochs); `federated` below is "
        f"that personal model, what the node tunes with. {cpu}. The averaged model alone "
        + (
            f"(before the fine-tune) scores {np.mean(glob):.3f} on the same tasks."
            if glob
            else "was not scored."
        ),
    ]


def markdown_seeds(report: FederationHelpsSeeds) -> str:
    runs, s = report.runs, summary(report)
    first = runs[0]
    loads = "; ".join(
        f"seed {r.seed}: {r.total_wall_s:.0f} s, load {load_text(r.load_average_start)} -> "
        f"{load_text(r.load_average_end)}"
        for r in runs
    )
    lines = [
        "# Federation helps, over seeds (SIMULATED GPUs)",
        "",
        f"Command: `{report.command}`  ",
        f"Data: {first.data}, fleet {_fleet_text(first)}. All latencies are SIMULATED "
        "(analytical GPU model).  ",
        f"Federation: {first.grid}; {len(first.nodes)} nodes, {first.rounds} rounds, "
        f"{first.epochs} epochs per round, k = {first.k_experts} experts sent per node, "
        f"{_variant_text(first)}; seeds {s['seeds']}; held-out tasks: {first.split}.  ",
        "Own-only: "
        + (
            f"{first.own_only_epochs} epochs, its budget chosen on validation "
            "(bench/federation_own_only.json).  "
            if first.own_only_epochs is not None
            else f"the federation's {first.rounds} x {first.epochs} epochs (not chosen on "
            "validation).  "
        ),
        f"Central reference: {first.central_epochs} epochs (= rounds x epochs per round: the "
        "same training effort).  ",
        f"Runs: {loads}; {first.threads} torch thread(s).",
        *_personal_lines(runs),
        "",
        "Each unit's value is its mean over the seeds; intervals: 95 % paired bootstrap "
        "clustered by GPU model (models resampled, each with all its units; 4,000 resamples).",
        "",
        "| what | mean | difference [95 %] | per seed |",
        "|---|---|---|---|",
        f"| nodes ({s['nodes']}), held-out tasks: own-only -> federated | "
        f"{s['own_only']:.3f} -> {s['federated']:.3f} | {_ci(s['node_difference'])} "
        f"(better on {s['nodes_better']} of {s['nodes']}) | "
        f"{', '.join(f'{v:+.3f}' for v in s['node_difference_per_seed'])} |",
    ]
    if "newcomers" in s:
        verdict = "met" if s["goal_met"] else "MISSED"
        lines += [
            f"| newcomers ({s['newcomers']}), zero-shot: federated vs central, same data "
            f"(gap = central - federated) | {s['newcomer_zero_shot']:.3f} vs "
            f"{s['central']:.3f} | {_ci(s['newcomer_gap'])} | "
            f"{', '.join(f'{v:+.3f}' for v in s['newcomer_gap_per_seed'])} |",
            "",
            f"Goal: newcomer gap at most {GOAL_NEWCOMER_GAP}: {verdict} (mean gap "
            f"{s['newcomer_gap'][0]:+.3f}, interval up to {s['newcomer_gap'][2]:+.3f}).",
        ]
    if "similarity_rank_correlation" in s:
        rho = s["similarity_rank_correlation"]
        verdict = "met" if rho[0] >= GOAL_SIMILARITY else "MISSED"
        lines += [
            "",
            "| what | mean [95 %] | per seed |",
            "|---|---|---|",
            f"| newcomers: the final model's cos(z_newcomer, z_node) against the measured "
            f"agreement (mean per-task Spearman of their latencies on the candidates both "
            f"have), Spearman over the {len(first.nodes)} nodes | {_ci(rho)} | "
            f"{', '.join(f'{v:+.3f}' for v in s['similarity_rank_correlation_per_seed'])} |",
            "",
            f"Goal (issue 23): learned similarity follows measured agreement, rank correlation "
            f"at least {GOAL_SIMILARITY}: {verdict} (mean {rho[0]:+.3f}, interval from "
            f"{rho[1]:+.3f}).",
        ]
    lines += ["", "## Nodes (seed means)", "", "| node | own-only | federated | difference |"]
    lines.append("|---|---|---|---|")
    own = _seed_means(runs, "nodes", "own_only_top1")
    fed = _seed_means(runs, "nodes", "federated_top1")
    for gpu in own:
        lines.append(f"| {gpu} | {own[gpu]:.3f} | {fed[gpu]:.3f} | {fed[gpu] - own[gpu]:+.3f} |")
    zero = _seed_means(runs, "newcomers", "zero_shot_top1")
    central = _seed_means(runs, "newcomers", "central_top1")
    if zero:
        lines += ["", "## Newcomers (seed means)", ""]
        rho_by = _seed_means(runs, "newcomers", "similarity_rank_correlation")
        lines += [
            "| newcomer | experts sent (seed 0) | zero-shot | central | gap "
            "| similarity vs agreement (Spearman) |"
        ]
        lines.append("|---|---|---|---|---|---|")
        for row in first.newcomers:
            c = central.get(row.gpu)
            gap = "n/a" if c is None else f"{c - zero[row.gpu]:+.3f}"
            rho_text = f"{rho_by[row.gpu]:+.3f}" if row.gpu in rho_by else "n/a"
            lines.append(
                f"| {row.gpu} | {', '.join(row.experts)} | {zero[row.gpu]:.3f} | {_num(c)} "
                f"| {gap} | {rho_text} |"
            )
    if report.earlier_runs:
        lines += ["", "## Earlier runs of this report (replaced, kept in its JSON)", ""]
        lines += [
            "| command | fleet | own-only epochs | similarity fit | seeds "
            "| nodes: federated - own-only | newcomer gap |"
        ]
        lines.append("|---|---|---|---|---|---|---|")
        for earlier in report.earlier_runs:
            e, first_e = summary(earlier), earlier.runs[0]
            gap = _ci(e["newcomer_gap"]) if "newcomer_gap" in e else "n/a"
            own = first_e.own_only_epochs or f"{first_e.rounds} x {first_e.epochs} (not chosen)"
            lines.append(
                f"| `{earlier.command}` | {_fleet_text(first_e)} | {own} | {_fit_text(first_e)} "
                f"| {e['seeds']} | {_ci(e['node_difference'])} | {gap} |"
            )
    return "\n".join(lines) + "\n"


def choose_variant(reports: dict[str, FederationHelpsSeeds]) -> str:
    """bench/protocol.py FEDERATION_VARIANT_RULE over validation reports (tag -> report): the
    smallest mean newcomer gap among the variants whose nodes gain on average (federated minus
    own-only above 0); if none gains, the largest node difference; ties to the fewer training
    epochs (rounds x epochs per round, plus a personal fine-tune's)."""
    summaries = {tag: summary(r) for tag, r in reports.items()}

    def epochs(tag: str) -> int:  # a personal fine-tune's epochs count as training epochs
        first = reports[tag].runs[0]
        return first.rounds * (first.epochs + first.teacher_epochs) + first.personal_epochs

    gaining = [t for t, s in summaries.items() if s["node_difference"][0] > 0]
    if gaining:
        return min(gaining, key=lambda t: (summaries[t]["newcomer_gap"][0], epochs(t)))
    return min(summaries, key=lambda t: (-summaries[t]["node_difference"][0], epochs(t)))


def choose_variant_r3(
    reports: dict[str, FederationHelpsSeeds], among: Sequence[str], max_node_loss: float
) -> str | None:
    """bench/protocol.py FEDERATION_VARIANT_RULE_R3 over validation reports (tag -> report):
    among the tags `among` that were run, those whose nodes do not lose to own-only by more
    than `max_node_loss` on average, the smallest mean newcomer gap (rounded to 3 decimals);
    ties to the fewer training epochs, then to the earlier tag of `among`. None: none run
    qualifies."""
    order = [t for t in among if t in reports]
    summaries = {t: summary(reports[t]) for t in order}
    kept = [t for t in order if summaries[t]["node_difference"][0] >= -max_node_loss]
    if not kept:
        return None

    def epochs(tag: str) -> int:
        first = reports[tag].runs[0]
        return first.rounds * (first.epochs + first.teacher_epochs) + first.personal_epochs

    return min(
        kept, key=lambda t: (round(summaries[t]["newcomer_gap"][0], 3), epochs(t), order.index(t))
    )


def variants_markdown(reports: dict[str, FederationHelpsSeeds]) -> str:
    """One row per run (variant): its settings, the nodes' difference and the newcomer gap,
    each with its interval: the table a variant is chosen from (on validation)."""
    lines = [
        "# Federation helps: variants side by side (SIMULATED GPUs)",
        "",
        "Each row is one `python -m bench.federation.federation_helps` run over the same "
        "seeds (its "
        "command in the row's report, `federation_helps_<split>_<tag>.md`); the central "
        "reference gets rounds x epochs per round epochs (the same training effort). "
        "Intervals: 95 % paired bootstrap over units of their seed means, clustered by GPU "
        "model.",
        "",
        "Fleet: the protocol fleet's digest where the report recorded it; reports that did not "
        "(all from before fleet da10b0fa) ran on the fleet of their time. Similarity fit: the "
        "server's fit of the hardware encoder on the nodes' rank agreements after each average "
        "(none: the run predates it). Own-only: its epochs as chosen on validation, or the "
        "federation's rounds x epochs where none was chosen. Similarity vs agreement: per "
        "newcomer, the Spearman of the final model's cos(z) to each node against their measured "
        "agreement, mean over newcomers (goal >= 0.7).",
        "",
        "| tag | fleet | split | rounds x epochs | local batch | prox mu | transfer weight "
        "| server | similarity "
        "fit | newcomers get | personal epochs | own-only epochs | nodes: federated - own-only "
        "| better | newcomer gap (central - federated) | gap per seed | similarity vs agreement "
        "| wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for tag, report in reports.items():
        first, s = report.runs[0], summary(report)
        gap = _ci(s["newcomer_gap"]) if "newcomer_gap" in s else "n/a"
        per_seed = ", ".join(f"{v:+.3f}" for v in s.get("newcomer_gap_per_seed", []))
        split = "test" if "test split" in first.data else "validation"
        matched = "experts' global" if first.matched_global else "latest"
        matched += f", k = {first.k_experts}"
        rho = _ci(s["similarity_rank_correlation"]) if "similarity_rank_correlation" in s else "n/a"
        own = first.own_only_epochs or f"{first.rounds * first.epochs} (not chosen)"
        lines.append(
            f"| {tag} | {_fleet_text(first)} | {split} | {first.rounds} x {first.epochs} | "
            f"{first.local_batch} | {first.prox_mu:g} | {first.transfer_weight:g} | "
            f"{first.server_optimizer} {first.server_lr:g}"
            f"{f' + distil {first.distill_steps}' if first.distill_steps else ''}"
            f"{_teacher_text(first)} | "
            f"{_fit_text(first)} | {matched} | {first.personal_epochs} | "
            f"{own} | "
            f"{_ci(s['node_difference'])} | {s['nodes_better']}/{s['nodes']} | {gap} | "
            f"{per_seed} | {rho} | {sum(r.total_wall_s for r in report.runs):.0f} |"
        )
    return "\n".join(lines) + "\n"


# -- the offline benchmark's figures, beside the newcomers' ------------------------------------
def offline_figures(path: Path = OFFLINE_REPORT) -> dict[str, float]:
    """SiMoE's zero-shot top-1 per held-out GPU from the offline report (empty if absent)."""
    if not path.exists():
        return {}
    rows = read_offline(path).per_gpu.get("simoe", {}).get(0, {})
    return {device.removeprefix("sim:"): row.top1 for device, row in rows.items()}


def with_offline_figures(
    report: FederationHelpsReport, offline: dict[str, float]
) -> FederationHelpsReport:
    """The report compared against these offline figures (the offline report was rerun)."""
    rows = [r.model_copy(update={"offline_top1": offline.get(r.gpu)}) for r in report.newcomers]
    values = [r.offline_top1 for r in rows if r.offline_top1 is not None]
    mean = float(np.mean(values)) if values and len(values) == len(rows) else None
    return report.model_copy(update={"newcomers": rows, "offline_zero_shot_top1": mean})
