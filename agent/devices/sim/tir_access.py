"""A kernel's buffer accesses and the memory traffic their addresses imply.

The TIR walk (`kernel_walker`) records each access with its loop nest and its index
expression compiled into a small numpy evaluator. Evaluating those on real thread and
loop indices gives coalescing (32-byte sectors touched by one warp), shared-memory bank
conflicts and per-block and per-kernel footprints exactly on the addresses, not guessed
from the text. Where a nest has too many points, a fixed-seed random sample stands in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# A compiled index expression: loop/thread variable values (numpy arrays) -> addresses.
EvalFn = Callable[[dict[str, Any]], Any]

# Up to this many loop points an access is evaluated exactly, beyond it on a sample.
MAX_EXACT_POINTS = 1 << 13
# One fixed seed for every sample, so that a candidate's record never changes.
RNG_SEED = 20240611


@dataclass
class Loop:
    var: str
    extent: int
    kind: int
    is_thread: bool = False
    is_vthread: bool = False


@dataclass
class Access:
    """One buffer access in the kernel: where it sits and how its address is computed."""

    buffer: Any
    scope: str
    flat_index: EvalFn
    vars_used: set[str]
    loops: list[Loop]
    lanes: int
    guard: float
    is_store: bool
    dims: list[tuple[EvalFn, set[str]]] = field(default_factory=list)
    # loops of the unrolled innermost nest the address does not depend on: a load is
    # kept in a register across them (the compiler hoists it out of the unrolled body)
    hoisted: set[str] = field(default_factory=set)


# ----------------------------------------------------------------------------- expressions


def compile_expr(expr: Any) -> tuple[EvalFn, set[str]]:
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
        return compile_expr(expr.value)
    if kind == "Ramp":
        base, vb = compile_expr(expr.base)
        return base, vb
    if kind == "Broadcast":
        return compile_expr(expr.value)
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
        fa, va = compile_expr(expr.a)
        fb, vb = compile_expr(expr.b)
        return (lambda env: op(fa(env), fb(env))), va | vb
    if kind == "Not":
        fa, va = compile_expr(expr.a)
        return (lambda env: np.logical_not(fa(env))), va
    if kind == "Select":
        fc, vc = compile_expr(expr.condition)
        ft, vt = compile_expr(expr.true_value)
        ff, vf = compile_expr(expr.false_value)
        return (lambda env: np.where(fc(env), ft(env), ff(env))), vc | vt | vf
    if kind == "Call" and len(expr.args) == 1 and "likely" in str(expr.op):
        return compile_expr(expr.args[0])
    # Anything else (a data-dependent index, an opaque call) reads as 0: rare in these kernels.
    return (lambda env: 0), set()


def sample_env(
    loops: list[Loop], names: set[str], n_max: int, rng: np.random.Generator
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


def is_int(value: Any) -> bool:
    try:
        int(value)
    except (TypeError, ValueError):
        return False
    return True


# ----------------------------------------------------------------------------- per access


def _warp_env(access: Access, threads: dict[str, int]) -> dict[str, Any]:
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


def warp_sectors(access: Access, threads: dict[str, int], elem_bytes: float) -> tuple[float, float]:
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


def bank_conflict_degree(access: Access, threads: dict[str, int], elem_bytes: float) -> float:
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


def block_footprint(access: Access, rng: np.random.Generator) -> float:
    """Distinct elements one thread block touches (blockIdx fixed at 0)."""
    in_block = [lp for lp in access.loops if not lp.var.startswith("blockIdx")]
    names = access.vars_used - {lp.var for lp in access.loops if lp.var.startswith("blockIdx")}
    total = math.prod(lp.extent for lp in in_block if lp.var in names) if names else 1
    if total <= MAX_EXACT_POINTS:
        env, _ = sample_env(in_block, names, MAX_EXACT_POINTS, rng)
        addr = np.atleast_1d(np.asarray(access.flat_index(env)))
        return float(np.unique(addr).size)
    # too many points: the bounding box of each dimension, capped by the access count
    box = 1.0
    for fn, dim_names in access.dims:
        env, _ = sample_env(in_block, dim_names - {"blockIdx"}, 1 << 14, rng)
        vals = np.atleast_1d(np.asarray(fn(env)))
        box *= float(vals.max() - vals.min() + 1) if vals.size else 1.0
    return min(box, float(total))


def kernel_unique(access: Access, rng: np.random.Generator) -> float:
    """Distinct elements the whole kernel touches through this access (bounded by the buffer)."""
    size = float(math.prod(int(s) if is_int(s) else 1 for s in access.buffer.shape))
    names = access.vars_used
    total = math.prod(lp.extent for lp in access.loops if lp.var in names) if names else 1
    if total <= MAX_EXACT_POINTS:
        env, _ = sample_env(access.loops, names, MAX_EXACT_POINTS, rng)
        addr = np.atleast_1d(np.asarray(access.flat_index(env)))
        return min(float(np.unique(addr).size), size)
    box = 1.0
    for fn, dim_names in access.dims:
        env, _ = sample_env(access.loops, dim_names, 1 << 14, rng)
        vals = np.atleast_1d(np.asarray(fn(env)))
        box *= float(vals.max() - vals.min() + 1) if vals.size else 1.0
    return min(box, size, float(total))
