"""Figures set by the configuration rather than by the network, and why a check is there: what report.html
says beside them (docs/reports.md, "Figures bounded by configuration").

A link that fails without closing its connections (a scenario ``link_down``: the wire goes silent) is declared
dead by the router at its end when nothing has arrived for the **lease**; the peer sent something at least
every **keep-alive** interval until the cut, so the detection comes between lease − keep-alive and the lease
after it (2–3 s with the defaults 3 s and 1 s). A detection time after a failure is therefore the router's
configuration, not a property of the network, unless the connection closed first (a killed router's kernel
closes its sockets at once).
"""
from __future__ import annotations

from typing import Optional

from runfolder.units import UnitError, format_duration, parse_duration

__all__ = ["failure_detection_bound", "lease_ns", "CLOCK_CHECK_WHY", "DEFAULT_LEASE_NS"]

#: beside the clock check in the report: why every run has it
CLOCK_CHECK_WHY = ("checked on every run: each latency is the subscriber's clock minus the publisher's, so the "
                   "clocks' error must stay a small share of what is measured (the topology's "
                   "clock_error_max_share sets the share)")


def _ns(value) -> Optional[int]:
    try:
        return parse_duration(value) if value is not None else None
    except (UnitError, ValueError, TypeError):
        return None


#: the routers' lease when the manifest does not say (docs/router.md: lease_ms 3000)
DEFAULT_LEASE_NS = 3 * 10**9


def _settings(manifest: Optional[dict]) -> dict:
    """node -> its router settings as the manifest's resolved spec has them."""
    settings = ((manifest or {}).get("spec") or {}).get("router_settings")
    return settings if isinstance(settings, dict) else {}


def lease_ns(manifest: Optional[dict]) -> int:
    """The longest lease of the run's routers (the default when the manifest has none)."""
    leases = [_ns(s.get("lease")) for s in _settings(manifest).values() if isinstance(s, dict)]
    return max([x for x in leases if x], default=DEFAULT_LEASE_NS)


def failure_detection_bound(reroute: dict, manifest: Optional[dict]) -> Optional[str]:
    """What bounds this reroute's detection time, when its cause is a failure (scenario ``link_down`` or
    ``kill_router``) detected by a router's ``link_down``: the lease and keep-alive of the detecting router, as
    the manifest's resolved spec has them (None for other causes, or when the run's router driver ignores the
    lease)."""
    if reroute.get("cause") != "failure" or reroute.get("detection_event") != "link_down":
        return None
    man = manifest or {}
    driver = man.get("router_driver") if isinstance(man.get("router_driver"), dict) else {}
    if "lease" in (driver.get("settings_ignored") or []):
        return None
    settings = _settings(man)
    own = settings.get(reroute.get("detection_node")) or next(iter(settings.values()), None)
    if not isinstance(own, dict):
        return None
    lease, keepalive = _ns(own.get("lease")), _ns(own.get("keepalive"))
    if lease is None:
        return None
    if keepalive is None or keepalive >= lease:
        return f"at most the lease ({format_duration(lease)}) unless the connection closed first"
    return (f"set by the lease: {format_duration(lease - keepalive)}–{format_duration(lease)} after a silent cut "
            f"(lease {format_duration(lease)} − keep-alive {format_duration(keepalive)}) unless the connection "
            "closed first")
