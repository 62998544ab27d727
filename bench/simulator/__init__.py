"""The simulated GPUs themselves: their diversity, speed and ptxas facts, and the checks against
real GPUs (TopHub, a GPU machine's run, the GPU evidence bundle).
"""
