"""What one run of `simoe-server demo` does: its fleet, its newcomer, its budgets, and the
server's settings (the deployment's defaults but for the overrides it names, with why)."""

from __future__ import annotations

from dataclasses import dataclass

from schemas import BadInputError
from schemas.cli import Population, Seed, checked
from schemas.sharing import MAX_TOP_K
from server.run_config import DEFAULTS, ServerRunConfig, start_option


@dataclass
class DemoPlan:
    gpus: list[str]
    cpu: bool = True
    new_gpu: str = "a10-ecc-on"
    # What the fleet tunes (its experts' training data): the network a newcomer will tune,
    # as a real fleet would have tuned it on its own GPUs; SiMoE's transfer is across
    # hardware. Its 2 largest tasks.
    network: str = "bert_layer"
    fleet_largest_tasks: int | None = 2  # None: every task of `network`
    # This machine's CPU builds and runs each candidate for real, and checks the compiled
    # network at the end: with the fleet's 2 tasks it was the node everything waited for
    # (docs/results/demo_history.md, run f3: 402 s against 228-262 s for the simulated
    # nodes). Its expert is never sent to a GPU. None: as the fleet.
    cpu_largest_tasks: int | None = 1
    # ... and the simulated GPUs' daemons (whose measurements are modelled) run at this
    # nice value, so that the CPU node's real builds and runs get the cores first: it is
    # still the last to finish, and its measurements are timed on the same 2 cores.
    sim_nice: int = 10
    # What the newcomer tunes: a BERT encoder layer, whose three dense layers are 97% of
    # its FLOPs. 0.3: its largest task alone (32% of the FLOPs, run 4 times a layer); all
    # three took the newcomer's three tunes (8, 8 and 32 trials/task) past 10 minutes.
    new_network: str = "bert_layer"
    flops_share: float = 0.3  # its largest tasks covering this share of its FLOPs
    # Trials per task each fleet node tunes (its experts' data, its shared schedules). 64,
    # not 16: a deployment's fleet has tuned longer than the newcomer's 4x baseline (32);
    # after 16 the best shared schedule was 1.9x slower on the A10 than MetaSchedule at 32
    # finds, after 64 as fast, for a minute more of wall time (docs/results/demo_history.md,
    # s9 and s10, the rule written before s10's run).
    fleet_trials: int = 64
    # Seed of every fleet node's search (`submit --seed`): one seed is one draw of the
    # fleet's records, so two demos at the same seed tune the same records; another seed
    # is an independent draw. `fleet_population`: their search population (None: the
    # product's default; the loopback tests search small to stay fast).
    fleet_seed: int = 0
    fleet_population: int | None = None
    seed: int = 0  # of the newcomer's three searches
    budget: int = 8
    full_budget: int = 32
    # Opt-in schedule sharing, as a deployment that turned it on runs: every node (the
    # fleet and the newcomer) enrolls with `--share-schedules`; off by default, as in the
    # product. `share_top_k`: schedules each node shares per workload (None: the agent's
    # default).
    share_schedules: bool = False
    share_top_k: int | None = None
    # The server runs on the deployment's defaults (server.run_config.DEFAULTS: FedAdam,
    # its local epochs, its k); `server_overrides` lists the demo's only departures.
    epochs: int = DEFAULTS.epochs
    k_experts: int = DEFAULTS.k_experts
    # Opt-in: each node's own-records teacher and the newcomers' distilled copy
    # (`--teacher-epochs`, `--newcomer-distill-steps`; off, as in the product)
    teacher_epochs: int = DEFAULTS.teacher_epochs
    newcomer_distill_steps: int = DEFAULTS.newcomer_distill_steps
    # Rounds while nodes still tune cost CPU (a ClientApp process per node and round) and
    # teach little; the demo asks for a round when a node finishes tuning, and a node that
    # joins starts one, so nothing waits for the interval. At 60 s the rounds ran back to
    # back and one more fleet round came before the newcomer's (docs/results/
    # demo_history.md, run g3).
    round_interval: float = 120.0
    timeout_s: float = 1500.0  # the whole fleet phase

    def server_config(self) -> ServerRunConfig:
        """The server's settings (validated: a bad one fails before anything starts)."""
        return ServerRunConfig.from_options(
            epochs=self.epochs,
            k_experts=self.k_experts,
            teacher_epochs=self.teacher_epochs,
            newcomer_distill_steps=self.newcomer_distill_steps,
            round_interval=self.round_interval,
            min_nodes=len(self.gpus) + int(self.cpu),  # all, at once
        )

    def server_overrides(self) -> list[str]:
        """Each setting off the deployment's defaults, with its value, default and why."""
        why = {
            "round_interval": "rounds while the nodes still tune cost CPU and teach little; "
            "the demo asks for one when a node has tuned",
            "min_nodes": "the first round waits for the whole fleet",
            "teacher_epochs": "opt-in: each node's own-records teacher, for the newcomers' copy",
            "newcomer_distill_steps": "opt-in: the newcomer is served the distilled copy",
        }
        config = self.server_config()
        lines = []
        for option, name in _option_names(config):
            default = getattr(DEFAULTS, name)
            value = getattr(config, name)
            reason = f": {why[name]}" if name in why else ""
            lines.append(f"{option} {_plain(value)} (default {_plain(default)}{reason})")
        return lines

    def enroll_sharing_options(self) -> list[str]:
        """What every `simoe-agent enroll` of the demo adds for schedule sharing."""
        if not self.share_schedules:
            return []
        top_k = [] if self.share_top_k is None else ["--share-top-k", str(self.share_top_k)]
        return ["--share-schedules", *top_k]

    def largest_tasks(self, device: str) -> int | None:
        """How many of `network`'s largest tasks the node on `device` tunes (None: all)."""
        if device == "cpu" and self.cpu_largest_tasks is not None:
            return self.cpu_largest_tasks
        return self.fleet_largest_tasks

    def check(self) -> None:
        if not self.gpus and not self.cpu:
            raise BadInputError("the fleet is empty: give --gpus or --cpu")
        if self.new_gpu in self.gpus:
            raise BadInputError(
                f"--new-gpu {self.new_gpu} is one of --gpus; pick a GPU none of them is"
            )
        for value, option in ((self.budget, "--budget"), (self.fleet_trials, "--fleet-trials")):
            if value < 1:
                raise BadInputError(f"{option} must be at least 1, got {value}")
        for tasks, option in (
            (self.fleet_largest_tasks, "--fleet-largest-tasks"),
            (self.cpu_largest_tasks, "--cpu-largest-tasks"),
        ):
            if tasks is not None and tasks < 1:
                raise BadInputError(f"{option} must be at least 1, got {tasks}")
        checked("--fleet-seed", self.fleet_seed, Seed)
        if self.fleet_population is not None:
            checked("fleet_population", self.fleet_population, Population)
        if not 0 <= self.sim_nice <= 19:
            raise BadInputError(f"sim_nice must be in 0..19, got {self.sim_nice}")
        if self.share_top_k is not None and not self.share_schedules:
            raise BadInputError("--share-top-k needs --share-schedules")
        if self.share_top_k is not None and not 1 <= self.share_top_k <= MAX_TOP_K:
            raise BadInputError(f"--share-top-k must be in 1..{MAX_TOP_K}, got {self.share_top_k}")
        if not 0 < self.flops_share <= 1:
            raise BadInputError(f"--flops-share must be in (0, 1], got {self.flops_share}")
        if self.full_budget <= self.budget:
            raise BadInputError("--full-budget must be larger than --budget")
        self.server_config()


def settings_text(config: ServerRunConfig) -> str:
    return (
        f"{config.describe()}, {config.epochs} local epoch(s) per round, "
        f"{config.k_experts} experts per node"
    )


def _plain(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _option_names(config: ServerRunConfig) -> list[tuple[str, str]]:
    """(`simoe-server start` option, field name) of each setting off the defaults."""
    return [
        (start_option(name), name)
        for name, value in config
        if name != "registry" and value != getattr(DEFAULTS, name)
    ]
