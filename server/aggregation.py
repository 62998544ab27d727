"""Which strategy aggregates the shared arrays: `--aggregation fedavg|trimmed|median|krum`.

Each robust rule is its own strategy class (as Flower's FedTrimmedAvg, FedMedian and
MultiKrum are); this module only maps the names the CLI and the run config use to
those classes and their one parameter each. `--clip NORM` applies to every rule: each
update's change against the current global model is scaled down to that L2 norm.
The server's step on the combined change (`--server-optimizer sgd|adam`, `--server-lr`)
and what a newcomer is sent (`--matched-global`) apply to every rule, too, as does the fit
of the hardware similarity on the nodes' rank agreements after each average
(`--similarity-steps`, 0: off). All of them are fields of the one settings model,
`server.run_config.ServerRunConfig`.
"""

from __future__ import annotations

from server.registry import Registry
from server.run_config import ServerRunConfig
from server.strategy import SimilarityFn, SiMoEStrategy
from server.strategy_krum import SiMoEKrum
from server.strategy_median import SiMoEMedian
from server.strategy_trimmed import SiMoETrimmedAvg

STRATEGIES: dict[str, type[SiMoEStrategy]] = {
    cls.aggregation: cls for cls in (SiMoEStrategy, SiMoETrimmedAvg, SiMoEMedian, SiMoEKrum)
}


def make_strategy(
    config: ServerRunConfig, registry: Registry, similarity: SimilarityFn, **kwargs: object
) -> SiMoEStrategy:
    """The strategy class `config.aggregation` names, built from every setting of `config`.

    `kwargs` override the strategy's own arguments (the tests' toy settings)."""
    extra: dict[str, object] = {}
    if config.aggregation == "trimmed":
        extra["trim_fraction"] = config.trim
    elif config.aggregation == "krum":
        extra["num_malicious"] = config.krum_f
    settings: dict[str, object] = {
        "clip_norm": config.clip or None,
        "server_optimizer": config.server_optimizer,
        "server_lr": config.server_lr,
        "matched_global": config.matched_global,
        "k_experts": config.k_experts,
        "min_available_nodes": config.min_nodes,
        "epochs": config.epochs,
        "seed": config.seed,
        "local_batch": config.local_batch,
        "prox_mu": config.prox_mu,
        "transfer_weight": config.transfer_weight,
        "personal_epochs": config.personal_epochs,
        "similarity_steps": config.similarity_steps,
        "distill_steps": config.distill_steps,
        "similarity_source": config.similarity_source,
        "teacher_epochs": config.teacher_epochs,
        "teacher_distill_steps": config.teacher_distill_steps,
        "teacher_balance": config.teacher_balance,
        "newcomer_distill_steps": config.newcomer_distill_steps,
        "newcomer_teachers": config.newcomer_teachers,
    }
    if config.probes:
        from simoe_model.probe_file import load_probes

        settings["probes"] = load_probes(config.probes)
    if config.similarity_steps > 0:
        from server.similarity import fit_shared_similarity

        settings["similarity_fit"] = fit_shared_similarity
    cls = STRATEGIES[config.aggregation]
    return cls(registry, similarity, **(settings | extra | kwargs))  # type: ignore[arg-type]
