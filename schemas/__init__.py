"""Pydantic models of everything that crosses a boundary. Validation only."""

from schemas.config import AgentConfig
from schemas.errors import BadInputError, RunFailure, SimoeError
from schemas.gpu import GpuSpec
from schemas.hardware import AnalyticalSpecs, DeviceKind, EmpiricalFingerprint, HardwareProfile
from schemas.messages import NodeFederationState, NodeHello, TrainInstruction
from schemas.records import FAILED_RUN_SECS, TuningRecord
from schemas.workload import OPERATOR_DIMS, WorkloadSpec

__all__ = [
    "FAILED_RUN_SECS",
    "OPERATOR_DIMS",
    "AgentConfig",
    "AnalyticalSpecs",
    "BadInputError",
    "DeviceKind",
    "EmpiricalFingerprint",
    "GpuSpec",
    "HardwareProfile",
    "NodeFederationState",
    "NodeHello",
    "RunFailure",
    "SimoeError",
    "TrainInstruction",
    "TuningRecord",
    "WorkloadSpec",
]
