"""Reliability on loopback with real processes: bad inputs through the CLIs, kill -9 chaos, an
idle federation's CPU.
"""
