"""Router configuration: load a JSON (or YAML, if PyYAML is importable) file
into typed dataclasses, rejecting unknown keys and bad values with a message
that names the key.  Every key is documented in docs/router.md.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .codec import DEFAULT_MAX_MESSAGE, NUM_PRIORITIES, PRIORITY_NAMES
from .limits import NOISY_POLICIES, SLOW_READER_POLICIES, LimitsConfig, RoleLimits

# Zenoh's default queue sizes (in batches) per priority.
DEFAULT_QUEUE_SIZES = (1, 1, 1, 1, 2, 4, 2, 1)
DEFAULT_WRR_WEIGHTS = (8, 8, 8, 8, 4, 2, 1, 1)
DEFAULT_CONTENTION_WINDOW_US = 20_000
DEFAULT_POLLING_WINDOW_US = 80_000
SCHEDULERS = ("strict", "wrr", "contention_polling")  # router/scheduler.py
DEFAULT_LINK_WEIGHT = 100
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


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


@dataclass(frozen=True)
class PipelineConfig:
    queue_sizes: Tuple[int, ...] = DEFAULT_QUEUE_SIZES
    batch_size_bytes: int = 65535
    batch_threshold_bytes: int = 32768
    batch_time_limit_us: int = 1000
    drop_deadline_ms: float = 1.0
    close_deadline_ms: float = 5000.0
    scheduler: str = "strict"
    wrr_weights: Tuple[int, ...] = DEFAULT_WRR_WEIGHTS
    # contention_polling: a contention window (strict priority) then a polling window (weighted), in us
    contention_window_us: int = DEFAULT_CONTENTION_WINDOW_US
    polling_window_us: int = DEFAULT_POLLING_WINDOW_US
    # A message larger than a batch is sent in FRAGMENT frames no larger than a batch, so that
    # frames of other priorities pass between its pieces (False: one oversize DATA frame of its own).
    fragmentation: bool = True
    # The largest message a connection reassembles from fragments.
    max_message_bytes: int = DEFAULT_MAX_MESSAGE


@dataclass(frozen=True)
class RouterConfig:
    node: str
    router_listen: Tuple[Address, ...] = ()
    client_listen: Tuple[Address, ...] = ()
    neighbours: Tuple[NeighbourConfig, ...] = ()
    lease_ms: int = 3000
    keepalive_ms: int = 750
    reconnect_initial_ms: int = 100
    reconnect_max_ms: int = 2000
    route_debounce_ms: int = 20
    #: after a route computation that took d, the next waits until d x this has passed (at most 10% of a
    #: core on routes at 10, whatever the topology's size); 0 = only the debounce
    route_hold_factor: int = 10
    #: ... but never longer than this: a router's trees are stale while it holds a change back, and what
    #: its neighbours send it along their newer trees finds no route (0 = no ceiling)
    route_hold_max_ms: int = 2000
    #: queries: how many of this router's queries may be outstanding at one serving router at once
    query_channels: int = 8
    #: queries: an attempt at one serving router times out after this (within the query's own timeout)
    query_attempt_timeout_ms: int = 1000
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    client_queue_sizes: Optional[Tuple[int, ...]] = None
    metrics_listen: Optional[Address] = None
    admin_token: Optional[str] = None
    event_log: Optional[str] = None
    log_level: str = "INFO"
    # Congestion-aware routing (docs/router.md "Congestion-aware routing").
    congestion_aware: bool = True
    monitor_interval_ms: int = 1000
    monitor_buffer_bps: Optional[int] = None  # None = 5% of the link's capacity
    recovery_ratio: float = 0.2
    block_weight: int = 65535
    restore_weight: Optional[int] = None  # None: back to the link's configured data weight
    flow_ttl_ms: int = 5000
    flow_sweep_ms: int = 1000
    data_priorities: Tuple[int, ...] = (4, 5, 6, 7)
    high_priorities: Tuple[int, ...] = (0, 1, 2, 3)
    tcp_notsent_lowat: Optional[int] = 32768
    # The same on router-to-client sockets: larger, so that a fast local client costs no throughput,
    # yet bounded, so that what a slow reader has not read stays in its pipeline (resource limits).
    client_tcp_notsent_lowat: Optional[int] = 262144
    # Resource limits (docs/router.md "Resource limits").
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    # Streaming links (docs/router.md "Large messages"): a message of at least the threshold goes to a
    # router or a client over a stream connection from a per-endpoint pool, not the shared connection.
    streaming_links: bool = True
    streaming_threshold_bytes: int = 262144
    stream_pool_max_idle: int = 4
    stream_pool_max_busy: int = 4
    stream_idle_ms: int = 10000
    # Stream connections to a router are paced (SO_MAX_PACING_RATE) at this share of the link's
    # capacity (link_capacity_bps), so a large message never fills the link's queue ahead of the
    # shared connection; 0: not paced.
    stream_pacing: float = 0.8


_TOP_KEYS = {
    "node", "router_listen", "client_listen", "neighbours", "lease_ms", "keepalive_ms",
    "reconnect_initial_ms", "reconnect_max_ms", "route_debounce_ms", "route_hold_factor", "route_hold_max_ms",
    "query_channels", "query_attempt_timeout_ms", "queue_sizes",
    "client_queue_sizes", "batch_size_bytes", "batch_threshold_bytes", "batch_time_limit_us",
    "drop_deadline_ms", "close_deadline_ms", "scheduler", "wrr_weights", "contention_window_us", "polling_window_us",
    "metrics_listen",
    "admin_token", "event_log", "log_level",
    "congestion_aware", "monitor_interval_ms", "monitor_buffer_bps", "recovery_ratio", "block_weight",
    "restore_weight", "flow_ttl_ms", "flow_sweep_ms", "data_priorities", "high_priorities", "tcp_notsent_lowat",
    "client_tcp_notsent_lowat", "fragmentation", "max_message_bytes",
    "limits", "streaming_links", "streaming_threshold_bytes", "stream_pool_max_idle", "stream_pool_max_busy", "stream_idle_ms",
    "stream_pacing",
}
_LIMITS_KEYS = {"total_bytes", "control_bytes", "client", "router", "check_interval_ms", "declarations_per_client"}
_ROLE_LIMIT_KEYS = {"endpoint_bytes", "sender_bytes", "input_rate_bps", "input_burst_bytes", "noisy_policy",
                    "drop_priorities", "slow_reader_ms", "stalled_reader_ms", "slow_reader_policy"}
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


def _int(raw: Dict[str, Any], key: str, default: int, minimum: int = 0, maximum: Optional[int] = None) -> int:
    value = raw.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        raise ConfigError(f"{key}: {value} is outside {minimum}..{maximum if maximum is not None else 'inf'}")
    return value


def _float(raw: Dict[str, Any], key: str, default: float, minimum: float = 0.0) -> float:
    value = raw.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{key}: {value} must be >= {minimum}")
    return float(value)


def _per_priority(raw: Dict[str, Any], key: str, default: Tuple[int, ...], minimum: int) -> Tuple[int, ...]:
    """A list of 8 integers, or a mapping from priority number/name to integer."""
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, list):
        if len(value) != NUM_PRIORITIES:
            raise ConfigError(f"{key}: expected {NUM_PRIORITIES} values (priorities 0..7), got {len(value)}")
        items = list(enumerate(value))
    elif isinstance(value, dict):
        names = {name: prio for prio, name in PRIORITY_NAMES.items()}
        items = []
        for k, v in value.items():
            if k in names:
                items.append((names[k], v))
            elif str(k).isdigit() and int(k) < NUM_PRIORITIES:
                items.append((int(k), v))
            else:
                raise ConfigError(f"{key}: unknown priority {k!r}; use 0..7 or one of {sorted(names)}")
    else:
        raise ConfigError(f"{key}: expected a list of 8 integers or a mapping priority -> integer")
    out = list(default)
    for prio, v in items:
        if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
            raise ConfigError(f"{key}[{prio}]: expected an integer >= {minimum}, got {v!r}")
        out[prio] = v
    return tuple(out)


def _addresses(raw: Dict[str, Any], key: str) -> Tuple[Address, ...]:
    value = raw.get(key, [])
    if isinstance(value, (str, dict)):
        value = [value]
    if not isinstance(value, list):
        raise ConfigError(f"{key}: expected a list of addresses")
    return tuple(parse_address(v, f"{key}[{i}]") for i, v in enumerate(value))


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
    port = _int(value, "port", 0, 1, 65535)
    weight = _int(value, "weight", DEFAULT_LINK_WEIGHT, 1, 65535)
    caps = {}
    for k in ("capacity_bps", "link_capacity_bps"):
        cap = value.get(k)
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap <= 0):
            raise ConfigError(f"{where}.{k}: expected a positive integer (bit/s) or null")
        caps[k] = cap
    data_weight = None if value.get("data_weight") is None else _int(value, "data_weight", 0, 1, 65535)
    return NeighbourConfig(name=name, address=address, port=port, weight=weight, capacity_bps=caps["capacity_bps"],
                           link_capacity_bps=caps["link_capacity_bps"], data_weight=data_weight)


def _priority_list(raw: Dict[str, Any], key: str, default: Tuple[int, ...],
                   where: Optional[str] = None) -> Tuple[int, ...]:
    """A list of priorities given as numbers 0..7 or names."""
    value = raw.get(key)
    if value is None:
        return default
    key = where or key
    if not isinstance(value, list):
        raise ConfigError(f"{key}: expected a list of priorities (0..7 or names)")
    names = {name: prio for prio, name in PRIORITY_NAMES.items()}
    out = []
    for v in value:
        if isinstance(v, str) and v in names:
            out.append(names[v])
        elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v < NUM_PRIORITIES:
            out.append(v)
        else:
            raise ConfigError(f"{key}: unknown priority {v!r}; use 0..7 or one of {sorted(names)}")
    return tuple(sorted(set(out)))


def _bool(raw: Dict[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    return value


def _optional_int(raw: Dict[str, Any], key: str, where: str, default: Optional[int], minimum: int = 1) -> Optional[int]:
    if key not in raw:
        return default
    value = raw[key]
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{where}.{key}: expected an integer >= {minimum} or null, got {value!r}")
    return value


def _choice(raw: Dict[str, Any], key: str, where: str, default: str, allowed: Tuple[str, ...]) -> str:
    value = raw.get(key, default)
    if value not in allowed:
        raise ConfigError(f"{where}.{key}: expected one of {', '.join(repr(a) for a in allowed)}, got {value!r}")
    return value


def _role_limits(raw: Any, where: str, default: RoleLimits) -> RoleLimits:
    if raw is None:
        return default
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected an object with keys {sorted(_ROLE_LIMIT_KEYS)}")
    unknown = set(raw) - _ROLE_LIMIT_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_ROLE_LIMIT_KEYS)}")
    rate = _optional_int(raw, "input_rate_bps", where, default.input_rate_bps)
    burst = _optional_int(raw, "input_burst_bytes", where, default.input_burst_bytes)
    if burst is not None and rate is None:
        raise ConfigError(f"{where}.input_burst_bytes: only meaningful with input_rate_bps")
    return RoleLimits(
        endpoint_bytes=_optional_int(raw, "endpoint_bytes", where, default.endpoint_bytes),
        sender_bytes=_optional_int(raw, "sender_bytes", where, default.sender_bytes),
        input_rate_bps=rate,
        input_burst_bytes=burst,
        noisy_policy=_choice(raw, "noisy_policy", where, default.noisy_policy, NOISY_POLICIES),
        drop_priorities=_priority_list(raw, "drop_priorities", default.drop_priorities, f"{where}.drop_priorities"),
        slow_reader_ms=_optional_int(raw, "slow_reader_ms", where, default.slow_reader_ms),
        stalled_reader_ms=_optional_int(raw, "stalled_reader_ms", where, default.stalled_reader_ms),
        slow_reader_policy=_choice(raw, "slow_reader_policy", where, default.slow_reader_policy,
                                   SLOW_READER_POLICIES),
    )


def _limits(raw: Dict[str, Any]) -> LimitsConfig:
    value = raw.get("limits")
    default = LimitsConfig()
    if value is None:
        return default
    if not isinstance(value, dict):
        raise ConfigError(f"limits: expected an object with keys {sorted(_LIMITS_KEYS)}")
    unknown = set(value) - _LIMITS_KEYS
    if unknown:
        raise ConfigError(f"limits: unknown key(s) {sorted(unknown)}; allowed: {sorted(_LIMITS_KEYS)}")
    control = _optional_int(value, "control_bytes", "limits", default.control_bytes, 1024)
    if control is None:
        raise ConfigError("limits.control_bytes: control frames are always bounded; give a number of bytes")
    return LimitsConfig(
        total_bytes=_optional_int(value, "total_bytes", "limits", default.total_bytes),
        control_bytes=control,
        client=_role_limits(value.get("client"), "limits.client", default.client),
        router=_role_limits(value.get("router"), "limits.router", default.router),
        check_interval_ms=_int(value, "check_interval_ms", default.check_interval_ms, 10, 10_000),
        declarations_per_client=_optional_int(value, "declarations_per_client", "limits",
                                              default.declarations_per_client),
    )


def config_from_dict(raw: Dict[str, Any]) -> RouterConfig:
    if not isinstance(raw, dict):
        raise ConfigError("router config must be a JSON/YAML object")
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"unknown config key(s) {sorted(unknown)}; allowed keys: {sorted(_TOP_KEYS)}")
    node = raw.get("node")
    if not isinstance(node, str) or not node or "/" in node:
        raise ConfigError("node: required, a non-empty name without '/'")
    neighbours_raw = raw.get("neighbours", [])
    if not isinstance(neighbours_raw, list):
        raise ConfigError("neighbours: expected a list")
    neighbours = tuple(_neighbour(v, i) for i, v in enumerate(neighbours_raw))
    names = [n.name for n in neighbours]
    if len(set(names)) != len(names) or node in names:
        raise ConfigError("neighbours: names must be unique and differ from node")
    scheduler = raw.get("scheduler", "strict")
    if scheduler not in SCHEDULERS:
        raise ConfigError(f"scheduler: expected one of {', '.join(repr(s) for s in SCHEDULERS)}, got {scheduler!r}")
    contention_us = _int(raw, "contention_window_us", DEFAULT_CONTENTION_WINDOW_US, 0, 60_000_000)
    polling_us = _int(raw, "polling_window_us", DEFAULT_POLLING_WINDOW_US, 0, 60_000_000)
    if contention_us + polling_us == 0:
        raise ConfigError("contention_window_us and polling_window_us: at least one must be above 0")
    batch_size = _int(raw, "batch_size_bytes", 65535, 256, 16 * 1024 * 1024)
    pipeline = PipelineConfig(
        queue_sizes=_per_priority(raw, "queue_sizes", DEFAULT_QUEUE_SIZES, 1),
        batch_size_bytes=batch_size,
        batch_threshold_bytes=_int(raw, "batch_threshold_bytes", min(32768, batch_size), 1, batch_size),
        batch_time_limit_us=_int(raw, "batch_time_limit_us", 1000, 0),
        drop_deadline_ms=_float(raw, "drop_deadline_ms", 1.0),
        close_deadline_ms=_float(raw, "close_deadline_ms", 5000.0),
        scheduler=scheduler,
        wrr_weights=_per_priority(raw, "wrr_weights", DEFAULT_WRR_WEIGHTS, 1),
        contention_window_us=contention_us,
        polling_window_us=polling_us,
        fragmentation=_bool(raw, "fragmentation", True),
        max_message_bytes=_int(raw, "max_message_bytes", DEFAULT_MAX_MESSAGE, 1024, 1024 * 1024 * 1024),
    )
    lease = _int(raw, "lease_ms", 3000, 100)
    keepalive = _int(raw, "keepalive_ms", max(lease // 4, 10), 10)
    if keepalive >= lease:
        raise ConfigError(f"keepalive_ms ({keepalive}) must be smaller than lease_ms ({lease})")
    metrics = raw.get("metrics_listen")
    log_level = os.environ.get("ROUTER_LOG_LEVEL") or raw.get("log_level", "INFO")
    if not isinstance(log_level, str) or log_level.upper() not in LOG_LEVELS:
        raise ConfigError(f"log_level: expected one of {LOG_LEVELS}, got {log_level!r}")
    token = raw.get("admin_token")
    if token is not None and (not isinstance(token, str) or len(token) < 8):
        raise ConfigError("admin_token: expected a string of at least 8 characters, or null")
    event_log = raw.get("event_log")
    if event_log is not None and not isinstance(event_log, str):
        raise ConfigError("event_log: expected a file path string or null")
    client_q = raw.get("client_queue_sizes")
    buffer_bps = raw.get("monitor_buffer_bps")
    if buffer_bps is not None:
        buffer_bps = _int(raw, "monitor_buffer_bps", 0, 0)
    lowat = raw.get("tcp_notsent_lowat", 32768)
    if lowat is not None:
        lowat = _int(raw, "tcp_notsent_lowat", 32768, 0, 64 * 1024 * 1024) or None
    client_lowat = raw.get("client_tcp_notsent_lowat", 262144)
    if client_lowat is not None:
        client_lowat = _int(raw, "client_tcp_notsent_lowat", 262144, 0, 64 * 1024 * 1024) or None
    recovery = _float(raw, "recovery_ratio", 0.2)
    if recovery >= 1.0:
        raise ConfigError(f"recovery_ratio: {recovery} must be below 1 (a fraction of cap_limit)")
    cfg = RouterConfig(
        node=node,
        router_listen=_addresses(raw, "router_listen"),
        client_listen=_addresses(raw, "client_listen"),
        neighbours=neighbours,
        lease_ms=lease,
        keepalive_ms=keepalive,
        reconnect_initial_ms=_int(raw, "reconnect_initial_ms", 100, 1),
        reconnect_max_ms=_int(raw, "reconnect_max_ms", 2000, 1),
        route_debounce_ms=_int(raw, "route_debounce_ms", 20, 0),
        route_hold_factor=_int(raw, "route_hold_factor", 10, 0),
        route_hold_max_ms=_int(raw, "route_hold_max_ms", 2000, 0),
        query_channels=_int(raw, "query_channels", 8, 1),
        query_attempt_timeout_ms=_int(raw, "query_attempt_timeout_ms", 1000, 1),
        pipeline=pipeline,
        client_queue_sizes=None if client_q is None else _per_priority(raw, "client_queue_sizes", DEFAULT_QUEUE_SIZES, 1),
        metrics_listen=None if metrics is None else parse_address(metrics, "metrics_listen"),
        admin_token=token,
        event_log=event_log,
        log_level=log_level.upper(),
        congestion_aware=_bool(raw, "congestion_aware", True),
        monitor_interval_ms=_int(raw, "monitor_interval_ms", 1000, 10),
        monitor_buffer_bps=buffer_bps,
        recovery_ratio=recovery,
        block_weight=_int(raw, "block_weight", 65535, 1, 65535),
        restore_weight=None if raw.get("restore_weight") is None else _int(raw, "restore_weight", 100, 1, 65535),
        flow_ttl_ms=_int(raw, "flow_ttl_ms", 5000, 1),
        flow_sweep_ms=_int(raw, "flow_sweep_ms", 1000, 1),
        data_priorities=_priority_list(raw, "data_priorities", (4, 5, 6, 7)),
        high_priorities=_priority_list(raw, "high_priorities", (0, 1, 2, 3)),
        tcp_notsent_lowat=lowat,
        client_tcp_notsent_lowat=client_lowat,
        limits=_limits(raw),
        streaming_links=_bool(raw, "streaming_links", True),
        streaming_threshold_bytes=_int(raw, "streaming_threshold_bytes", 262144, 1),
        stream_pool_max_idle=_int(raw, "stream_pool_max_idle", 4, 0, 1024),
        stream_pool_max_busy=_int(raw, "stream_pool_max_busy", 4, 1, 1024),
        stream_idle_ms=_int(raw, "stream_idle_ms", 10000, 1),
        stream_pacing=_float(raw, "stream_pacing", 0.8),
    )
    if cfg.stream_pacing > 1:
        raise ConfigError(f"stream_pacing: {cfg.stream_pacing} is a share of the link's capacity, 0..1 (0: not paced)")
    if cfg.restore_weight is not None and cfg.restore_weight >= cfg.block_weight:
        raise ConfigError(f"restore_weight ({cfg.restore_weight}) must be below block_weight ({cfg.block_weight})")
    if not cfg.router_listen and not cfg.client_listen:
        raise ConfigError("at least one of router_listen / client_listen must be given")
    return cfg


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
