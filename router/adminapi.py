"""The admin API's operations and views: run-time link weights and link
capacities (validated requests), and the read-only views of weights,
capacities, flows and the whole node (``GET /admin/state``).  The HTTP server
that exposes them is in router/metrics.py.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Set

from .routecontrol import DATA_TREE_SET


class LinkMismatch(ValueError):
    """An admin request names a link between two routers that is not the one this router uses."""



class AdminViews:
    """Mixin of :class:`router.node.RouterNode`: admin operations and views."""

    def admin_set_weights(self, body: Any) -> Dict[str, Any]:
        """POST /admin/weights: ``{"neighbour": str, "data_weight": int|null, "weight": int|null}``
        (null = back to the configured value).  Raises ValueError on bad input."""
        if not isinstance(body, dict):
            raise ValueError("expected a JSON object")
        unknown = set(body) - {"neighbour", "weight", "data_weight", "reason"}
        if unknown:
            raise ValueError(f"unknown key(s) {sorted(unknown)}; allowed: neighbour, weight, data_weight, reason")
        nb = body.get("neighbour")
        if not isinstance(nb, str) or (nb not in self.routers and nb not in self.neighbour_cfg):
            raise ValueError(f"neighbour {nb!r} is not a neighbour router of {self.name}")
        if "weight" not in body and "data_weight" not in body:
            raise ValueError("give weight and/or data_weight")
        for k in ("weight", "data_weight"):
            v = body.get(k)
            if k in body and v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 65535):
                raise ValueError(f"{k}: expected an integer 1..65535 or null, got {v!r}")
        reason = str(body.get("reason", "admin"))
        for k, wset in (("weight", ""), ("data_weight", DATA_TREE_SET)):
            if k in body:
                if body[k] is None:
                    self.clear_link_weight(nb, wset, reason=reason, source="admin")
                else:
                    self.set_link_weight(nb, body[k], wset, reason=reason, source="admin")
        return self.weights_view()

    def weights_view(self) -> Dict[str, Any]:
        names = sorted(set(self.neighbour_cfg) | set(self.routers))
        out = {}
        for n in names:
            st = self.monitor.links.get(n)
            out[n] = {"up": n in self.routers, "weight": self.current_weight(n), "data_weight": self._data_weight(n),
                      "congested": bool(st and st.blocked), "link_capacity_bps": self.link_capacity(n)}
        return out

    # ------------------------------------------------------------ link capacity (congestion monitor)

    def link_capacity(self, neighbour: str) -> Optional[int]:
        """The capacity (bit/s) the monitor decides against for the link to ``neighbour``:
        the last one set through the admin API, else the configured ``link_capacity_bps``."""
        if neighbour in self.capacity_overrides:
            return self.capacity_overrides[neighbour]
        cfg = self.neighbour_cfg.get(neighbour)
        return cfg.link_capacity_bps if cfg is not None else None

    def _neighbour_addresses(self, neighbour: str) -> Set[str]:
        out: Set[str] = set()
        cfg = self.neighbour_cfg.get(neighbour)
        if cfg is not None:
            out.add(cfg.address)
        conn = self.routers.get(neighbour)
        if conn is not None:
            peer = conn.transport.get_extra_info("peername")
            if isinstance(peer, tuple) and peer:
                out.add(str(peer[0]))
        return out

    def admin_set_capacity(self, body: Any) -> Dict[str, Any]:
        """POST /admin/capacity: ``{"neighbour": str, "capacity_bps": int|null, "address": str, "reason": str}``.

        Sets the capacity of the link to ``neighbour`` that the congestion monitor
        decides against from its next interval on (``null``: the link has no known
        capacity and the monitor ignores it, restoring it if it held it blocked).
        ``address`` (optional) is the neighbour's address on the link meant; when it
        is not the address this router reaches that neighbour at, the change is
        refused with :class:`LinkMismatch` (another link between the same routers).
        Emits ``link_capacity_changed``.  Raises ValueError on bad input."""
        if not isinstance(body, dict):
            raise ValueError("expected a JSON object")
        unknown = set(body) - {"neighbour", "capacity_bps", "address", "reason"}
        if unknown:
            raise ValueError(f"unknown key(s) {sorted(unknown)}; allowed: neighbour, capacity_bps, address, reason")
        nb = body.get("neighbour")
        if not isinstance(nb, str) or (nb not in self.routers and nb not in self.neighbour_cfg):
            raise ValueError(f"neighbour {nb!r} is not a neighbour router of {self.name}")
        if "capacity_bps" not in body:
            raise ValueError("give capacity_bps (bit/s, or null for no known capacity)")
        cap = body["capacity_bps"]
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap <= 0):
            raise ValueError(f"capacity_bps: expected a positive integer (bit/s) or null, got {cap!r}")
        address = body.get("address")
        if address is not None:
            if not isinstance(address, str) or not address:
                raise ValueError("address: expected the neighbour's address on the link, as a string")
            known = self._neighbour_addresses(nb)
            if address not in known:
                raise LinkMismatch(f"{self.name} reaches {nb} at {', '.join(sorted(known)) or 'no known address'}, "
                                   f"not at {address}: that link is not the one the monitor watches")
        reason = str(body.get("reason", "admin"))
        before = self.link_capacity(nb)
        self.capacity_overrides[nb] = cap
        self.events.emit("link_capacity_changed", neighbour=nb, capacity_bps_before=before, capacity_bps_after=cap,
                         source="admin", reason=reason)
        return dict(neighbour=nb, capacity_bps_before=before, **self.capacity_view(nb)[nb])

    def capacity_view(self, neighbour: Optional[str] = None) -> Dict[str, Any]:
        """GET /admin/capacity: per neighbour, the capacity the monitor uses and its last figures."""
        names = [neighbour] if neighbour is not None else sorted(set(self.neighbour_cfg) | set(self.routers))
        out = {}
        for n in names:
            cfg = self.neighbour_cfg.get(n)
            st = self.monitor.links.get(n)
            out[n] = {"capacity_bps": self.link_capacity(n),
                      "configured_capacity_bps": cfg.link_capacity_bps if cfg is not None else None,
                      "cap_limit_bps": round(st.cap_limit_bps) if st is not None else None,
                      "congested": bool(st and st.blocked), "up": n in self.routers,
                      "monitor_interval_ms": self.config.monitor_interval_ms if self.config.congestion_aware else None}
        return out

    def flows_view(self) -> List[Dict[str, Any]]:
        now = time.time_ns()
        return [fl.to_json(now) for fl in sorted(self.flows.flows.values(), key=lambda f: (f.origin, f.key))]

    def describe(self) -> Dict[str, Any]:
        return {
            "node": self.name,
            "neighbours": {n: {"weight": self.current_weight(n), "data_weight": self._data_weight(n)}
                           for n in sorted(self.routers)},
            "weight_overrides": {k or "base": dict(v) for k, v in self.weight_overrides.items()},
            "clients": sorted(c.peer_name for c in self.clients),
            "linkstate": [lsp.to_json() for lsp in self.lsdb.all()],
            "routing": self.routing.describe(),
            "weights": self.weights_view(),
            "capacity": self.capacity_view(),
            "flows": self.flows_view(),
            "congestion_aware": self.config.congestion_aware,
            "limits": self.limits_view(),
            "streams": self.streams_view(),
        }
