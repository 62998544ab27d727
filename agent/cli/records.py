"""`simoe-agent records`: list, best, export and import the node's tuning records."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from agent.cli.app import StateDir, command_group, node_state
from agent.ms_json import export_ms_json, import_ms_json
from agent.store import Store
from agent.store_rows import RecordSummary
from schemas import BadInputError
from schemas.cli import Json, Verbose, err_console, print_json, print_table
from schemas.errors import output_folder
from schemas.tables import Column, short_time

records_app = command_group(
    "records",
    help="The node's tuning records (they never leave the node).",
    invoke_without_command=True,
)

_DEVICE_PATTERN = re.compile(r"^(cpu|cuda:\d+|sim:\S+)$")
# Columns a narrow console may go without (a sim: device already says simulated).
LATENCY = Column("latency us", "right")
SIMULATED = Column("simulated", optional=True)
WHEN = Column("when", optional=True)
CANDIDATE = Column("candidate", optional=True)


def _store_path(state_dir: Path | None) -> Path:
    return node_state(state_dir).store_path


def _read(state_dir: Path | None) -> Store | None:
    """The store for reading, or None when the node has none yet (nothing is created)."""
    path = _store_path(state_dir)
    return Store(path) if path.exists() else None


def _latency_us(summary: RecordSummary) -> float | None:
    return None if summary.latency_s is None else summary.latency_s * 1e6


def _as_json(summary: RecordSummary, *, best: bool = False) -> dict[str, object]:
    data = summary.model_dump(mode="json", exclude=None if best else {"n_records"})
    data["latency_us"] = _latency_us(summary)
    return data


def _when(summary: RecordSummary) -> str:
    return short_time(summary.created_at)


def _latency_cell(summary: RecordSummary) -> str:
    latency = _latency_us(summary)
    return "failed" if latency is None else f"{latency:.2f}"


@records_app.callback(invoke_without_command=True)
def records_list(
    ctx: typer.Context,
    workload: str | None = typer.Option(
        None, "--workload", help="only this workload (its key or its task name)"
    ),
    device: str | None = typer.Option(None, "--device", help="only this device"),
    limit: int = typer.Option(50, "--limit", min=1, help="at most this many, newest first"),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """List the records, newest first: task, device, latency, simulated or measured, when."""
    if ctx.invoked_subcommand is not None:
        return
    store = _read(state_dir)
    summaries = []
    if store is not None:
        with store:
            summaries = store.summaries(workload=workload, device=device, limit=limit)
    if json_out:
        print_json([_as_json(s) for s in summaries])
        return
    print_table(
        f"records ({len(summaries)} shown, newest first)",
        ["task", "device", LATENCY, SIMULATED, WHEN, CANDIDATE],
        [
            (
                s.task_name,
                s.device,
                _latency_cell(s),
                "simulated" if s.simulated else "measured",
                _when(s),
                s.candidate_id[:10],
            )
            for s in summaries
        ],
    )


@records_app.command("best")
def records_best(
    device: str | None = typer.Option(None, "--device", help="only this device"),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """The fastest successful record of each workload on each device."""
    store = _read(state_dir)
    best = []
    if store is not None:
        with store:
            best = store.best_summaries(device=device)
    if json_out:
        print_json([_as_json(s, best=True) for s in best])
        return
    print_table(
        "best record per workload and device",
        [
            "task",
            "device",
            Column("best us", "right"),
            Column("ok", "right"),
            SIMULATED,
            CANDIDATE,
            WHEN,
        ],  # fmt: skip
        [
            (
                s.task_name,
                s.device,
                _latency_cell(s),
                s.n_records,
                "simulated" if s.simulated else "measured",
                s.candidate_id[:10],
                _when(s),
            )
            for s in best
        ],
    )


@records_app.command("export")
def records_export(
    directory: Path = typer.Argument(..., help="where to write the MetaSchedule JSON database"),
    device: str | None = typer.Option(None, "--device", help="only this device's records"),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """Write the records as a MetaSchedule JSONDatabase (database_workload.json + records)."""
    path = _store_path(state_dir)
    if not path.exists():
        raise BadInputError(f"{path}: no store yet (nothing tuned on this node)")
    output_folder(directory, "the export folder")
    with Store(path) as store, err_console.status("exporting records", spinner="dots"):
        count = export_ms_json(store, directory, device=device)
    result = {"directory": str(directory), "records": count, "device": device}
    if json_out:
        print_json(result)
    else:
        print_table("exported", ["directory", "device", "records"], [(directory, device, count)])


@records_app.command("import")
def records_import(
    directory: Path = typer.Argument(
        ..., help="a MetaSchedule JSON database directory, or a Kernel Tuner cache file"
    ),
    device: str | None = typer.Option(
        None,
        "--device",
        help="the device the records were measured on (a MetaSchedule database); for a "
        "Kernel Tuner cache file, the GPU where the file names none",
    ),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """Read a MetaSchedule JSONDatabase into the store; records of `sim:` devices are simulated.

    A file is read as a Kernel Tuner cache file: its configurations go to the store's
    kernel records, measured on the GPU the file names (`simoe-agent kernels`)."""
    if directory.is_file():
        from agent.cli.kernels import import_kernel_cache, print_import

        print_import(import_kernel_cache(state_dir, directory, device), json_out)
        return
    if device is None:
        raise BadInputError("--device is required for a MetaSchedule database")
    if not _DEVICE_PATTERN.match(device):
        raise BadInputError(f"device {device!r}: use cpu, cuda:N or sim:<gpu>")
    simulated = device.startswith("sim:")
    if simulated:  # a GPU of the catalog (or a spec file), under the name tuning gives it
        from agent.devices.sim.catalog import resolve

        try:
            resolve(device.removeprefix("sim:"))
        except BadInputError as exc:
            raise BadInputError(f"--device {device}: {exc}") from None
    with (
        Store(_store_path(state_dir)) as store,
        err_console.status("importing records", spinner="dots"),
    ):
        added = import_ms_json(store, directory, device=device, simulated=simulated)
        total = store.count_records(device=device)
    result = {
        "directory": str(directory),
        "device": device,
        "simulated": simulated,
        "added": added,
        "records_on_device": total,
    }
    if json_out:
        print_json(result)
    else:
        print_table(
            "imported",
            ["directory", "device", "simulated", "new records", "records on device"],
            [(directory, device, simulated, added, total)],
        )
