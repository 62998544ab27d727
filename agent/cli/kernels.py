"""`simoe-agent kernels`: Kernel Tuner measurements on this node, and SiMoE models of them.

Kernel Tuner cache files (real GPU measurements of a tunable kernel) go into the node's
store (`kernels import`, or `records import FILE`), a SiMoE kernel model is trained from
the store's GPUs (`kernels train`), and a Kernel Tuner user tunes a new GPU with it
(`agent.kernels.strategy.SiMoEStrategy`; docs/kernel_tuner.md).
"""

from __future__ import annotations

from pathlib import Path

import typer

from agent.cli.app import StateDir, command_group, node_state
from schemas import BadInputError
from schemas.cli import Json, Verbose, err_console, print_json, print_table

kernels_app = command_group(
    "kernels",
    help="Kernel Tuner measurements (real GPUs) and the SiMoE kernel models trained on them.",
    invoke_without_command=True,
)


def import_kernel_cache(
    state_dir: Path | None,
    file: Path,
    gpu: str | None,
    block_size_names: str | None = None,
    grid_div: list[str] | None = None,
    search_space: Path | None = None,
) -> dict[str, object]:
    """Read a Kernel Tuner cache file into the node's store; what was stored.

    The kernel's layout (which parameters set the thread block, what one block covers)
    comes from a T1 search-space description, or from the names Kernel Tuner's own
    `block_size_names` / `grid_div_x` took; without either, the defaults."""
    from agent.kernels.cache_file import read_cache_file, read_t1_layout
    from agent.kernels.gpus import find_gpu
    from agent.kernels.records import import_cache
    from agent.store import Store

    block, grid = None, None
    if search_space is not None:
        block, grid = read_t1_layout(search_space)
    if block_size_names:
        block = [n.strip() for n in block_size_names.split(",") if n.strip()]
    for item in grid_div or []:
        axis, _, names = item.partition("=")
        if axis not in ("x", "y", "z") or not names:
            raise BadInputError(f"--grid-div {item!r}: use AXIS=NAME[,NAME...], AXIS x, y or z")
        grid = {**(grid or {}), axis: [n.strip() for n in names.split(",") if n.strip()]}
    with err_console.status("reading the cache file", spinner="dots"):
        cache = read_cache_file(file, device_name=gpu, block_size_names=block, grid_div=grid)
    known = find_gpu(cache.device_name)
    with Store(node_state(state_dir).store_path) as store:
        result = import_cache(store, cache, known.key)
    return {
        "file": str(file),
        "kernel": result.kernel_name,
        "space_id": result.space_id,
        "gpu": result.gpu,
        "device_name": cache.device_name,
        "configurations": result.configurations,
        "failed": result.failed,
        "added": result.added,
        "measured": True,
    }


@kernels_app.callback(invoke_without_command=True)
def kernels_list(
    ctx: typer.Context,
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """Per kernel and GPU: configurations in the store, failed ones, the best time."""
    if ctx.invoked_subcommand is not None:
        return
    from agent.kernels.records import kernel_summary
    from agent.store import Store

    path = node_state(state_dir).store_path
    rows = []
    if path.exists():
        with Store(path) as store:
            rows = kernel_summary(store)
    if json_out:
        print_json(rows)
        return
    print_table(
        "kernel records (measured on real GPUs)",
        ["kernel", "space", "gpu", "configurations", "failed", "best ms"],
        [
            (
                r["kernel"],
                r["space_id"],
                r["gpu"],
                r["configurations"],
                r["failed"],
                f"{r['best_ms']:.4g}",
            )
            for r in rows
        ],  # fmt: skip
    )


@kernels_app.command("import")
def kernels_import(
    file: Path = typer.Argument(..., help="a Kernel Tuner cache file (.json or .json.gz)"),
    gpu: str | None = typer.Option(
        None, "--gpu", help="the GPU, where the file names none (e.g. MI250X)"
    ),
    block_size_names: str | None = typer.Option(
        None,
        "--block-size-names",
        help="the thread block's parameters, as Kernel Tuner's block_size_names (e.g. MDIMC,NDIMC)",
    ),
    grid_div: list[str] | None = typer.Option(
        None,
        "--grid-div",
        help="what one block covers per axis, as grid_div_x/y/z: x=MWG (repeat per axis)",
    ),
    search_space: Path | None = typer.Option(
        None, "--search-space", help="a T1 search-space description (its LocalSize, GridDiv)"
    ),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """Store a Kernel Tuner cache file's measurements (labelled measured, by GPU)."""
    result = import_kernel_cache(state_dir, file, gpu, block_size_names, grid_div, search_space)
    print_import(result, json_out)


def print_import(result: dict[str, object], json_out: bool) -> None:
    if json_out:
        print_json(result)
    else:
        shown = ("kernel", "gpu", "configurations", "failed", "added")
        print_table(f"imported {result['file']}", list(shown), [[result[k] for k in shown]])


@kernels_app.command("train")
def kernels_train(
    kernel: str = typer.Option(
        ..., "--kernel", help="the kernel to rank: its kernel name, or its space id (`kernels`)"
    ),
    probe_kernels: list[str] = typer.Option(
        ...,
        "--probe-kernel",
        help="a kernel (name or space id) whose fixed configurations are the probes",
    ),
    out: Path = typer.Option(..., "--out", help="where to write the kernel model"),
    probes: int = typer.Option(8, "--probes", min=1, max=12, help="probes per probe kernel"),
    steps: int = typer.Option(400, "--steps", min=1, max=100_000, help="expert training steps"),
    seed: int = typer.Option(0, "--seed", min=0),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """Train a SiMoE kernel model: one expert per GPU with records of the kernel."""
    import torch

    from agent.kernels.training import train_from_store
    from agent.store import Store
    from simoe_model.kernel_model import KernelTraining

    if kernel in probe_kernels:
        raise BadInputError("a probe kernel must be another kernel than the one ranked")
    torch.set_num_threads(1)  # small models: more threads only contend
    path = node_state(state_dir).store_path
    if not path.exists():
        raise BadInputError(f"{path}: no store yet (import Kernel Tuner cache files first)")
    with Store(path) as store, err_console.status("training the kernel model", spinner="dots"):
        meta = train_from_store(
            store, kernel, probe_kernels, out, probes_per_kernel=probes,
            training=KernelTraining(expert_steps=steps), seed=seed,
        )  # fmt: skip
    result = {
        "model": str(out),
        "kernel": kernel,
        "experts": meta["gpus"],
        "probes": meta["probes"],
    }
    if json_out:
        print_json(result)
    else:
        print_table(
            "kernel model", ["model", "kernel", "experts"],
            [(out, kernel, ", ".join(meta["gpus"]))],
        )  # fmt: skip
