"""Why SiMoE's mixture does or does not beat its nearest expert, per target unit.

For each target unit at budget 0: where the gate puts its weight (mean over the unit's
scored candidates: the top expert, its weight, the effective number of experts
1/sum(w^2)), which expert is nearest in z-space, and the measured twin: the training unit
whose own latencies rank the shared candidates most like the target's (mean per-task
Spearman). A gate that collapses onto one expert, or a target with a near twin in
training, leaves the mixture little to add over the nearest expert alone.
"""

from __future__ import annotations

import numpy as np

from bench.transfer.protocol_result import UnitGate


def gate_profile(model, features: list[np.ndarray], hardware_vector: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """Mean gate weight per expert (model.expert_names order) over the candidates."""
    import torch

    from simoe_model.features import pack_rows

    model.eval()
    rows, offsets = pack_rows(features)
    seg = torch.from_numpy(np.repeat(np.arange(len(features)), np.diff(offsets)))
    with torch.no_grad():
        e = model.embed(torch.from_numpy(rows), seg, len(features))
        _, weights = model.mixture(e, torch.as_tensor(hardware_vector, dtype=torch.float32))
    return weights.mean(0).numpy()


def unit_diagnostics(model, split, agreement: dict[str, float]) -> UnitGate:  # noqa: ANN001
    """One target unit's gate, nearest expert and measured twin (see the module doc)."""
    from simoe_model.train import nearest_expert

    features = [f for t in split.test for f in t.features]
    weights = gate_profile(model, features, split.hardware_vector)
    names = model.expert_names
    top = int(np.argmax(weights))
    near = nearest_expert(model, split.hardware_vector)
    twin = max(agreement, key=agreement.get) if agreement else None
    return UnitGate(
        gate_top=names[top],
        gate_top_weight=float(weights[top]),
        gate_effective_experts=float(1.0 / np.sum(weights**2)),
        nearest_expert=near,
        gate_top_is_nearest=names[top] == near,
        measured_twin=twin,
        twin_agreement=None if twin is None else float(agreement[twin]),
        nearest_agreement=float(agreement.get(near, float("nan"))),
        nearest_is_twin=near == twin,
    )


def markdown(diag: dict[int, dict[str, UnitGate]]) -> list[str]:
    """A per-unit table, seeds averaged (names from the first seed where they differ)."""
    seeds = sorted(diag)
    if not seeds:
        return []
    lines = [
        "",
        "Gate and twins (budget 0, bench/transfer/protocol_diagnostics.py; weights averaged over "
        "the seeds, names from the first seed; twin = the training unit whose measured "
        "latencies rank the target's candidates most alike, agreement = mean per-task "
        "Spearman):",
        "",
        "| unit | gate's top expert | its weight | effective experts | top = nearest "
        "| nearest expert | measured twin | twin agreement | nearest's agreement |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for unit in diag[seeds[0]]:
        rows = [diag[s][unit] for s in seeds]
        first = rows[0]
        lines.append(
            f"| {unit.removeprefix('sim:')} | {first.gate_top} "
            f"| {np.mean([r.gate_top_weight for r in rows]):.2f} "
            f"| {np.mean([r.gate_effective_experts for r in rows]):.1f} "
            f"| {sum(r.gate_top_is_nearest for r in rows)}/{len(rows)} "
            f"| {first.nearest_expert} | {first.measured_twin} "
            f"| {np.mean([r.twin_agreement for r in rows]):.3f} "
            f"| {np.mean([r.nearest_agreement for r in rows]):.3f} |"
        )
    return lines
