"""`simoe-agent evaluate`: how well a SiMoE model ranks the measured candidates of devices.

It reads the node's store (or every store of a fleet dataset directory), scores
each device's measured candidates with the model on that device's hardware
vector, and reports TenSet-style metrics per device. `--zero-shot` leaves the
device's own expert out of the mixture, as for hardware the model has never seen.
Nothing is trained and nothing leaves the node.
"""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import BaseModel, ConfigDict

from agent.cli.app import StateDir, app, node_state, progress_bar
from schemas import BadInputError
from schemas.cli import Json, Verbose, print_json, print_table
from schemas.tables import Column


class DeviceEvaluation(BaseModel):
    """One device's metrics: the `--json` output is a list of these."""

    model_config = ConfigDict(extra="forbid")

    device: str
    simulated: bool
    tasks: int
    candidates: int
    experts_used: list[str]
    top1: float
    top5: float
    pairwise: float
    average_peak: float


def _stores(data: Path | None, store_path: Path) -> list[Path]:
    if data is None:
        if not store_path.exists():
            raise BadInputError(f"{store_path}: no store yet; tune something or give --data DIR")
        return [store_path]
    if data.is_file():
        return [data]
    paths = sorted(data.glob("*.sqlite"))
    if not paths:
        raise BadInputError(f"{data}: no *.sqlite stores in this directory")
    return paths


def _profile(store, device: str):  # noqa: ANN001, ANN202 - agent Store, HardwareProfile
    profile = store.latest_profile(device)
    if profile is None and device.startswith("sim:"):
        from agent.devices import get_device
        from agent.profiler import profile_device

        profile = profile_device(get_device(device))  # modelled, costs nothing
    if profile is None:
        raise BadInputError(
            f"no hardware profile of {device}; run `simoe-agent profile --device {device}`"
        )
    return profile


@app.command("evaluate")
def evaluate_command(
    model_path: Path | None = typer.Option(
        None, "--model", help="a saved SiMoE model (default: the node's federation/model.pt)"
    ),
    data: Path | None = typer.Option(
        None, "--data", help="a store file or a fleet dataset directory (default: the node's store)"
    ),
    device_filter: str | None = typer.Option(None, "--device", help="only this device"),
    zero_shot: bool = typer.Option(
        False, "--zero-shot", help="leave each device's own expert out of the mixture"
    ),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """Score the measured candidates of each device with a SiMoE model (top-k, pairwise)."""
    import torch

    from agent.store import Store
    from agent.store_datasets import load_device_dataset, store_devices
    from simoe_model.metrics import task_metrics
    from simoe_model.model import load_model
    from simoe_model.train import predict

    torch.set_num_threads(1)
    node = node_state(state_dir)
    config = node.config()
    model_path = model_path or node.model_path
    model = load_model(model_path)
    if not model.expert_names:
        raise BadInputError(f"{model_path}: the model has no experts yet; train it first")
    results: list[DeviceEvaluation] = []
    paths = _stores(data, node.store_path)
    with progress_bar(transient=False, disable=json_out) as progress:
        bar = progress.add_task("evaluating", total=len(paths))
        for path in paths:
            with Store(path) as store:
                for device in store_devices(store):
                    if device_filter and device != device_filter:
                        continue
                    profile = _profile(store, device)
                    dataset = load_device_dataset(store, device, profile)
                    if not dataset.tasks:
                        continue
                    exclude = [
                        n
                        for n in model.expert_names
                        if zero_shot and n in (device, device.removeprefix("sim:"), config.name)
                    ]
                    used = [n for n in model.expert_names if n not in exclude]
                    if not used:
                        continue
                    per_task = [
                        (
                            predict(model, t.features, dataset.hardware_vector, exclude=exclude),
                            t.latencies,
                        )
                        for t in dataset.tasks
                    ]
                    m = task_metrics(per_task)
                    results.append(
                        DeviceEvaluation(
                            device=device,
                            simulated=profile.simulated,
                            tasks=len(dataset.tasks),
                            candidates=dataset.num_candidates,
                            experts_used=used,
                            top1=m["top1"],
                            top5=m["top5"],
                            pairwise=m["pairwise"],
                            average_peak=m["aps"],
                        )
                    )
            progress.advance(bar)
    if device_filter and not results:
        raise BadInputError(f"no measured, featurized candidates of {device_filter}")
    if json_out:
        print_json([r.model_dump() for r in results])
        return
    print_table(
        f"SiMoE model {model_path.name}: ranking quality" + (" (zero-shot)" if zero_shot else ""),
        [
            "device",
            *(Column(h, "right") for h in ("top-1", "top-5", "pairwise", "avg peak", "tasks")),
            Column("candidates", "right", optional=True),
            Column("experts", "right", optional=True),
        ],
        [
            (
                r.device + (" (simulated)" if r.simulated else ""),
                f"{r.top1:.3f}",
                f"{r.top5:.3f}",
                f"{r.pairwise:.3f}",
                f"{r.average_peak:.3f}",
                r.tasks,
                r.candidates,
                len(r.experts_used),
            )
            for r in results
        ],
    )
