"""The simulated fleet's GPU catalog (catalog.json, validated by `schemas.GpuSpec`)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from schemas import BadInputError
from schemas.errors import one_line
from schemas.gpu import GpuSpec, UnitState

CATALOG_PATH = Path(__file__).with_name("catalog.json")
UNITS_PATH = Path(__file__).with_name("units.json")


class GpuCatalog(BaseModel):
    """The catalog file: a list of spec sheets."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    gpus: list[GpuSpec]


@lru_cache(maxsize=1)
def _load(path: str) -> dict[str, GpuSpec]:
    catalog = GpuCatalog.model_validate_json(Path(path).read_text())
    specs: dict[str, GpuSpec] = {}
    for spec in catalog.gpus:
        if spec.key in specs:
            raise ValueError(f"catalog: duplicate key {spec.key!r}")
        specs[spec.key] = spec
    return specs


def load_catalog() -> dict[str, GpuSpec]:
    """Every GPU model of the catalog, by key, in catalog order (Kepler first)."""
    return dict(_load(str(CATALOG_PATH)))


class UnitEntry(BaseModel):
    """One physical unit of a catalog model: the model's spec sheet plus its own state."""

    model_config = ConfigDict(extra="forbid")

    key: str
    model: str
    label: str
    state: UnitState


class UnitCatalog(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    note: str = ""
    units: list[UnitEntry]


def as_unit(model: GpuSpec, key: str, label: str, state: UnitState) -> GpuSpec:
    """A unit of `model`: its spec sheet with the unit's own key, name and state (and, where
    the state says so, its own SM count, L2 and memory bandwidth: `GpuSpec` applies them)."""
    source = model.source + (f"; unit state: {state.source}" if state.source else "")
    data = model.model_dump()
    data.update(
        key=key, name=f"{model.name} [{label}]", aliases=[], model=model.key, unit=state,
        source=source,
    )  # fmt: skip
    return GpuSpec.model_validate(data)


@lru_cache(maxsize=1)
def _load_units(path: str) -> dict[str, GpuSpec]:
    models = load_catalog()
    units: dict[str, GpuSpec] = {}
    try:
        entries = UnitCatalog.model_validate_json(Path(path).read_text()).units
    except ValidationError as exc:
        raise BadInputError(f"{path}: {one_line(exc)}") from None
    for entry in entries:
        if entry.key in units or entry.key in models:
            raise BadInputError(f"{path}: duplicate unit key {entry.key!r}")
        if entry.model not in models:
            raise BadInputError(f"{path}: unit {entry.key!r} names unknown model {entry.model!r}")
        try:
            units[entry.key] = as_unit(models[entry.model], entry.key, entry.label, entry.state)
        except ValidationError as exc:
            raise BadInputError(f"{path}: unit {entry.key!r}: {one_line(exc)}") from None
    return units


def load_units() -> dict[str, GpuSpec]:
    """Every unit of units.json, by key: catalog models with their own unit state."""
    return dict(_load_units(str(UNITS_PATH)))


def unit_differences(spec: GpuSpec) -> str:
    """What a unit states beside its model's sheet, in a few words (for listings)."""
    state = spec.unit
    if state is None:
        return ""
    parts: list[str] = []
    hardware = spec.hardware_overrides
    if "sms" in hardware:
        parts.append(f"{spec.sms} SMs")
    if "l2_cache_kb" in hardware:
        parts.append(f"L2 {spec.l2_cache_kb / 1024:g} MB")
    if "mem_bandwidth_gbs" in hardware:
        parts.append(f"{spec.mem_bandwidth_gbs:g} GB/s")
    if state.power_mode:
        parts.append(f"mode {state.power_mode}")
    if state.sustained_clock_mhz:
        parts.append(f"{state.sustained_clock_mhz:g} MHz")
    if state.memory_clock_factor != 1.0:
        parts.append(f"memory clock x{state.memory_clock_factor:g}")
    if state.power_limit_w:
        parts.append(f"{state.power_limit_w:g} W")
    if state.ecc is not None:
        parts.append("ECC on" if state.ecc else "ECC off")
    if state.spread_seed is not None:
        parts.append(f"spread seed {state.spread_seed}")
    return ", ".join(parts)


def _normalise(name: str) -> str:
    return name.strip().lower().replace(" ", "-").replace("_", "-")


def _index() -> dict[str, str]:
    """Lower-case names and aliases -> catalog key."""
    index: dict[str, str] = {}
    for key, spec in {**load_catalog(), **load_units()}.items():
        for name in [key, spec.name, *spec.aliases]:
            index[_normalise(name)] = key
            index[_normalise(name).replace("-", "")] = key
    return index


def lookup(name: str) -> GpuSpec:
    """A catalog GPU by key, alias or full name, case-insensitive."""
    wanted = _normalise(name)
    index = _index()
    key = index.get(wanted) or index.get(wanted.replace("-", ""))
    if key is None:
        known = ", ".join(load_catalog())
        raise BadInputError(
            f"unknown GPU {name!r}: use a catalog name ({known}), a unit of "
            "agent/devices/sim/units.json, or a spec.json"
        )
    return {**load_catalog(), **load_units()}[key]


def load_spec_file(path: Path) -> GpuSpec:
    """A user's own spec file, validated like a catalog entry; errors name the field."""
    if not path.is_file():
        raise BadInputError(f"{path}: no such spec file")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{path}: not JSON ({exc})") from None
    try:
        return GpuSpec.model_validate(data)
    except ValidationError as exc:
        raise BadInputError(f"{path}: {one_line(exc)}") from None


def resolve(name_or_path: str) -> GpuSpec:
    """`sim:<name>` or `sim:<path to spec.json>`."""
    text = name_or_path.strip()
    if not text:
        raise BadInputError("sim: needs a GPU name or a spec.json path, e.g. sim:t4")
    if text.endswith(".json") or "/" in text or Path(text).is_file():
        return load_spec_file(Path(text))
    return lookup(text)
