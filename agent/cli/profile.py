"""`simoe-agent profile`: the device's analytical specs and its probe fingerprint."""

from __future__ import annotations

import typer

from agent.cli.app import StateDir, app, node_state, progress_bar
from schemas import HardwareProfile
from schemas.cli import Json, Verbose, console, print_json, print_table


def _print_profile(profile: HardwareProfile) -> None:
    label = " (SIMULATED: modelled, not measured)" if profile.simulated else ""
    console.print(f"[bold]{profile.device}[/bold]: {profile.name}{label}")
    specs = profile.analytical.model_dump()
    print_table(
        "Analytical specs", ["spec", "value"], [(key, f"{value:g}") for key, value in specs.items()]
    )
    from agent.probes import PROBES_BY_NAME

    empirical = profile.empirical
    rows = [
        (name, PROBES_BY_NAME[name].category if name in PROBES_BY_NAME else "?", f"{us:.3f}")
        for name, us in sorted(empirical.probe_latency_us.items(), key=lambda kv: kv[1])
    ]
    print_table(
        f"Probe suite v{empirical.probe_suite_version}: median latency"
        + (" (simulated)" if profile.simulated else ""),
        ["probe", "stresses", "latency (us)"],
        rows,
    )
    print_table(
        "Measured rates" + (" (simulated)" if profile.simulated else ""),
        ["rate", "measured", "spec"],
        [
            (
                "bandwidth (GB/s)",
                f"{empirical.bandwidth_gbs:.1f}",
                f"{profile.analytical.mem_bandwidth_gbs:.1f}",
            ),
            (
                "FP32 FMA (GFLOP/s)",
                f"{empirical.fma_gflops:.1f}",
                f"{profile.analytical.fp32_gflops:.1f}",
            ),
        ],
    )
    console.print(f"profile id {profile.profile_id}, taken {profile.created_at:%Y-%m-%d %H:%M:%S}")


@app.command("profile")
def profile_command(
    device_name: str | None = typer.Option(
        None, "--device", help="cpu, cuda:N or sim:<gpu> (default: the node's configured device)"
    ),
    refresh: bool = typer.Option(False, "--refresh", help="profile again even if cached"),
    repeat: int = typer.Option(5, "--repeat", min=1, help="measurements per probe"),
    json_out: Json = False,
    verbose: Verbose = False,
    state_dir: StateDir = None,
) -> None:
    """Profile the device: spec sheet plus the latencies of the fixed probe suite (cached)."""
    from agent.devices import get_device
    from agent.node_state import load_or_profile

    node = node_state(state_dir)
    config = node.config()
    device = get_device(device_name or config.device)
    with progress_bar("probing {task.description}") as progress:
        bar = progress.add_task(device.name, total=None)

        def on_probe(name: str, done: int, total: int) -> None:
            progress.update(bar, completed=done, total=total, description=f"{device.name} {name}")

        profile = load_or_profile(
            device, node.dir, refresh=refresh, repeat=repeat, progress=on_probe
        )
    if json_out:
        print_json(profile.model_dump(mode="json"))
    else:
        _print_profile(profile)
