"""Lower a scheduled TIR module for a CUDA target into what a thin runner needs.

TVM's own runtime module needs TVM on the GPU node. A bundle carries less: the
CUDA source of the kernels (compiled here, see `agent.bundle.nvcc`) and, for each
kernel launch the host function would make, the kernel's name, its grid and block,
its dynamic shared memory and its arguments (which buffer, or which constant). The
runner then allocates the buffers and launches the kernels itself.

The launches are read off the host function that TVM's default pipeline produces,
from its printed TVMScript: `T.call_ffi_kernel("name", A_1.data, ..., 16, 128,
launch_params=[...])`, with each `.data` traced back to the packed argument it
comes from. Only what a static-shape single-function workload produces is
understood; anything else (workspaces, dynamic launch sizes) is `Unsupported`, and
the exporter leaves that candidate out and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_CALL = re.compile(r'T\.call_ffi_kernel\("([\w.]+)", (.*?), launch_params=\[(.*?)\]')
_HANDLE = re.compile(r"(\w+): T\.let\[T\.handle\] = .*?T\.tvm_struct_get\((\w+), (\d+), 15")
_DECL = re.compile(r"(\w+) = T\.decl_buffer\(.*?data=.*?T\.tvm_struct_get\((\w+), 0, 1,")
# `B = A.view(...)` or `B = T.decl_buffer(..., data=A.data)`: B shares A's memory
_VIEW = re.compile(r"(\w+) = (?:(\w+)\.view\(|T\.decl_buffer\(.*?data=(\w+)\.data\))")
_INT = re.compile(r"^(?:T\.int(32|64)\()?(-?\d+)\)?$")
_AXES = {"x": 0, "y": 1, "z": 2}


class Unsupported(Exception):
    """The module lowers to something the thin runner cannot launch."""


@dataclass
class Launch:
    kernel: str
    grid: list[int] = field(default_factory=lambda: [1, 1, 1])
    block: list[int] = field(default_factory=lambda: [1, 1, 1])
    dyn_smem: int = 0
    args: list[dict[str, int]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "grid": self.grid,
            "block": self.block,
            "dyn_smem": self.dyn_smem,
            "args": self.args,
        }


@dataclass
class LoweredProgram:
    """CUDA source plus launches; `buffers` are the function's parameters, in order."""

    source: str
    kernels: list[str]
    launches: list[Launch]
    buffers: list[dict[str, Any]]

    def renamed(self, prefix: str) -> LoweredProgram:
        """The same program with every kernel name prefixed (unique in a shared cubin)."""
        source = self.source
        mapping = {name: f"{prefix}_{name}" for name in self.kernels}
        for old, new in mapping.items():
            source = re.sub(rf"\b{re.escape(old)}\b", new, source)
        launches = [
            Launch(mapping[launch.kernel], launch.grid, launch.block, launch.dyn_smem, launch.args)
            for launch in self.launches
        ]
        return LoweredProgram(source, list(mapping.values()), launches, self.buffers)


