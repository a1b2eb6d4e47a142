"""Router configuration: load a JSON (or YAML, if PyYAML is importable) file
into typed dataclasses, rejecting unknown keys and bad values with a message
that names the key.  The keys, their kinds, defaults and ranges are declared
once in router/settings.py (and the tables of docs/router.md follow from them);
here are the parser of each kind and the rules between keys.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from .codec import NUM_PRIORITIES, PRIORITY_NAMES
from .limits import LimitsConfig, RoleLimits
from .settings import LIMITS_SETTINGS, ROLE_SETTINGS, ROUTER_SETTINGS, Setting, by_key, config_class, role_default

DEFAULT_LINK_WEIGHT = 100
#: the top-level settings whose values live in ``RouterConfig.pipeline``
PIPELINE_KEYS = tuple(s.key for s in ROUTER_SETTINGS if s.section == "pipeline")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class NeighbourConfig:
    name: str
    address: str
    port: int
    weight: int = DEFAULT_LINK_WEIGHT
    capacity_bps: Optional[int] = None
    # Capacity of the link for the congestion monitor (bit/s); None = the monitor ignores this link.
    link_capacity_bps: Optional[int] = None
    # Initial data-tree weight of the link; None = same as ``weight``.
    data_weight: Optional[int] = None


#: The transmission pipeline's settings (router/settings.py, ``section="pipeline"``).
PipelineConfig = config_class("PipelineConfig", tuple(s for s in ROUTER_SETTINGS if s.section == "pipeline"),
                              module=__name__)

#: A parsed router config: one field per top-level setting of router/settings.py, and ``pipeline``.
RouterConfig = config_class(
    "RouterConfig", tuple(s for s in ROUTER_SETTINGS if s.section != "pipeline"), module=__name__,
    factories={"limits": LimitsConfig},
    extra=(("pipeline", "PipelineConfig", field(default_factory=PipelineConfig)),))

_TOP_KEYS = tuple(s.key for s in ROUTER_SETTINGS)
_NEIGHBOUR_KEYS = {"name", "address", "port", "weight", "capacity_bps", "link_capacity_bps", "data_weight"}


def parse_address(value: Any, key: str) -> Address:
    if isinstance(value, dict):
        unknown = set(value) - {"host", "port"}
        if unknown:
            raise ConfigError(f"{key}: unknown key(s) {sorted(unknown)}; allowed: host, port")
        host, port = value.get("host"), value.get("port")
    elif isinstance(value, str) and ":" in value:
        host, _, port_s = value.rpartition(":")
        host = host.strip("[]")
        try:
            port = int(port_s)
        except ValueError:
            raise ConfigError(f"{key}: port in {value!r} is not an integer") from None
    else:
        raise ConfigError(f"{key}: expected 'host:port' or {{host, port}}, got {value!r}")
    if not isinstance(host, str) or not host:
        raise ConfigError(f"{key}: host must be a non-empty string")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigError(f"{key}: port must be an integer 0..65535, got {port!r}")
    return Address(host, port)


def _number_text(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _range(setting: Setting) -> str:
    low, high = setting.low, setting.high
    if low is None:
        return ""
    return f" {_number_text(low)}..{_number_text(high)}" if high is not None else f" >= {_number_text(low)}"


def _int(setting: Setting, value: Any, where: str) -> int:
    low, high = setting.low, setting.high
    if (not isinstance(value, int) or isinstance(value, bool) or (low is not None and value < low)
            or (high is not None and value > high)):
        raise ConfigError(f"{where}: expected an integer{_range(setting)}{' or null' if setting.null else ''}, "
                          f"got {value!r}")
    return value


def _number(setting: Setting, value: Any, where: str) -> float:
    low, high = setting.low, setting.high
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or (low is not None and value < low)
            or (high is not None and value > high)):
        raise ConfigError(f"{where}: expected a number{_range(setting)}, got {value!r}")
    return float(value)


def _bool(setting: Setting, value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    return value


def _choice(setting: Setting, value: Any, where: str) -> str:
    if value not in setting.choices:
        raise ConfigError(f"{where}: expected one of {', '.join(repr(a) for a in setting.choices)}, got {value!r}")
    return value


def _string(setting: Setting, value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) < (setting.low or 0):
        least = f" of at least {_number_text(setting.low)} characters" if setting.low else ""
        raise ConfigError(f"{where}: expected a string{least}{' or null' if setting.null else ''}, got {value!r}")
    return value


def _name(setting: Setting, value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or "/" in value:
        raise ConfigError(f"{where}: required, a non-empty name without '/'")
    return value


_PRIORITY_BY_NAME = {name: prio for prio, name in PRIORITY_NAMES.items()}


def _priority(value: Any, where: str) -> int:
    if isinstance(value, str) and value in _PRIORITY_BY_NAME:
        return _PRIORITY_BY_NAME[value]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < NUM_PRIORITIES:
        return value
    if isinstance(value, str) and value.isdigit() and int(value) < NUM_PRIORITIES:
        return int(value)
    raise ConfigError(f"{where}: unknown priority {value!r}; use 0..7 or one of {sorted(_PRIORITY_BY_NAME)}")


def _per_priority(setting: Setting, value: Any, where: str) -> Tuple[Any, ...]:
    """A list of 8 values, or a mapping from priority number/name to value; the default for the others."""
    if isinstance(value, list):
        if len(value) != NUM_PRIORITIES:
            raise ConfigError(f"{where}: expected {NUM_PRIORITIES} values (priorities 0..7), got {len(value)}")
        items = list(enumerate(value))
    elif isinstance(value, dict):
        items = [(_priority(k, where), v) for k, v in value.items()]
    else:
        raise ConfigError(f"{where}: expected a list of 8 values or a mapping priority -> value")
    out = list(setting.default) if setting.default is not None else [None] * NUM_PRIORITIES
    parse = _int if setting.item == "int" else _number
    for prio, v in items:
        out[prio] = parse(setting, v, f"{where}[{prio}]")
    return tuple(out)


def _priorities(setting: Setting, value: Any, where: str) -> Tuple[int, ...]:
    """A list of priorities given as numbers 0..7 or names."""
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of priorities (0..7 or names)")
    return tuple(sorted({_priority(v, where) for v in value}))


def _address(setting: Setting, value: Any, where: str) -> Address:
    return parse_address(value, where)


def _addresses(setting: Setting, value: Any, where: str) -> Tuple[Address, ...]:
    if isinstance(value, (str, dict)):
        value = [value]
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of addresses")
    return tuple(parse_address(v, f"{where}[{i}]") for i, v in enumerate(value))


def _neighbours(setting: Setting, value: Any, where: str) -> Tuple[NeighbourConfig, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list")
    return tuple(_neighbour(v, i) for i, v in enumerate(value))


def _neighbour_int(value: Dict[str, Any], key: str, where: str, minimum: int, maximum: int) -> int:
    v = value[key]
    if not isinstance(v, int) or isinstance(v, bool) or not minimum <= v <= maximum:
        raise ConfigError(f"{where}.{key}: expected an integer {minimum}..{maximum}, got {v!r}")
    return v


def _neighbour(value: Any, index: int) -> NeighbourConfig:
    where = f"neighbours[{index}]"
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object with name, address, port")
    unknown = set(value) - _NEIGHBOUR_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_NEIGHBOUR_KEYS)}")
    for required in ("name", "address", "port"):
        if required not in value:
            raise ConfigError(f"{where}: missing required key {required!r}")
    name, address = value["name"], value["address"]
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name: expected a non-empty string")
    if not isinstance(address, str) or not address:
        raise ConfigError(f"{where}.address: expected a non-empty string")
    port = _neighbour_int(value, "port", where, 1, 65535)
    weight = DEFAULT_LINK_WEIGHT if "weight" not in value else _neighbour_int(value, "weight", where, 1, 65535)
    caps = {}
    for k in ("capacity_bps", "link_capacity_bps"):
        cap = value.get(k)
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap <= 0):
            raise ConfigError(f"{where}.{k}: expected a positive integer (bit/s) or null")
        caps[k] = cap
    data_weight = None if value.get("data_weight") is None else _neighbour_int(value, "data_weight", where, 1, 65535)
    return NeighbourConfig(name=name, address=address, port=port, weight=weight, capacity_bps=caps["capacity_bps"],
                           link_capacity_bps=caps["link_capacity_bps"], data_weight=data_weight)


def _object(value: Any, where: str, settings: Tuple[Setting, ...]) -> Dict[str, Any]:
    """``value`` checked to be an object with only ``settings``' keys."""
    allowed = sorted(s.key for s in settings)
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object with keys {allowed}")
    unknown = set(value) - set(allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {allowed}")
    return value


def _role(setting: Setting, value: Any, where: str) -> RoleLimits:
    raw = _object(value, where, ROLE_SETTINGS)
    limits = _parse_all(ROLE_SETTINGS, raw, where, role=setting.key)
    if limits["input_burst_bytes"] is not None and limits["input_rate_bps"] is None:
        raise ConfigError(f"{where}.input_burst_bytes: only meaningful with input_rate_bps")
    return RoleLimits(**limits)


def _limits(setting: Setting, value: Any, where: str) -> LimitsConfig:
    raw = _object(value, where, LIMITS_SETTINGS)
    if "control_bytes" in raw and raw["control_bytes"] is None:
        raise ConfigError(f"{where}.control_bytes: control frames are always bounded; give a number of bytes")
    return LimitsConfig(**_parse_all(LIMITS_SETTINGS, raw, where))


#: how each kind of setting is parsed: (setting, value, where it is) -> the value
_PARSERS: Dict[str, Callable[[Setting, Any, str], Any]] = {
    "int": _int, "number": _number, "bool": _bool, "choice": _choice, "string": _string, "name": _name,
    "per_priority": _per_priority, "priorities": _priorities, "address": _address, "addresses": _addresses,
    "neighbours": _neighbours, "limits": _limits, "role": _role,
}
#: kinds for which null (or no value) means the default
_NULL_IS_DEFAULT = ("per_priority", "priorities", "limits", "role")


def _default(setting: Setting, role: Optional[str]) -> Any:
    if setting.kind == "limits":
        return LimitsConfig()
    if setting.kind == "role":
        return getattr(LimitsConfig(), setting.key)
    return role_default(setting, role)


def parse_setting(setting: Setting, raw: Dict[str, Any], where: str = "", role: Optional[str] = None) -> Any:
    """``setting``'s value in ``raw`` (an object at ``where``), parsed, or its default when not given."""
    name = f"{where}.{setting.key}" if where else setting.key
    value = raw.get(setting.key)
    if setting.kind == "name":
        return _name(setting, value, name)
    if value is None or (setting.zero_is_null and value == 0):
        if setting.key not in raw or setting.kind in _NULL_IS_DEFAULT:
            return _default(setting, role)
        if setting.null:
            return None
    return _PARSERS[setting.kind](setting, value, name)


def _parse_all(settings: Tuple[Setting, ...], raw: Dict[str, Any], where: str = "",
               role: Optional[str] = None) -> Dict[str, Any]:
    return {s.key: parse_setting(s, raw, where, role) for s in settings}


def config_from_dict(raw: Dict[str, Any]) -> RouterConfig:
    if not isinstance(raw, dict):
        raise ConfigError("router config must be a JSON/YAML object")
    unknown = set(raw) - set(_TOP_KEYS)
    if unknown:
        raise ConfigError(f"unknown config key(s) {sorted(unknown)}; allowed keys: {sorted(_TOP_KEYS)}")
    raw = dict(raw)
    level = os.environ.get("ROUTER_LOG_LEVEL") or raw.get("log_level")
    if isinstance(level, str):
        raw["log_level"] = level.upper()
    values = _parse_all(ROUTER_SETTINGS, raw)
    # defaults that follow from other keys, and rules between keys (docs/router.md "Configuration")
    if "keepalive_ms" not in raw:
        values["keepalive_ms"] = max(values["lease_ms"] // 4, 10)
    if values["keepalive_ms"] >= values["lease_ms"]:
        raise ConfigError(f"keepalive_ms ({values['keepalive_ms']}) must be smaller than lease_ms ({values['lease_ms']})")
    batch_size = values["batch_size_bytes"]
    if "batch_threshold_bytes" not in raw:
        values["batch_threshold_bytes"] = min(values["batch_threshold_bytes"], batch_size)
    elif values["batch_threshold_bytes"] > batch_size:
        raise ConfigError(f"batch_threshold_bytes: {values['batch_threshold_bytes']} is more than batch_size_bytes "
                          f"({batch_size})")
    if values["client_queue_sizes"] is not None:  # the priorities not given: the router's queue_sizes defaults
        values["client_queue_sizes"] = tuple(
            default if size is None else size
            for size, default in zip(values["client_queue_sizes"], by_key(ROUTER_SETTINGS)["queue_sizes"].default))
    if values["contention_window_us"] + values["polling_window_us"] == 0:
        raise ConfigError("contention_window_us and polling_window_us: at least one must be above 0")
    names = [n.name for n in values["neighbours"]]
    if len(set(names)) != len(names) or values["node"] in names:
        raise ConfigError("neighbours: names must be unique and differ from node")
    if values["recovery_ratio"] >= 1.0:
        raise ConfigError(f"recovery_ratio: {values['recovery_ratio']} must be below 1 (a fraction of cap_limit)")
    if values["restore_weight"] is not None and values["restore_weight"] >= values["block_weight"]:
        raise ConfigError(f"restore_weight ({values['restore_weight']}) must be below block_weight "
                          f"({values['block_weight']})")
    if not values["router_listen"] and not values["client_listen"]:
        raise ConfigError("at least one of router_listen / client_listen must be given")
    pipeline = PipelineConfig(**{key: values.pop(key) for key in PIPELINE_KEYS})
    return RouterConfig(pipeline=pipeline, **values)


def load_config(path: str) -> RouterConfig:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if p.suffix in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise ConfigError(f"{path}: YAML config needs PyYAML, which is not installed; use a .json config") from None
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    else:
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{path}: invalid JSON: {exc}") from None
    return config_from_dict(raw)
