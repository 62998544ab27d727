"""The node's state directory: the one place that knows where each piece of state lives.

Layout (unchanged from earlier releases, so existing state directories keep working):

  agent.json                   the AgentConfig (name, device, server, cost model, ...)
  store.sqlite                 the measurements (agent.store.Store); never sent
  profiles/<device-slug>.json  the hardware profile of each device (the profiler's cache);
                               the configured device's is the profile the federation sees
  federation/model.pt          the current SiMoE (global shared parts, bank, own expert)
  federation/state.json        NodeFederationState (versions, last round, refusals)
  models/imported.pt           a model imported with `simoe-agent model import`
  keys/node.key, node.pub      the node's ECDSA key (written by `enroll`)
  queue/{pending,running,done,failed}/   the daemon's jobs (agent.daemon.Queue)
  logs/                        SuperNode, job, enrolment and federation logs
  flwr/                        FLWR_HOME of the node's Flower processes
  daemon.json                  the daemon's last status
  audit/                       if present: a copy of every reply sent (agent.audit)

Before this module, the profile was also copied to `federation/profile.json`; a directory
that only has that copy is still read (`profile`), and nothing writes it any more.

The hardware profile has one owner here: one reader of the cache (`read_profile`: of this
device and of the current probe suite, else None), used by the node's hello, training
and `simoe-agent profile` alike (`NodeState.cached_profile`, `load_or_profile`); the
profiler (`agent.profiler`) only measures, and never reads this directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from schemas import AgentConfig, BadInputError, HardwareProfile, NodeFederationState, RunFailure
from schemas.errors import plain_errors
from schemas.messages import NodeHello, key_fingerprint

if TYPE_CHECKING:
    from agent.devices.base import Device
    from agent.progress import ProgressCallback
    from agent.store import Store
    from simoe_model.model import SiMoE

_LEGACY_PROFILE = Path("federation") / "profile.json"
log = logging.getLogger(__name__)


def default_state_dir() -> Path:
    """`$SIMOE_HOME/agent` if set, else `~/.simoe/agent`."""
    home = os.environ.get("SIMOE_HOME")
    return (Path(home) if home else Path.home() / ".simoe") / "agent"


def device_slug(device_name: str) -> str:
    """A file name for a device: `cuda:0` -> `cuda-0`, `sim:a/b c.json` -> `sim-a-b-c.json`."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", device_name).strip("-.")
    return slug or "device"


def read_profile(
    path: Path,
    device_name: str,
    kind: str | None = None,
    *,
    quiet: bool = False,
    any_suite: bool = False,
) -> HardwareProfile | None:
    """The profile cached at `path` if it is valid, of this device (and kind, if given) and
    of the current probe suite (unless `any_suite`); else None (why is logged unless
    `quiet`)."""
    from agent.probes import PROBE_SUITE_VERSION

    if not path.exists():
        return None
    say = (lambda *_: None) if quiet else log.warning
    try:
        profile = HardwareProfile.model_validate_json(path.read_bytes())
    except (ValidationError, ValueError, OSError) as exc:
        reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        say("%s: unreadable cached profile (%s); profiling again", path, reason)
        return None
    if profile.device != device_name or (kind is not None and profile.device_kind != kind):
        say("%s: cached profile is of %s; profiling again", path, profile.device)
        return None
    if not any_suite and profile.empirical.probe_suite_version != PROBE_SUITE_VERSION:
        if not quiet:
            log.info("%s: probe suite changed; profiling again", path)
        return None
    return profile


def profile_path(device: Device, state_dir: Path) -> Path:
    return NodeState(state_dir).profile_path(device.name)


def load_or_profile(
    device: Device,
    state_dir: Path,
    *,
    refresh: bool = False,
    repeat: int = 5,
    progress: ProgressCallback | None = None,
) -> HardwareProfile:
    """The device's profile from `state_dir/profiles/<slug>.json`, profiling it if needed.

    A missing, corrupt, foreign or outdated cache file (or `refresh`) means profiling
    again; the new profile is written to the cache and saved into the node's store.
    """
    from agent.profiler import profile_device

    node = NodeState(state_dir)
    if not refresh:
        cached = read_profile(node.profile_path(device.name), device.name, device.kind)
        if cached is not None:
            return cached
    profile = profile_device(device, repeat=repeat, progress=progress)
    node.save_profile(profile)
    return profile


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and a rename: a crash never leaves half a file, and a
    failed write (a full disk) leaves neither half a file nor the temporary one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # two writers never share one
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as exc:  # a full or read-only disk: one line, and no .tmp left behind
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        why = (exc.strerror or type(exc).__name__).lower()
        raise RunFailure(f"{path}: cannot write it ({why}); the old file is unchanged") from None


