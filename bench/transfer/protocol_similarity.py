"""Learned hardware similarity against measured ranking agreement (SIMULATED fleet; issue 23,
item 3).

    python -m bench.transfer.protocol_similarity --split validation   # every variant; the rule
    python -m bench.transfer.protocol_similarity --split test --variants mse,<chosen>  # once
    python -m bench.transfer.protocol_similarity --render PATH.json   # re-render the Markdown

SiMoE is trained as the protocol trains it (bench/protocol_choices.json: the chosen expert
and shared epochs) on the training units; the split's units are held out as newcomers. For
each seed the experts and program encoder are trained once; every alignment variant
(protocol.SIMILARITY_VARIANTS, simoe_model.losses.ALIGNMENT_LOSSES) then trains the hardware
encoder and gate anew on them (same initial weights per seed). For each (held-out unit,
training unit) pair: the learned cos(z), the spec-sheet similarity (cosine of the training-
standardized analytical part of the hardware vector), the profile similarity (schedule
transfer's neighbour rule: cosine of the whole standardized vector, probes included), and the
measured agreement (mean per-task Spearman of their latencies on the candidates both
measured, read only through `protocol.UnitLabels`). Reported: the rank correlation of each
similarity with the agreement per held-out unit (averaged; the selection metric of
protocol.SIMILARITY_RULE) and pooled over all pairs, with 95 % bootstrap intervals that
resample GPU models; per GPU model; SiMoE's top-1 at budget 0; the nearest expert per unit.
Trained experts are cached per seed under runs/similarity_experts (the test run reuses the
validation run's: the same training units and seeds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy.stats import spearmanr

from bench import protocol
from bench.reporting import add_render_option, render

DOCS = protocol.ROOT / "docs" / "results"
CACHE = protocol.ROOT / "runs" / "similarity_experts"
CHOICES = protocol.ROOT / "bench" / "protocol_choices.json"
GOAL = 0.7


class PairRow(BaseModel):
    """One held-out unit and one training unit."""

    model_config = ConfigDict(extra="forbid")

    unit: str
    gpu_model: str
    other: str
    agreement: float  # measured: mean per-task Spearman on the candidates both measured
    spec: float  # cosine of the standardized analytical (spec-sheet) vectors
    profile: float  # cosine of the standardized whole hardware vectors (schedule transfer's)
    learned: dict[str, list[float]]  # variant -> cos(z) per seed


class Correlation(BaseModel):
    """A similarity's rank correlation with the agreement: mean and 95 % interval."""

    model_config = ConfigDict(extra="forbid")

    per_unit: float  # mean over units (and seeds) of the within-unit Spearman
    per_unit_interval: tuple[float, float]
    pooled: float  # Spearman over all pairs (mean over seeds)
    pooled_interval: tuple[float, float]
    per_unit_by_seed: list[float]
    by_unit: dict[str, float]  # mean over seeds
    by_model: dict[str, float]


class VariantResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    variant: str
    correlation: Correlation
    minus_mse: float  # per-unit mean minus mse's (paired)
    minus_mse_interval: tuple[float, float]
    top1_budget0: float  # SiMoE's mean top-1 at budget 0 over units, tasks and seeds
    top1_by_seed: list[float]
    nearest: dict[str, list[str]]  # unit -> nearest training unit by cos(z), per seed
    nearest_agreement: float  # mean measured agreement of the nearest expert's unit
    cos_spread: float  # mean over units and seeds of (max - min) cos(z) to the training units
    shared_seconds: list[float]
    # added after the first validation and test runs (None in them): per unit, top-1 at budget
    # 0 per seed; this variant minus mse's, paired by unit and seed, interval resampling GPU
    # models; (unit, seed) cases whose nearest training unit differs from mse's
    top1_by_unit: dict[str, list[float]] | None = None
    top1_minus_mse: float | None = None
    top1_minus_mse_interval: tuple[float, float] | None = None
    nearest_changed: int | None = None
    # with --adapt-budgets (None otherwise): budget -> unit -> SiMoE's top-1 per seed after
    # adapting on that many measurements as the protocol does (its new expert starts as a copy
    # of the nearest expert by cos(z), so the similarity picks where the few-shot starts)
    top1_adapted: dict[int, dict[str, list[float]]] | None = None


class SimilarityReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str
    split: str
    simulated: bool = True
    seeds: list[int]
    units: list[str]
    training_units: list[str]
    hyperparameters: dict[str, int]
    fleet: str
    units_equal_to_recorded_fleet: str
    rule: str
    variants: list[VariantResult]
    spec: Correlation
    profile: Correlation
    twin_agreement: float  # mean over units of the best agreement of any training unit
    chosen: str | None  # by protocol.SIMILARITY_RULE (validation only)
    expert_seconds: list[float]
    wall_s: float
    rows: list[PairRow]


# -- measuring ---------------------------------------------------------------------------
def measured_agreements(targets: list, train: list) -> dict[str, dict[str, float]]:
    """Agreement of each held-out unit with each training unit (simoe_model.train's
    `_agreements`, the quantity the alignment loss is trained on), pair by pair."""
    from simoe_model.train import _agreements

    out: dict[str, dict[str, float]] = {}
    for ds in targets:
        out[ds.device] = {}
        for other in train:
            pairs, values = _agreements([ds, other])
            if len(pairs):
                out[ds.device][other.device] = float(values[0])
    return out


def _cosines(vectors: np.ndarray, target: np.ndarray) -> np.ndarray:
    return vectors @ target / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(target) + 1e-12)


def hand_similarities(targets: list, train: list) -> dict[str, dict[str, tuple[float, float]]]:
    """(spec-sheet cosine, whole-profile cosine) of each held-out unit to each training unit,
    standardized by the training units' statistics."""
    from simoe_model.hardware import ANALYTICAL_SLICE

    fleet = np.stack([d.hardware_vector for d in train]).astype(np.float64)
    mean, std = fleet.mean(0), fleet.std(0) + 1e-6
    z = (fleet - mean) / std
    out = {}
    for ds in targets:
        t = (np.asarray(ds.hardware_vector, np.float64) - mean) / std
        spec = _cosines(z[:, ANALYTICAL_SLICE], t[ANALYTICAL_SLICE])
        prof = _cosines(z, t)
        out[ds.device] = {
            d.device: (float(s), float(p)) for d, s, p in zip(train, spec, prof, strict=True)
        }
    return out


def trained_experts(train: list, hp: dict[str, int], seed: int, cache: Path | None):  # noqa: ANN201
    """Experts and program encoder as the protocol trains them (SiMoEFamily's first step),
    cached per seed and training set."""
    import torch

    from simoe_model.model import SiMoE, SiMoEConfig
    from simoe_model.train import train_experts

    digest = hashlib.sha256(
        json.dumps([[d.device for d in train], hp["expert_epochs"], seed]).encode()
    )
    for d in train:  # the labels too: another fleet's units of the same names miss the cache
        for t in d.tasks:
            digest.update(np.ascontiguousarray(t.latencies, dtype=np.float64).tobytes())
    key = digest.hexdigest()[:16]
    path = cache / f"experts-{key}.pt" if cache else None
    torch.manual_seed(seed)
    model = SiMoE(SiMoEConfig())
    if path is not None and path.exists():
        for d in train:
            model.ensure_expert(d.device, d.hardware_vector)
        model.load_state_dict(torch.load(path, weights_only=True))
        return model, 0.0
    t0 = time.perf_counter()
    train_experts(model, [(d.device, d) for d in train], epochs=hp["expert_epochs"], seed=seed)
    seconds = time.perf_counter() - t0
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), path)
    return model, seconds


def with_alignment(base, train: list, seed: int, shared_epochs: int, alignment: str):  # noqa: ANN001, ANN201
    """`base`'s experts and program encoder; a fresh hardware encoder and gate (initial weights
    a function of the seed) trained by train_shared with the named alignment loss."""
    import torch

    from simoe_model.model import SiMoE
    from simoe_model.train import train_shared

    torch.manual_seed(seed)
    model = SiMoE(base.config)
    for name in base.expert_names:
        model.ensure_expert(name, base.expert(name).hardware)
    keep = ("program_encoder", "experts")
    model.load_state_dict(
        {k: v for k, v in base.state_dict().items() if k.startswith(keep)}, strict=False
    )
    train_shared(model, train, epochs=shared_epochs, seed=seed, alignment=alignment)
    return model


