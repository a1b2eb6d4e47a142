"""The plan of one traffic process: a JSON document, one owner for both sides. The orchestrator's planner
(testbed/trafficplanner.py) builds :class:`ProcessPlan` and :class:`FlowPlan` values and writes their
``to_json``; the traffic process on its node reads them back with :func:`load_plan` /
``ProcessPlan.from_json`` (:func:`parse_plan`), which checks every field.

Schema (version 1; every time is integer ns, phases on the run clock)::

    {
      "version": 1,
      "role": "pub" | "sub" | "query" | "queryable",
      "name": "pub-zpub.pub1",            # process name: the process log is <log_dir>/<name>.log
      "node": "r1",                       # the node it runs on (recv logs are named after it)
      "router": {"host": "10.0.0.1", "port": 7447,
                 "client": "testbed"},   # optional: the client library (CLIENTS), default "testbed"
      "t0_ns": 1700000000000000000,       # run clock origin, ns since the Unix epoch
      "end_ns": 60000000000,              # run clock: publishers stop, subscribers exit
      "log_dir": "/path/results/<run>/traffic",
      "flows": [{
        "name": "zpub.pub1", "flow_id": 1, "key": "demo/example/pub1",
        # publishers only (subscribers need name, flow_id, key):
        "priority": 5, "congestion_control": "drop", "express": false,
        "size": 12500, "rate_bps": 2000000, "tick_ns": 50000000,
        "phases": [[5000000000, 30000000000]],
        "burst": null | {"on_ns": 1000000000, "off_ns": 1000000000},
        "catch_up_ticks": 1               # optional: late ticks sent with the due one (docs/traffic.md)
      }]
    }

Queries (docs/traffic.md): a ``"role": "query"`` plan's flows have ``name``, ``flow_id``,
``key`` (may use ``*``/``**``), ``priority``, ``size`` (query payload bytes), ``interval_ns``
(one query every interval in the phases), ``timeout_ns``, ``consolidation`` and ``phases``; a
``"role": "queryable"`` plan's flows have ``name``, ``flow_id``, ``key``, ``service_time_ns`` and
``reply_size``.

``router.client`` chooses the client library the process speaks to its router with (the router
driver's): ``"testbed"`` (traffic/client.py, our router's protocol) or ``"zenoh"``
(traffic/zenohclient.py, a stock Zenoh router; publishers and subscribers only: no queries, no
slow readers).

Optional keys: ``connect_timeout_ns`` (default 2 s), ``retry_max_ns`` (back-off
cap, default 2 s), ``flush_interval_ns`` (default 0.5 s, at most 1 s).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from router.codec import PAYLOAD_HEADER_SIZE
from router.keyexpr import KeyExprError, validate as validate_key
from router.queries import CONSOLIDATIONS

PLAN_VERSION = 1
#: the client libraries a traffic process can use (plan.router.client): traffic/sessions.py opens them, and
#: traffic/clients.py has their error for what they do not do
CLIENTS = ("testbed", "zenoh")


#: why the zenoh client refuses query plans (traffic/zenohclient.py says the same)
NO_ZENOH_QUERIES = "the zenoh client does not do queries"
#: pub: publisher, sub: subscriber, query: querier, queryable: answers a query flow's queries
ROLES = ("pub", "sub", "query", "queryable")
_MAX_PAYLOAD = 16 * 1024 * 1024 - 4096  # a router frame (16 MiB) less its headers
_MIN_QUERY_INTERVAL_NS = 1_000_000  # 1000 queries per second
_MAX_QUERY_TIMEOUT_NS = 3600 * 1_000_000_000  # as the client library's get
_S = 1_000_000_000
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


class PlanError(ValueError):
    """A plan that cannot be run; the message says which field and why."""


@dataclass(frozen=True)
class Burst:
    on_ns: int
    off_ns: int


@dataclass(frozen=True)
class FlowPlan:
    name: str
    flow_id: int
    key: str
    priority: int = 5
    congestion_control: str = "drop"
    express: bool = False
    size: int = 1024
    rate_bps: int = 0
    tick_ns: int = 0
    phases: Tuple[Tuple[int, int], ...] = ()
    burst: Optional[Burst] = None
    catch_up_ticks: int = 1
    #: a querier's flow: one query of ``size`` bytes every ``interval_ns`` in the phases
    interval_ns: int = 0
    timeout_ns: int = 0
    consolidation: str = "first"
    #: a queryable's flow: each query answered after ``service_time_ns`` with ``reply_size`` bytes
    service_time_ns: int = 0
    reply_size: int = 0

    def to_json(self, role: str = "pub") -> Dict[str, Any]:
        """The flow as a plan of ``role`` holds it (only that role's keys)."""
        out: Dict[str, Any] = {"name": self.name, "flow_id": self.flow_id, "key": self.key}
        if role == "sub":
            return out
        if role == "queryable":
            return {**out, "service_time_ns": self.service_time_ns, "reply_size": self.reply_size}
        out.update(priority=self.priority, size=self.size)
        if role == "query":
            return {**out, "interval_ns": self.interval_ns, "timeout_ns": self.timeout_ns,
                    "consolidation": self.consolidation, "phases": [list(p) for p in self.phases]}
        return {
            **out, "congestion_control": self.congestion_control, "express": self.express,
            "rate_bps": self.rate_bps, "tick_ns": self.tick_ns, "phases": [list(p) for p in self.phases],
            "burst": None if self.burst is None else {"on_ns": self.burst.on_ns, "off_ns": self.burst.off_ns},
            "catch_up_ticks": self.catch_up_ticks,
        }


@dataclass(frozen=True)
class ProcessPlan:
    role: str
    name: str
    node: str
    host: str
    port: int
    t0_ns: int
    end_ns: int
    log_dir: str
    flows: Tuple[FlowPlan, ...]
    connect_timeout_ns: int = 2 * _S
    retry_max_ns: int = 2 * _S
    flush_interval_ns: int = _S // 2
    extra: Dict[str, Any] = field(default_factory=dict)
    #: a slow subscriber: reads at this rate (bit/s; 0 = stops reading) from ``slow_from_ns`` on (run clock)
    read_rate_bps: Optional[int] = None
    slow_from_ns: int = 0
    #: the receiver's name in its receive logs (recv-<flow>-<log_as>.csv); default the node
    log_as: Optional[str] = None
    #: the client library (CLIENTS): "testbed" (our router's protocol) or "zenoh" (stock Zenoh)
    client: str = "testbed"

    def to_json(self) -> Dict[str, Any]:
        return {
            "version": PLAN_VERSION, "role": self.role, "name": self.name, "node": self.node,
            "router": {"host": self.host, "port": self.port, "client": self.client}, "t0_ns": self.t0_ns, "end_ns": self.end_ns,
            "log_dir": self.log_dir, "connect_timeout_ns": self.connect_timeout_ns,
            "retry_max_ns": self.retry_max_ns, "flush_interval_ns": self.flush_interval_ns,
            "flows": [f.to_json(self.role) for f in self.flows],
            **({"read": {"rate_bps": self.read_rate_bps, "from_ns": self.slow_from_ns}}
               if self.read_rate_bps is not None else {}),
            **({"log_as": self.log_as} if self.log_as else {}),
        }

    @classmethod
    def from_json(cls, obj: Any) -> "ProcessPlan":
        """The plan ``to_json`` wrote, checked (:func:`parse_plan`); PlanError naming the first wrong field."""
        return parse_plan(obj)


def _get(obj: Dict[str, Any], key: str, where: str, kind: type, default: Any = ..., ) -> Any:
    if key not in obj or obj[key] is None:
        if default is ...:
            raise PlanError(f"{where}: missing {key!r}")
        return default
    value = obj[key]
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlanError(f"{where}.{key}: {value!r} is not an integer")
    elif kind is bool:
        if not isinstance(value, bool):
            raise PlanError(f"{where}.{key}: {value!r} is not true/false")
    elif not isinstance(value, kind):
        raise PlanError(f"{where}.{key}: {value!r} is not a {kind.__name__}")
    return value


def _name(value: str, where: str) -> str:
    if not _NAME.fullmatch(value):
        raise PlanError(f"{where}: {value!r} is not a name (1-128 letters, digits, '_', '.', '-')")
    return value


def _payload_size(obj: Dict[str, Any], key: str, where: str, default: Any = ...) -> int:
    size = _get(obj, key, where, int, default)
    if size < PAYLOAD_HEADER_SIZE:
        raise PlanError(f"{where}.{key}: {size} bytes is smaller than the {PAYLOAD_HEADER_SIZE}-byte payload "
                        f"header every message carries; use {key} >= {PAYLOAD_HEADER_SIZE}")
    if size > _MAX_PAYLOAD:
        raise PlanError(f"{where}.{key}: {size} bytes is larger than a router frame (16 MiB)")
    return size


def _phases(obj: Dict[str, Any], where: str) -> Tuple[Tuple[int, int], ...]:
    raw = _get(obj, "phases", where, list)
    phases: List[Tuple[int, int]] = []
    for i, p in enumerate(raw):
        if (not isinstance(p, (list, tuple)) or len(p) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in p)):
            raise PlanError(f"{where}.phases[{i}]: {p!r} is not [start_ns, stop_ns]")
        if p[1] <= p[0]:
            raise PlanError(f"{where}.phases[{i}]: stop {p[1]} is not after start {p[0]}")
        phases.append((int(p[0]), int(p[1])))
    return tuple(phases)


