"""Walk one kernel's lowered TIR: its loops, allocations, accesses and arithmetic.

The walk sees the statements after `tir_analysis.lower_for_analysis`, where thread
bindings are launch attributes and shared/local buffers are compact. It counts what a
thread executes (FP, SFU and integer instructions, syncs, unroll, ILP) and records every
buffer access (`tir_access.Access`) for the traffic analysis.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tvm

from agent.devices.sim.tir_access import (
    RNG_SEED,
    Access,
    EvalFn,
    Loop,
    compile_expr,
    is_int,
    sample_env,
)


class KernelWalker:
    """Collects loops, allocations, accesses and arithmetic of one kernel."""

    def __init__(self) -> None:
        self.thread_extents: dict[str, int] = {}
        self.vthreads = 1
        self.loops: list[Loop] = []
        self.guards: list[tuple[EvalFn, set[str]]] = []
        self.accesses: list[Access] = []
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
                self.loops.append(Loop(iv.var.name, extent, 0, is_vthread=True))
                self.visit(stmt.body)
                self.loops.pop()
                return
            self.thread_extents[tag] = extent
            self.loops.append(Loop(iv.var.name, extent, 4, is_thread=True))
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
        self.loops.append(Loop(stmt.loop_var.name, extent, kind))
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
        cond = compile_expr(stmt.condition)
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
                store_vars |= compile_expr(idx)[1]
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
            env, _ = sample_env(self.loops, names, 4096, rng)
            try:
                val = np.asarray(fn(env), dtype=bool)
                frac *= float(val.mean()) if val.size else float(bool(val))
            except Exception:  # noqa: BLE001 - an opaque guard counts as always taken
                continue
        return max(frac, 1e-3)

    def _record_access(self, buffer: Any, indices: Any, *, is_store: bool, lanes: int) -> None:
        dims = [compile_expr(idx) for idx in indices]
        shape = [int(s) if is_int(s) else 1 for s in buffer.shape]
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
        rng = np.random.default_rng(RNG_SEED)
        self.accesses.append(
            Access(
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
