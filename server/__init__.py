"""The federation: strategy, expert registry, ServerApp, `simoe-server`.

Importing it changes nothing in the process: the entry points (`simoe-server`, the
ServerApp) call `schemas.protocol.prepare_flower_env()` and `simoe_model.tvm_compat.install()`.
"""