def top1_adapted(model, targets: list, seed: int, budget: int, epochs: int) -> dict[str, float]:  # noqa: ANN001
    """Per unit, SiMoE's top-1 after adapting on `budget` measurements (SiMoEFamily.evaluate's
    mixture: `adapt` on a copy, its expert started from the nearest expert by cos(z))."""
    import copy

    from bench.transfer.offline_transfer import split_device
    from bench.transfer.protocol_methods import features_only, top1_tasks
    from simoe_model.train import adapt, predict

    out = {}
    for ds in targets:
        split = split_device(ds, seed)
        tuned = copy.deepcopy(model)
        adapt(tuned, split.device, split.budget(budget), epochs=epochs)
        hv = ds.hardware_vector
        got = top1_tasks(features_only(lambda f, m=tuned, hv=hv: predict(m, f, hv)), split)
        out[ds.device] = float(np.mean(got))
    return out


def top1_budget0(model, targets: list, seed: int) -> tuple[float, dict[str, float]]:  # noqa: ANN001
    """SiMoE's top-1 at budget 0 on the split's test sets: over all tasks, and per unit."""
    from bench.transfer.offline_transfer import split_device
    from bench.transfer.protocol_methods import features_only, top1_tasks
    from simoe_model.train import predict

    scores, by_unit = [], {}
    for ds in targets:
        split = split_device(ds, seed)
        hv = ds.hardware_vector
        got = top1_tasks(features_only(lambda f, hv=hv: predict(model, f, hv)), split)
        by_unit[ds.device] = float(np.mean(got))
        scores += got
    return float(np.mean(scores)), by_unit


# -- statistics --------------------------------------------------------------------------
def _rho(x: list[float], y: list[float]) -> float:
    if len(x) < 3:
        return float("nan")
    r = spearmanr(x, y).statistic
    return float(r) if np.isfinite(r) else 0.0  # a constant similarity orders nothing


def _per_unit(rows: list[PairRow], value) -> dict[str, float]:  # noqa: ANN001 - PairRow -> float
    by_unit: dict[str, list[PairRow]] = {}
    for r in rows:
        by_unit.setdefault(r.unit, []).append(r)
    return {u: _rho([value(r) for r in rs], [r.agreement for r in rs]) for u, rs in by_unit.items()}


def correlation(
    rows: list[PairRow], values: list, n_boot: int = 2000, seed: int = 0
) -> tuple[Correlation, np.ndarray]:
    """`values`: one PairRow -> similarity function per seed. The per-unit Spearman (mean over
    units and seeds) and the pooled one (mean over seeds), intervals by resampling GPU models;
    also the per-unit rho array [seeds, units] for paired differences."""
    units = list(dict.fromkeys(r.unit for r in rows))
    model_of = {r.unit: r.gpu_model for r in rows}
    by_value = [_per_unit(rows, v) for v in values]
    per_seed_unit = np.array([[rho[u] for u in units] for rho in by_value])
    by_unit_rows = {u: [r for r in rows if r.unit == u] for u in units}
    models = list(dict.fromkeys(model_of[u] for u in units))
    members = {m: [i for i, u in enumerate(units) if model_of[u] == m] for m in models}

    def pooled(unit_idx: list[int]) -> float:
        rs = [r for i in unit_idx for r in by_unit_rows[units[i]]]
        return float(np.mean([_rho([v(r) for r in rs], [r.agreement for r in rs]) for v in values]))

    rng = np.random.default_rng(seed)
    boot_unit, boot_pooled = [], []
    for _ in range(n_boot):
        drawn = [i for m in rng.choice(models, len(models)) for i in members[m]]
        boot_unit.append(float(per_seed_unit[:, drawn].mean()))
        boot_pooled.append(pooled(drawn))
    everyone = list(range(len(units)))
    by_model = {m: float(per_seed_unit[:, idx].mean()) for m, idx in members.items()}
    result = Correlation(
        per_unit=float(per_seed_unit.mean()),
        per_unit_interval=tuple(np.percentile(boot_unit, [2.5, 97.5]).tolist()),  # type: ignore[arg-type]
        pooled=pooled(everyone),
        pooled_interval=tuple(np.percentile(boot_pooled, [2.5, 97.5]).tolist()),  # type: ignore[arg-type]
        per_unit_by_seed=per_seed_unit.mean(1).tolist(),
        by_unit={u: float(per_seed_unit[:, i].mean()) for i, u in enumerate(units)},
        by_model=by_model,
    )
    return result, per_seed_unit


