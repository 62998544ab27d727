"""SiMoE with (multi-)Krum: average only the updates closest to their neighbours.

Why: Krum (Blanchard et al., 2017) scores each update by the summed squared distance
to its n - f - 2 nearest other updates and keeps the best; an update far from every
honest one (scaled, random, stale) scores badly and is left out whole. Selection is
Flower's own `select_multikrum`; the kept updates are averaged by `num-examples`
(the base strategy's `combine`), as Flower's MultiKrum does. Those left out are
named in the round's outcome (`set_aside`).
"""

from __future__ import annotations

from flwr.app import RecordDict
from flwr.serverapp.strategy.multikrum import select_multikrum

from schemas.protocol import Arrays, arrays_to_record
from server.strategy import SiMoEStrategy

CHANGE_KEY = "change"


class SiMoEKrum(SiMoEStrategy):
    """Multi-Krum over the (clipped) changes: keep n - f (or `keep`), average those."""

    aggregation = "krum"

    def __init__(
        self, *args: object, num_malicious: int = 2, keep: int | None = None, **kwargs: object
    ) -> None:
        if num_malicious < 0:
            raise ValueError(f"num_malicious must not be negative, got {num_malicious}")
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.num_malicious = num_malicious
        self.keep = keep  # None: n - f, Multi-Krum; 1: classic Krum

    def select(self, changes: list[Arrays], weights: list[float]) -> list[int]:
        """The n - f (or `keep`) changes Krum scores best; the rest are set aside."""
        n = len(changes)
        keep = self.keep if self.keep is not None else n - self.num_malicious
        keep = min(max(keep, 1), n)
        contents = [RecordDict({CHANGE_KEY: arrays_to_record(c)}) for c in changes]
        chosen = {id(c) for c in select_multikrum(contents, self.num_malicious, keep)}
        return [i for i, content in enumerate(contents) if id(content) in chosen]
