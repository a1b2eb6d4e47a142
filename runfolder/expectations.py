"""The metric names and the expectation grammar: ``<metric> <op> <value> [for flow|priority <name>]``.

One definition for the topology's ``expect:`` (the spec's pydantic model validates through these functions,
with line-exact errors), a suite's ``metrics:``, the analysis's checks (``spark.expectations``) and the
trend pages. Standard library only: the analysis reads expectations without testbed or pydantic.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Union

from . import units
from .priorities import Priority, parse_priority
from .wording import did_you_mean

__all__ = ["METRICS", "QUERY_METRICS", "ROUTER_METRICS", "OPS", "Expectation", "ExpectationError",
           "parse_expectation", "parse_expectations", "split_compact", "check_metric", "check_op", "parse_value",
           "check_selectors", "format_value"]

#: Metric name -> kind of value it is compared with.
METRICS: Dict[str, str] = {
    "latency.p50": "duration",
    "latency.p95": "duration",
    "latency.p99": "duration",
    "latency.p999": "duration",
    "latency.max": "duration",
    "latency.mean": "duration",
    "jitter": "duration",
    "loss": "percent",
    "delivery": "percent",
    "throughput": "bandwidth",
    "drops": "count",
    "reroutes": "count",
    "reroutes_per_episode": "count",
    "reroute.time": "duration",
    "detection.time": "duration",
    "reaction.time": "duration",
    "reroute.lost": "count",
    # the routers' resources (summary.json "resources"): over all routers and the whole run
    "router.queued_bytes": "size",
    "router.memory": "size",
    "limits.noisy_senders": "count",
    "limits.slow_readers": "count",
    "limits.disconnects": "count",
    # query flows (summary.json "queries"): completion times of the queries that ended ok, and counts
    "query.p50": "duration",
    "query.p99": "duration",
    "query.max": "duration",
    "query.timeouts": "count",
    "query.failovers": "count",
    "query.past_timeout": "count",
}

#: metrics about query flows: ``for flow <query flow>`` or all query flows together, no ``for priority``
QUERY_METRICS = ("query.p50", "query.p99", "query.max", "query.timeouts", "query.failovers", "query.past_timeout")

#: metrics about the routers, not about flows: they take no ``flow`` / ``priority``
ROUTER_METRICS = ("router.queued_bytes", "router.memory", "limits.noisy_senders", "limits.slow_readers",
                  "limits.disconnects")

#: the comparisons an expectation may make
OPS = ("<", "<=", ">", ">=", "==")

_KIND_PARSERS = {
    "duration": units.parse_duration,
    "percent": units.parse_percent,
    "bandwidth": units.parse_bandwidth,
    "size": units.parse_size,
}

_COMPACT = re.compile(
    r"\s*(?P<metric>\S+)\s*(?P<op><=|>=|==|<|>)\s*(?P<value>\S+)"
    r"(?:\s+for\s+(?P<sel>flow|priority)\s+(?P<target>\S+))?\s*"
)
_COMPACT_EXAMPLE = "'latency.p99 <= 50ms for priority real_time'"


class ExpectationError(ValueError):
    """An expectation that cannot be read; the message says which part and why (``field``: which key)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def split_compact(value: Any) -> Any:
    """The compact form as a mapping (``{metric, op, value[, flow|priority]}``); a mapping is returned as is."""
    if not isinstance(value, str):
        return value
    match = _COMPACT.fullmatch(value)
    if not match:
        raise ExpectationError(f"{value!r} is not an expectation; write '<metric> <op> <value> "
                               f"[for flow|priority <name>]', e.g. {_COMPACT_EXAMPLE}")
    out: Dict[str, Any] = {"metric": match["metric"], "op": match["op"], "value": match["value"]}
    if match["sel"]:
        out[match["sel"]] = match["target"]
    return out


def check_metric(value: Any) -> str:
    """``value`` when it is one of :data:`METRICS`, else ExpectationError with the closest name."""
    if not isinstance(value, str) or value not in METRICS:
        hint = did_you_mean(value, METRICS) if isinstance(value, str) else ""
        raise ExpectationError(f"{value!r} is not a metric ({hint}allowed: {', '.join(METRICS)})", "metric")
    return value


def check_op(value: Any) -> str:
    if value not in OPS:
        hint = did_you_mean(value, OPS) if isinstance(value, str) else ""
        raise ExpectationError(f"{value!r} is not allowed ({hint}allowed: {', '.join(OPS)})", "op")
    return value