def _split_args(text: str) -> list[str]:
    """Top-level comma split (an argument may hold parentheses)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def launches_from_host_script(
    script: str, kernel_params: dict[str, tuple[list[str], list[str]]], args_var: str = "args"
) -> list[Launch]:
    """The kernel launches of a lowered host function, from its TVMScript.

    Args:
        script: the host module's TVMScript.
        kernel_params: per kernel, (its parameters' dtypes, its launch param tags).
        args_var: the packed-arguments parameter of the host function.
    """
    handle_index = {
        m.group(1): int(m.group(3)) for m in _HANDLE.finditer(script) if m.group(2) == args_var
    }
    buffer_index = {
        m.group(1): handle_index[m.group(2)]
        for m in _DECL.finditer(script)
        if m.group(2) in handle_index
    }
    for _ in range(8):  # views of views
        for m in _VIEW.finditer(script):
            base = m.group(2) or m.group(3)
            if base in buffer_index:
                buffer_index.setdefault(m.group(1), buffer_index[base])
    if "AllocWorkspace" in script:
        raise Unsupported("the host allocates a workspace")
    launches = []
    for m in _CALL.finditer(script):
        name, raw_args = m.group(1), _split_args(m.group(2))
        if name not in kernel_params:
            raise Unsupported(f"host calls unknown kernel {name}")
        dtypes, tags = kernel_params[name]
        if len(raw_args) != len(dtypes) + len(tags):
            raise Unsupported(f"kernel {name}: {len(raw_args)} call arguments, expected "
                              f"{len(dtypes)} + {len(tags)} launch values")  # fmt: skip
        launch = Launch(name)
        for raw, dtype in zip(raw_args[: len(dtypes)], dtypes, strict=True):
            if raw.endswith(".data"):
                buffer = raw.removesuffix(".data")
                if buffer not in buffer_index:
                    raise Unsupported(f"kernel {name}: argument {raw} is not a parameter")
                launch.args.append({"buffer": buffer_index[buffer]})
            else:
                value = _INT.match(raw)
                if value is None:
                    raise Unsupported(f"kernel {name}: argument {raw!r} is not a constant")
                launch.args.append(
                    {"int": int(value.group(2)), "bits": 64 if "64" in dtype else 32}
                )
        for raw, tag in zip(raw_args[len(dtypes) :], tags, strict=True):
            value = _INT.match(raw)
            if value is None:
                raise Unsupported(f"kernel {name}: launch size {raw!r} is not a constant")
            n = int(value.group(2))
            if tag.startswith("blockIdx."):
                launch.grid[_AXES[tag[-1]]] = n
            elif tag.startswith("threadIdx."):
                launch.block[_AXES[tag[-1]]] = n
            elif tag.endswith("use_dyn_shared_memory"):
                launch.dyn_smem = n
            else:
                raise Unsupported(f"kernel {name}: launch tag {tag}")
        launches.append(launch)
    if not launches:
        raise Unsupported("no kernel launch found in the host function")
    return launches


def lower(mod: Any, target: Any) -> LoweredProgram:
    """CUDA source and launches of a scheduled module (`main`) for a cuda target.

    Runs under `with target:` so that anything TVM reads from the current target
    (the arch, most of all) is this target's, never a GPU of the building process.
    """
    import importlib

    import tvm
    from tvm.s_tir import meta_schedule as ms

    build = importlib.import_module("tvm.tirx.build")
    target = tvm.target.Target(target)
    host_target = target.host or tvm.target.Target("llvm")
    with target:
        bound = tvm.tirx.transform.BindTarget(target.with_host(host_target))(mod)
        pipeline, finalize_host, finalize_device = tvm.tirx.get_default_tir_pipeline(target)
        lowered = pipeline(bound)
        host_mod, device_mods = build.split_host_device_mods(lowered)
        if len(device_mods) != 1:
            raise Unsupported(f"{len(device_mods)} device modules (expected one cuda module)")
        (device_mod,) = (finalize_device()(m) for m in device_mods.values())
        source = str(build.codegen_build(device_mod, target).inspect_source("cuda"))
    kernel_params: dict[str, tuple[list[str], list[str]]] = {}
    for gv, func in device_mod.functions.items():
        symbol = str(func.attrs.get("global_symbol", gv.name_hint))
        tags = [str(t) for t in func.attrs.get("tirx.kernel_launch_params", [])]
        kernel_params[symbol] = ([str(p.ty) for p in func.params], tags)
    host_main = host_mod["main"]
    args_var = host_main.params[1].name if len(host_main.params) > 1 else "args"
    launches = launches_from_host_script(host_mod.script(), kernel_params, args_var)
    buffers = [
        {"shape": [int(d) for d in info.shape], "dtype": str(info.dtype)}
        for info in ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    ]
    for launch in launches:
        for arg in launch.args:
            if "buffer" in arg and arg["buffer"] >= len(buffers):
                raise Unsupported(f"kernel {launch.kernel}: argument #{arg['buffer']} out of range")
    return LoweredProgram(source, sorted({launch.kernel for launch in launches}), launches, buffers)