def _priority(obj: Dict[str, Any], where: str, default: int) -> int:
    priority = _get(obj, "priority", where, int, default)
    if not 0 <= priority <= 7:
        raise PlanError(f"{where}.priority: {priority} is not 0..7")
    return priority


def _query_flow(obj: Dict[str, Any], where: str, name: str, flow_id: int, key: str) -> FlowPlan:
    priority = _priority(obj, where, 3)
    size = _payload_size(obj, "size", where, 64)
    interval = _get(obj, "interval_ns", where, int)
    if interval < _MIN_QUERY_INTERVAL_NS:
        raise PlanError(f"{where}.interval_ns: {interval} is below 1 ms (more than 1000 queries per second)")
    timeout = _get(obj, "timeout_ns", where, int)
    if not 0 < timeout <= _MAX_QUERY_TIMEOUT_NS:
        raise PlanError(f"{where}.timeout_ns: {timeout} is not in (0, 3600 s]")
    consolidation = _get(obj, "consolidation", where, str, "first")
    if consolidation not in CONSOLIDATIONS:
        raise PlanError(f"{where}.consolidation: {consolidation!r} is not one of {', '.join(CONSOLIDATIONS)}")
    return FlowPlan(name, flow_id, key, priority=priority, size=size, phases=_phases(obj, where),
                    interval_ns=interval, timeout_ns=timeout, consolidation=consolidation)


