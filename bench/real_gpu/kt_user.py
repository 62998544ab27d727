"""A Kernel Tuner user's view, end to end: import a fleet, train, tune a new GPU.

    python -m bench.real_gpu.kt_user [--hub DIR] [--budget 16] [--seed 0]

Runs the commands of docs/kernel_tuner.md as a user would (the real `simoe-agent` CLI in
a fresh state directory): the GEMM and convolution cache files of the RTX 2080 Ti, RTX
3060 Laptop and TITAN RTX go into a node's store, a kernel model is trained for GEMM with
the convolution as the probe kernel, and Kernel Tuner itself (`tune_kernel` in simulation
mode, replaying the RTX 3090's GEMM cache) runs `SiMoEStrategy` for the new GPU. Prints
the fraction of the optimum reached after 1, 4 and `budget` measurements, next to what
the best configurations of the GPU nearest by spec sheet reach.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.real_gpu.hub import hub_dir

FLEET = ("RTX_2080_Ti", "RTX_3060_laptop", "RTX_Titan")
TARGET = ("RTX_3090", "rtx-3090")


def _cli(*args: str) -> str:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("simoe-agent")), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"simoe-agent {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def main(argv: list[str] | None = None) -> None:
    from bench import prepare

    prepare()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hub", default=None)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    hub = hub_dir(args.hub)
    from agent.kernels.cache_file import read_cache_file
    from agent.kernels.strategy import SiMoEStrategy
    from bench.real_gpu.kt_replay import kt_strategy_trace
    from bench.real_gpu.methods import best_keys, spec_order
    from bench.real_gpu.scores import fraction_at

    with tempfile.TemporaryDirectory() as tmp:
        state = ["--state-dir", str(Path(tmp) / "node")]
        for gpu in FLEET:
            _cli("kernels", "import", str(hub / "gemm" / f"{gpu}.json.gz"),
                 "--block-size-names", "MDIMC,NDIMC", "--grid-div", "x=MWG",
                 "--grid-div", "y=NWG", *state)  # fmt: skip
            t1 = str(hub / "search_spaces" / "convolution.json")
            _cli("kernels", "import", str(hub / "convolution" / f"{gpu}.json.gz"),
                 "--search-space", t1, *state)  # fmt: skip
        model = Path(tmp) / "gemm.simoe.pt"
        _cli("kernels", "train", "--kernel", "Xgemm", "--probe-kernel", "convolution_kernel",
             "--seed", str(args.seed), "--out", str(model), *state)  # fmt: skip
        strategy = SiMoEStrategy.from_files(
            model, gpu=TARGET[1], probes={"convolution_kernel": hub / "convolution" /
                                          f"{TARGET[0]}.json.gz"},
        )  # fmt: skip
        target_file = hub / "gemm" / f"{TARGET[0]}.json.gz"
        keys = kt_strategy_trace(target_file, None, strategy, args.budget, args.seed)
    target = read_cache_file(target_file)
    index = target.index()
    ns = (1, 4, args.budget)
    simoe = fraction_at([index[k] for k in keys], target.time_ms, ns)
    from agent.kernels.gpus import find_gpu

    fleet = {find_gpu(g).key: read_cache_file(hub / "gemm" / f"{g}.json.gz") for g in FLEET}
    nearest = spec_order(find_gpu(TARGET[1]), [find_gpu(g) for g in FLEET])[0]
    transfer = [index[k] for k in best_keys(fleet[nearest]) if k in index][: args.budget]
    spec = fraction_at(transfer, target.time_ms, ns)
    print(f"new GPU {TARGET[1]}, GEMM, seed {args.seed}; fraction of the optimum after {ns}:")
    print("  SiMoEStrategy in Kernel Tuner: " + ", ".join(f"{simoe[n]:.3f}" for n in ns))
    print(f"  best of the spec-nearest GPU ({nearest}): " + ", ".join(f"{spec[n]:.3f}" for n in ns))
    assert np.isfinite(list(simoe.values())).all()


if __name__ == "__main__":
    main()
