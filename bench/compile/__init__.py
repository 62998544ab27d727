"""Compile time on simulated GPUs: the compile section's data and runs, the MetaSchedule-20K
references, the model-only search's cost and depth, and this machine's real CPU (kernels, peak,
model throughput).
"""