def parse_value(metric: str, value: Any) -> Union[int, float]:
    """The limit in the metric's unit (ns, percent, bit/s, bytes, or a count) from what was written."""
    kind = METRICS[metric]
    if kind == "count":
        if isinstance(value, str):  # from the compact form
            try:
                value = float(value) if "." in value else int(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ExpectationError(f"{value!r} is not a count for {metric} (a number >= 0)", "value")
        return value
    try:
        return _KIND_PARSERS[kind](value)
    except units.UnitError as err:
        raise ExpectationError(f"{metric} is a {kind}: {err}", "value") from None


def check_selectors(metric: str, flow: Optional[str], priority: Optional[Priority]) -> None:
    """Router metrics take no ``for flow``/``for priority``; query metrics no ``for priority``."""
    if metric in ROUTER_METRICS and (flow is not None or priority is not None):
        raise ExpectationError(f"{metric} is about the routers (over all of them and the whole run): it takes "
                               "no 'for flow' or 'for priority'")
    if metric in QUERY_METRICS and priority is not None:
        raise ExpectationError(f"{metric} is about query flows: write 'for flow <query flow>' or nothing (all "
                               "query flows together), not 'for priority'")


def format_value(metric: str, value: Union[int, float]) -> Any:
    """The limit as written back: ``50ms``, ``1%``, ``10mbit``, ``64MiB``, a count as is."""
    kind = METRICS.get(metric)
    if kind == "duration":
        return units.format_duration(int(value))
    if kind == "percent":
        return units.format_percent(value)
    if kind == "bandwidth":
        return units.format_bandwidth(int(value))
    if kind == "size":
        return units.format_size(int(value))
    return value


@dataclass(frozen=True)
class Expectation:
    """``latency.p99 <= 50ms for priority real_time``: the limit in the metric's unit."""

    metric: str
    op: str
    value: Union[int, float]
    flow: Optional[str] = None
    priority: Optional[Priority] = None

    @property
    def kind(self) -> str:
        return METRICS[self.metric]

    def describe(self) -> str:
        """The compact form, e.g. ``latency.p99 <= 50ms for priority real_time``."""
        text = f"{self.metric} {self.op} {format_value(self.metric, self.value)}"
        if self.flow:
            text += f" for flow {self.flow}"
        if self.priority is not None:
            text += f" for priority {self.priority.label}"
        return text

    def to_json(self) -> dict:
        """As a topology writes it: the value with its unit, the priority by name."""
        return {"metric": self.metric, "op": self.op, "value": format_value(self.metric, self.value),
                "flow": self.flow, "priority": None if self.priority is None else self.priority.label}


def parse_expectation(value: Any) -> Expectation:
    """One expectation, compact (``"loss <= 1% for flow f"``) or a mapping; ExpectationError (``field``: the
    key at fault, '' for the whole) on the first thing wrong."""
    data = split_compact(value)
    if not isinstance(data, Mapping):
        raise ExpectationError(f"{value!r} is not an expectation (a mapping or '<metric> <op> <value>')")
    unknown = sorted(set(map(str, data)) - {"metric", "op", "value", "flow", "priority"})
    if unknown:
        raise ExpectationError(f"unknown key {unknown[0]!r} (allowed: metric, op, value, flow, priority)", unknown[0])
    for key in ("metric", "op", "value"):
        if key not in data:
            raise ExpectationError("missing", key)
    metric = check_metric(data["metric"])
    op = check_op(data["op"])
    limit = parse_value(metric, data["value"])
    flow = data.get("flow")
    if flow is not None and not isinstance(flow, str):
        raise ExpectationError(f"{flow!r} is not a flow name", "flow")
    priority = None
    if data.get("priority") is not None:
        try:
            priority = parse_priority(data["priority"])
        except ValueError as err:
            raise ExpectationError(str(err), "priority") from None
    check_selectors(metric, flow, priority)
    return Expectation(metric, op, limit, flow, priority)


def parse_expectations(items: List[Any]) -> List[Expectation]:
    """Every expectation of a list; ExpectationError naming the first wrong one as ``[index.field]``."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append(parse_expectation(item))
        except ExpectationError as err:
            where = f"{i}.{err.field}" if err.field else str(i)
            raise ExpectationError(f"expect[{where}]: {err}") from None
    return out