def paired_difference(
    ours: np.ndarray, theirs: np.ndarray, model_of_unit: list[str], n_boot: int = 2000
) -> tuple[float, tuple[float, float]]:
    """Mean per-unit difference and its interval, resampling GPU models."""
    models = list(dict.fromkeys(model_of_unit))
    members = {m: [i for i, x in enumerate(model_of_unit) if x == m] for m in models}
    diff = ours - theirs
    rng = np.random.default_rng(0)
    boot = [
        float(diff[:, [i for m in rng.choice(models, len(models)) for i in members[m]]].mean())
        for _ in range(n_boot)
    ]
    return float(diff.mean()), tuple(np.percentile(boot, [2.5, 97.5]).tolist())  # type: ignore[return-value]


def choose(variants: list[VariantResult]) -> str | None:
    """protocol.SIMILARITY_RULE; None unless every variant of it was run."""
    by = {v.variant: v for v in variants}
    if set(by) != set(protocol.SIMILARITY_VARIANTS):
        return None
    base = by["mse"]
    passing = [
        v
        for v in variants
        if v.variant != "mse"
        and v.correlation.per_unit > base.correlation.per_unit + 0.02
        and v.top1_budget0 >= base.top1_budget0 - 0.005
    ]
    if not passing:
        return "mse"
    best = max(v.correlation.per_unit for v in passing)
    order = list(protocol.SIMILARITY_VARIANTS)
    tied = [v for v in passing if v.correlation.per_unit >= best - 0.005]
    return min(tied, key=lambda v: order.index(v.variant)).variant


