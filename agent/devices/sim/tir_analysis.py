"""Analyse a scheduled CUDA TIR module ONCE into a small numeric record per kernel.

The latency model never looks at TIR: it evaluates these records for every GPU at
once with numpy. The analysis lowers the scheduled module just far enough that
thread bindings and compact shared/local allocations are explicit (the first
passes of TVM's s_tir pipeline), then walks the statements in Python. Index
expressions are compiled into small numpy evaluators, so coalescing (32-byte
sectors touched by one warp), shared-memory bank conflicts and per-block
footprints are computed exactly on the addresses, not guessed from the text.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import tvm
from tvm import s_tir

# Kernel record fields, in the column order of `KernelRecord.as_row()`.
EvalFn = Callable[[dict[str, Any]], Any]

_MAX_EXACT_POINTS = 1 << 13
_RNG_SEED = 20240611


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


@dataclass
class _Loop:
    var: str
    extent: int
    kind: int
    is_thread: bool = False
    is_vthread: bool = False


@dataclass
class _Access:
    """One buffer access in the kernel: where it sits and how its address is computed."""

    buffer: Any
    scope: str
    flat_index: EvalFn
    vars_used: set[str]
    loops: list[_Loop]
    lanes: int
    guard: float
    is_store: bool
    dims: list[tuple[EvalFn, set[str]]] = field(default_factory=list)
    # loops of the unrolled innermost nest the address does not depend on: a load is
    # kept in a register across them (the compiler hoists it out of the unrolled body)
    hoisted: set[str] = field(default_factory=set)


# ----------------------------------------------------------------------------- expressions


def _compile(expr: Any) -> tuple[EvalFn, set[str]]:
    """A numpy evaluator of an integer/boolean TIR expression and the variables it reads."""
    kind = type(expr).__name__
    if kind == "IntImm":
        value = int(expr.value)
        return (lambda env: value), set()
    if kind == "FloatImm":
        fvalue = float(expr.value)
        return (lambda env: fvalue), set()
    if kind in ("Var", "SizeVar"):
        name = expr.name
        return (lambda env: env.get(name, 0)), {name}
    if kind == "Cast":
        return _compile(expr.value)
    if kind == "Ramp":
        base, vb = _compile(expr.base)
        return base, vb
    if kind == "Broadcast":
        return _compile(expr.value)
    binary: dict[str, Callable[[Any, Any], Any]] = {
        "Add": np.add,
        "Sub": np.subtract,
        "Mul": np.multiply,
        "FloorDiv": lambda a, b: np.floor_divide(a, np.where(np.asarray(b) == 0, 1, b)),
        "FloorMod": lambda a, b: np.mod(a, np.where(np.asarray(b) == 0, 1, b)),
        "Div": lambda a, b: np.floor_divide(a, np.where(np.asarray(b) == 0, 1, b)),
        "Mod": lambda a, b: np.mod(a, np.where(np.asarray(b) == 0, 1, b)),
        "Min": np.minimum,
        "Max": np.maximum,
        "LT": np.less,
        "LE": np.less_equal,
        "GT": np.greater,
        "GE": np.greater_equal,
        "EQ": np.equal,
        "NE": np.not_equal,
        "And": np.logical_and,
        "Or": np.logical_or,
    }
    if kind in binary:
        op = binary[kind]
        fa, va = _compile(expr.a)
        fb, vb = _compile(expr.b)
        return (lambda env: op(fa(env), fb(env))), va | vb
    if kind == "Not":
        fa, va = _compile(expr.a)
        return (lambda env: np.logical_not(fa(env))), va
    if kind == "Select":
        fc, vc = _compile(expr.condition)
        ft, vt = _compile(expr.true_value)
        ff, vf = _compile(expr.false_value)
        return (lambda env: np.where(fc(env), ft(env), ff(env))), vc | vt | vf
    if kind == "Call" and len(expr.args) == 1 and "likely" in str(expr.op):
        return _compile(expr.args[0])
    # Anything else (a data-dependent index, an opaque call) reads as 0: rare in these kernels.
    return (lambda env: 0), set()


def _sample_env(
    loops: list[_Loop], names: set[str], n_max: int, rng: np.random.Generator
) -> tuple[dict[str, Any], int]:
    """All points of the loops named in `names` (broadcast grid) or a random sample of them."""
    used = [lp for lp in loops if lp.var in names]
    total = math.prod(lp.extent for lp in used) if used else 1
    env: dict[str, Any] = {}
    if total <= n_max:
        grids = np.meshgrid(*[np.arange(lp.extent) for lp in used], indexing="ij") if used else []
        for lp, grid in zip(used, grids, strict=True):
            env[lp.var] = grid.ravel()
        return env, total
    for lp in used:
        env[lp.var] = rng.integers(0, lp.extent, size=n_max)
    return env, n_max


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


# ----------------------------------------------------------------------------- walking


class _KernelWalker:
    """Collects loops, allocations, accesses and arithmetic of one kernel."""

    def __init__(self) -> None:
        self.thread_extents: dict[str, int] = {}
        self.vthreads = 1
        self.loops: list[_Loop] = []
        self.guards: list[tuple[EvalFn, set[str]]] = []
        self.accesses: list[_Access] = []
        self.smem_bytes = 0.0
        self.local_words = 0.0
        self.fp_instrs = 0.0
        self.flops = 0.0
        self.sfu_instrs = 0.0
        self.int_instrs = 0.0
        self.syncs = 0.0
        self.unroll = 0.0
        self.fp16 = False
        self.ilp = 1.0
        self._inner_compute_trip = 0.0

    # -- statements
    def visit(self, stmt: Any) -> None:
        kind = type(stmt).__name__
        handler = getattr(self, f"_visit_{kind}", None)
        if handler is not None:
            handler(stmt)
            return
        body = getattr(stmt, "body", None)
        if body is not None:
            self.visit(body)

    def _visit_SeqStmt(self, stmt: Any) -> None:
        for child in stmt.seq:
            self.visit(child)

    def _visit_AttrStmt(self, stmt: Any) -> None:
        key = stmt.attr_key
        if key in ("thread_extent", "virtual_thread"):
            iv = stmt.node
            tag = iv.thread_tag
            extent = int(stmt.value)
            if tag.startswith("vthread") or key == "virtual_thread":
                self.vthreads *= extent
                self.loops.append(_Loop(iv.var.name, extent, 0, is_vthread=True))
                self.visit(stmt.body)
                self.loops.pop()
                return
            self.thread_extents[tag] = extent
            self.loops.append(_Loop(iv.var.name, extent, 4, is_thread=True))
            self.visit(stmt.body)
            self.loops.pop()
            return
        if key == "pragma_auto_unroll_max_step":
            self.unroll = max(self.unroll, float(int(stmt.value)))
        self.visit(stmt.body)

    def _visit_For(self, stmt: Any) -> None:
        try:
            extent = int(stmt.extent)
        except (TypeError, ValueError):
            extent = 16
        extent = max(extent, 1)
        kind = int(stmt.kind)
        self.loops.append(_Loop(stmt.loop_var.name, extent, kind))
        before_shared = self._shared_counts()
        self.visit(stmt.body)
        self.loops.pop()
        after_shared = self._shared_counts()
        # a loop that fills shared memory and then reads it needs two barriers per iteration
        if after_shared[0] > before_shared[0] and after_shared[1] > before_shared[1]:
            iterations = self._trip(exclude_threads=True, used=set()) * extent
            self.syncs = max(self.syncs, 2.0 * iterations)

    def _shared_counts(self) -> tuple[int, int]:
        stores = sum(1 for a in self.accesses if a.scope.startswith("shared") and a.is_store)
        loads = sum(1 for a in self.accesses if a.scope.startswith("shared") and not a.is_store)
        return stores, loads

    def _visit_IfThenElse(self, stmt: Any) -> None:
        cond = _compile(stmt.condition)
        self.guards.append(cond)
        self.visit(stmt.then_case)
        self.guards.pop()
        if stmt.else_case is not None:
            self.visit(stmt.else_case)

    def _visit_AllocBuffer(self, stmt: Any) -> None:
        buf = stmt.buffer
        elems = math.prod(int(s) for s in buf.shape) if len(buf.shape) else 1
        nbytes = elems * tvm.DataType(buf.dtype).bits / 8
        scope = buf.scope()
        vt = self.vthreads
        if scope.startswith("shared"):
            self.smem_bytes += nbytes  # shared buffers are not replicated per virtual thread
        elif scope == "local":
            self.local_words += math.ceil(nbytes / 4) * vt
        body = getattr(stmt, "body", None)
        if body is not None:
            self.visit(body)

    _visit_DeclBuffer = _visit_AllocBuffer

    def _visit_BufferStore(self, stmt: Any) -> None:
        lanes = self._vector_lanes()
        n_before = len(self.accesses)
        self._record_access(stmt.buffer, stmt.indices, is_store=True, lanes=lanes)
        fp, flops, sfu = self._arith(stmt.value)
        stmt_vars: set[str] = set()
        for acc in self.accesses[n_before:]:
            stmt_vars |= acc.vars_used
        trip = self._trip(exclude_threads=True, used=stmt_vars)
        if "float16" in str(stmt.buffer.dtype):
            self.fp16 = True
        self.fp_instrs += fp * trip * lanes
        self.flops += flops * trip * lanes
        self.sfu_instrs += sfu * trip * lanes
        # loop overhead: iterations of the innermost loop the unroller does not flatten
        unrolled = 1.0
        for lp in reversed(self.loops):
            if lp.is_thread or lp.is_vthread:
                break
            if lp.kind == 2 or lp.kind == 3 or unrolled * lp.extent <= self.unroll:
                unrolled *= lp.extent
                continue
            break
        self.int_instrs += 2.0 * trip / max(unrolled, 1.0)
        # independent accumulators: spatial loops inside the innermost reduction loop
        if fp > 0 and stmt.buffer.scope() == "local" and trip > self._inner_compute_trip:
            self._inner_compute_trip = trip
            store_vars: set[str] = set()
            for idx in stmt.indices:
                store_vars |= _compile(idx)[1]
            # without unrolling only the spatial loops inside the innermost reduction count;
            # in an unrolled nest the compiler interleaves every accumulator of the nest
            ilp = 1.0
            nest = 1.0
            for lp in reversed(self.loops):
                if lp.is_thread or lp.is_vthread:
                    break
                nest *= lp.extent
                in_unrolled = lp.kind == 3 or nest <= self.unroll
                if lp.var in store_vars:
                    ilp *= lp.extent
                elif not in_unrolled:
                    break
            # accumulators of virtual threads are independent too
            ilp *= math.prod(
                lp.extent for lp in self.loops if lp.is_vthread and lp.var in store_vars
            )
            self.ilp = max(1.0, ilp)

    def _visit_Evaluate(self, stmt: Any) -> None:
        return

    # -- expressions
    def _arith(self, expr: Any) -> tuple[float, float, float]:
        """(FP instructions, FLOPs, SFU calls) of an expression; loads are recorded."""
        kind = type(expr).__name__
        if kind in ("TensorLoad", "BufferLoad"):
            buffer = getattr(expr, "buffer", None) or expr.source
            self._record_access(buffer, expr.indices, is_store=False, lanes=self._vector_lanes())
            return 0.0, 0.0, 0.0
        if kind in ("Add", "Sub", "Mul", "Div", "Min", "Max"):
            fa = self._arith(expr.a)
            fb = self._arith(expr.b)
            is_float = "float" in str(getattr(expr, "ty", getattr(expr, "dtype", "")))
            fused = kind in ("Add", "Sub") and (
                type(expr.a).__name__ == "Mul" or type(expr.b).__name__ == "Mul"
            )
            own = 0.0 if (fused or not is_float) else 1.0
            flop = 1.0 if is_float else 0.0
            return fa[0] + fb[0] + own, fa[1] + fb[1] + flop, fa[2] + fb[2]
        if kind == "Call":
            total = [0.0, 0.0, 0.0]
            for arg in expr.args:
                part = self._arith(arg)
                total = [t + p for t, p in zip(total, part, strict=True)]
            name = str(expr.op)
            if any(f in name for f in ("exp", "log", "sqrt", "tanh", "sigmoid", "erf", "pow")):
                total[2] += 1.0
                total[1] += 1.0
            return total[0], total[1], total[2]
        if kind == "Select":
            parts = [self._arith(e) for e in (expr.true_value, expr.false_value)]
            return parts[0][0] + parts[1][0] + 1.0, parts[0][1] + parts[1][1], 0.0
        if kind in ("Cast", "Broadcast"):
            return self._arith(expr.value)
        return 0.0, 0.0, 0.0

    # -- helpers
    def _trip(self, *, exclude_threads: bool, used: set[str] | None = None) -> float:
        """Iterations per thread; a virtual thread counts only where its variable is used."""
        trip = 1.0
        for lp in self.loops:
            if exclude_threads and lp.is_thread:
                continue
            if lp.is_vthread and used is not None and lp.var not in used:
                continue
            if lp.kind == 2:  # vectorized lanes are counted as lanes
                continue
            trip *= lp.extent
        return trip

    def _vector_lanes(self) -> int:
        if self.loops and self.loops[-1].kind == 2:
            return self.loops[-1].extent
        return 1

    def _guard_fraction(self, rng: np.random.Generator) -> float:
        frac = 1.0
        for fn, names in self.guards:
            env, _ = _sample_env(self.loops, names, 4096, rng)
            try:
                val = np.asarray(fn(env), dtype=bool)
                frac *= float(val.mean()) if val.size else float(bool(val))
            except Exception:  # noqa: BLE001 - an opaque guard counts as always taken
                continue
        return max(frac, 1e-3)

    def _record_access(self, buffer: Any, indices: Any, *, is_store: bool, lanes: int) -> None:
        dims = [_compile(idx) for idx in indices]
        shape = [int(s) if _is_int(s) else 1 for s in buffer.shape]
        strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]

        def flat(env: dict[str, Any], _dims: list[tuple[EvalFn, set[str]]] = dims) -> Any:
            total: Any = 0
            for (fn, _), stride in zip(_dims, strides, strict=True):
                total = total + np.asarray(fn(env)) * stride
            return total

        used: set[str] = set()
        for _, names in dims:
            used |= names
        hoisted: set[str] = set()
        if not is_store:
            nest = 1.0
            for lp in reversed(self.loops):
                if lp.is_thread or lp.is_vthread:
                    break
                nest *= lp.extent
                if not (lp.kind in (2, 3) or nest <= self.unroll):
                    break
                if lp.var not in used:
                    hoisted.add(lp.var)
        rng = np.random.default_rng(_RNG_SEED)
        self.accesses.append(
            _Access(
                buffer=buffer,
                scope=buffer.scope(),
                flat_index=flat,
                vars_used=used,
                loops=list(self.loops),
                lanes=lanes,
                guard=self._guard_fraction(rng) if self.guards else 1.0,
                is_store=is_store,
                dims=dims,
                hoisted=hoisted,
            )
        )


def _is_int(value: Any) -> bool:
    try:
        int(value)
    except (TypeError, ValueError):
        return False
    return True


# ----------------------------------------------------------------------------- per access


def _warp_env(access: _Access, threads: dict[str, int]) -> dict[str, Any]:
    """The first warp of block 0: 32 linear thread ids split over threadIdx.x/y/z."""
    bx = threads.get("threadIdx.x", 1)
    by = threads.get("threadIdx.y", 1)
    tid = np.arange(min(32, bx * by * threads.get("threadIdx.z", 1)))
    env: dict[str, Any] = {}
    names = {lp.var: lp for lp in access.loops if lp.is_thread}
    for var, lp in names.items():
        del lp
        if var.startswith("threadIdx_x") or var == "threadIdx.x":
            env[var] = tid % bx
        elif var.startswith("threadIdx_y"):
            env[var] = (tid // bx) % by
        elif var.startswith("threadIdx_z"):
            env[var] = tid // (bx * by)
    if access.lanes > 1 and access.loops and access.loops[-1].kind == 2:
        lane_var = access.loops[-1].var
        for key in list(env):
            env[key] = np.repeat(env[key], access.lanes)
        env[lane_var] = np.tile(np.arange(access.lanes), len(tid))
    return env


def _warp_sectors(
    access: _Access, threads: dict[str, int], elem_bytes: float
) -> tuple[float, float]:
    """(sector bytes touched, useful bytes) by one warp executing the access once."""
    env = _warp_env(access, threads)
    addr = np.atleast_1d(np.asarray(access.flat_index(env), dtype=np.int64))
    if addr.size == 0:
        return 32.0, elem_bytes
    byte_addr = addr * int(elem_bytes)
    sectors = np.unique(byte_addr // 32).size
    useful = np.unique(byte_addr).size * elem_bytes
    # a warp's request is at least one sector; duplicates (broadcast) cost nothing extra
    return float(max(sectors, 1) * 32), float(useful)


def _bank_conflict_degree(access: _Access, threads: dict[str, int], elem_bytes: float) -> float:
    """Shared-memory wavefronts per warp request (1 = conflict free), 4-byte banks."""
    env = _warp_env(access, threads)
    addr = np.atleast_1d(np.asarray(access.flat_index(env), dtype=np.int64))
    if addr.size == 0:
        return 1.0
    words = np.unique(addr * int(elem_bytes) // 4)
    banks = words % 32
    _, counts = np.unique(banks, return_counts=True)
    per_request = float(counts.max()) if counts.size else 1.0
    lanes = max(access.lanes * elem_bytes / 4.0, 1.0)
    return max(1.0, per_request / lanes)


def _block_footprint(access: _Access, rng: np.random.Generator) -> float:
    """Distinct elements one thread block touches (blockIdx fixed at 0)."""
    in_block = [lp for lp in access.loops if not lp.var.startswith("blockIdx")]
    names = access.vars_used - {lp.var for lp in access.loops if lp.var.startswith("blockIdx")}
    total = math.prod(lp.extent for lp in in_block if lp.var in names) if names else 1
    if total <= _MAX_EXACT_POINTS:
        env, _ = _sample_env(in_block, names, _MAX_EXACT_POINTS, rng)
        addr = np.atleast_1d(np.asarray(access.flat_index(env)))
        return float(np.unique(addr).size)
    # too many points: the bounding box of each dimension, capped by the access count
    box = 1.0
    for fn, dim_names in access.dims:
        env, _ = _sample_env(in_block, dim_names - {"blockIdx"}, 1 << 14, rng)
        vals = np.atleast_1d(np.asarray(fn(env)))
        box *= float(vals.max() - vals.min() + 1) if vals.size else 1.0
    return min(box, float(total))


def _kernel_unique(access: _Access, rng: np.random.Generator) -> float:
    """Distinct elements the whole kernel touches through this access (bounded by the buffer)."""
    size = float(math.prod(int(s) if _is_int(s) else 1 for s in access.buffer.shape))
    names = access.vars_used
    total = math.prod(lp.extent for lp in access.loops if lp.var in names) if names else 1
    if total <= _MAX_EXACT_POINTS:
        env, _ = _sample_env(access.loops, names, _MAX_EXACT_POINTS, rng)
        addr = np.atleast_1d(np.asarray(access.flat_index(env)))
        return min(float(np.unique(addr).size), size)
    box = 1.0
    for fn, dim_names in access.dims:
        env, _ = _sample_env(access.loops, dim_names, 1 << 14, rng)
        vals = np.atleast_1d(np.asarray(fn(env)))
        box *= float(vals.max() - vals.min() + 1) if vals.size else 1.0
    return min(box, size, float(total))


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
    walker = _KernelWalker()
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
    rng = np.random.default_rng(_RNG_SEED)
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
            sector_bytes, useful = _warp_sectors(acc, ext, elem_bytes)
            warp_execs = execs_per_thread * warps_per_block * grid
            rec.vector_bytes = max(rec.vector_bytes, acc.lanes * elem_bytes)
            if acc.is_store:
                rec.gst_bytes += useful * warp_execs
                rec.gst_sector_bytes += sector_bytes * warp_execs
            else:
                rec.gld_instrs += execs_per_thread
                rec.gld_bytes += useful * warp_execs
                rec.gld_sector_bytes += sector_bytes * warp_execs
            foot = _block_footprint(acc, rng) * elem_bytes
            touched = useful * execs_per_thread * warps_per_block
            rec.block_footprint_bytes += min(foot, touched) * grid
            key = acc.buffer.name
            unique_by_buffer[key] = max(
                unique_by_buffer.get(key, 0.0), _kernel_unique(acc, rng) * elem_bytes
            )
        elif acc.scope.startswith("shared"):
            degree = _bank_conflict_degree(acc, ext, elem_bytes)
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
