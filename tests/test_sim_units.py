"""Units, not only models: two units of one model share a spec sheet, differ in state."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.devices import get_device
from agent.devices.sim import latency
from agent.devices.sim.catalog import load_catalog, load_units, lookup
from agent.profiler import profile_device
from schemas import BadInputError
from simoe_model.hardware import ANALYTICAL_SLICE, EMPIRICAL_SLICE, hardware_vector

UNITS = load_units()


def test_every_unit_is_a_catalog_model_with_its_spec_sheet() -> None:
    models = load_catalog()
    assert len(UNITS) >= 30
    for key, unit in UNITS.items():
        assert unit.model in models and unit.unit is not None
        sheet = models[unit.model].analytical_specs().model_dump()
        own = unit.analytical_specs().model_dump()
        # the model's sheet, but where the unit states its own SMs, L2 or bandwidth
        differs = {name for name in sheet if sheet[name] != own[name]}
        overrides = unit.hardware_overrides
        allowed = {
            "sms": {"compute_units", "fp32_gflops", "fp16_gflops"},
            "l2_cache_kb": {"l2_cache_kb"},
            "mem_bandwidth_gbs": {"mem_bandwidth_gbs"},
        }
        assert differs <= set().union(*(allowed[n] for n in overrides)), key
        assert key not in models
        # a unit that states a figure names where it comes from
        state = unit.unit
        stated = state.sustained_clock_mhz or state.memory_clock_factor != 1.0 or overrides
        assert not stated or len(state.source) > 20, key
    by_model: dict[str, list[str]] = {}
    for key, unit in UNITS.items():
        by_model.setdefault(unit.model or "", []).append(key)
    assert sum(len(v) > 1 for v in by_model.values()) >= 6  # the same model, several units


@pytest.mark.parametrize(
    ("a", "b"),
    [("t4-cool", "t4-hot"), ("xavier-maxn", "xavier-15w"), ("a40-ecc-on", "a40-ecc-off")],
)
def test_probes_tell_two_units_of_one_model_apart(a: str, b: str) -> None:
    va, vb = (hardware_vector(profile_device(get_device(f"sim:{k}"))) for k in (a, b))
    assert np.array_equal(va[ANALYTICAL_SLICE], vb[ANALYTICAL_SLICE])  # same spec sheet
    assert np.abs(va[EMPIRICAL_SLICE] - vb[EMPIRICAL_SLICE]).max() > 0.03  # probes differ


def test_unit_state_drives_the_latency_model() -> None:
    cool, hot = latency.unit_behaviour(UNITS["t4-cool"]), latency.unit_behaviour(UNITS["t4-hot"])
    assert hot.clock_hz < cool.clock_hz
    # inline ECC (GDDR) costs bandwidth, sideband ECC (HBM) does not
    on, off = (
        latency.unit_behaviour(UNITS["a40-ecc-on"]),
        latency.unit_behaviour(UNITS["a40-ecc-off"]),
    )
    assert on.bandwidth == pytest.approx(off.bandwidth * (1 - latency.ECC_INLINE_COST))
    hbm = latency.unit_behaviour(UNITS["a30-u1"])
    assert hbm.bandwidth == lookup("a30").mem_bandwidth_gbs * 1e9
    # a Jetson power mode caps the GPU and the memory controller
    low = latency.unit_behaviour(UNITS["xavier-15w"])
    assert low.bandwidth < latency.unit_behaviour(UNITS["xavier-maxn"]).bandwidth
    # the seeded spread: reproducible, within 8 % below the stated clock, never above
    for seed in range(200):
        assert 0.92 < latency.unit_spread(seed) <= 1.0
    assert latency.unit_spread(7) == latency.unit_spread(7)
    # a model without a unit state keeps its default behaviour
    t4 = latency.unit_behaviour(lookup("t4"))
    assert t4.clock_hz == pytest.approx(1590e6 * latency.ARCH_PARAMS["turing"].clock_factor)


def test_a_users_spec_file_may_state_a_unit(tmp_path: Path) -> None:
    data = lookup("t4").model_dump()
    data.update(key="my-t4", name="My T4", aliases=[])
    data["unit"] = {"sustained_clock_mhz": 900, "ecc": True, "source": "nvidia-smi -q on my box"}
    path = tmp_path / "my_t4.json"
    path.write_text(json.dumps(data))
    device = get_device(f"sim:{path}")
    assert device.spec.unit is not None and device.spec.unit.sustained_clock_mhz == 900
    assert (
        latency.unit_behaviour(device.spec).clock_hz < latency.unit_behaviour(lookup("t4")).clock_hz
    )
    data["unit"] = {"sustained_clock_mhz": -5}
    path.write_text(json.dumps(data))
    with pytest.raises(BadInputError, match="sustained_clock_mhz"):
        get_device(f"sim:{path}")


def test_units_are_looked_up_by_key() -> None:
    device = get_device("sim:a100-pcie-250w")
    assert device.name == "sim:a100-pcie-250w" and device.spec.model == "a100-40gb"
    assert "[PCIe 250 W]" in device.hardware_name


def _streaming_kernel(elements: int = 1 << 24) -> latency.KernelRecord:
    """A copy of `elements` floats with 16-byte vector loads: DRAM-bound on every GPU."""
    nbytes = 4.0 * elements
    return latency.KernelRecord(
        grid=elements / 1024, threads=256, fp_instrs=1, gld_instrs=1, vector_bytes=16,
        gld_bytes=nbytes, gld_sector_bytes=nbytes, gst_bytes=nbytes, gst_sector_bytes=nbytes,
        block_footprint_bytes=2 * nbytes, unique_bytes=2 * nbytes, flops=elements,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("full", "mig", "fraction"),
    [("a100-sxm4-400w", "a100-mig-1g5gb", 1 / 8), ("a30-u1", "a30-mig-2g12gb", 2 / 4)],
)
def test_a_mig_slice_has_its_own_sms_l2_and_bandwidth(full: str, mig: str, fraction: float) -> None:
    whole, part = UNITS[full], UNITS[mig]
    assert part.model == whole.model and part.sms < whole.sms
    assert part.mem_bandwidth_gbs == pytest.approx(whole.mem_bandwidth_gbs * fraction)
    assert part.l2_cache_kb == pytest.approx(whole.l2_cache_kb * fraction)
    # the FP peak follows the SM count; the analytical vector reads the slice, as CUDA does
    assert part.fp32_gflops / part.sms == pytest.approx(whole.fp32_gflops / whole.sms)
    assert part.analytical_specs().compute_units == part.sms
    params = latency.GpuParams.from_specs([whole, part])
    assert params.l2_bytes[0, 1] == pytest.approx(part.l2_cache_kb * 1024)
    # a bandwidth-bound kernel is slower on the slice by about its bandwidth fraction
    matrix, owner = latency.kernel_matrix([[_streaming_kernel()]])
    seconds = latency.candidate_latency(matrix, owner, 1, params)[0]
    assert seconds[1] / seconds[0] == pytest.approx(1 / fraction, rel=0.1)


def test_an_orin_power_mode_gates_tpcs_off() -> None:
    maxn, low = UNITS["orin-maxn"], UNITS["orin-15w"]
    assert (maxn.sms, low.sms) == (16, 6)  # nvpmodel MODE_15W: 3 of 8 TPCs
    assert latency.GpuParams.from_specs([low]).sms[0, 0] == 6
    assert low.analytical_specs().fp32_gflops == pytest.approx(maxn.fp32_gflops * 6 / 16)


def test_a_board_variant_has_its_own_bus() -> None:
    gddr6, gddr6x = UNITS["3060ti-gddr6"], UNITS["3060ti-gddr6x"]
    assert (gddr6.mem_bandwidth_gbs, gddr6x.mem_bandwidth_gbs) == (448, 608)
    slow, fast = (latency.unit_behaviour(u).bandwidth for u in (gddr6, gddr6x))
    assert fast / slow == pytest.approx(608 / 448, rel=0.01)  # beyond the 1.3 clock-factor cap
    spec = Path(__file__).parent.parent / "bench" / "protocol_specs" / "rtx3060-8gb.json"
    board = get_device(f"sim:{spec}").spec
    assert (board.model, board.mem_bandwidth_gbs, board.l2_cache_kb, board.sms) == (
        "rtx3060", 240, 2048, 28,
    )  # fmt: skip


def test_a_bad_hardware_override_is_one_line(tmp_path: Path) -> None:
    from agent.devices.sim.catalog import _load_units

    bad = tmp_path / "units.json"
    entry = {"key": "a100-too-big", "model": "a100-40gb", "label": "x", "state": {"sms": 500}}
    bad.write_text(json.dumps({"units": [entry]}))
    with pytest.raises(BadInputError, match="unit.sms: 500") as info:
        _load_units(str(bad))
    assert "\n" not in str(info.value)
    entry["state"] = {"l2_cache_kb": -1}
    bad.write_text(json.dumps({"units": [entry]}))
    with pytest.raises(BadInputError, match="l2_cache_kb") as info:
        _load_units.__wrapped__(str(bad))
    assert "\n" not in str(info.value)
    data = lookup("a30").model_dump()
    data.update(key="my-a30", aliases=[], unit={"sms": 0})
    path = tmp_path / "my_a30.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BadInputError, match="sms"):
        get_device(f"sim:{path}")


def test_listing_the_catalog_and_units_does_not_import_tvm() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "import agent.cli\n"
        "from agent.cli.app import app\n"
        "result = CliRunner().invoke(app, ['dataset', 'gpus'])\n"
        "assert result.exit_code == 0, result.output\n"
        "assert 'a100-mig-1g5gb' in result.output and 'orin-15w' in result.output\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tvm', 'tvm_ffi')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-500:]
