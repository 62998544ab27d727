"""CPU of an idle one-node federation: a real server and one enrolled node daemon on loopback.

    python -m bench.reliability.idle_cpu [--window 180] [--out DIR]

Starts `simoe-server start` (its defaults, --round-interval 10) and one node
(`simoe-agent enroll --device sim:t4`, then `simoe-agent run`, nothing queued), waits
until the node has replied in a round and the server has gone idle, then measures for
`--window` seconds the CPU time (user + system, the processes' own and their reaped
children's) of both process trees, and the rounds that started. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import psutil


def tree_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of `pid` and each process below it (with the children each has reaped),
    by a label: the program's name and pid."""
    found: dict[str, float] = {}
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return found
    for proc in procs:
        try:
            t = proc.cpu_times()
            words = [w for w in proc.cmdline()[:3] if "/" in w or w.startswith("-m")]
            label = f"{Path(words[-1]).name if words else proc.name()}:{proc.pid}"
            found[label] = t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return found


def main(argv: list[str] | None = None) -> int:
    from bench import prepare

    prepare()
    from server.processes import Background, cli, free_port, wait_until
    from server.registry import Registry

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=180.0, help="seconds measured")
    parser.add_argument("--out", type=Path, default=None, help="work dir (default: a temp dir)")
    args = parser.parse_args(argv)
    work = args.out or Path(tempfile.mkdtemp(prefix="simoe-idle-"))
    server_dir, node_dir = work / "server", work / "node"
    port, node_port = free_port(), free_port()
    server = Background(
        "server", "simoe-server",
        ["start", "--port", str(port), "--state-dir", str(server_dir)], work / "server.log",
    )  # fmt: skip
    daemon = None
    try:
        ca = server_dir / "certs" / "ca.pem"
        wait_until("the server", lambda: ca.exists() and (server_dir / "registry.sqlite").exists(),
                   300)  # fmt: skip
        cli("simoe-agent", ["enroll", "--server", f"127.0.0.1:{port}", "--ca", str(ca),
                            "--name", "n1", "--device", "sim:t4", "--state-dir", str(node_dir),
                            "--port", str(node_port), "--timeout", "300"])  # fmt: skip
        daemon = Background("node", "simoe-agent", ["run", "--state-dir", str(node_dir)],
                            work / "node.log")  # fmt: skip

        def rounds() -> list:
            with Registry(server_dir / "registry.sqlite", read_only=True) as registry:
                return [r for r in registry.rounds() if r.status != "running"]

        # the daemon's node replies in a round (news: its first), then one with nothing new
        wait_until("two rounds with the daemon", lambda: len(rounds()) >= 3, 300)
        time.sleep(15)  # the loop has logged "idle" by now
        before_rounds = len(rounds())
        cpu0 = tree_cpu(server.pid) | tree_cpu(daemon.pid)
        wall0 = time.monotonic()
        time.sleep(args.window)
        cpu1 = tree_cpu(server.pid) | tree_cpu(daemon.pid)
        wall = time.monotonic() - wall0
        each = {k: round(v - cpu0.get(k, 0.0), 2) for k, v in cpu1.items()}
        cpu = sum(each.values())
        result = {
            "window_s": round(wall, 1),
            "cpu_s": round(cpu, 2),
            "share_of_a_core": round(cpu / wall, 4),
            "rounds_in_window": len(rounds()) - before_rounds,
            "cpu_s_by_process": dict(sorted(each.items(), key=lambda kv: -kv[1])),
            "rounds_before": before_rounds,
            "load_average": [round(x, 2) for x in psutil.getloadavg()],
            "work": str(work),
        }
        print(json.dumps(result))
    finally:
        if daemon is not None:
            daemon.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