def _queryable_flow(obj: Dict[str, Any], where: str, name: str, flow_id: int, key: str) -> FlowPlan:
    service = _get(obj, "service_time_ns", where, int, 0)
    if service < 0:
        raise PlanError(f"{where}.service_time_ns: {service} must be >= 0")
    return FlowPlan(name, flow_id, key, service_time_ns=service,
                    reply_size=_payload_size(obj, "reply_size", where, 64))


def parse_flow(obj: Any, role: str, where: str) -> FlowPlan:
    if not isinstance(obj, dict):
        raise PlanError(f"{where}: a flow is a JSON object, not {type(obj).__name__}")
    name = _name(_get(obj, "name", where, str), f"{where}.name")
    where = f"{where} ({name})"
    flow_id = _get(obj, "flow_id", where, int)
    if not 0 <= flow_id <= 0xFFFFFFFF:
        raise PlanError(f"{where}.flow_id: {flow_id} does not fit in a u32")
    key = _get(obj, "key", where, str)
    try:
        validate_key(key)
    except KeyExprError as exc:
        raise PlanError(f"{where}.key: {exc}") from None
    if role == "sub":
        return FlowPlan(name=name, flow_id=flow_id, key=key)
    if role == "query":
        return _query_flow(obj, where, name, flow_id, key)
    if role == "queryable":
        return _queryable_flow(obj, where, name, flow_id, key)
    if "*" in key:
        raise PlanError(f"{where}.key: a publisher needs a concrete key, not {key!r}")
    priority = _priority(obj, where, 5)
    cc = _get(obj, "congestion_control", where, str, "drop")
    if cc not in ("block", "drop"):
        raise PlanError(f"{where}.congestion_control: {cc!r} is not 'block' or 'drop'")
    express = _get(obj, "express", where, bool, False)
    size = _payload_size(obj, "size", where)
    rate = _get(obj, "rate_bps", where, int)
    if rate <= 0:
        raise PlanError(f"{where}.rate_bps: {rate} must be > 0")
    tick = _get(obj, "tick_ns", where, int)
    if tick < 100_000:
        raise PlanError(f"{where}.tick_ns: {tick} is below 0.1 ms, which a Python publisher cannot keep")
    phases = _phases(obj, where)
    burst = None
    b = obj.get("burst")
    if b is not None:
        if not isinstance(b, dict):
            raise PlanError(f"{where}.burst: {b!r} is not {{on_ns, off_ns}} or null")
        on = _get(b, "on_ns", f"{where}.burst", int)
        off = _get(b, "off_ns", f"{where}.burst", int)
        if on <= 0 or off <= 0:
            raise PlanError(f"{where}.burst: on_ns and off_ns must be > 0")
        burst = Burst(on, off)
    catch_up = _get(obj, "catch_up_ticks", where, int, 1)
    if catch_up < 0:
        raise PlanError(f"{where}.catch_up_ticks: {catch_up} must be >= 0")
    return FlowPlan(name, flow_id, key, priority, cc, express, size, rate, tick, phases, burst, catch_up)


