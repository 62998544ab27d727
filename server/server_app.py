"""The ServerApp: continual federated rounds over whichever nodes are online.

Each round: nodes not seen yet in this run are asked who they are (`query.hello`,
which also hands them the current global model, so a node that joins late is served
at its first round); then every known node gets the global shared arrays and the
experts of its most similar hardware (`train`); the strategy checks the replies and
averages the shared keys. Only the loop changes the run's `Roster`, from what the
strategy decided; the `RoundRecorder` writes that to the registry (the strategy
persists nothing). Round numbers and the global model continue across runs and
restarts (the registry keeps them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from schemas import RunFailure
from schemas.messages import MSG_REFUSED, REC_CONFIG
from schemas.protocol import Arrays, prepare_flower_env
from server.aggregation import make_strategy
from server.idle import News
from server.registry import Registry
from server.roster import Roster
from server.round_outcome import RoundInputs, RoundOutcome
from server.round_recorder import RoundRecorder
from server.run_config import ServerRunConfig
from server.strategy import SimilarityFn, SiMoEStrategy
from simoe_model import tvm_compat

log = logging.getLogger("simoe.server")
# A round the registry could not record (a full or read-only disk) is tried again after this.
RETRY_S = 10.0
JOIN_POLL_S = 2.0  # how often the wait between rounds looks for nodes that joined
# ... and while idle (nothing new since the last round): each look is a request the
# SuperLink serves, and a newcomer then waits at most this long for its first round
IDLE_JOIN_POLL_S = 5.0


def node_public_keys(grid: Grid) -> dict[int, bytes]:
    """The registered public key of each connected node, where the SuperLink reports one."""
    try:
        return {n.node_id: bytes(n.public_key) for n in grid.get_nodes() if n.public_key}
    except Exception:  # noqa: BLE001 - a Grid without node info (tests) has no keys
        return {}


def wait_for_nodes(
    grid: Grid, minimum: int, deadline_s: float, stop: threading.Event | None
) -> list[int]:
    """Node ids online once at least `minimum` are (or when the deadline passes)."""
    end = time.monotonic() + deadline_s
    while True:
        node_ids = list(grid.get_node_ids())
        if len(node_ids) >= minimum or time.monotonic() >= end or (stop and stop.is_set()):
            return node_ids
        time.sleep(0.5)


def run_rounds(
    grid: Grid,
    strategy: SiMoEStrategy,
    initial_arrays: Arrays,
    *,
    num_rounds: int,
    roster: Roster | None = None,
    timeout: float = 120.0,
    wait_nodes_s: float = 60.0,
    stop: threading.Event | None = None,
    on_round: Callable[[RoundOutcome], None] | None = None,
    min_interval_s: float = 0.0,
    idle_probe_s: float = 0.0,
    ends_run: bool = True,
) -> list[RoundOutcome]:
    """Run `num_rounds` rounds (0: until `stop` is set); returns what each round did.

    `ends_run`: the run ends with these rounds (False: a later call continues it), so the
    last of them is the run's final round (`RoundInputs.final`; every round when running on).

    `idle_probe_s` > 0: after a round with nothing new (`server.idle.News`) the next waits
    for news (a newcomer, an operator's request) or this long at the most, instead of
    `min_interval_s`.

    `roster`: who the nodes of the run are. The loop owns it: it hands it to the strategy
    each round (`RoundInputs.roster`, read only) and changes it from the outcomes the
    strategy returns. None starts a new run (every online node is asked who it is); a
    second call given the first's roster continues that run.
    """
    roster = Roster() if roster is None else roster
    recorder = RoundRecorder(strategy.registry)
    arrays = recorder.open_run(initial_arrays)
    outcomes: list[RoundOutcome] = []
    done = 0
    round_started = time.monotonic()
    news = News(strategy.registry.path if idle_probe_s > 0 else None)
    while num_rounds == 0 or done < num_rounds:
        if stop is not None and stop.is_set():
            break
        if outcomes and min_interval_s > 0:  # continual rounds, not a busy loop
            idle = idle_probe_s > 0 and not news.fresh
            pause = max(idle_probe_s, min_interval_s) if idle else min_interval_s
            wait = pause - (time.monotonic() - round_started)
            if idle:
                log.info("nothing new since round %d: idle until news", outcomes[-1].round)
            poll = IDLE_JOIN_POLL_S if idle else JOIN_POLL_S
            if wait > 0 and wait_between_rounds(grid, roster, wait, stop, news, poll_s=poll):
                break
        round_started = time.monotonic()
        try:
            node_ids = wait_for_nodes(grid, strategy.min_available_nodes, wait_nodes_s, stop)
            public_keys = node_public_keys(grid)
            roster.forget_departed(node_ids)
            unknown = roster.unknown(node_ids)
            if unknown:
                roster.asked.update(unknown)
                hellos = strategy.hello_messages(unknown, arrays)
                replies = grid.send_and_receive(hellos, timeout=timeout)
                greeted = strategy.read_hellos(replies, public_keys, roster)
                recorder.record_hellos(greeted)
                roster.admit(greeted.identified, greeted.name_taken)
                refuse_nodes(grid, roster.refusals(unknown))
            known = roster.known(node_ids)
            if not known:
                if num_rounds != 0 and wait_nodes_s <= 0:
                    break
                continue
            number = recorder.start_round(grid.run.run_id if _has_run(grid) else 0, len(known))
            final = num_rounds == 0 or (ends_run and done == num_rounds - 1)
            inputs = RoundInputs(number, arrays, node_ids, public_keys, roster, final=final)
            plan = strategy.configure_train(inputs)
            replies = list(grid.send_and_receive(plan.messages, timeout=timeout))
            news.after_round(replies, joined=bool(unknown))
            outcome = recorder.record_round(strategy.aggregate_train(inputs, plan, replies))
            roster.admit(outcome.identified, outcome.name_taken)
            roster.drop([*outcome.errored, *outcome.missing], outcome.leaving)
            if outcome.aggregated is not None:
                arrays = outcome.aggregated
            log.info(
                "round %d: %d accepted, %d rejected, %d failed, global v%d",
                number,
                len(outcome.accepted),
                len(outcome.rejected),
                outcome.failed,
                outcome.global_version,
            )
            send_receipts(grid, strategy, outcome)
            outcomes.append(outcome)
            if on_round is not None:
                on_round(outcome)
        except RunFailure as exc:  # the registry cannot be written (a full disk): one line
            log.error("round not recorded: %s; trying again in %.0f s", exc, RETRY_S)
            if stop.wait(RETRY_S) if stop is not None else time.sleep(RETRY_S):
                break
            continue
        done += 1
    return outcomes


def send_receipts(grid: Grid, strategy: SiMoEStrategy, outcome: RoundOutcome) -> None:
    """Tell leaving nodes their reply is in (pushed only: nobody waits for their answer)."""
    messages = strategy.receipt_messages(outcome)
    if not messages:
        return
    try:
        grid.push_messages(messages)
    except Exception as exc:  # noqa: BLE001 - the node stops on its own after a while
        log.warning("round %d: receipts not sent: %s", outcome.round, exc)


def wait_between_rounds(
    grid: Grid,
    roster: Roster,
    wait_s: float,
    stop: threading.Event | None,
    news: News | None = None,
    *,
    poll_s: float | None = None,
) -> bool:
    """Wait out the interval between rounds, but end it when a node joins (True: stopped).

    A node that comes online is served its model and experts at once, instead of after
    a long interval; nodes asked once already (refused, gone quiet) do not count. An
    operator's request (`simoe-server round`) ends it too.
    """
    end = time.monotonic() + wait_s
    while (left := end - time.monotonic()) > 0:
        step = min(poll_s or JOIN_POLL_S, left)
        if stop.wait(step) if stop is not None else time.sleep(step):
            return True
        if news is not None and news.requested():
            log.info("a round was requested")
            return False
        try:
            online = list(grid.get_node_ids())
        except Exception:  # noqa: BLE001 - a SuperLink busy or restarting: keep waiting
            continue
        if roster.newcomers(online):
            return False
    return False


def refuse_nodes(grid: Grid, reasons: Mapping[int, str]) -> None:
    """Tell refused nodes why (e.g. a name already taken), so `enroll` can say it."""
    if not reasons:
        return
    messages = []
    for node_id, reason in reasons.items():
        content = RecordDict({REC_CONFIG: ConfigRecord({"reason": reason})})
        messages.append(Message(content, dst_node_id=node_id, message_type=MSG_REFUSED))
    grid.send_and_receive(messages, timeout=10.0)


def _has_run(grid: Grid) -> bool:
    try:
        grid.run  # noqa: B018 - some test grids have no run
    except Exception:  # noqa: BLE001
        return False
    return True


def default_similarity() -> SimilarityFn:
    from server.similarity import model_similarity

    return model_similarity


def default_initial_arrays(seed: int = 0) -> Arrays:
    from server.similarity import initial_shared_arrays

    return initial_shared_arrays(seed)


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point under a SuperLink: settings come from the run config."""
    prepare_flower_env()
    tvm_compat.install()
    config = ServerRunConfig.from_run_config(context.run_config)
    registry_path = Path(config.registry or "registry.sqlite").expanduser()
    with Registry(registry_path) as registry:
        strategy = make_strategy(config, registry, default_similarity())
        run_rounds(
            grid,
            strategy,
            default_initial_arrays(config.seed),
            num_rounds=config.num_rounds,
            timeout=config.round_timeout,
            wait_nodes_s=config.wait_nodes,
            min_interval_s=config.round_interval,
            idle_probe_s=config.idle_probe,
        )
