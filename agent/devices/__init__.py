"""Devices: `get_device("cpu" | "cuda:N" | "sim:<gpu or spec.json>")`."""

from __future__ import annotations

from agent.devices.base import Device
from schemas import BadInputError


def get_device(spec: str) -> Device:
    """The device named by `spec`; a one-line BadInputError for anything else."""
    spec = spec.strip()
    if spec == "cpu":
        from agent.devices.cpu import CPUDevice

        return CPUDevice()
    if spec.startswith("cuda"):
        index = spec.removeprefix("cuda").removeprefix(":") or "0"
        if not index.isdigit():
            raise BadInputError(f"device {spec!r}: expected cuda:N with N a GPU index")
        from agent.devices.cuda import CUDADevice

        return CUDADevice(int(index))
    if spec.startswith("sim:"):
        from agent.devices.sim import SimulatedGPU

        return SimulatedGPU.from_spec(spec.removeprefix("sim:"))
    raise BadInputError(f"unknown device {spec!r}: use cpu, cuda:N or sim:<gpu>")


__all__ = ["Device", "get_device"]
