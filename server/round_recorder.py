"""The one writer of the federation's rounds: strategy outcomes into the registry.

The strategy decides (`SiMoEStrategy.read_hellos`, `aggregate_train`) and persists
nothing; the round loop hands what it decided to this recorder, which writes it to the
registry: who the nodes are, refusals and rejections with their reasons, each reply's
metrics and traffic, each node's verdicts on the experts it was sent (with its rank
agreement with each), its expert, what the fit of the hardware similarity did, the
new global model and the round's row. A round's replies go one way: strategy ->
`RoundOutcome` -> `RoundRecorder` -> `Registry`.

A write the registry cannot make (a full or read-only disk) raises `RunFailure`; the
loop logs it and tries the round again later.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from schemas.protocol import Arrays
from server.registry import Registry
from server.roster import Identified
from server.round_outcome import HelloOutcome, RoundOutcome

log = logging.getLogger("simoe.server")


class RoundRecorder:
    """Writes what the strategy decided to the registry; reads nothing back but versions."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def open_run(self, initial_arrays: Arrays) -> Arrays:
        """Close the rounds a killed server left open; the global model to start from
        (the registry's latest, or `initial_arrays` saved as the first version)."""
        registry = self.registry
        interrupted = registry.close_interrupted_rounds()
        if interrupted:
            log.warning("rounds %s were interrupted (the server stopped mid-round)", interrupted)
        latest = registry.latest_global()
        if latest is not None:
            return latest[1]
        registry.save_global(initial_arrays, round_=registry.last_round())
        return dict(initial_arrays)

    def start_round(self, run_id: int, sampled: int) -> int:
        """Open the next round; its number (numbers continue across runs and restarts)."""
        return self.registry.start_round(run_id, sampled)

    def record_hellos(self, outcome: HelloOutcome) -> None:
        for node in outcome.identified:
            self._node(node, self.registry.last_round())
        for node_id, why in outcome.refusals:
            self.registry.add_refusal(node_id, why)

    def record_round(self, outcome: RoundOutcome) -> RoundOutcome:
        """Write the round; the outcome with the global version it ended on."""
        registry, number = self.registry, outcome.round
        for node in outcome.identified:
            self._node(node, number)
        for who, why in outcome.rejected.items():
            registry.add_rejection(number, who, why)
        for answer in outcome.replies:
            registry.add_metrics(number, answer.node_key, answer.metrics)
            registry.add_traffic(
                number, answer.node_key, bytes_down=answer.bytes_down, bytes_up=answer.bytes_up
            )
            registry.touch_node(answer.node_key)
            if answer.expert is None:
                continue  # served: no expert, no verdicts
            registry.record_checks(
                number, answer.node_key, answer.checked, answer.refuted, answer.agreement
            )
            registry.put_expert(
                answer.name,
                answer.node_key,
                answer.expert,
                round_=number,
                num_examples=answer.num_examples,
            )
        if outcome.similarity_fit is not None:
            registry.add_similarity_fit(outcome.similarity_fit)
        version = registry.global_version()
        if outcome.aggregated is not None:
            version = registry.save_global(outcome.aggregated, round_=number)
        registry.finish_round(
            number,
            replied=outcome.replied,
            rejected=len(outcome.rejected),
            failed=outcome.failed,
            global_version=version,
            updated=outcome.aggregated is not None,
        )
        return replace(outcome, global_version=version)

    def _node(self, node: Identified, round_: int) -> None:
        self.registry.upsert_node(node.hello, node.node_id, key_verified=node.key_verified)
        if node.share is not None:  # opt-in: its shared schedules replace the last ones
            self.registry.put_share(node.node_key, node.share, round_=round_)
        else:  # it does not share (or no longer): nothing of it stays shared
            self.registry.drop_share(node.node_key)
