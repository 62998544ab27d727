"""The device interface: where tensor programs are built and measured.

Three kinds implement it, one module each: `cpu` (LLVM on this host), `cuda:N`
(a real NVIDIA GPU) and `sim:<gpu>` (a simulated GPU: an analytical latency
model; everything it produces is labelled simulated).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from schemas import AnalyticalSpecs, DeviceKind

if TYPE_CHECKING:
    import tvm
    from tvm.s_tir import meta_schedule as ms


class Device(ABC):
    """One device a node can tune for.

    Attributes:
        kind: cpu, cuda or sim.
        name: the device as the user wrote it, canonical: `cpu`, `cuda:0`, `sim:t4`.
        simulated: True when measurements are modelled, not taken.
    """

    kind: ClassVar[DeviceKind]
    simulated: ClassVar[bool] = False

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    @abstractmethod
    def hardware_name(self) -> str:
        """The hardware's own name, e.g. 'Intel Xeon ...' or 'Tesla T4'."""

    @abstractmethod
    def target(self) -> tvm.target.Target:
        """The TVM target that code for this device is generated for."""

    @abstractmethod
    def analytical_specs(self) -> AnalyticalSpecs:
        """The spec-sheet part of the hardware representation."""

    @abstractmethod
    def builder(self) -> ms.builder.Builder:
        """A MetaSchedule builder for this device's candidates."""

    @abstractmethod
    def runner(self) -> ms.runner.Runner:
        """A MetaSchedule runner that measures built candidates on this device."""

    @abstractmethod
    def measure(self, mod: tvm.IRModule, repeat: int = 5) -> list[float]:
        """Seconds per run of `mod["main"]` (already scheduled), one entry per repeat."""

    def memory_bytes(self) -> int | None:
        """Memory the device's kernels can use (GPU memory, host RAM); None when unknown."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
