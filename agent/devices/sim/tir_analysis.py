"""Analyse a scheduled CUDA TIR module ONCE into a small numeric record per kernel.

The latency model never looks at TIR: it evaluates these records for every GPU at
once with numpy. The analysis lowers the scheduled module just far enough that
thread bindings and compact shared/local allocations are explicit (the first
passes of TVM's s_tir pipeline), then walks the statements in Python. Index
expressions are compiled into small numpy evaluators, so coalescing (32-byte
sectors touched by one warp), shared-memory bank conflicts and per-block
footprints are computed exactly on the addresses, not guessed from the text.

This module lowers, splits the kernels and assembles their records; the walk over one
kernel's statements is `kernel_walker`, the address analysis of its accesses `tir_access`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import tvm
from tvm import s_tir

from agent.devices.sim.kernel_walker import KernelWalker
from agent.devices.sim.tir_access import (
    RNG_SEED,
    bank_conflict_degree,
    block_footprint,
    kernel_unique,
    warp_sectors,
)


@dataclass
class KernelRecord:
    """What the latency model needs to know about one kernel launch."""

    grid: float = 1.0  # thread blocks
    threads: float = 1.0  # threads per block
    vthreads: float = 1.0  # virtual threads folded into each thread
    smem_bytes: float = 0.0  # static shared memory per block
    local_words: float = 0.0  # 32-bit words of local buffers per thread (-> registers)
    flops: float = 0.0  # floating-point operations of the whole kernel
    fp_instrs: float = 0.0  # FP warp-lane instructions per thread (FMA = 1)
    sfu_instrs: float = 0.0  # exp/log/sqrt/... per thread
    int_instrs: float = 0.0  # address and loop overhead per thread (not unrolled)
    gld_instrs: float = 0.0  # global load instructions per thread (vector load = 1)
    gld_bytes: float = 0.0  # useful bytes loaded from global memory, whole kernel
    gld_sector_bytes: float = 0.0  # bytes of 32-byte sectors those loads touch, whole kernel
    gst_bytes: float = 0.0  # useful bytes stored, whole kernel
    gst_sector_bytes: float = 0.0  # sector bytes of the stores, whole kernel
    block_footprint_bytes: float = 0.0  # distinct global bytes each block touches, summed
    unique_bytes: float = 0.0  # compulsory bytes: distinct global bytes of the whole kernel
    shared_instrs: float = 0.0  # shared load/store instructions per thread
    shared_wavefronts: float = 0.0  # the same, weighted by the bank-conflict degree
    syncs: float = 0.0  # __syncthreads per thread
    ilp: float = 1.0  # independent accumulators in the innermost compute loop
    unroll: float = 0.0  # auto-unroll max step (0 = none)
    vector_bytes: float = 4.0  # widest global access in bytes (4 = scalar float32)
    fp16: float = 0.0  # 1 when the arithmetic is float16

    @classmethod
    def columns(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def as_row(self) -> list[float]:
        return [float(getattr(self, name)) for name in self.columns()]


# ----------------------------------------------------------------------------- lowering

_LOWERING = [
    s_tir.transform.CanonicalizeLoop(),
    s_tir.transform.LowerCrossThreadReduction(),
    s_tir.transform.LowerInitBlock(),
    s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
    s_tir.transform.ConvertBlocksToOpaque(),
    s_tir.transform.LiftThreadBinding(),
    s_tir.transform.ManifestSharedMemoryLocalStage(),
    s_tir.transform.CompactBufferAllocation(),
    s_tir.transform.LowerAutoCopy(),
    s_tir.transform.UnifyThreadBinding(),
    s_tir.transform.LowerMatchBuffer(),
    s_tir.transform.StmtSimplify(),
    s_tir.transform.LowerOpaqueBlock(),
]


def lower_for_analysis(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """Thread bindings as launch attributes, compact shared/local buffers, no sblocks."""
    with target:
        return tvm.ir.transform.Sequential(_LOWERING)(mod)


# ----------------------------------------------------------------------------- kernels


def _split_kernels(body: Any) -> list[Any]:
    """The statements that launch a kernel (a blockIdx/threadIdx attribute at the top)."""
    kernels: list[Any] = []

    def visit(stmt: Any) -> None:
        kind = type(stmt).__name__
        if kind == "AttrStmt" and stmt.attr_key in ("thread_extent", "virtual_thread"):
            kernels.append(stmt)
            return
        if kind == "AttrStmt" and stmt.attr_key.startswith("pragma_"):
            # pragma attributes wrap the launch: keep them with it
            inner = stmt.body
            if type(inner).__name__ == "AttrStmt" and inner.attr_key.startswith(
                ("thread_extent", "pragma_")
            ):
                kernels.append(stmt)
                return
        if kind == "SeqStmt":
            for child in stmt.seq:
                visit(child)
            return
        child_body = getattr(stmt, "body", None)
        if child_body is not None:
            visit(child_body)

    visit(body)
    return kernels


def _analyse_kernel(stmt: Any) -> KernelRecord:
    walker = KernelWalker()
    walker.visit(stmt)
    ext = walker.thread_extents
    grid = float(ext.get("blockIdx.x", 1) * ext.get("blockIdx.y", 1) * ext.get("blockIdx.z", 1))
    threads = float(
        ext.get("threadIdx.x", 1) * ext.get("threadIdx.y", 1) * ext.get("threadIdx.z", 1)
    )
    total_threads = grid * threads
    rec = KernelRecord(
        grid=grid,
        threads=threads,
        vthreads=float(walker.vthreads),
        smem_bytes=walker.smem_bytes,
        local_words=walker.local_words,
        flops=walker.flops * total_threads,
        fp_instrs=walker.fp_instrs,
        sfu_instrs=walker.sfu_instrs,
        int_instrs=walker.int_instrs,
        syncs=walker.syncs,
        ilp=walker.ilp,
        unroll=walker.unroll,
        fp16=1.0 if walker.fp16 else 0.0,
    )
    rng = np.random.default_rng(RNG_SEED)
    unique_by_buffer: dict[str, float] = {}
    warps_per_block = math.ceil(threads / 32)
    for acc in walker.accesses:
        elem_bytes = tvm.DataType(acc.buffer.dtype).bits / 8
        trip = 1.0
        for lp in acc.loops:
            if (lp.is_vthread and lp.var not in acc.vars_used) or lp.var in acc.hoisted:
                continue
            if not lp.is_thread and lp.kind != 2:
                trip *= lp.extent
        execs_per_thread = trip * acc.guard
        if acc.scope == "global":
            sector_bytes, useful = warp_sectors(acc, ext, elem_bytes)
            warp_execs = execs_per_thread * warps_per_block * grid
            rec.vector_bytes = max(rec.vector_bytes, acc.lanes * elem_bytes)
            if acc.is_store:
                rec.gst_bytes += useful * warp_execs
                rec.gst_sector_bytes += sector_bytes * warp_execs
            else:
                rec.gld_instrs += execs_per_thread
                rec.gld_bytes += useful * warp_execs
                rec.gld_sector_bytes += sector_bytes * warp_execs
            foot = block_footprint(acc, rng) * elem_bytes
            touched = useful * execs_per_thread * warps_per_block
            rec.block_footprint_bytes += min(foot, touched) * grid
            key = acc.buffer.name
            unique_by_buffer[key] = max(
                unique_by_buffer.get(key, 0.0), kernel_unique(acc, rng) * elem_bytes
            )
        elif acc.scope.startswith("shared"):
            degree = bank_conflict_degree(acc, ext, elem_bytes)
            rec.shared_instrs += execs_per_thread
            rec.shared_wavefronts += execs_per_thread * degree
    rec.unique_bytes = sum(unique_by_buffer.values())
    rec.vthreads = float(walker.vthreads)
    return rec


def analyse_lowered(mod: tvm.IRModule) -> list[KernelRecord]:
    """Kernel records of an already lowered module (see `lower_for_analysis`)."""
    func = mod["main"]
    kernels = _split_kernels(func.body)
    if not kernels:
        # no thread binding at all: one thread runs everything
        return [_analyse_kernel(func.body)]
    return [_analyse_kernel(k) for k in kernels]


def analyse(mod: tvm.IRModule, target: tvm.target.Target) -> list[KernelRecord]:
    """Kernel records of a scheduled (MetaSchedule-postprocessed) CUDA module."""
    return analyse_lowered(lower_for_analysis(mod, target))
