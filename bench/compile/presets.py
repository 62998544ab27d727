"""The compile section's presets: QUICK (minutes on 2 cores), QUICK_BUDGET (section 5 in
--quick) and FULL (paper-sized), the test units it tunes on and the held-out network, with
SiMoE's and the MLP peer's training budgets as chosen on validation."""

from __future__ import annotations

import json
from pathlib import Path

from bench.protocol import TRAIN_UNITS
from bench.report.report_model import CompileSettings

# -- the presets --------------------------------------------------------------------------------
CHOICES = Path(__file__).resolve().parents[1] / "protocol_choices.json"
# TVM's MLP cost model trains 50 epochs on a full dataset (its TrainerConfig.num_epoch_full)
MLP_DEFAULT_EPOCHS = 50


def validated_epochs(choices: Path = CHOICES) -> dict[str, int]:
    """SiMoE's and the MLP peer's training budgets as chosen on the protocol's validation
    units (bench/protocol_choices.json, bench/transfer/protocol_transfer.py's grid, seed 0): every
    model compared trains for the budget its own validation score chose. A choices file whose
    fleet has no MLP choice yet (its selection is run per method) gives TVM's default rather
    than failing every import of the presets."""
    chosen = json.loads(choices.read_text())["chosen"]
    mlp = chosen.get("mlp-finetune")
    return {
        "expert_epochs": int(chosen["simoe"]["expert_epochs"]),
        "shared_epochs": int(chosen["simoe"]["shared_epochs"]),
        "mlp_epochs": int(mlp["mlp_epochs"]) if mlp else MLP_DEFAULT_EPOCHS,
    }


# The protocol's units (bench/protocol.py, issue 11): every model trains on the 23 training
# units; the section tunes on test units, of models in no training or validation unit.
# Test units of three generations (Ampere, Turing, Pascal); --quick takes the first.
TEST_UNITS_COMPILE = ["a30-u1", "2080ti-ref", "titanxp-u1"]
# The GPT-2-style block's operators (causal attention at width 1024) are in no model's
# training data and no fleet record: SiMoE and the MLP see them zero-shot; schedule
# transfer has nothing to transfer there.
HELD_OUT_NETWORKS = ["gpt2_block"]
# --quick runs the four methods issue 12's 32-measurement claims compare (the rest: --full
# or `--methods all`): SiMoE fast, MetaSchedule XGB, the pre-trained MLP through SiMoE fast's
# own search (the fair peer) and fleet schedule transfer.
# ms-xgb-32 searches 4 x 8 so that XGB is fitted after the first 8 and ranks the other 24;
# ms-random-32 is what ms-xgb-32 was before issue 24 (one search of 32: XGB never trained
# before it was spent), MetaSchedule's search with random scores, named for what it is.
QUICK_METHODS = ["simoe-fast", "mlp-fast", "schedule-transfer", "ms-xgb-32", "ms-random-32"]

# Quick: the top task (weight x FLOPs) of each network on one test unit, sized to fit the
# 15-minute quick run on 2 cores: these are task figures, not network figures (each
# network's report says its share of FLOPs). Search, not measurement, is the cost of a
# simulated GPU: each evolutionary search first samples random valid CUDA schedules (~5%
# pass VerifyGPUCode) until it holds 50 for MetaSchedule's population of 512, then mutates
# its population. Here every search, of every method, uses a population of 64 and samples 8
# first (50 scaled with the population). 32 measurements per search (TLM's budget). XGB's
# warm-up is cut from 100 to 32 so that a second search would use its model (a stronger peer,
# not a weaker one); the small-budget XGB peer searches 4 x 8 (settings.xgb_small_rounds) so
# that its model is fitted and used within the 32. SiMoE fast: 3 chained model-only searches,
# then 32 measured.
QUICK = CompileSettings(
    networks=["resnet50", "mobilenet_v2", "bert_layer", *HELD_OUT_NETWORKS],
    held_out_networks=HELD_OUT_NETWORKS,
    max_tasks=1,
    train_gpus=list(TRAIN_UNITS),
    unseen_gpus=TEST_UNITS_COMPILE[:1],
    methods=QUICK_METHODS,
    samples_per_task=64,
    full_budget=64,
    small_budgets=[32],
    population=64,
    genetic_iters=2,
    simoe_fast_population=64,
    simoe_fast_genetic_iters=2,
    simoe_fast_rounds=3,
    fleet_rounds=4,
    trials_per_iter=32,
    xgb_warmup=32,
    xgb_small_rounds=4,
    scale_init_min=True,
    **validated_epochs(),
)

# The budget section in --quick: one task, so each search can be larger (population 128).
QUICK_BUDGET = QUICK.model_copy(
    update={
        "population": 128,
        "simoe_fast_population": 128,
        "simoe_fast_rounds": 5,
        "fleet_rounds": 6,
        # SiMoE fast and full, schedule transfer (the trivial baseline, the same training
        # units' records) and MetaSchedule at its realistic budget: no MLP is trained here
        "methods": ["simoe-fast", "simoe-full", "schedule-transfer", "ms-xgb-1000"],
        "held_out_networks": [],
        "networks": QUICK.networks[:1],
    }
)

FULL = CompileSettings(
    networks=["resnet50", "mobilenet_v2", "bert_layer", *HELD_OUT_NETWORKS],
    held_out_networks=HELD_OUT_NETWORKS,
    max_tasks=None,
    flops_share=0.8,  # issue 12: a task subset covering at least 80% of each network's FLOPs
    train_gpus=list(TRAIN_UNITS),
    unseen_gpus=TEST_UNITS_COMPILE,
    samples_per_task=512,
    full_budget=1000,
    small_budgets=[32, 64, 128],
    population=512,
    genetic_iters=4,
    simoe_fast_population=512,
    simoe_fast_genetic_iters=4,
    simoe_fast_rounds=8,
    simoe_fast_per_round=64,
    fleet_rounds=16,
    fleet_per_round=64,
    xgb_small_rounds=4,
    expert_epochs=30,
    shared_epochs=30,
    mlp_epochs=30,
)
