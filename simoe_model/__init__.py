"""The SiMoE cost model: features, hardware vector, the MoE module, losses, training, metrics."""

from simoe_model import tvm_compat  # noqa: F401  (before any TVM import: see the module)
