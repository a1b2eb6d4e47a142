"""The router process: listeners, neighbour dialers, link-state flooding,
route computation and the publication forwarding fast path."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from . import keyexpr
from .codec import (
    DEFAULT_TTL,
    FLAG_BLOCK,
    FLAG_EXPRESS,
    MESSAGE_HEADER,
    MESSAGE_HEADER_SIZE,
    MAX_KEY_LEN,
    KNOWN_MESSAGE_FLAGS,
    CodecError,
    FrameKind,
    encode_json_frame,
    router_id,
)
from .config import Address, NeighbourConfig, RouterConfig
from .connection import Connection, ConnectionHandler, read_frame
from .events import EventLog
from .linkstate import LinkStateDatabase, LinkStatePacket
from .pipeline import TransmissionPipeline
from .congestion import BLOCK, CongestionMonitor, Decision
from .flows import Flow, FlowTable
from .routing import RoutingTable, TreeSetSpec

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 5.0
STREAM_LIMIT = 1 << 20
ROUTE_CACHE_MAX = 65536
DROP_EVENT_INTERVAL_S = 1.0
_HOP_HEAD = __import__("struct").Struct(">BBI")  # flags, ttl, origin: first 6 bytes of a message


@dataclass
class ClientState:
    conn: Connection
    subs: Dict[int, str] = field(default_factory=dict)


@dataclass
class NodeCounters:
    no_route: int = 0
    ttl_expired: int = 0
    trees_recomputed: int = 0
    links_closed_block: int = 0
    flows_pinned: int = 0
    flows_unpinned: int = 0
    flows_expired: int = 0
    pin_requests_sent: int = 0
    pin_requests_received: int = 0


DATA_TREE_SET = "data"
DEFAULT_TREE_SET = "default"


def tree_sets_for(data_priorities) -> List[TreeSetSpec]:
    """The default trees (base weights) and the data trees (LSP ``extra["data"]`` weights)."""
    data = frozenset(data_priorities)
    specs = [TreeSetSpec(DEFAULT_TREE_SET, "", frozenset(range(8)) - data)]
    if data:
        specs.append(TreeSetSpec(DATA_TREE_SET, DATA_TREE_SET, data))
    return specs


class LinkMismatch(ValueError):
    """An admin request names a link between two routers that is not the one this router uses."""


class RouterNode(ConnectionHandler):
    def __init__(self, config: RouterConfig, events: Optional[EventLog] = None) -> None:
        self.config = config
        self.name = config.node
        self.id = router_id(config.node)
        self.events = events or EventLog(config.node, config.event_log)
        self.lsdb = LinkStateDatabase()
        self.routing = RoutingTable(self.name, tree_sets_for(config.data_priorities))
        self.routers: Dict[str, Connection] = {}
        self.router_weights: Dict[str, int] = {}
        # Runtime weight changes: weight set name ("" = base weights) -> neighbour -> weight.
        self.weight_overrides: Dict[str, Dict[str, int]] = {}
        self.clients: Dict[Connection, ClientState] = {}
        self.counters = NodeCounters()
        self.neighbour_cfg: Dict[str, NeighbourConfig] = {n.name: n for n in config.neighbours}
        # Run-time link capacities for the monitor (POST /admin/capacity): neighbour -> bit/s or None.
        self.capacity_overrides: Dict[str, Optional[int]] = {}
        self._seq = time.time_ns()
        self._servers: List[asyncio.AbstractServer] = []
        self._tasks: List[asyncio.Task] = []
        self._recompute_handle: Optional[asyncio.TimerHandle] = None
        self._remote_cache: Dict[Tuple[int, int, bytes], Tuple[Connection, ...]] = {}
        self._stopped = asyncio.Event()
        self._pending_drops: Dict[Tuple[str, str, int], int] = {}
        self._drop_flush: Optional[asyncio.TimerHandle] = None
        self.lease_s = config.lease_ms / 1000.0
        self.keepalive_s = config.keepalive_ms / 1000.0
        self.ready_addresses: Dict[str, List[Address]] = {}
        # Congestion-aware routing: flow table, monitor, data tree set index.
        self.flows = FlowTable()
        self.flow_ttl_ns = config.flow_ttl_ms * 1_000_000
        self.monitor = CongestionMonitor(config.data_priorities, config.high_priorities, config.monitor_buffer_bps,
                                         config.recovery_ratio)
        self.data_set = -1
        self._data_edges: Optional[tuple] = None

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._originate_lsp(flood=False)
        self._recompute()
        for addr in self.config.router_listen:
            srv = await asyncio.start_server(self._accept_router, addr.host, addr.port, limit=STREAM_LIMIT)
            self._servers.append(srv)
            self.ready_addresses.setdefault("router", []).append(self._bound(srv, addr))
        for addr in self.config.client_listen:
            srv = await asyncio.start_server(self._accept_client, addr.host, addr.port, limit=STREAM_LIMIT)
            self._servers.append(srv)
            self.ready_addresses.setdefault("client", []).append(self._bound(srv, addr))
        loop = asyncio.get_running_loop()
        for nb in self.config.neighbours:
            self._tasks.append(loop.create_task(self._dial_loop(nb), name=f"dial-{nb.name}"))
        self._tasks.append(loop.create_task(self._sweep_loop(), name="flow-sweep"))
        if self.config.congestion_aware:
            self._tasks.append(loop.create_task(self._monitor_loop(), name="congestion-monitor"))

    @staticmethod
    def _bound(srv: asyncio.AbstractServer, addr: Address) -> Address:
        for sock in srv.sockets:
            host, port = sock.getsockname()[:2]
            return Address(addr.host, port)
        return addr

    async def stop(self) -> None:
        for srv in self._servers:
            srv.close()
        for t in self._tasks:
            t.cancel()
        for conn in list(self.routers.values()) + [c.conn for c in self.clients.values()]:
            conn.close("router shutting down")
        self._stopped.set()

    # ------------------------------------------------------------ connection setup

    def _router_hello(self, weight: int) -> Dict[str, Any]:
        return {"role": "router", "name": self.name, "id": self.id, "lease_ms": self.config.lease_ms, "weight": weight}

    async def _dial_loop(self, nb: NeighbourConfig) -> None:
        backoff = self.config.reconnect_initial_ms / 1000.0
        while True:
            existing = self.routers.get(nb.name)
            if existing is not None:
                await existing.wait_closed()
                backoff = self.config.reconnect_initial_ms / 1000.0
                continue
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(nb.address, nb.port, limit=STREAM_LIMIT), HANDSHAKE_TIMEOUT_S)
            except (OSError, asyncio.TimeoutError) as exc:
                log.debug("connect to %s at %s:%d failed: %s", nb.name, nb.address, nb.port, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.config.reconnect_max_ms / 1000.0)
                continue
            try:
                writer.write(encode_json_frame(FrameKind.HELLO, self._router_hello(nb.weight)))
                frame = await asyncio.wait_for(read_frame(reader), HANDSHAKE_TIMEOUT_S)
                hello = self._check_hello(frame, "router")
                if hello["name"] != nb.name:
                    raise CodecError(f"expected router {nb.name!r} at {nb.address}:{nb.port}, found {hello['name']!r}")
            except (CodecError, OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
                self.events.emit("peer_disconnected", peer=nb.name, kind="router", reason=f"handshake failed: {exc}")
                writer.close()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.config.reconnect_max_ms / 1000.0)
                continue
            self._router_up(nb.name, reader, writer, nb.weight, nb.capacity_bps, dialer=self.name)

    def _check_hello(self, frame: Any, role: str) -> Dict[str, Any]:
        if frame.kind != FrameKind.HELLO:
            raise CodecError(f"expected HELLO, got frame kind {frame.kind}")
        hello = frame.json()
        if hello.get("role") != role:
            raise CodecError(f"expected a {role} HELLO, got role {hello.get('role')!r}")
        name = hello.get("name")
        if not isinstance(name, str) or not name or "/" in name:
            raise CodecError("HELLO name must be a non-empty string without '/'")
        return hello

    async def _accept_router(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            frame = await asyncio.wait_for(read_frame(reader), HANDSHAKE_TIMEOUT_S)
            hello = self._check_hello(frame, "router")
        except (CodecError, OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            self.events.emit("peer_disconnected", peer=str(peer), kind="router", reason=f"handshake failed: {exc}")
            writer.close()
            return
        name = hello["name"]
        if name == self.name:
            self.events.emit("peer_disconnected", peer=str(peer), kind="router", reason="peer has our own name")
            writer.close()
            return
        cfg = self.neighbour_cfg.get(name)
        offered = hello.get("weight")
        weight = cfg.weight if cfg else (max(1, min(65535, offered)) if isinstance(offered, int) else 100)
        writer.write(encode_json_frame(FrameKind.HELLO, self._router_hello(weight)))
        self._router_up(name, reader, writer, weight, cfg.capacity_bps if cfg else None, dialer=name)

    def _router_up(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   weight: int, capacity: Optional[int], dialer: str) -> None:
        old = self.routers.get(name)
        if old is not None:
            # Simultaneous connections: keep the one dialled by the smaller name.
            if dialer != min(self.name, name):
                writer.close()
                return
            old.close("replaced by a newer connection")
        conn = Connection(reader, writer, TransmissionPipeline(self.config.pipeline), self, name, "router",
                          self.lease_s, self.keepalive_s, capacity, notsent_lowat=self.config.tcp_notsent_lowat)
        self.routers[name] = conn
        self.router_weights[name] = weight
        conn.start()
        cfg = self.neighbour_cfg.get(name)
        self.events.emit("link_up", neighbour=name, weight=weight, capacity_bps=capacity,
                         link_capacity_bps=self.link_capacity(name),
                         data_weight=self._data_weight(name, weight))
        for lsp in self.lsdb.all():
            conn.send_control(FrameKind.LINKSTATE, lsp.to_json())
        self._originate_lsp()

    async def _accept_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            frame = await asyncio.wait_for(read_frame(reader), HANDSHAKE_TIMEOUT_S)
            hello = self._check_hello(frame, "client")
        except (CodecError, OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            self.events.emit("client_disconnected", client=str(peer), reason=f"handshake failed: {exc}")
            writer.close()
            return
        name = f"{hello['name']}@{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else hello["name"]
        writer.write(encode_json_frame(FrameKind.HELLO, {"role": "router", "name": self.name, "id": self.id,
                                                          "lease_ms": self.config.lease_ms}))
        conn = Connection(reader, writer,
                          TransmissionPipeline(self.config.pipeline, self.config.client_queue_sizes),
                          self, name, "client", self.lease_s, self.keepalive_s)
        self.clients[conn] = ClientState(conn)
        conn.start()
        self.events.emit("client_connected", client=name)

    # ------------------------------------------------------------ closing

    def on_closed(self, conn: Connection, reason: str) -> None:
        if conn.kind == "router":
            if self.routers.get(conn.peer_name) is conn:
                del self.routers[conn.peer_name]
                self.router_weights.pop(conn.peer_name, None)
                self.events.emit("link_down", neighbour=conn.peer_name, reason=reason)
                self._unpin_via(conn.peer_name, "link_down")
                self._originate_lsp()
            else:
                self.events.emit("peer_disconnected", peer=conn.peer_name, kind="router", reason=reason)
        else:
            state = self.clients.pop(conn, None)
            self.events.emit("client_disconnected", client=conn.peer_name, reason=reason)
            if state is not None and state.subs:
                self._local_subs_changed()
        self._invalidate_caches()

    # ------------------------------------------------------------ control plane

    def on_control(self, conn: Connection, kind: int, obj: Dict[str, Any]) -> None:
        if conn.kind == "router":
            if kind == FrameKind.LINKSTATE:
                if "pin" in obj:
                    self._on_pin_request(conn, obj["pin"])
                else:
                    self._on_linkstate(conn, LinkStatePacket.from_json(obj))
            else:
                raise CodecError(f"unexpected frame kind {kind} from router")
            return
        state = self.clients.get(conn)
        if state is None:
            return
        sub_id = obj.get("id")
        if not isinstance(sub_id, int):
            raise CodecError("DECLARE/UNDECLARE needs an integer 'id'")
        if kind == FrameKind.DECLARE:
            key = obj.get("key")
            if not isinstance(key, str):
                raise CodecError("DECLARE needs a string 'key'")
            try:
                keyexpr.validate(key)
            except keyexpr.KeyExprError as exc:
                raise CodecError(str(exc)) from None
            state.subs[sub_id] = key
        elif kind == FrameKind.UNDECLARE:
            state.subs.pop(sub_id, None)
        else:
            raise CodecError(f"unexpected frame kind {kind} from client")
        self._local_subs_changed()

    def _local_subs_changed(self) -> None:
        self._remote_cache.clear()
        self._originate_lsp()

    def _local_sub_keys(self) -> Tuple[str, ...]:
        return tuple(sorted({k for st in self.clients.values() for k in st.subs.values()}))

    def _originate_lsp(self, flood: bool = True) -> None:
        self._seq += 1
        base = self.weight_overrides.get("", {})
        links = {n: base.get(n, w) for n, w in self.router_weights.items()}
        extra = {name: {n: w for n, w in weights.items() if n in links}
                 for name, weights in self.weight_overrides.items() if name}
        if self.data_set >= 0 or DATA_TREE_SET in {s.weights for s in self.routing.specs}:
            extra[DATA_TREE_SET] = {n: self._data_weight(n, w) for n, w in links.items()}
        lsp = LinkStatePacket(self.name, self._seq, links, self._local_sub_keys(),
                              {k: v for k, v in extra.items() if v})
        self.lsdb.update(lsp)
        if flood:
            self._flood(lsp, exclude=None)
            self._schedule_recompute()

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
            if lsp.seq >= self._seq:  # a stale LSP of a previous incarnation: supersede it
                self._seq = lsp.seq
                self._originate_lsp()
            return
        old = self.lsdb.get(lsp.origin)
        if self.lsdb.update(lsp):
            if old is not None:
                self._report_remote_weight_changes(old, lsp)
            self._flood(lsp, exclude=conn)
            self._schedule_recompute()

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
        if self._recompute_handle is not None:
            return
        loop = asyncio.get_running_loop()
        self._recompute_handle = loop.call_later(self.config.route_debounce_ms / 1000.0, self._recompute)

    def _recompute(self) -> None:
        self._recompute_handle = None
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
                        tuple(sorted(self.routing.subs.items())))
            prev = self._data_edges
            weight_only = (prev is not None and prev[1] == snapshot[1] and prev[0] != snapshot[0]
                           and {e[:2] for e in prev[0]} == {e[:2] for e in snapshot[0]})
            self._data_edges = snapshot
            if self.config.congestion_aware:
                self._reconcile_flows(weight_only)
        self._invalidate_caches()
        self.events.emit("trees_recomputed", duration_ns=result.duration_ns, routers=result.routers,
                         links=result.links, tree_sets=[s.name for s in self.routing.specs])

    def _invalidate_caches(self) -> None:
        self._remote_cache.clear()

    # ------------------------------------------------------------ congestion-aware routing

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
            peer = conn.writer.get_extra_info("peername")
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

    # ------------------------------------------------------------ data plane

    def _targets(self, tree_set: int, origin: int, key: bytes, prio: int = 0, now_ns: int = 0):
        """(connections to forward to, the flow record or None) for a cache miss."""
        key_s = key.decode("utf-8")
        out: List[Connection] = []
        flow: Optional[Flow] = None
        origin_name = self.name if origin == self.id else self.routing.origin_name(origin)
        if origin_name is not None:
            hops = self.routing.next_hops_in_set(tree_set, origin_name, key_s)
            if tree_set == self.data_set:
                flow = self.flows.touch((tree_set, origin, key), origin_name, key_s, prio, hops, now_ns)
                if flow.pinned is not None:
                    hops = flow.pinned
                flow.next_hops = hops
            for hop in hops:
                conn = self.routers.get(hop)
                if conn is not None:
                    out.append(conn)
        for st in self.clients.values():
            if any(keyexpr.intersects(s, key_s) for s in st.subs.values()):
                out.append(st.conn)
        return tuple(out), flow

    async def on_data(self, conn: Connection, body: bytes) -> None:
        """Forward every message of one DATA frame (the hot path)."""
        now = time.time_ns()
        from_client = conn.kind == "client"
        my_id = self.id
        rx_bytes = conn.rx.bytes
        rx_msgs = conn.rx.messages
        cache = self._remote_cache
        set_of_priority = self.routing.set_of_priority
        unpack = MESSAGE_HEADER.unpack_from
        hop_pack = _HOP_HEAD.pack
        mv = memoryview(body)
        end = len(body)
        offset = 0
        while offset < end:
            if end - offset < MESSAGE_HEADER_SIZE:
                raise CodecError(f"truncated message header at offset {offset} of a {end}-byte DATA body")
            flags, ttl, origin, keylen, paylen = unpack(body, offset)
            kstart = offset + MESSAGE_HEADER_SIZE
            pstart = kstart + keylen
            stop = pstart + paylen
            if flags & ~KNOWN_MESSAGE_FLAGS or keylen == 0 or keylen > MAX_KEY_LEN or stop > end:
                raise CodecError(f"malformed message at offset {offset}: flags=0x{flags:02x} keylen={keylen} "
                                 f"paylen={paylen}, {end - offset} bytes left")
            prio = flags & 7
            rx_bytes[prio] += stop - offset
            rx_msgs[prio] += 1
            if from_client:
                origin = my_id
                ttl = DEFAULT_TTL
            else:
                ttl -= 1
                if ttl <= 0:
                    self.counters.ttl_expired += 1
                    offset = stop
                    continue
            key = body[kstart:pstart]
            ck = (set_of_priority[prio], origin, key)
            cached = cache.get(ck)
            if cached is None:
                try:
                    cached = self._targets(ck[0], origin, key, prio, now)
                except UnicodeDecodeError:
                    raise CodecError(f"key at offset {offset} is not valid UTF-8") from None
                if len(cache) >= ROUTE_CACHE_MAX:
                    cache.clear()
                cache[ck] = cached
            targets, flow = cached
            if flow is not None:
                flow.last_ns = now
                flow.prev = conn
            if targets:
                head = hop_pack(flags, ttl, origin)
                rest = mv[offset + 6 : stop]
                express = bool(flags & FLAG_EXPRESS)
                for target in targets:
                    if target is conn:
                        continue
                    pipe = target.pipeline
                    st = pipe.queues[prio].stats
                    st.tried += 1
                    st.avg_qsize += 0.1 * (st.in_queue - st.avg_qsize)
                    if not pipe.try_push(prio, express, head, rest, now):
                        if pipe.closed:
                            continue
                        block = bool(flags & FLAG_BLOCK)
                        if not await pipe.push_wait(prio, express, head, rest, block):
                            if pipe.closed:
                                continue
                            if block:
                                self.counters.links_closed_block += 1
                                self.events.emit("link_closed", peer=target.peer_name, kind=target.kind,
                                                 reason=f"Block message waited more than close deadline "
                                                        f"{self.config.pipeline.close_deadline_ms} ms",
                                                 priority=prio)
                                target.close("close deadline exceeded by a Block message")
                            else:
                                st.dropped += 1
                                self._note_drop(target, prio)
                        now = time.time_ns()
            else:
                self.counters.no_route += 1
            offset = stop

    def _note_drop(self, target: Connection, prio: int) -> None:
        """Drops are reported as one summary event per second per (peer, priority)."""
        key = (target.peer_name, target.kind, prio)
        self._pending_drops[key] = self._pending_drops.get(key, 0) + 1
        if self._drop_flush is None:
            self._drop_flush = asyncio.get_running_loop().call_later(DROP_EVENT_INTERVAL_S, self._flush_drops)

    def _flush_drops(self) -> None:
        self._drop_flush = None
        pending, self._pending_drops = self._pending_drops, {}
        for (peer, kind, prio), count in sorted(pending.items()):
            self.events.emit("messages_dropped", peer=peer, kind=kind, priority=prio, count=count,
                             interval_s=DROP_EVENT_INTERVAL_S)

    # ------------------------------------------------------------ admin views

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
        }
