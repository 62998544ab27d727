"""The hardware encoder's alignment losses (simoe_model.losses, issue 23 item 3)."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import spearmanr

from simoe_model.losses import (
    ALIGNMENT_LOSSES,
    alignment_loss,
    listwise_alignment_loss,
    pairwise_alignment_loss,
)

# device 0 and four others whose agreements with it bunch near 1, as measured ones do
PAIRS = torch.tensor([[0, 1], [0, 2], [0, 3], [0, 4]])
AGREEMENT = torch.tensor([0.99, 0.98, 0.97, 0.96])
ORDER_AWARE = [pairwise_alignment_loss, listwise_alignment_loss]


def _fan(cos_to_zero: list[float]) -> torch.Tensor:
    """2-d embeddings: device 0 at angle 0, device k+1 at the angle whose cosine is given."""
    angles = [0.0, *[math.acos(c) for c in cos_to_zero]]
    return torch.tensor([[math.cos(a), math.sin(a)] for a in angles])


@pytest.mark.parametrize("loss", ORDER_AWARE)
def test_order_aware_loss_is_lower_for_cos_in_agreement_order(loss) -> None:  # noqa: ANN001
    in_order = _fan([0.9, 0.8, 0.7, 0.6])
    reversed_ = _fan([0.6, 0.7, 0.8, 0.9])
    assert loss(in_order, PAIRS, AGREEMENT) < loss(reversed_, PAIRS, AGREEMENT) - 0.1


@pytest.mark.parametrize("loss", ORDER_AWARE)
def test_order_aware_loss_follows_the_order_not_the_values(loss) -> None:  # noqa: ANN001
    """The same order with other values (agreements spread out) gives the same pairwise loss,
    and a listwise one still ranks in-order below reversed; the MSE does not see order: for
    bunched agreements it is LOWER for cos reversed near 1 than for cos in order spread out."""
    in_order = _fan([0.9, 0.8, 0.7, 0.6])
    near_one_reversed = _fan([0.95, 0.96, 0.97, 0.98])
    spread = AGREEMENT**20  # 0.82 .. 0.44: same order
    if loss is pairwise_alignment_loss:
        assert torch.isclose(loss(in_order, PAIRS, AGREEMENT), loss(in_order, PAIRS, spread))
    assert loss(in_order, PAIRS, AGREEMENT) < loss(near_one_reversed, PAIRS, AGREEMENT)
    assert alignment_loss(near_one_reversed, PAIRS, AGREEMENT) < alignment_loss(
        in_order, PAIRS, AGREEMENT
    )


def test_training_on_the_pairwise_loss_puts_cos_in_agreement_order() -> None:
    torch.manual_seed(0)
    z = torch.randn(6, 4, requires_grad=True)
    pairs = torch.tensor([[i, j] for i in range(6) for j in range(i + 1, 6)])
    agreement = 0.9 + 0.01 * torch.rand(len(pairs))  # bunched, in a random order
    optimizer = torch.optim.Adam([z], lr=0.05)
    for _ in range(200):
        optimizer.zero_grad()
        pairwise_alignment_loss(z, pairs, agreement).backward()
        optimizer.step()
    cos = torch.cosine_similarity(z[pairs[:, 0]], z[pairs[:, 1]], dim=-1).detach()
    assert spearmanr(cos.numpy(), agreement.numpy()).statistic > 0.8


@pytest.mark.parametrize("name", sorted(ALIGNMENT_LOSSES))
def test_every_alignment_loss_has_one_signature(name: str) -> None:
    """(z, pairs, agreement) -> scalar with a gradient; no pair: zero (a server-side step can
    call any of them by name)."""
    z = _fan([0.9, 0.8, 0.7, 0.6]).requires_grad_(True)
    value = ALIGNMENT_LOSSES[name](z, PAIRS, AGREEMENT)
    assert value.dim() == 0 and torch.isfinite(value)
    value.backward()
    assert z.grad is not None
    empty = ALIGNMENT_LOSSES[name](z, torch.zeros(0, 2, dtype=torch.long), torch.zeros(0))
    assert float(empty.detach()) == 0.0


def test_train_shared_refuses_an_unknown_alignment() -> None:
    from simoe_model.model import SiMoE, SiMoEConfig
    from simoe_model.train import train_shared

    with pytest.raises(ValueError, match="unknown alignment"):
        train_shared(SiMoE(SiMoEConfig()), [], alignment="cosine-magic")


def test_the_default_alignment_is_the_one_the_validation_rule_chose() -> None:
    """simoe_model.losses.DEFAULT_ALIGNMENT is what bench/protocol.py's SIMILARITY_RULE chose
    on the validation split (docs/results/protocol_similarity_validation.json), and
    train_shared uses it unless told otherwise."""
    import inspect
    import json
    from pathlib import Path

    from simoe_model.losses import DEFAULT_ALIGNMENT
    from simoe_model.train import train_shared

    report = (
        Path(__file__).resolve().parents[1] / "docs/results/protocol_similarity_validation.json"
    )
    assert json.loads(report.read_text())["chosen"] == DEFAULT_ALIGNMENT
    default = inspect.signature(train_shared).parameters["alignment"].default
    assert default == DEFAULT_ALIGNMENT
