"""`simoe-agent sharing [on|off]`: opt-in schedule sharing, shown or switched (agent.json)."""

from __future__ import annotations

import typer

from agent.cli.app import StateDir, app, node_state
from schemas import BadInputError
from schemas.cli import Json, print_json, print_table
from schemas.sharing import MAX_TOP_K


@app.command("sharing")
def sharing_command(
    switch: str | None = typer.Argument(None, help="on or off (none: show the setting)"),
    top_k: int | None = typer.Option(
        None, "--top-k", help=f"schedules shared per workload (1-{MAX_TOP_K})"
    ),
    state_dir: StateDir = None,
    as_json: Json = False,
) -> None:
    """Show or switch schedule sharing: what this node shares and what it received."""
    from agent.sharing import offer_path, received_schedules, schedule_share, wanted

    node = node_state(state_dir)
    config = node.config()
    if switch is not None and switch not in {"on", "off"}:
        raise BadInputError(f"sharing: say on or off, not {switch!r}")
    if top_k is not None and not 1 <= top_k <= MAX_TOP_K:
        raise BadInputError(f"--top-k must be 1 to {MAX_TOP_K}, got {top_k}")
    update: dict[str, object] = {}
    if switch is not None:
        update["share_schedules"] = switch == "on"
    if top_k is not None:
        update["share_top_k"] = top_k
    if update:
        config = config.model_copy(update=update)
        node.save_config(config)
    share = schedule_share(node)
    received = received_schedules(node)
    info = {
        "share_schedules": config.share_schedules,
        "share_top_k": config.share_top_k,
        "workloads_shared": len(share.workload_keys()) if share else 0,
        "schedules_shared": len(share.schedules) if share else 0,
        "workloads_asked": len(wanted(node)) if share else 0,
        "workloads_received": len(received),
        "schedules_received": sum(len(v) for v in received.values()),
        "received_file": str(offer_path(node)) if received else None,
    }
    if as_json:
        print_json(info)
        return
    state = "on" if config.share_schedules else "off (nothing is shared or asked)"
    print_table(
        f"schedule sharing {state}",
        ["", "value"],
        [(k.replace("_", " "), "-" if v is None else v) for k, v in info.items()],
    )
