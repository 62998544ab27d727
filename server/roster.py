"""Who the nodes of a run are: the round loop's, read (never changed) by the strategy.

Flower's node_id names a connection, not a node: it changes when a SuperNode restarts.
The `Roster` maps the node ids of this run to node keys (the key fingerprints the
registry knows nodes by), and remembers who was asked, refused, served and gone. The
round loop (`server.server_app.run_rounds`) keeps it and updates it from what the
strategy says happened (`admit`, `drop`); the strategy reads it
to plan a round and to check a reply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from schemas.messages import NodeHello
from schemas.sharing import ScheduleShare


@dataclass(frozen=True)
class Identified:
    """A node that said who it is in a reply, and passed the strategy's checks."""

    node_id: int
    node_key: str
    hello: NodeHello
    key_verified: bool  # the SuperLink vouched for the key the node claims
    # its schedule share (opt-in schedule sharing); None: it does not share (any it
    # shared before is dropped)
    share: ScheduleShare | None = None


@dataclass
class Roster:
    """Who the nodes of this run are: Flower node_id -> node key, and refusals."""

    identity: dict[int, str] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)  # node_id -> why
    hellos: dict[int, NodeHello] = field(default_factory=dict)  # what each last said
    # leaving nodes served and told so, while the SuperLink still lists them online
    departed: set[int] = field(default_factory=set)
    asked: set[int] = field(default_factory=set)  # every node id sent a hello this run

    # -- what the strategy reads ------------------------------------------------------

    def newcomers(self, online: Iterable[int]) -> list[int]:
        """Online nodes never asked who they are: worth a round now, not after the interval."""
        return [n for n in online if n not in self.asked and n not in self.identity]

    def can_check(self, node_id: int) -> bool:
        """Whether the node has trained on records of its own (so it can test experts)."""
        hello = self.hellos.get(node_id)
        return hello is not None and hello.expert_version > 0

    def unknown(self, node_ids: Iterable[int]) -> list[int]:
        return [n for n in node_ids if n not in self.identity]

    def known(self, node_ids: Iterable[int]) -> list[int]:
        return [n for n in node_ids if n in self.identity]

    def refusals(self, node_ids: Iterable[int]) -> dict[int, str]:
        return {n: self.refused[n] for n in node_ids if n in self.refused}

    # -- what the loop changes --------------------------------------------------------

    def forget_departed(self, online: Iterable[int]) -> None:
        """A departed node seen offline may come back (a daemon, another enrolment)."""
        self.departed &= set(online)

    def admit(self, identified: Iterable[Identified], name_taken: Mapping[int, str]) -> None:
        """The nodes that said who they are (a hello, or a round's reply), and those
        refused for a name another key holds (told why when they are asked again)."""
        for node in identified:
            self.identity[node.node_id] = node.node_key
            self.hellos[node.node_id] = node.hello
            self.refused.pop(node.node_id, None)
        self.refused.update(name_taken)

    def drop(self, gone: Iterable[int], leaving: Iterable[int]) -> None:
        """Nodes gone (asked again if they come back) and leaving nodes served (not
        sampled again while they stop)."""
        for node_id in gone:
            self.identity.pop(node_id, None)
        for node_id in leaving:
            self.identity.pop(node_id, None)
            self.departed.add(node_id)
