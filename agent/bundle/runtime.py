"""The thin GPU node's runner: time a measurement bundle's prebuilt CUDA kernels.

    python3 run.py BUNDLE_DIR --out RESULTS_DIR [--deadline SECONDS] [--device N]

This file runs on the GPU node, where there is no compiler, no TVM and no SiMoE: it
needs only the standard library at import, and on the GPU `torch` (buffers, CUDA
events, the cuBLAS/cuDNN references), `cuda-bindings` (the driver API that loads a
cubin and launches its kernels) and optionally `nvidia-ml-py` (NVML specs). The
exporter copies it into every bundle as `run.py`; `python -m agent.bundle.runtime`
runs the same code on a host that has the project.

Every kernel is timed as MetaSchedule's evaluator times it (`number` runs per
repeat, more until a repeat lasts `min_repeat_ms`, `repeat` repeats, after one
warm-up run), with CUDA events on the stream the kernels run on. Results are
appended to `results.jsonl` one line per entry, flushed and synced, and
`summary.json` is rewritten after each step: a run that is killed, or that stops
at its deadline, keeps everything it measured and names its first error.

`--backend sim --standin FILE` replaces the GPU by a stand-in that reads modelled
latencies from FILE (written by the exporter from a simulated GPU): everything else
(manifest, artifact checks, kernel lookup, deadline, result files) runs as on a
GPU. Its results say `simulated: true` and import as simulated records only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import platform
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

FORMAT = "simoe-bundle"
FORMAT_VERSION = 1
SELF_CHECK_LIMIT_S = 60.0
# Errors after which the CUDA context is unusable: the run stops and says so.
STICKY_ERRORS = (
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ASSERT",
    "illegal memory access",
)  # fmt: skip
_DTYPE_BYTES = {"float32": 4, "float16": 2, "float64": 8, "int32": 4, "int64": 8, "int8": 1}


try:  # as a module of the project, or as run.py beside cuda_backend.py in a bundle
    from agent.bundle.cuda_backend import CudaBackend, EntryError
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cuda_backend import CudaBackend, EntryError  # type: ignore[no-redef]


# ----------------------------------------------------------------------- result files


class ResultWriter:
    """results.jsonl (append, fsync per line) and summary.json (atomic rewrite)."""

    def __init__(self, out_dir: Path, summary: dict[str, Any]) -> None:
        self.out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.summary = summary
        self.lock = threading.RLock()  # the watchdog thread saves too
        self._results = open(out_dir / "results.jsonl", "a", encoding="utf-8")  # noqa: SIM115

    def result(self, row: dict[str, Any]) -> None:
        with self.lock:
            self._result(row)

    def _result(self, row: dict[str, Any]) -> None:
        self._results.write(json.dumps(row) + "\n")
        self._results.flush()
        os.fsync(self._results.fileno())
        counts = self.summary.setdefault("counts", {"ok": 0, "failed": 0})
        counts["ok" if row.get("ok") else "failed"] += 1
        if not row.get("ok") and self.summary.get("first_error") is None:
            self.summary["first_error"] = f"{row.get('id')}: {row.get('error')}"
        self.save()

    def error(self, message: str) -> None:
        if self.summary.get("first_error") is None:
            self.summary["first_error"] = message
        self.save()

    def save(self) -> None:
        with self.lock:
            self.summary["updated_at"] = time.time()
            tmp = self.out_dir / f".summary.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(self.summary, indent=2, default=str))
            tmp.replace(self.out_dir / "summary.json")

    def close(self) -> None:
        self._results.close()


# ----------------------------------------------------------------------------- backends


def _read_module(bundle: Path, module: dict[str, Any]) -> bytes:
    """The module's cubin, checked against the manifest's digest."""
    path = bundle / module["file"]
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EntryError(f"artifact {module['file']} unreadable: {exc}") from None
    if hashlib.sha256(data).hexdigest() != module["sha256"]:
        raise EntryError(f"artifact {module['file']} does not match the manifest's sha256")
    if module["file"].endswith(".xz"):
        try:
            data = lzma.decompress(data)
        except lzma.LZMAError as exc:
            raise EntryError(f"artifact {module['file']}: {exc}") from None
    return data


class SimBackend:
    """A stand-in for the GPU: latencies from a simulated device's model, labelled simulated.

    Loading checks what a driver would: an ELF image that defines every kernel named.
    """

    simulated = True

    def __init__(self, standin: Path, delay_s: float = 0.0) -> None:
        data = json.loads(Path(standin).read_text())
        self.device = data.get("device", "sim")
        self.latencies: dict[str, Any] = data["latencies"]
        self.profile: dict[str, Any] = data.get("attributes", {})
        self.delay_s = delay_s
        self._images: dict[int, bytes] = {}

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "sim",
            "simulated": True,
            "device": self.device,
            "attributes": self.profile,
        }

    def load(self, index: int, image: bytes) -> None:
        if not image.startswith(b"\x7fELF"):
            raise EntryError("cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE (not an ELF cubin)")
        self._images[index] = image

    def unload(self, index: int) -> None:
        self._images.pop(index, None)

    def time_entry(self, entry: dict[str, Any], evaluator: dict[str, Any]) -> list[float]:
        image = self._images.get(entry["module"])
        if image is None:
            raise EntryError("module not loaded")
        for launch in entry["launches"]:
            if launch["kernel"].encode() + b"\x00" not in image:
                raise EntryError(f"cuModuleGetFunction({launch['kernel']}): CUDA_ERROR_NOT_FOUND")
        if self.delay_s:
            time.sleep(self.delay_s)
        outcome = self.latencies.get(entry["id"])
        if outcome is None:
            raise EntryError("the stand-in has no latency for this entry")
        if isinstance(outcome, str):
            raise EntryError(outcome)
        return [float(s) for s in outcome][: max(1, int(evaluator["repeat"]))]

    def time_reference(self, ref: dict[str, Any], evaluator: dict[str, Any]) -> dict[str, Any]:
        raise EntryError("no cuBLAS/cuDNN on a simulated stand-in")

    def extra(self) -> dict[str, Any]:
        return {}


# ---------------------------------------------------------------------------------- run


def _order(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Probes, then the untuned defaults, then candidates round-robin over their groups.

    Round-robin: a run cut short by its deadline has measured every workload alike.
    """
    probes = [e for e in entries if e["kind"] == "probe"]
    defaults = [e for e in entries if e["kind"] == "default"]
    groups: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        if e["kind"] not in ("probe", "default"):
            groups.setdefault(e.get("group", ""), []).append(e)
    mixed = []
    queues = list(groups.values())
    while any(queues):
        for q in queues:
            if q:
                mixed.append(q.pop(0))
    return probes + defaults + mixed