# -- the run -----------------------------------------------------------------------------
def run(
    split: str,
    seeds: list[int],
    variants: list[str],
    labels: protocol.UnitLabels,
    cache: Path | None,
    command: str,
    adapt_budgets: tuple[int, ...] = (),
) -> SimilarityReport:
    import torch

    from bench.transfer.protocol_report import model_of
    from bench.transfer.protocol_transfer import fleet_check

    torch.set_num_threads(1)
    started = time.perf_counter()
    hp = json.loads(CHOICES.read_text())["chosen"]["simoe"]
    train = labels.load_many(protocol.units("train"), "train")
    purpose = "test" if split == "test" else "select"
    targets = labels.load_many(protocol.units(split), purpose)  # type: ignore[arg-type]
    agreement = measured_agreements(targets, train)
    hand = hand_similarities(targets, train)
    rows = [
        PairRow(
            unit=ds.device,
            gpu_model=model_of(ds.device),
            other=other,
            agreement=a,
            spec=hand[ds.device][other][0],
            profile=hand[ds.device][other][1],
            learned={v: [] for v in variants},
        )
        for ds in targets
        for other, a in agreement[ds.device].items()
    ]
    hv = {d.device: d.hardware_vector for d in targets}
    top1: dict[str, list[float]] = {v: [] for v in variants}
    top1_unit: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
    adapted: dict[str, dict[int, dict[str, list[float]]]] = {v: {} for v in variants}
    nearest: dict[str, dict[str, list[str]]] = {
        v: {d.device: [] for d in targets} for v in variants
    }
    spreads: dict[str, list[float]] = {v: [] for v in variants}
    shared_s: dict[str, list[float]] = {v: [] for v in variants}
    expert_s = []
    for seed in seeds:
        base, seconds = trained_experts(train, hp, seed, cache)
        expert_s.append(seconds)
        print(f"seed {seed}: experts {seconds:.0f} s", flush=True)
        for variant in variants:
            t0 = time.perf_counter()
            model = with_alignment(base, train, seed, hp["shared_epochs"], variant)
            shared_s[variant].append(time.perf_counter() - t0)
            for r in rows:
                cos = model.similarity(hv[r.unit], model.expert(r.other).hardware.numpy())
                r.learned[variant].append(cos)
            for ds in targets:
                mine = [r for r in rows if r.unit == ds.device]
                cos = [r.learned[variant][-1] for r in mine]
                nearest[variant][ds.device].append(mine[int(np.argmax(cos))].other)
                spreads[variant].append(max(cos) - min(cos))
            for budget in adapt_budgets:
                got = top1_adapted(model, targets, seed, budget, hp["adapt_epochs"])
                for unit, value in got.items():
                    adapted[variant].setdefault(budget, {}).setdefault(unit, []).append(value)
            overall, by_unit = top1_budget0(model, targets, seed)
            top1[variant].append(overall)
            for unit, value in by_unit.items():
                top1_unit[variant].setdefault(unit, []).append(value)
            print(
                f"seed {seed} {variant}: shared {shared_s[variant][-1]:.0f} s, "
                f"top-1 {top1[variant][-1]:.4f}",
                flush=True,
            )
    n_seeds = len(seeds)
    spec, _ = correlation(rows, [lambda r: r.spec] * n_seeds)
    profile, _ = correlation(rows, [lambda r: r.profile] * n_seeds)
    per_unit_arrays, results = {}, []
    for variant in variants:
        fns = [lambda r, v=variant, k=k: r.learned[v][k] for k in range(n_seeds)]
        corr, per_unit_arrays[variant] = correlation(rows, fns)
        results.append((variant, corr))
    units = list(dict.fromkeys(r.unit for r in rows))
    unit_models = [model_of(u) for u in units]
    agree_of = {(r.unit, r.other): r.agreement for r in rows}
    out = []

    def top1_array(variant: str) -> np.ndarray:  # [seeds, units]
        return np.array([top1_unit[variant][u] for u in units]).T

    for variant, corr in results:
        top1_diff: float | None = None
        top1_interval: tuple[float, float] | None = None
        changed: int | None = None
        if "mse" in per_unit_arrays:
            diff, interval = paired_difference(
                per_unit_arrays[variant], per_unit_arrays["mse"], unit_models
            )
            top1_diff, top1_interval = paired_difference(
                top1_array(variant), top1_array("mse"), unit_models
            )
            changed = sum(
                a != b
                for u in units
                for a, b in zip(nearest[variant][u], nearest["mse"][u], strict=True)
            )
        else:
            diff, interval = float("nan"), (float("nan"), float("nan"))
        out.append(
            VariantResult(
                variant=variant,
                correlation=corr,
                minus_mse=diff,
                minus_mse_interval=interval,
                top1_budget0=float(np.mean(top1[variant])),
                top1_by_seed=top1[variant],
                nearest=nearest[variant],
                nearest_agreement=float(
                    np.mean([agree_of[(u, n)] for u, ns in nearest[variant].items() for n in ns])
                ),
                cos_spread=float(np.mean(spreads[variant])),
                shared_seconds=shared_s[variant],
                top1_by_unit=top1_unit[variant],
                top1_minus_mse=top1_diff,
                top1_minus_mse_interval=top1_interval,
                nearest_changed=changed,
                top1_adapted=adapted[variant] or None,
            )
        )
    twin = float(np.mean([max(a.values()) for a in agreement.values()]))
    return SimilarityReport(
        command=command,
        split=split,
        seeds=seeds,
        units=[d.device for d in targets],
        training_units=[d.device for d in train],
        hyperparameters=hp,
        **fleet_check(labels.data_dir, [*protocol.units("train"), *protocol.units(split)]),  # type: ignore[arg-type]
        rule=protocol.SIMILARITY_RULE,
        variants=out,
        spec=spec,
        profile=profile,
        twin_agreement=twin,
        chosen=choose(out) if split == "validation" and seeds == list(protocol.SEEDS) else None,
        expert_seconds=expert_s,
        wall_s=time.perf_counter() - started,
        rows=rows,
    )


# -- the report --------------------------------------------------------------------------
def _ci(pair: tuple[float, float]) -> str:
    return f"[{pair[0]:+.3f}, {pair[1]:+.3f}]"


def _goal(value: float) -> str:
    return "met" if value >= GOAL else "MISSED"


