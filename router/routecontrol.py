"""Route control: this router's link-state packet (links, weights, local
subscriptions), flooding, run-time link weights and the recomputation of the
trees (default and data) after a change.  The state it owns: ``lsdb``,
``routing``, ``weight_overrides`` and the route cache's invalidation.
"""
from __future__ import annotations

import asyncio
import logging
from typing import List, Optional, Tuple

from .connection import Connection
from .codec import FrameKind
from .linkstate import LinkStatePacket
from .routing import TreeSetSpec

log = logging.getLogger(__name__)

DATA_TREE_SET = "data"
DEFAULT_TREE_SET = "default"


def tree_sets_for(data_priorities) -> List[TreeSetSpec]:
    """The default trees (base weights) and the data trees (LSP ``extra["data"]`` weights)."""
    data = frozenset(data_priorities)
    specs = [TreeSetSpec(DEFAULT_TREE_SET, "", frozenset(range(8)) - data)]
    if data:
        specs.append(TreeSetSpec(DATA_TREE_SET, DATA_TREE_SET, data))
    return specs



class RouteControl:
    """Mixin of :class:`router.node.RouterNode`: link state, weights, trees."""

    def _local_sub_keys(self) -> Tuple[str, ...]:
        return tuple(sorted({k for st in self.clients.values() for k in st.subs.values()}))

    def _local_queryable_keys(self) -> Tuple[str, ...]:
        return tuple(sorted({k for st in self.clients.values() for k in st.queryables.values()}))

    def _originate_lsp(self, flood: bool = True) -> None:
        self._seq += 1
        base = self.weight_overrides.get("", {})
        links = {n: base.get(n, w) for n, w in self.router_weights.items()}
        extra = {name: {n: w for n, w in weights.items() if n in links}
                 for name, weights in self.weight_overrides.items() if name}
        if self.data_set >= 0 or DATA_TREE_SET in {s.weights for s in self.routing.specs}:
            extra[DATA_TREE_SET] = {n: self._data_weight(n, w) for n, w in links.items()}
        lsp = LinkStatePacket(self.name, self._seq, links, self._local_sub_keys(),
                              {k: v for k, v in extra.items() if v}, self._local_queryable_keys())
        old = self.lsdb.get(self.name)
        self.lsdb.update(lsp)
        if flood:
            self._flood(lsp, exclude=None)
            self._routes_changed(old, lsp)

    def _data_weight(self, neighbour: str, base: Optional[int] = None) -> int:
        """The data-tree weight advertised for the link to ``neighbour``: a run-time
        override, else the configured ``data_weight``, else the link's base weight."""
        w = self.weight_overrides.get(DATA_TREE_SET, {}).get(neighbour)
        if w is not None:
            return w
        cfg = self.neighbour_cfg.get(neighbour)
        if cfg is not None and cfg.data_weight is not None:
            return cfg.data_weight
        if base is None:
            base = self.weight_overrides.get("", {}).get(neighbour, self.router_weights.get(neighbour))
        return base if base is not None else (cfg.weight if cfg else 100)

    def current_weight(self, neighbour: str, weight_set: str = "") -> Optional[int]:
        if weight_set == DATA_TREE_SET:
            return self._data_weight(neighbour)
        if weight_set == "":
            return self.weight_overrides.get("", {}).get(neighbour, self.router_weights.get(neighbour))
        return self.weight_overrides.get(weight_set, {}).get(neighbour)

    def set_link_weight(self, neighbour: str, weight: int, weight_set: str = "", reason: str = "",
                        source: str = "admin") -> None:
        """Change the weight of the link to ``neighbour`` in ``weight_set`` ("" =
        the base weights used by the default trees; "data" = the data trees'
        weights; another name = a weight map carried in the LSPs' ``extra``).
        Floods a new LSP (every router recomputes its trees) and emits
        ``weight_changed``."""
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 65535:
            raise ValueError(f"link weight must be an integer 1..65535, got {weight!r}")
        before = self.current_weight(neighbour, weight_set)
        self.weight_overrides.setdefault(weight_set, {})[neighbour] = weight
        self.events.emit("weight_changed", neighbour=neighbour, tree=weight_set or DEFAULT_TREE_SET,
                         weight_before=before, weight_after=weight, source=source, reason=reason)
        self._originate_lsp()

    def clear_link_weight(self, neighbour: str, weight_set: str = "", reason: str = "",
                          source: str = "admin") -> None:
        """Undo ``set_link_weight``: back to the configured weight (or no override)."""
        if neighbour not in self.weight_overrides.get(weight_set, {}):
            return
        before = self.current_weight(neighbour, weight_set)
        del self.weight_overrides[weight_set][neighbour]
        self.events.emit("weight_changed", neighbour=neighbour, tree=weight_set or DEFAULT_TREE_SET,
                         weight_before=before, weight_after=self.current_weight(neighbour, weight_set),
                         source=source, reason=reason)
        self._originate_lsp()

    def _flood(self, lsp: LinkStatePacket, exclude: Optional[Connection]) -> None:
        body = lsp.to_json()
        for conn in self.routers.values():
            if conn is not exclude:
                conn.send_control(FrameKind.LINKSTATE, body)

    def _on_linkstate(self, conn: Connection, lsp: LinkStatePacket) -> None:
        if lsp.origin == self.name:
            # our own LSP coming back around a cycle of links (a neighbour got it by a faster path
            # first, then floods it on to us) is left alone: superseding it would flood a new one,
            # which can come back the same way, for as long as the links' delays differ so.  Only
            # one of a previous incarnation (a sequence number ahead of ours, or ours with other
            # contents) is superseded.
            if lsp.seq > self._seq or (lsp.seq == self._seq and lsp != self.lsdb.get(self.name)):
                self._seq = lsp.seq
                self._originate_lsp()
            return
        old = self.lsdb.get(lsp.origin)
        if self.lsdb.update(lsp):
            if old is not None:
                self._report_remote_weight_changes(old, lsp)
            self._flood(lsp, exclude=conn)
            self._routes_changed(old, lsp)

    def _routes_changed(self, old: Optional[LinkStatePacket], new: LinkStatePacket) -> None:
        """Act on a stored LSP: a change of links or weights recomputes the trees (held back as
        ``_schedule_recompute`` says); a change of subscriptions alone leaves the trees as they are
        and is applied at once, so a new subscriber is reached as soon as the flood arrives, however
        long the last tree computation took (at 100 routers on 2 cores one took 0.85 s, holding every
        change back 8.5 s, and the first messages to a new subscriber were dropped for no route)."""
        if old is not None and old.links == new.links and old.extra == new.extra:
            if old.subs != new.subs or old.queryables != new.queryables:
                self._apply_subscriptions(new)
            return
        self._schedule_recompute()

    def _apply_subscriptions(self, lsp: LinkStatePacket) -> None:
        self.routing.update_subscriptions(self.lsdb)
        if self._data_edges is not None:
            # the snapshot that tells a weight-only change from others follows the subscriptions
            self._data_edges = (self._data_edges[0], self._subscription_snapshot())
        self._invalidate_caches()
        self._sync_query_peers()
        self.events.emit("subscriptions_updated", router=lsp.origin, subscriptions=len(lsp.subs),
                         queryables=len(lsp.queryables))

    def _report_remote_weight_changes(self, old: LinkStatePacket, new: LinkStatePacket) -> None:
        """``weight_changed`` (source linkstate) for each weight another router changed on a link it kept."""
        for tree, get in ((DEFAULT_TREE_SET, lambda p, n: p.links.get(n)),
                          (DATA_TREE_SET, lambda p, n: p.extra.get(DATA_TREE_SET, {}).get(n, p.links.get(n)))):
            for nbr in sorted(set(old.links) & set(new.links)):
                before, after = get(old, nbr), get(new, nbr)
                if before != after:
                    self.events.emit("weight_changed", router=new.origin, neighbour=nbr, tree=tree,
                                     weight_before=before, weight_after=after, source="linkstate")

    def _schedule_recompute(self) -> None:
        """Recompute the routes ``route_debounce_ms`` after a change, but not sooner than
        ``route_hold_factor`` times the last computation's duration after its end: a change alone is
        acted on at once, while a flood of changes (many routers starting, a large topology) costs a
        bounded share of the router's time.  The hold is at most ``route_hold_max_ms``: the duration is
        wall time, which on a crowded machine is mostly waiting for a core (at 100 routers on 2 cores a
        20 ms computation took 1.2 s), and a router holding a change back forwards on stale trees."""
        if self._recompute_handle is not None:
            return
        loop = asyncio.get_running_loop()
        delay = self.config.route_debounce_ms / 1000.0
        last_end, last_duration = self._last_recompute
        hold = last_duration * self.config.route_hold_factor
        if self.config.route_hold_max_ms:
            hold = min(hold, self.config.route_hold_max_ms / 1000.0)
        delay = max(delay, last_end + hold - loop.time())
        self._recompute_handle = loop.call_later(delay, self._recompute)

    def _recompute(self) -> None:
        self._recompute_handle = None
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            result = self.routing.recompute(self.lsdb)
        except ValueError as exc:
            log.error("route computation failed: %s", exc)
            self.events.emit("trees_recompute_failed", reason=str(exc))
            return
        self.counters.trees_recomputed += 1
        self.data_set = next((i for i, s in enumerate(self.routing.specs) if s.name == DATA_TREE_SET), -1)
        if self.data_set >= 0:
            # Pin "where it is" only when nothing but data weights changed: not on a
            # link coming or going, nor on a subscription change.
            adj = self.lsdb.edges(self.routing.specs[self.data_set].weights)
            snapshot = (frozenset((a, b, w) for a, nb in adj.items() for b, w in nb.items()),
                        self._subscription_snapshot())
            prev = self._data_edges
            weight_only = (prev is not None and prev[1] == snapshot[1] and prev[0] != snapshot[0]
                           and {e[:2] for e in prev[0]} == {e[:2] for e in snapshot[0]})
            self._data_edges = snapshot
            if self.config.congestion_aware:
                self._reconcile_flows(weight_only)
        self._invalidate_caches()
        ended = loop.time()
        self._last_recompute = (ended, ended - started)
        self.events.emit("trees_recomputed", duration_ns=result.duration_ns, routers=result.routers,
                         links=result.links, tree_sets=[s.name for s in self.routing.specs])
        self._sync_query_peers()  # last: what it sets off (queries failed over, ended) is not the trees' affair

    def _subscription_snapshot(self) -> tuple:
        return tuple(sorted(self.routing.subs.items()))

    def _invalidate_caches(self) -> None:
        self._remote_cache.clear()