class Deadline:
    def __init__(self, seconds: float | None, started: float) -> None:
        self.at = None if seconds is None else started + seconds
        self.stop_reason: str | None = None

    def passed(self, margin: float = 0.0) -> bool:
        if self.stop_reason is not None:
            return True
        if self.at is not None and time.monotonic() + margin >= self.at:
            self.stop_reason = "deadline"
        return self.stop_reason is not None


class Watchdog(threading.Thread):
    """Ends the process when the self-check or a hung entry outlasts its limit.

    A kernel that never returns blocks the main thread in a CUDA call, where no
    deadline check runs; this thread writes the summary (what hung, since when) and
    exits, and every result line written so far stays.
    """

    def __init__(self, writer: ResultWriter, self_check_s: float, hard_stop_at: float | None):
        super().__init__(daemon=True)
        self.writer, self.self_check_s, self.hard_stop_at = writer, self_check_s, hard_stop_at
        self.started = time.monotonic()
        self.self_checked = False
        self.current: str | None = None
        self.finished = False  # set when the run ends: the thread then ends too

    def run(self) -> None:
        while not self.finished:
            time.sleep(0.2)
            now = time.monotonic()
            if not self.self_checked and now - self.started > self.self_check_s:
                self._stop("self-check failed", f"self-check {self.current}: no result within "
                           f"{self.self_check_s:.0f} s", 1)  # fmt: skip
            if self.hard_stop_at is not None and now > self.hard_stop_at:
                self._stop("deadline", f"{self.current}: still running past the deadline", 0)

    def _stop(self, stopped: str, error: str, code: int) -> None:
        with self.writer.lock:
            if self.finished:
                return
            summary = self.writer.summary
            summary["stopped"] = stopped
            if summary.get("first_error") is None or stopped == "self-check failed":
                summary["first_error"] = error
            summary["wall_s"] = time.monotonic() - self.started
            self.writer.save()
        print(f"run.py: stopped ({stopped}): {error}", file=sys.stderr, flush=True)
        os._exit(code)


