"""The GPU side of a bundle's runner: cubins through the CUDA driver, buffers in torch.

Imports nothing but the standard library until a `CudaBackend` is made; then torch
(buffers, CUDA events, cuBLAS/cuDNN) and cuda-bindings (the driver API), and
optionally nvidia-ml-py. Copied into every bundle beside run.py.
"""

from __future__ import annotations

from typing import Any


class EntryError(Exception):
    """One entry failed (load, launch or timing); the run goes on with the next."""


class CudaBackend:
    """The real GPU: cubins through the CUDA driver API (cuda-bindings), buffers in torch."""

    simulated = False

    def __init__(self, index: int) -> None:
        import torch
        from cuda.bindings import driver

        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA GPU")
        self.torch, self.driver, self.index = torch, driver, index
        torch.cuda.set_device(index)
        torch.empty(1, device=f"cuda:{index}")  # makes the primary context current here
        self._check(driver.cuInit(0), "cuInit")
        torch.backends.cuda.matmul.allow_tf32 = False  # both sides do FP32 arithmetic
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True  # cuDNN picks its fastest algorithm, as tuning does
        self.stream = torch.cuda.current_stream()
        self._modules: dict[int, Any] = {}
        self._functions: dict[tuple[int, str], Any] = {}

    def _check(self, result: Any, what: str) -> Any:
        err, *rest = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            _, name = self.driver.cuGetErrorName(err)
            _, text = self.driver.cuGetErrorString(err)
            name = name.decode() if isinstance(name, bytes) else str(name)
            text = text.decode() if isinstance(text, bytes) else str(text)
            raise EntryError(f"{what}: {name} ({text})")
        return rest[0] if len(rest) == 1 else rest

    def describe(self) -> dict[str, Any]:
        torch, driver = self.torch, self.driver
        props = torch.cuda.get_device_properties(self.index)
        dev = self._check(driver.cuDeviceGet(self.index), "cuDeviceGet")
        attr = driver.CUdevice_attribute

        def cu(name: str) -> int | None:
            try:
                return int(self._check(driver.cuDeviceGetAttribute(getattr(attr, name), dev), name))
            except Exception:  # noqa: BLE001 - an attribute this driver lacks stays unknown
                return None

        attributes = {
            "name": props.name,
            "sm_count": props.multi_processor_count,
            "compute_capability": [props.major, props.minor],
            "total_memory_bytes": props.total_memory,
            "l2_cache_bytes": getattr(props, "L2_cache_size", None)
            or cu("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
            "warp_size": getattr(props, "warp_size", 32),
            "max_threads_per_block": cu("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            "max_shared_memory_per_block": cu("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK"),
            "cuda_sm_clock_khz": cu("CU_DEVICE_ATTRIBUTE_CLOCK_RATE"),
            "cuda_mem_clock_khz": cu("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"),
            "cuda_mem_bus_width_bits": cu("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH"),
            "pci_bus_id": cu("CU_DEVICE_ATTRIBUTE_PCI_BUS_ID"),
        }
        attributes.update(nvml_facts(attributes.get("pci_bus_id"), self.index))
        return {
            "backend": "cuda",
            "simulated": False,
            "device": f"cuda:{self.index}",
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "driver_api": self._check(driver.cuDriverGetVersion(), "cuDriverGetVersion"),
            "attributes": attributes,
        }

    def load(self, index: int, image: bytes) -> None:
        import ctypes

        # The image by address, the documented form (kept alive for the call).
        buffer = ctypes.create_string_buffer(image, len(image))
        self._modules[index] = self._check(
            self.driver.cuModuleLoadData(ctypes.addressof(buffer)), "cuModuleLoadData"
        )

    def unload(self, index: int) -> None:
        module = self._modules.pop(index, None)
        if module is not None:
            self.driver.cuModuleUnload(module)
            self._functions = {k: v for k, v in self._functions.items() if k[0] != index}

    def _function(self, module: int, name: str, dyn_smem: int) -> Any:
        key = (module, name)
        if key not in self._functions:
            if module not in self._modules:
                raise EntryError("module not loaded")
            fn = self._check(
                self.driver.cuModuleGetFunction(self._modules[module], name.encode()),
                f"cuModuleGetFunction({name})",
            )
            self._functions[key] = fn
        fn = self._functions[key]
        if dyn_smem > 48 * 1024:  # above 48 KiB a kernel must opt in, as TVM's runtime does
            attr = self.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._check(self.driver.cuFuncSetAttribute(fn, attr, dyn_smem), "cuFuncSetAttribute")
        return fn

    def _buffers(self, specs: list[dict[str, Any]]) -> list[Any]:
        torch = self.torch
        dev = torch.device(f"cuda:{self.index}")
        out = []
        gen = torch.Generator(device=dev).manual_seed(0)
        for spec in specs:
            dtype = getattr(torch, spec["dtype"])
            if dtype.is_floating_point:
                out.append(torch.rand(spec["shape"], dtype=dtype, device=dev, generator=gen))
            else:
                out.append(torch.zeros(spec["shape"], dtype=dtype, device=dev))
        return out

    def time_entry(self, entry: dict[str, Any], evaluator: dict[str, Any]) -> list[float]:
        import ctypes

        buffers = self._buffers(entry["buffers"])
        stream = self.stream.cuda_stream
        calls = []
        for launch in entry["launches"]:
            fn = self._function(entry["module"], launch["kernel"], launch.get("dyn_smem", 0))
            values: list[Any] = []
            types: list[Any] = []
            for arg in launch["args"]:
                if "buffer" in arg:
                    values.append(buffers[arg["buffer"]].data_ptr())
                    types.append(ctypes.c_void_p)
                else:
                    values.append(int(arg["int"]))
                    types.append(ctypes.c_int64 if arg.get("bits") == 64 else ctypes.c_int32)
            calls.append((fn, launch["grid"], launch["block"], launch.get("dyn_smem", 0),
                          (tuple(values), tuple(types))))  # fmt: skip

        def run() -> None:
            for fn, grid, block, smem, params in calls:
                self._check(
                    self.driver.cuLaunchKernel(fn, *grid, *block, smem, stream, params, 0),
                    "cuLaunchKernel",
                )

        return self._time(run, evaluator)

    def _time(self, run: Any, evaluator: dict[str, Any]) -> list[float]:
        """MetaSchedule's evaluator: warm up, then `repeat` repeats of at least min_repeat_ms."""
        torch = self.torch
        run()
        self._sync()
        number = max(1, int(evaluator["number"]))
        min_ms = float(evaluator["min_repeat_ms"])
        results = []
        for _ in range(max(1, int(evaluator["repeat"]))):
            while True:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(self.stream)
                for _ in range(number):
                    run()
                end.record(self.stream)
                end.synchronize()
                elapsed_ms = start.elapsed_time(end)
                if elapsed_ms >= min_ms or number >= 1_000_000:
                    break
                # TVM's rule: grow the count by the shortfall, with a margin.
                number = max(
                    number + 1, int(number * min(100.0, 1.618 * min_ms / max(elapsed_ms, 1e-3)))
                )
            results.append(elapsed_ms / 1000 / number)
        return results

    def _sync(self) -> None:
        try:
            self.torch.cuda.synchronize(self.index)
        except Exception as exc:  # noqa: BLE001 - a kernel fault surfaces here
            raise EntryError(f"kernel failed: {str(exc).strip().splitlines()[0]}") from None

    def time_reference(self, ref: dict[str, Any], evaluator: dict[str, Any]) -> dict[str, Any]:
        """The same operator through torch (cuBLAS / cuDNN), FP32 without TF32."""
        torch = self.torch
        f = torch.nn.functional
        tensors = self._buffers([{"shape": s, "dtype": ref.get("dtype", "float32")}
                                 for s in ref["shapes"]])  # fmt: skip
        kw = ref.get("kwargs", {})
        op = ref["op"]
        if op == "matmul":
            a, b = tensors

            def run() -> Any:
                return a @ b
        elif op == "bmm":
            a, b = tensors

            def run() -> Any:
                return torch.bmm(a, b)
        elif op == "conv2d":
            x, w = tensors

            def run() -> Any:
                return f.conv2d(x, w, **kw)
        else:
            raise EntryError(f"unknown reference op {op!r}")
        for _ in range(5):  # cuDNN's algorithm search happens in the first calls
            run()
        return {"run_secs": self._time(run, evaluator), "library": ref.get("library", op)}

    def extra(self) -> dict[str, Any]:
        """Device-to-device copy bandwidth through torch: a check on the copy probe."""
        torch = self.torch
        n = 1 << 28  # 1 GiB of float32: several times any L2
        src = torch.empty(n, dtype=torch.float32, device=f"cuda:{self.index}")
        dst = torch.empty_like(src)
        secs = self._time(lambda: dst.copy_(src), {"number": 3, "repeat": 3, "min_repeat_ms": 20})
        src = dst = None  # free the 2 GiB before anything else runs
        torch.cuda.empty_cache()
        return {"torch_copy_gbs": 2 * n * 4 / min(secs) / 1e9}


def nvml_facts(pci_bus: int | None, index: int) -> dict[str, Any]:
    """What NVML tells (driver, clocks, bus width, power); each field on its own.

    A field NVML does not support on this GPU is left out with its reason, so one
    unsupported query never aborts the profile.
    """
    facts: dict[str, Any] = {"nvml_errors": {}}
    try:
        import pynvml
    except ImportError:
        facts["nvml_errors"]["import"] = "nvidia-ml-py is not installed"
        return facts
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001
        facts["nvml_errors"]["init"] = str(exc)
        return facts
    handle = None
    try:
        # NVML numbers GPUs in PCI order; find ours by its PCI bus when CUDA told it.
        count = pynvml.nvmlDeviceGetCount()
        for i in range(count):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            if pci_bus is not None and pynvml.nvmlDeviceGetPciInfo(h).bus == pci_bus:
                handle = h
                break
        if handle is None and index < count:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:  # noqa: BLE001
        facts["nvml_errors"]["handle"] = str(exc)
    queries = {
        "driver": lambda: pynvml.nvmlSystemGetDriverVersion(),
        "nvml_name": lambda: pynvml.nvmlDeviceGetName(handle),
        "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "mem_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        "mem_bus_width_bits": lambda: pynvml.nvmlDeviceGetMemoryBusWidth(handle),
        "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000,
        "ecc_enabled": lambda: pynvml.nvmlDeviceGetEccMode(handle)[0],
        "sm_clock_now_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
    }
    for key, query in queries.items():
        if handle is None and key != "driver":
            continue
        try:
            value = query()
            facts[key] = value.decode() if isinstance(value, bytes) else value
        except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported and friends
            facts["nvml_errors"][key] = str(exc) or type(exc).__name__
    return facts
