"""The federation: strategy, expert registry, ServerApp, `simoe-server`."""

import os as _os

from simoe_model import tvm_compat  # noqa: F401  (before any TVM import: see the module)

# No network beyond the registries: Flower must not phone home.
_os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
_os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
