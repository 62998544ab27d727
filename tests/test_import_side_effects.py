"""Importing agent, server or simoe_model changes nothing in the process.

The inspect patch (`simoe_model.tvm_compat.install`) and Flower's offline settings
(`schemas.protocol.prepare_flower_env`) are explicit calls of the entry points; an
import that made them would make the behaviour depend on import order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_PROBE = """
import importlib, inspect, json, os, pkgutil, sys
import flwr.app, flwr.clientapp, flwr.serverapp, torch, tvm  # third parties set their own
before_env = dict(os.environ)
before_getmodule = inspect.getmodule
imported = []
for package in ("schemas", "simoe_model", "agent", "server"):
    root = importlib.import_module(package)
    imported.append(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        importlib.import_module(info.name)
        imported.append(info.name)
changed_env = sorted(k for k in set(os.environ) | set(before_env)
                     if os.environ.get(k) != before_env.get(k))
after = dict(imported=imported, changed_env=changed_env,
             getmodule_patched=inspect.getmodule is not before_getmodule)
from schemas.protocol import prepare_flower_env
from simoe_model import tvm_compat
prepare_flower_env(); tvm_compat.install()
after["entry_sets_env"] = os.environ.get("FLWR_TELEMETRY_ENABLED") == "0"
after["entry_patches"] = inspect.getmodule is not before_getmodule
print(json.dumps(after))
"""


def test_imports_patch_nothing_and_set_no_environment() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLWR_")}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert "agent.client_app" in report["imported"] and "server.server_app" in report["imported"]
    assert report["changed_env"] == []
    assert report["getmodule_patched"] is False
    # and the explicit calls do what the imports no longer do
    assert report["entry_sets_env"] and report["entry_patches"]