def parse_plan(obj: Any) -> ProcessPlan:
    """Check a plan document; raise PlanError naming the first wrong field."""
    if not isinstance(obj, dict):
        raise PlanError("a plan is a JSON object")
    version = obj.get("version", PLAN_VERSION)
    if version != PLAN_VERSION:
        raise PlanError(f"plan version {version!r} is not supported (this traffic tool reads version {PLAN_VERSION})")
    role = _get(obj, "role", "plan", str)
    if role not in ROLES:
        raise PlanError(f"plan.role: {role!r} is not one of {', '.join(repr(r) for r in ROLES)}")
    name = _name(_get(obj, "name", "plan", str), "plan.name")
    node = _name(_get(obj, "node", "plan", str), "plan.node")
    router = _get(obj, "router", "plan", dict)
    host = _get(router, "host", "plan.router", str)
    port = _get(router, "port", "plan.router", int)
    if not 0 < port < 65536:
        raise PlanError(f"plan.router.port: {port} is not a TCP port")
    client = _get(router, "client", "plan.router", str, "testbed")
    if client not in CLIENTS:
        raise PlanError(f"plan.router.client: {client!r} is not one of {', '.join(repr(c) for c in CLIENTS)}")
    if client == "zenoh" and role in ("query", "queryable"):
        raise PlanError(f"plan.router.client: {NO_ZENOH_QUERIES} (this is a {role!r} plan); "
                        f"query flows need the testbed client")
    t0 = _get(obj, "t0_ns", "plan", int)
    end = _get(obj, "end_ns", "plan", int)
    if end <= 0:
        raise PlanError(f"plan.end_ns: {end} must be > 0 (run clock)")
    log_dir = _get(obj, "log_dir", "plan", str)
    flows_raw = _get(obj, "flows", "plan", list)
    if not flows_raw:
        raise PlanError("plan.flows: a traffic process needs at least one flow")
    flows = tuple(parse_flow(f, role, f"plan.flows[{i}]") for i, f in enumerate(flows_raw))
    seen: Dict[Any, str] = {}
    for f in flows:
        for k in (("name", f.name), ("flow_id", f.flow_id)):
            if k in seen:
                raise PlanError(f"plan.flows: {k[0]} {k[1]!r} appears twice")
            seen[k] = f.name
    timeout = _get(obj, "connect_timeout_ns", "plan", int, 2 * _S)
    retry = _get(obj, "retry_max_ns", "plan", int, 2 * _S)
    flush = _get(obj, "flush_interval_ns", "plan", int, _S // 2)
    if timeout <= 0 or retry <= 0 or not 0 < flush <= _S:
        raise PlanError("plan: connect_timeout_ns and retry_max_ns must be > 0, flush_interval_ns in (0, 1 s]")
    read_rate, slow_from = None, 0
    read = obj.get("read")
    if read is not None:
        if role != "sub" or not isinstance(read, dict):
            raise PlanError("plan.read: {rate_bps, from_ns} of a subscriber (a slow reader)")
        read_rate = _get(read, "rate_bps", "plan.read", int)
        slow_from = _get(read, "from_ns", "plan.read", int, 0)
        if read_rate < 0 or slow_from < 0:
            raise PlanError("plan.read: rate_bps (0 = stops reading) and from_ns must be >= 0")
        if client != "testbed":
            raise PlanError(f"plan.read: a slow reader is a feature of the testbed client; "
                            f"the {client} client (plan.router.client) does not offer it")
    log_as = obj.get("log_as")
    if log_as is not None:
        log_as = _name(_get(obj, "log_as", "plan", str), "plan.log_as")
    return ProcessPlan(role, name, node, host, port, t0, end, log_dir, flows, timeout, retry, flush,
                       read_rate_bps=read_rate, slow_from_ns=slow_from, log_as=log_as, client=client)


def load_plan(path: str) -> ProcessPlan:
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except OSError as exc:
        raise PlanError(f"cannot read plan {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise PlanError(f"plan {path} is not valid JSON: {exc}") from None
    return parse_plan(obj)
