"""The records the run writes and the analysis reads back, one definition for both sides.

* :class:`ClockReading`: one node's clock against the controller's (manifest ``clocks``, written with
  :func:`clocks_json`, read with :func:`clocks_from_json`); measured by ``testbed.clocksync``, applied to
  latencies by ``spark.clockcorrection``.
* :class:`DriverRecord`: what the run's router driver provides (manifest ``router_driver``), written by
  ``testbed.drivers`` (``RouterDriver.describe``) and read by ``spark.routerdriver``.
* the CSV headers of the traffic logs (``SEND_HEADER`` ...), written by ``traffic`` and read by ``spark``.

Priority names are :mod:`runfolder.priorities`'. Standard library only.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, TypeVar

__all__ = ["CLOCK_METHODS", "ClockReading", "clocks_json", "clocks_from_json", "DriverRecord", "WIRES",
           "SEND_HEADER", "RECV_HEADER", "QUERY_HEADER", "SERVED_HEADER"]

# ---------------------------------------------------------------- the traffic logs' CSV headers
# (traffic/logs.py writes them, spark.ingest and spark.queries read by them; docs/results.md "traffic/")

SEND_HEADER = "seq,send_ns,size"
RECV_HEADER = "seq,send_ns,recv_ns,size"
QUERY_HEADER = "qid,send_ns,first_reply_ns,done_ns,outcome,replies,retries,served_by,attempts"
SERVED_HEADER = "qid,recv_ns,reply_ns"

# ---------------------------------------------------------------- the clock reading

#: how a reading was made: chrony on both ends, the exchange over the management connection, or the node
#: shares the controller's kernel clock (Mininet hosts, Docker containers)
CLOCK_METHODS = ("chrony", "exchange", "same-host")


@dataclass(frozen=True)
class ClockReading:
    """One node's clock against the controller's at one moment."""

    node: str
    method: str            # one of CLOCK_METHODS
    offset_ns: int         # node clock minus controller clock
    bound_ns: int          # the true offset is within offset_ns ± bound_ns
    rtt_ns: Optional[int]  # the exchange's round trip (None for chrony and same-host)
    at_ns: int             # controller time of the reading
    samples: int           # exchange rounds measured (1 for chrony, 0 for same-host)
    detail: str            # how it was obtained, for a person

    def __post_init__(self) -> None:
        if self.method not in CLOCK_METHODS:
            raise ValueError(f"clock reading of {self.node}: method {self.method!r} is not one of {CLOCK_METHODS}")
        if self.bound_ns < 0:
            raise ValueError(f"clock reading of {self.node}: negative bound {self.bound_ns}")

    @property
    def measured(self) -> bool:
        """True when the node has its own clock (chrony or exchange), False when it shares the controller's."""
        return self.method != "same-host"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> "ClockReading":
        """The reading ``to_json`` wrote; ValueError naming the field when something is missing or mistyped."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a clock reading must be an object, not {type(data).__name__}")
        node = data.get("node")
        if not isinstance(node, str) or not node:
            raise ValueError("clock reading: 'node' must be a non-empty string")
        out: Dict[str, Any] = {"node": node}
        for key, kind, optional in (("method", str, False), ("offset_ns", int, False), ("bound_ns", int, False),
                                    ("rtt_ns", int, True), ("at_ns", int, False), ("samples", int, False),
                                    ("detail", str, False)):
            v = data.get(key)
            if v is None and optional:
                out[key] = None
                continue
            if kind is int and isinstance(v, float) and v.is_integer():
                v = int(v)
            if not isinstance(v, kind) or isinstance(v, bool):
                what = "an integer" if kind is int else "a string"
                raise ValueError(f"clock reading of {node}: '{key}' must be {what}, not {v!r}")
            out[key] = v
        return cls(**out)


def clocks_json(before: Mapping[str, ClockReading], after: Optional[Mapping[str, ClockReading]] = None) -> dict:
    """``manifest.json``'s ``clocks``: ``{"before": {node: reading}, "after": {node: reading}}``; ``after`` is
    left out when there is none (the run died before it could be read)."""
    out = {"before": {n: r.to_json() for n, r in sorted(before.items())}}
    if after is not None:
        out["after"] = {n: r.to_json() for n, r in sorted(after.items())}
    return out


def clocks_from_json(data: Any) -> Tuple[Dict[str, ClockReading], Optional[Dict[str, ClockReading]]]:
    """``clocks_json``'s inverse: (before, after or None). ValueError saying what is wrong."""
    if not isinstance(data, Mapping):
        raise ValueError(f"'clocks' must be an object with 'before' (and 'after'), not {type(data).__name__}")
    if not isinstance(data.get("before"), Mapping):
        raise ValueError("'clocks' has no 'before' readings")
    parts: List[Optional[Dict[str, ClockReading]]] = []
    for when in ("before", "after"):
        readings = data.get(when)
        if readings is None:
            parts.append(None)
            continue
        if not isinstance(readings, Mapping):
            raise ValueError(f"clocks.{when} must be an object of node: reading")
        got = {}
        for node, r in readings.items():
            try:
                reading = ClockReading.from_json(r)
            except ValueError as err:
                raise ValueError(f"clocks.{when}.{node}: {err}") from None
            if reading.node != node:
                raise ValueError(f"clocks.{when}.{node}: the reading is of node {reading.node!r}")
            got[node] = reading
        parts.append(got)
    return parts[0] or {}, parts[1]




