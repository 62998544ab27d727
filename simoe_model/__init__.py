"""The SiMoE cost model: features, hardware vector, the MoE module, losses, training, metrics.

Importing it changes nothing in the process: entry points call
`simoe_model.tvm_compat.install()` themselves (see that module).
"""
