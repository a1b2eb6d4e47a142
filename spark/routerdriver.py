"""What the run's router driver provides, as the manifest records it (``router_driver``), and the words the
report and the checks use for what it does not provide.

``router_driver``: ``{"name": "testbed"|"zenoh"|"command", "wire": "testbed"|"zenoh"|"unknown", "client":
"testbed"|"zenoh", "metrics": bool, "events": bool, "admin": bool, ...}``: a top-level field of
``manifest.json`` (``testbed.run.manifest.Manifest.router_driver``, written by the orchestrator). An
``extra.router_driver`` is read when there is none (hand-made run folders). A manifest without one (or with
an empty one: the field's default) is a run of our router from before drivers existed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import List, Optional, Tuple

__all__ = ["RouterDriver", "read_router_driver", "TESTBED_DRIVER"]

_WIRES = ("testbed", "zenoh", "unknown")


@dataclass(frozen=True)
class RouterDriver:
    name: str = "testbed"
    wire: str = "testbed"
    client: str = "testbed"
    metrics: bool = True
    events: bool = True
    admin: bool = True
    recorded: bool = True  # False: the manifest had no router_driver (an older run: our router)

    @property
    def frames_decodable(self) -> bool:
        """Our wire format: the captures decode as router frames (``spark.pcap``); any other is searched for
        the traffic header (``spark.streamsearch``)."""
        return self.wire == "testbed"

    @property
    def observation_method(self) -> str:
        return "router-frames" if self.frames_decodable else "header-search"

    def not_available(self, what: str) -> str:
        """The reason shown for a figure the driver cannot give: ``what`` is "metrics" or "events"."""
        thing = "metrics" if what == "metrics" else "event log"
        return f"not available: router driver {self.name} provides no {thing}"

    def reason(self, what: str) -> Optional[str]:
        """None when the driver provides ``what`` ("metrics", "events"), else why not."""
        return None if getattr(self, what) else self.not_available(what)

    def as_dict(self) -> dict:
        return asdict(self)


TESTBED_DRIVER = RouterDriver(recorded=False)


def read_router_driver(manifest: Optional[dict]) -> Tuple[RouterDriver, List[str]]:
    """The run's driver and the problems reading it (a malformed entry: the captures are then searched for
    the traffic header, which is right whatever the wire, and metrics and events are taken as absent)."""
    man = manifest or {}
    raw = man.get("router_driver")
    if raw in (None, {}) and isinstance(man.get("extra"), dict):
        raw = man["extra"].get("router_driver")
    if raw in (None, {}):
        return TESTBED_DRIVER, []
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        return RouterDriver("unknown", "unknown", "unknown", False, False, False), [
            f"router_driver {raw!r} is not {{name, wire, client, metrics, events, admin}}: the captures are "
            "searched for the traffic header, router metrics and events taken as not provided"]
    problems = []
    wire = raw.get("wire")
    if wire not in _WIRES:
        problems.append(f"router_driver.wire {wire!r} is not one of {', '.join(_WIRES)}: read as unknown")
        wire = "unknown"
    flags = {}
    for key in ("metrics", "events", "admin"):
        v = raw.get(key)
        if not isinstance(v, bool):
            problems.append(f"router_driver.{key} {v!r} is not true or false: read as false")
            v = False
        flags[key] = v
    return RouterDriver(raw["name"], wire, str(raw.get("client") or "unknown"), **flags), problems