# ---------------------------------------------------------------- the router driver

#: how the analysis reads the captures: our wire format, Zenoh's, or a router it does not know
WIRES = ("testbed", "zenoh", "unknown")

_Driver = TypeVar("_Driver", bound="DriverRecord")


@dataclass(frozen=True)
class DriverRecord:
    """The manifest's ``router_driver``: ``{"name", "client", "wire", "metrics", "events", "admin",
    "settings_ignored"}``. ``recorded`` False: the manifest had none (a run of our router from before drivers
    existed)."""

    name: str = "testbed"
    wire: str = "testbed"
    client: str = "testbed"
    metrics: bool = True
    events: bool = True
    admin: bool = True
    recorded: bool = True

    def to_json(self, settings_ignored: List[str]) -> Dict[str, Any]:
        """What the orchestrator writes, with the router settings the driver does not apply."""
        return {"name": self.name, "client": self.client, "wire": self.wire, "metrics": self.metrics,
                "events": self.events, "admin": self.admin, "settings_ignored": list(settings_ignored)}

    @classmethod
    def from_manifest(cls: Type[_Driver], manifest: Optional[Mapping]) -> Tuple[_Driver, List[str]]:
        """The run's driver and the problems reading it. An ``extra.router_driver`` is read when there is no
        ``router_driver`` (hand-made run folders); none at all is our router (``recorded`` False). A
        malformed entry reads as an unknown wire (the captures are then searched for the traffic header,
        which is right whatever the wire) with metrics and events taken as absent."""
        man = manifest or {}
        raw = man.get("router_driver")
        if raw in (None, {}) and isinstance(man.get("extra"), dict):
            raw = man["extra"].get("router_driver")
        if raw in (None, {}):
            return cls(recorded=False), []
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            return cls("unknown", "unknown", "unknown", False, False, False), [
                f"router_driver {raw!r} is not {{name, wire, client, metrics, events, admin}}: the captures are "
                "searched for the traffic header, router metrics and events taken as not provided"]
        problems = []
        wire = raw.get("wire")
        if wire not in WIRES:
            problems.append(f"router_driver.wire {wire!r} is not one of {', '.join(WIRES)}: read as unknown")
            wire = "unknown"
        flags = {}
        for key in ("metrics", "events", "admin"):
            v = raw.get(key)
            if not isinstance(v, bool):
                problems.append(f"router_driver.{key} {v!r} is not true or false: read as false")
                v = False
            flags[key] = v
        return cls(raw["name"], wire, str(raw.get("client") or "unknown"), **flags), problems