class NodeState:
    """A node's state directory (see the module docstring for its layout)."""

    def __init__(self, directory: Path | str | None = None) -> None:
        self.dir = Path(directory).expanduser() if directory else default_state_dir()

    def __repr__(self) -> str:
        return f"NodeState({str(self.dir)!r})"

    # -- paths ----------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.dir / "agent.json"

    @property
    def store_path(self) -> Path:
        return self.dir / "store.sqlite"

    @property
    def profiles_dir(self) -> Path:
        return self.dir / "profiles"

    def profile_path(self, device_name: str) -> Path:
        return self.profiles_dir / f"{device_slug(device_name)}.json"

    @property
    def federation_dir(self) -> Path:
        return self.dir / "federation"

    @property
    def model_path(self) -> Path:
        return self.federation_dir / "model.pt"

    @property
    def personal_model_path(self) -> Path:
        """The node's personal fine-tune of its federated model (never sent)."""
        return self.federation_dir / "personal.pt"

    @property
    def teacher_model_path(self) -> Path:
        """The node's teacher: a model trained on its own records alone, round after round,
        never replaced by the average (only its scores on public probes are sent)."""
        return self.federation_dir / "teacher.pt"

    @property
    def probes_dir(self) -> Path:
        """The public probe set a server sent, kept by its sha256 (agent.probe_cache)."""
        return self.federation_dir / "probes"

    @property
    def imported_model_path(self) -> Path:
        """A model imported with `simoe-agent model import` (used without a federation)."""
        return self.dir / "models" / "imported.pt"

    @property
    def federation_state_path(self) -> Path:
        return self.federation_dir / "state.json"

    @property
    def keys_dir(self) -> Path:
        return self.dir / "keys"

    @property
    def key_path(self) -> Path:
        return self.keys_dir / "node.key"

    @property
    def public_key_path(self) -> Path:
        return self.keys_dir / "node.pub"

    @property
    def queue_dir(self) -> Path:
        return self.dir / "queue"

    @property
    def logs_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def federation_log_path(self) -> Path:
        """One line per refused server payload (agent.payload)."""
        return self.logs_dir / "federation.log"

    @property
    def audit_dir(self) -> Path:
        """Present only when the node keeps a copy of every reply it sends (agent.audit)."""
        return self.dir / "audit"

    @property
    def flwr_home(self) -> Path:
        """A private FLWR_HOME with the federation's connection settings."""
        return self.dir / "flwr"

    @property
    def daemon_status_path(self) -> Path:
        return self.dir / "daemon.json"

    # -- the config -----------------------------------------------------------------------
    def config(self) -> AgentConfig:
        """The saved config, or the defaults when there is none."""
        if not self.config_path.exists():
            return AgentConfig()
        try:
            return AgentConfig.model_validate_json(self.config_path.read_text())
        except ValidationError as exc:
            raise BadInputError(
                f"{self.config_path}: not a valid agent config ({plain_errors(exc, 'the file')})"
            ) from None

    def save_config(self, config: AgentConfig) -> None:
        write_atomic(self.config_path, config.model_dump_json(indent=2))

    # -- the store ------------------------------------------------------------------------
    def open_store(self) -> Store:
        """The node's store (created on first use); use it as a context manager."""
        from agent.store import Store

        return Store(self.store_path)

    # -- identity -------------------------------------------------------------------------
    def name(self) -> str:
        name = self.config().name
        if not name:
            raise BadInputError(f"{self.dir}: not enrolled (no node name); run enroll")
        return name

    def fingerprint(self) -> str:
        if not self.public_key_path.exists():
            raise BadInputError(f"{self.dir}: no node key; run `simoe-agent enroll`")
        return key_fingerprint(self.public_key_path.read_bytes())

    # -- the hardware profile -------------------------------------------------------------
    def cached_profile(
        self, device_name: str, kind: str | None = None, *, any_suite: bool = False
    ) -> HardwareProfile | None:
        """The saved profile of `device_name`, or None if there is no current one.

        Current: readable, of this device and of this probe suite (`read_profile`); the
        profile a node trains with and says hello with is the one `simoe-agent profile`
        would keep, never one it would refresh."""
        path = self.profile_path(device_name)
        profile = read_profile(path, device_name, kind, quiet=any_suite, any_suite=any_suite)
        if profile is None:  # the old copy: of the configured device, whichever that was
            legacy = self.dir / _LEGACY_PROFILE
            profile = read_profile(legacy, device_name, kind, quiet=True, any_suite=any_suite)
        return profile

    def profile(
        self, device: str | Device | None = None, *, progress: ProgressCallback | None = None
    ) -> HardwareProfile:
        """The profile of a device (default: the configured one); profiled if missing or outdated.

        A profile taken here is saved (`save_profile`): the file and the store's record."""
        device = device or self.config().device
        name = device if isinstance(device, str) else device.name
        profile = self.cached_profile(name)
        if profile is not None:
            return profile
        from agent.devices import get_device

        try:
            target = get_device(device) if isinstance(device, str) else device
        except BadInputError:
            # a device this machine cannot name (a synthetic one, in the tests and the
            # bench): it keeps the profile it was given, of whichever suite
            given = self.cached_profile(name, any_suite=True)
            if given is None:
                raise
            return given
        return load_or_profile(target, self.dir, refresh=True, progress=progress)

    def save_profile(self, profile: HardwareProfile) -> None:
        """Keep `profile` as its device's profile; the store records it for provenance.

        The store's copy is what its records cite (`profile_id`) and what a dataset
        exported from the store carries; the file is the node's current profile.
        """
        write_atomic(self.profile_path(profile.device), profile.model_dump_json(indent=2))
        with self.open_store() as store:
            store.save_profile(profile)

    # -- the federation -------------------------------------------------------------------
    def federation_state(self) -> NodeFederationState:
        if not self.federation_state_path.exists():
            return NodeFederationState()
        try:
            return NodeFederationState.model_validate_json(self.federation_state_path.read_text())
        except ValueError:
            return NodeFederationState()  # a torn file: start over, the server resends

    def save_federation_state(self, state: NodeFederationState) -> None:
        write_atomic(self.federation_state_path, state.model_dump_json(indent=2))

    def has_model(self) -> bool:
        return self.model_path.exists()

    def load_model(self) -> SiMoE:
        """The node's federated model, or a fresh one before the first round."""
        from simoe_model.model import SiMoE, load_model

        return load_model(self.model_path) if self.has_model() else SiMoE()

    def save_model(self, model: SiMoE) -> None:
        from simoe_model.model import save_model

        save_model(model, self.model_path)

    def load_personal_model(self) -> SiMoE | None:
        """The node's personal model, None when it holds none."""
        from simoe_model.model import load_model

        path = self.personal_model_path
        return load_model(path) if path.exists() else None

    def load_teacher_model(self) -> SiMoE | None:
        """The node's teacher model, None when it holds none."""
        from simoe_model.model import load_model

        path = self.teacher_model_path
        return load_model(path) if path.exists() else None

    def save_teacher_model(self, model: SiMoE) -> None:
        from simoe_model.model import save_model

        save_model(model, self.teacher_model_path)

    def save_personal_model(self, model: SiMoE | None) -> None:
        """Keep `model` as the node's personal model; None removes the one it holds."""
        from simoe_model.model import save_model

        if model is None:
            self.personal_model_path.unlink(missing_ok=True)
        else:
            save_model(model, self.personal_model_path)

    def hello(self, *, leaving: bool = False) -> NodeHello:
        """Who this node is, with its verdicts on the experts it was last sent (and the
        public probe sets it holds, so the server sends one once)."""
        from agent.probe_cache import held_digests

        state = self.federation_state()
        return NodeHello(
            leaving=leaving,
            name=self.name(),
            key_fingerprint=self.fingerprint(),
            profile=self.profile(),
            has_model=self.has_model(),
            expert_version=state.rounds_trained,
            checked_experts=state.checked_experts,
            refuted_experts=state.refuted_experts,
            expert_agreement=state.expert_agreement,
            probes_held=held_digests(self),
        )
