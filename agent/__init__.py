"""One node of the fleet: devices, profiler, workloads, tuner, store, Flower client, daemon.

Importing it changes nothing in the process: the entry points (`simoe-agent`, the
daemon's job child, the ClientApp) call
`schemas.protocol.prepare_flower_env()` and `simoe_model.tvm_compat.install()`.
"""
