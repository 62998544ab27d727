"""A round's messages in and out: what the loop hands the strategy (`RoundInputs`), the
messages it plans (`RoundPlan`), and what the round did (`RoundOutcome`, `HelloOutcome`,
`NodeReply`), which the recorder writes to the registry. Plain values, no behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from flwr.app import Message

from schemas.messages import SimilarityFitInfo
from schemas.protocol import Arrays
from server.roster import Identified, Roster


@dataclass(frozen=True)
class RoundInputs:
    """What the round loop hands the strategy for one round."""

    server_round: int
    arrays: Arrays  # the current global shared arrays
    node_ids: Sequence[int]  # the nodes online now (Flower node ids)
    # node_id -> the public key (PEM) the SuperLink authenticated it with, where known
    public_keys: Mapping[int, bytes] = field(default_factory=dict)
    # who the nodes of the run are: the loop's, handed in each round; the strategy reads it
    roster: Roster = field(default_factory=Roster)
    # the run's last round, after which the nodes tune with what they hold (every round of a
    # run that keeps running): when the strategy asks for their personal fine-tune
    final: bool = True


@dataclass
class HelloOutcome:
    """What the nodes' answers to a hello said, for the recorder and the roster."""

    identified: list[Identified] = field(default_factory=list)
    refusals: list[tuple[int, str]] = field(default_factory=list)  # (node_id, why), all
    name_taken: dict[int, str] = field(default_factory=dict)  # refused and told why


@dataclass
class NodeReply:
    """One accepted or served reply, as the registry keeps it."""

    node_key: str
    name: str  # the node's name, which its expert is kept under
    metrics: dict[str, float]
    bytes_down: int
    bytes_up: int
    expert: Arrays | None = field(default=None, repr=False)  # None: served, not trained
    num_examples: int = 0
    checked: list[str] = field(default_factory=list)  # experts it was sent and tested
    refuted: list[str] = field(default_factory=list)  # those it found ranking backwards
    # checked expert -> the node's rank agreement with it (2 decimals), where it gave one
    agreement: dict[str, float] = field(default_factory=dict)


@dataclass
class RoundPlan:
    """The messages of a round and what they carry, for `aggregate_train`."""

    messages: list[Message]
    sampled: list[int]
    delivered: dict[str, list[str]]  # node key -> expert names sent to it
    bytes_down: dict[int, int]  # node_id -> payload bytes sent to it
    # node_id -> the older global sent to it in place of the current (see matched_base)
    bases: dict[int, Arrays] = field(default_factory=dict)


@dataclass
class RoundOutcome:
    """What one round did, for the loop, the logs and the tests."""

    round: int
    sampled: list[int] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    served: list[str] = field(default_factory=list)  # answered without data to train on
    rejected: dict[str, str] = field(default_factory=dict)
    set_aside: list[str] = field(default_factory=list)  # accepted, left out by the aggregation
    failed: int = 0  # replies with an error plus nodes that did not answer
    missing: list[int] = field(default_factory=list)  # node ids that did not answer
    leaving: list[int] = field(default_factory=list)  # replied and go: told the reply is here
    delivered: dict[str, list[str]] = field(default_factory=dict)
    global_version: int = 0  # set by the loop once it has saved the new global model
    aggregated: Arrays | None = field(default=None, repr=False)  # None: nothing to average
    metrics: dict[str, float] = field(default_factory=dict)  # weighted means of the replies
    replied: int = 0  # replies without an error
    errored: list[int] = field(default_factory=list)  # node ids whose reply was an error
    identified: list[Identified] = field(default_factory=list)  # hellos in the replies
    name_taken: dict[int, str] = field(default_factory=dict)  # node_id -> refused: why
    replies: list[NodeReply] = field(default_factory=list, repr=False)  # accepted, served
    # the fit of the hardware similarity on the nodes' agreements (None: not run)
    similarity_fit: SimilarityFitInfo | None = None
