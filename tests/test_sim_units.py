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
        assert unit.analytical_specs() == models[unit.model].analytical_specs()
        assert key not in models
        # a unit that states a figure names where it comes from
        state = unit.unit
        stated = state.sustained_clock_mhz or state.memory_clock_factor != 1.0
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