def markdown(report: SimilarityReport) -> str:
    model_of_row = {r.unit: r.gpu_model for r in report.rows}
    split = report.split.upper()
    lines = [
        f"# Learned hardware similarity against measured ranking agreement ({split} split, "
        "SIMULATED fleet)",
        "",
        f"Command: `{report.command}`; seeds {report.seeds}; {len(report.units)} held-out "
        f"units x {len(report.training_units)} training units = "
        f"{len(report.rows)} pairs; SiMoE trained as the protocol trains it "
        f"({report.hyperparameters}); fleet {report.fleet[:8]}: "
        f"{report.units_equal_to_recorded_fleet} units read equal, task by task, to the recorded "
        "fleet (docs/results/protocol_fleet_hash.json); "
        f"{report.wall_s:.0f} s wall. Simulated GPUs: no measurement of a real GPU.",
        "",
        "Measured agreement of a pair = mean per-task Spearman of the two units' latencies on "
        "the candidates both measured. Per unit = Spearman over the training units between a "
        "similarity to the held-out unit and its agreement with it, averaged over units (what "
        "picks a newcomer's experts); pooled = Spearman over all pairs. Intervals: 95 % "
        f"bootstrap resampling GPU models ({len({r.gpu_model for r in report.rows})} models). "
        f"Goal for the learned similarity: >= {GOAL}.",
        "",
        "| similarity | per unit | interval | pooled | interval | goal (per unit / pooled) "
        "| top-1 at budget 0 | nearest's agreement | cos spread |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in report.variants:
        c = v.correlation
        lines.append(
            f"| learned, {v.variant} | {c.per_unit:.3f} | {_ci(c.per_unit_interval)} | "
            f"{c.pooled:.3f} | {_ci(c.pooled_interval)} | {_goal(c.per_unit)} / "
            f"{_goal(c.pooled)} | {v.top1_budget0:.4f} | {v.nearest_agreement:.4f} | "
            f"{v.cos_spread:.3f} |"
        )
    for name, c in (("spec sheet", report.spec), ("profile (schedule transfer's)", report.profile)):
        lines.append(
            f"| {name} | {c.per_unit:.3f} | {_ci(c.per_unit_interval)} | {c.pooled:.3f} | "
            f"{_ci(c.pooled_interval)} | | | | |"
        )
    lines += [
        "",
        f"Best possible nearest's agreement (each unit's measured twin): "
        f"{report.twin_agreement:.4f}. Cos spread = max - min cos(z) from a held-out unit to "
        "the training units, mean over units and seeds.",
        "",
        "Per variant against mse (per-unit rank correlation, paired over units and seeds):",
        "",
        "| variant | minus mse | interval | per-unit by seed | top-1 by seed | shared-part s |",
        "|---|---|---|---|---|---|",
    ]
    for v in report.variants:
        lines.append(
            f"| {v.variant} | {v.minus_mse:+.3f} | {_ci(v.minus_mse_interval)} | "
            f"{', '.join(f'{x:.3f}' for x in v.correlation.per_unit_by_seed)} | "
            f"{', '.join(f'{x:.4f}' for x in v.top1_by_seed)} | "
            f"{', '.join(f'{x:.0f}' for x in v.shared_seconds)} |"
        )
    if all(v.top1_minus_mse_interval is not None for v in report.variants):
        cases = len(report.units) * len(report.seeds)
        lines += [
            "",
            "Does the similarity change expert choice and top-1 at budget 0 (against mse; "
            "paired by unit and seed, interval resampling GPU models)?",
            "",
            "| variant | nearest expert differs from mse's | nearest's agreement "
            "| top-1 at budget 0 minus mse | interval |",
            "|---|---|---|---|---|",
        ]
        for v in report.variants:
            lo, hi = v.top1_minus_mse_interval  # type: ignore[misc]
            lines.append(
                f"| {v.variant} | {v.nearest_changed} of {cases} (unit, seed) | "
                f"{v.nearest_agreement:.4f} | {v.top1_minus_mse:+.4f} | [{lo:+.4f}, {hi:+.4f}] |"
            )
    budgets = sorted({b for v in report.variants for b in (v.top1_adapted or {})})
    if budgets and "mse" in {v.variant for v in report.variants}:
        base = next(v for v in report.variants if v.variant == "mse")
        unit_models = [model_of_row[u] for u in report.units]
        lines += [
            "",
            "SiMoE adapted on N measurements as the protocol does (mean top-1; minus mse "
            "paired by unit and seed, interval resampling GPU models):",
            "",
            "| variant | budget | top-1 | minus mse | interval |",
            "|---|---|---|---|---|",
        ]
        for v in report.variants:
            for b in budgets:
                mine = np.array([v.top1_adapted[b][u] for u in report.units]).T  # type: ignore[index]
                theirs = np.array([base.top1_adapted[b][u] for u in report.units]).T  # type: ignore[index]
                diff, (lo, hi) = paired_difference(mine, theirs, unit_models)
                lines.append(
                    f"| {v.variant} | {b} | {mine.mean():.4f} | {diff:+.4f} | "
                    f"[{lo:+.4f}, {hi:+.4f}] |"
                )
    names = [v.variant for v in report.variants]
    models = list(dict.fromkeys(r.gpu_model for r in report.rows))
    lines += [
        "",
        "Per GPU model (per-unit rank correlation, mean over its units and seeds):",
        "",
        f"| GPU model | {' | '.join(names)} | spec sheet | profile |",
        f"|---|{'---|' * (len(names) + 2)}",
    ]
    for m in models:
        cells = [f"{v.correlation.by_model[m]:.3f}" for v in report.variants]
        cells += [f"{report.spec.by_model[m]:.3f}", f"{report.profile.by_model[m]:.3f}"]
        lines.append(f"| {m} | {' | '.join(cells)} |")
    lines += [
        "",
        "Per held-out unit (per-unit rank correlation, mean over seeds; nearest expert by "
        "cos(z) per seed):",
        "",
        f"| unit | {' | '.join(names)} | spec sheet | "
        + " | ".join(f"nearest, {n}" for n in names)
        + " |",
        f"|---|{'---|' * (2 * len(names) + 1)}",
    ]
    for u in report.units:
        cells = [f"{v.correlation.by_unit[u]:.3f}" for v in report.variants]
        cells.append(f"{report.spec.by_unit[u]:.3f}")
        cells += [", ".join(n.removeprefix("sim:") for n in v.nearest[u]) for v in report.variants]
        lines.append(f"| {u.removeprefix('sim:')} | {' | '.join(cells)} |")
    if report.split == "validation":
        lines += ["", f"Rule (bench/protocol.py SIMILARITY_RULE): {report.rule}", ""]
        lines.append(
            f"**Chosen by the rule: {report.chosen}.**"
            if report.chosen
            else "Not a selection run (the rule needs every variant and seeds "
            f"{list(protocol.SEEDS)}): nothing chosen."
        )
    lines += [
        "",
        f"Experts trained per seed: {', '.join(f'{s:.0f}' for s in report.expert_seconds)} s "
        "(0: read from the cache of an earlier run with the same training units and seed).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=["validation", "test"], default="validation")
    parser.add_argument("--seeds", default=",".join(map(str, protocol.SEEDS)))
    parser.add_argument("--variants", default=",".join(protocol.SIMILARITY_VARIANTS))
    parser.add_argument("--data", type=Path, default=protocol.DATA_DIR, help="the fleet dataset")
    parser.add_argument("--cache", type=Path, default=CACHE, help="trained experts per seed")
    parser.add_argument("--out", type=Path, default=DOCS)
    parser.add_argument("--name", default=None, help="report file stem (default by split)")
    parser.add_argument(
        "--adapt-budgets", default="", help="also SiMoE's top-1 after N measurements, e.g. 16"
    )
    add_render_option(parser)
    args = parser.parse_args(argv)
    if args.render:
        if not args.render.is_file():
            sys.exit(f"error: no report {args.render}")
        render(args.render, SimilarityReport, markdown)
        return
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        sys.exit(f"error: --seeds wants integers separated by commas, got {args.seeds!r}")
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in protocol.SIMILARITY_VARIANTS]
    if unknown or not variants:
        sys.exit(f"error: unknown variants {unknown}; known: {list(protocol.SIMILARITY_VARIANTS)}")
    try:
        budgets = tuple(int(b) for b in args.adapt_budgets.split(",") if b)
    except ValueError:
        sys.exit(f"error: --adapt-budgets wants integers, got {args.adapt_budgets!r}")
    if any(b <= 0 or b > protocol.POOL for b in budgets):
        sys.exit(f"error: --adapt-budgets must lie in 1..{protocol.POOL}")
    protocol.require_fleet(args.data)
    command = "python -m bench.transfer.protocol_similarity " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    labels = protocol.UnitLabels(args.data)
    report = run(args.split, seeds, variants, labels, args.cache, command, budgets)
    stem = args.name or f"protocol_similarity_{args.split}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(report.model_dump(), indent=1) + "\n")
    text = markdown(report)
    (args.out / f"{stem}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    from bench import prepare

    prepare()
    main()
