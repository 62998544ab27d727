"""Tunable kernels with a parameter space: Kernel Tuner cache files, real GPUs, probes, strategy."""