def run_bundle(
    bundle: Path,
    out_dir: Path,
    backend: Any,
    *,
    deadline_s: float | None = None,
    skip_references: bool = False,
    self_check_s: float = SELF_CHECK_LIMIT_S,
) -> dict[str, Any]:
    """Time every entry of the bundle on `backend`; returns the final summary."""
    started = time.monotonic()
    manifest = json.loads((bundle / "manifest.json").read_text())
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        raise SystemExit(f"run.py: error: {bundle}: not a {FORMAT} v{FORMAT_VERSION} manifest")
    summary: dict[str, Any] = {
        "bundle_id": manifest["bundle_id"],
        "arch": manifest["arch"],
        "started_at": time.time(),
        "python": platform.python_version(),
        "host": platform.node(),
        "first_error": None,
        "stopped": None,
        "steps": {},
    }
    writer = ResultWriter(out_dir, summary)
    deadline = Deadline(deadline_s, started)
    grace = None if deadline_s is None else started + deadline_s + max(10.0, 0.1 * deadline_s)
    watchdog = Watchdog(writer, self_check_s, grace)
    watchdog.start()

    def on_term(signum: int, _frame: Any) -> None:
        deadline.stop_reason = f"signal {signum}"

    if threading.current_thread() is threading.main_thread():  # signals: main thread only
        signal.signal(signal.SIGTERM, on_term)
    try:
        step = time.monotonic()
        summary["device"] = backend.describe()
        summary["steps"]["describe_s"] = time.monotonic() - step
        writer.save()
        (out_dir / "device.json").write_text(json.dumps(summary["device"], indent=2, default=str))
        evaluator = manifest["evaluator"]
        entries = _order(manifest["entries"])
        by_module: dict[int, list[dict[str, Any]]] = {}
        for e in entries:
            by_module.setdefault(e["module"], []).append(e)
        loaded: dict[int, str | None] = {}
        self_checked = False
        for entry in entries:
            if deadline.passed(margin=1.0):
                break
            watchdog.current = entry["id"]
            row: dict[str, Any] = {
                "id": entry["id"],
                "kind": entry["kind"],
                "group": entry.get("group"),
            }
            t0 = time.monotonic()
            try:
                mod = entry["module"]
                if mod not in loaded:
                    try:
                        backend.load(mod, _read_module(bundle, manifest["modules"][mod]))
                        loaded[mod] = None
                    except EntryError as exc:
                        loaded[mod] = str(exc)
                if loaded[mod] is not None:
                    raise EntryError(f"loading module {mod} failed: {loaded[mod]}")
                row["run_secs"] = backend.time_entry(entry, evaluator)
                row["ok"] = True
            except EntryError as exc:
                row["ok"], row["error"] = False, str(exc)
            except Exception as exc:  # noqa: BLE001 - anything else from the driver or torch
                row["ok"], row["error"] = False, f"{type(exc).__name__}: {exc}".splitlines()[0]
            row["seconds"] = time.monotonic() - t0
            writer.result(row)
            if not row["ok"] and any(code in row["error"] for code in STICKY_ERRORS):
                summary["stopped"] = "context lost"  # every later launch would fail alike
                writer.error(f"{entry['id']}: {row['error']}")
                return summary
            by_module[entry["module"]].remove(entry)
            if not by_module[entry["module"]]:
                backend.unload(entry["module"])  # frees the module; its kernels are done
            if not self_checked:
                # The self-check: the first entry (a probe) must load and run, fast.
                self_checked = watchdog.self_checked = True
                summary["self_check"] = {
                    "id": entry["id"],
                    "ok": row["ok"],
                    "seconds": row["seconds"],
                }
                if not row["ok"] or row["seconds"] > self_check_s:
                    summary["stopped"] = "self-check failed"
                    summary["first_error"] = f"self-check {entry['id']}: " + str(
                        row.get("error", f"took {row['seconds']:.0f} s")
                    )
                    return summary
        summary["steps"]["entries_s"] = time.monotonic() - started
        if backend.simulated:
            summary["references"] = "skipped: no cuBLAS/cuDNN on a simulated stand-in"
        elif not skip_references and not deadline.passed(margin=5.0):
            for ref in manifest.get("references", []):
                if deadline.passed(margin=2.0):
                    break
                row = {"id": ref["id"], "kind": "reference", "group": ref.get("group")}
                t0 = time.monotonic()
                try:
                    row.update(backend.time_reference(ref, evaluator))
                    row["ok"] = True
                except Exception as exc:  # noqa: BLE001
                    row["ok"], row["error"] = False, f"{type(exc).__name__}: {exc}".splitlines()[0]
                row["seconds"] = time.monotonic() - t0
                writer.result(row)
        if not deadline.passed(margin=3.0):
            try:
                summary["extra"] = backend.extra()
            except Exception as exc:  # noqa: BLE001
                summary["extra"] = {"error": str(exc)}
        summary["stopped"] = deadline.stop_reason or "done"
    except Exception as exc:  # noqa: BLE001 - keep what was measured, name the failure
        summary["stopped"] = "error"
        writer.error(f"{type(exc).__name__}: {exc}".splitlines()[0])
    finally:
        with writer.lock:
            watchdog.finished = True
        summary["wall_s"] = time.monotonic() - started
        writer.save()
        writer.close()
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run.py", description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="results folder (default $OUT)")
    parser.add_argument("--deadline", type=float, default=None, help="stop after SECONDS")
    parser.add_argument("--device", type=int, default=0, help="CUDA device index")
    parser.add_argument("--backend", choices=("cuda", "sim"), default="cuda")
    parser.add_argument("--standin", type=Path, help="sim backend: the modelled latencies")
    parser.add_argument("--standin-delay", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--self-check-limit", type=float, default=SELF_CHECK_LIMIT_S,
                        help="seconds the first probe may take before the run aborts")  # fmt: skip
    parser.add_argument("--no-references", action="store_true", help="skip cuBLAS/cuDNN")
    args = parser.parse_args(argv)
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if out is None:
        print("run.py: error: give --out DIR (or set OUT)", file=sys.stderr)
        return 2
    if not (args.bundle / "manifest.json").is_file():
        print(f"run.py: error: {args.bundle}: no manifest.json", file=sys.stderr)
        return 2
    # NVML and CUDA must number GPUs alike; a user's CUDA_VISIBLE_DEVICES is respected.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    out.mkdir(parents=True, exist_ok=True)
    try:
        if args.backend == "sim":
            if args.standin is None:
                print("run.py: error: --backend sim needs --standin FILE", file=sys.stderr)
                return 2
            backend: Any = SimBackend(args.standin, args.standin_delay)
        else:
            backend = CudaBackend(args.device)
    except Exception as exc:  # noqa: BLE001 - no GPU, no torch, no cuda-bindings: say which
        message = f"cannot start the {args.backend} backend: {type(exc).__name__}: {exc}"
        (out / "summary.json").write_text(json.dumps({"first_error": message, "stopped": "error"}))
        print(f"run.py: error: {message}", file=sys.stderr)
        return 1
    summary = run_bundle(
        args.bundle, out, backend, deadline_s=args.deadline,
        skip_references=args.no_references, self_check_s=args.self_check_limit,
    )  # fmt: skip
    counts = summary.get("counts", {})
    print(
        f"run.py: {counts.get('ok', 0)} timed, {counts.get('failed', 0)} failed, "
        f"stopped: {summary['stopped']}, {summary['wall_s']:.1f} s; "
        f"first error: {summary.get('first_error')}",
        flush=True,
    )
    return 0 if summary["stopped"] in ("done", "deadline") else 1  # context lost, errors: 1


if __name__ == "__main__":
    sys.exit(main())
