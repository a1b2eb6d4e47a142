"""Congestion-aware routing: the monitor loop and its decisions (block a
link's data weight, restore it), flow pinning so that flows already on a path
do not oscillate, pin requests to upstream routers, and the expiry of idle
flows.  The state it owns: ``flows`` and ``monitor``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Dict, List, Optional, Tuple

from .codec import CodecError, FrameKind, router_id
from .congestion import BLOCK, Decision
from .connection import Connection
from .flows import Flow
from .routecontrol import DATA_TREE_SET

log = logging.getLogger(__name__)


class CongestionRouting:
    """Mixin of :class:`router.node.RouterNode`: monitor decisions and flow pinning."""

    async def _monitor_loop(self) -> None:
        interval = self.config.monitor_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                self.monitor_tick()
            except Exception:  # a bug in the monitor must not stop it for good
                log.exception("congestion monitor tick failed")

    def monitor_tick(self, now: Optional[float] = None) -> List[Decision]:
        links = []
        for name, conn in self.routers.items():
            links.append((name, id(conn), self.link_capacity(name), conn.pipeline.tx.bytes))
        decisions = self.monitor.tick(time.monotonic() if now is None else now, links)
        for d in decisions:
            self._apply_decision(d)
        return decisions

    def _apply_decision(self, d: Decision) -> None:
        before = self._data_weight(d.neighbour)
        if d.kind == BLOCK:
            after = self.config.block_weight
            self.events.emit("congestion_detected", **d.numbers(), weight_before=before, weight_after=after)
            self._pin_flows_using(d.neighbour)
        else:
            restore = self.config.restore_weight
            if restore is None:  # back to the link's configured data weight (the reference's 100)
                self.weight_overrides.get(DATA_TREE_SET, {}).pop(d.neighbour, None)
                after = self._data_weight(d.neighbour)
                self.weight_overrides.setdefault(DATA_TREE_SET, {})[d.neighbour] = before
                self.events.emit("congestion_cleared", **d.numbers(), weight_before=before, weight_after=after)
                self.clear_link_weight(d.neighbour, DATA_TREE_SET, reason=f"congestion {d.kind}", source="monitor")
                return
            after = restore
            self.events.emit("congestion_cleared", **d.numbers(), weight_before=before, weight_after=after)
        self.set_link_weight(d.neighbour, after, DATA_TREE_SET, reason=f"congestion {d.kind}", source="monitor")

    def _pin_flows_using(self, neighbour: str) -> None:
        """The link to ``neighbour`` is being blocked: the data flows using it move
        to the new data trees.  Flows that arrived from another router are kept
        on the link here (``local_block``, so messages already on the way are
        delivered) and their upstream router is asked to move them; flows that
        entered here (from a local client) are moved here."""
        now = time.time_ns()
        requests: Dict[str, List[Dict[str, str]]] = {}
        for fl in self.flows.active(now, self.flow_ttl_ns):
            if neighbour not in fl.next_hops:
                continue
            if fl.prev_is_router:
                self._pin(fl, fl.next_hops, "local_block")
                requests.setdefault(fl.prev_name, []).append({"origin": fl.origin, "key": fl.key})
            else:
                fl.move_requested = "local_block"
        self._send_pin_requests(requests, [self.name, neighbour])

    def _send_pin_requests(self, requests: Dict[str, List[Dict[str, str]]], link: List[str]) -> None:
        for upstream, flows in requests.items():
            conn = self.routers.get(upstream)
            if conn is not None:
                conn.send_control(FrameKind.LINKSTATE, {"pin": {"from": self.name, "link": link, "flows": flows}})
                self.counters.pin_requests_sent += 1

    def _on_pin_request(self, conn: Connection, req: Any) -> None:
        """A downstream router blocked a link our flows use: move them to the new
        data trees (pinned there) and pass the request on upstream."""
        if not isinstance(req, dict) or not isinstance(req.get("flows"), list) or not isinstance(req.get("link"), list):
            raise CodecError("LINKSTATE pin request needs 'flows' and 'link' lists")
        self.counters.pin_requests_received += 1
        if self.data_set < 0:
            return
        requests: Dict[str, List[Dict[str, str]]] = {}
        for f in req["flows"]:
            if not isinstance(f, dict) or not isinstance(f.get("origin"), str) or not isinstance(f.get("key"), str):
                raise CodecError("LINKSTATE pin request flows must be {origin, key} objects")
            fl = self.flows.get((self.data_set, router_id(f["origin"]), f["key"].encode("utf-8")))
            if fl is None:
                continue
            fl.move_requested = "upstream_request"
            if fl.prev_is_router and fl.prev_name != conn.peer_name:
                requests.setdefault(fl.prev_name, []).append(f)
        self._send_pin_requests(requests, req["link"])
        self._schedule_recompute()

    def _reconcile_flows(self, weight_only: bool) -> None:
        """After the data trees changed: flows asked to move are pinned to their new
        next hops; when only weights changed (no link came or went), every other
        active flow whose next hops would change is pinned where it is, so flows
        move only when asked and never flap back and forth."""
        now = time.time_ns()
        for fl in self.flows.active(now, self.flow_ttl_ns):
            new = self.routing.next_hops_in_set(self.data_set, fl.origin, fl.key)
            if fl.move_requested:
                reason, fl.move_requested = fl.move_requested, ""
                if new:
                    self._pin(fl, new, reason)
            elif (weight_only and fl.pinned is None and fl.next_hops and new != fl.next_hops
                  and all(h in self.routers for h in fl.next_hops)):
                self._pin(fl, fl.next_hops, "route_change")

    def _pin(self, fl: Flow, hops: Tuple[str, ...], reason: str) -> None:
        previous = fl.next_hops
        fl.pinned = tuple(hops)
        fl.pin_reason = reason
        fl.next_hops = fl.pinned
        self.counters.flows_pinned += 1
        self.events.emit("flow_pinned", key=fl.key, origin=fl.origin, priority=fl.priority,
                         previous_hop=fl.prev_name, next_hop=list(fl.pinned), previous_next_hop=list(previous),
                         reason=reason)
        self._invalidate_caches()

    def _unpin(self, fl: Flow, reason: str) -> None:
        if fl.pinned is None:
            return
        self.events.emit("flow_unpinned", key=fl.key, origin=fl.origin, priority=fl.priority,
                         next_hop=list(fl.pinned), reason=reason)
        fl.pinned = None
        fl.pin_reason = ""
        self.counters.flows_unpinned += 1
        self._invalidate_caches()

    def _unpin_via(self, neighbour: str, reason: str) -> None:
        for fl in list(self.flows.flows.values()):
            if fl.pinned is not None and neighbour in fl.pinned:
                self._unpin(fl, reason)

    async def _sweep_loop(self) -> None:
        interval = self.config.flow_sweep_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            self.sweep_flows()

    def sweep_flows(self, now_ns: Optional[int] = None) -> int:
        """Expire flows idle longer than ``flow_ttl_ms`` (unpinning them)."""
        now = time.time_ns() if now_ns is None else now_ns
        dead = self.flows.expire(now, self.flow_ttl_ns)
        for fl in dead:
            self.counters.flows_expired += 1
            self.events.emit("flow_expired", key=fl.key, origin=fl.origin, priority=fl.priority,
                             next_hop=list(fl.next_hops), idle_ms=(now - fl.last_ns) // 1_000_000,
                             pinned=fl.pinned is not None)
            self._unpin(fl, "ttl")
        if dead:
            self._invalidate_caches()
        return len(dead)
