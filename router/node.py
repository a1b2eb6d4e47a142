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
from .routing import RoutingTable

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


class RouterNode(ConnectionHandler):
    def __init__(self, config: RouterConfig, events: Optional[EventLog] = None) -> None:
        self.config = config
        self.name = config.node
        self.id = router_id(config.node)
        self.events = events or EventLog(config.node, config.event_log)
        self.lsdb = LinkStateDatabase()
        self.routing = RoutingTable(self.name)
        self.routers: Dict[str, Connection] = {}
        self.router_weights: Dict[str, int] = {}
        # Runtime weight changes: weight set name ("" = base weights) -> neighbour -> weight.
        self.weight_overrides: Dict[str, Dict[str, int]] = {}
        self.clients: Dict[Connection, ClientState] = {}
        self.counters = NodeCounters()
        self.neighbour_cfg: Dict[str, NeighbourConfig] = {n.name: n for n in config.neighbours}
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
                          self.lease_s, self.keepalive_s, capacity)
        self.routers[name] = conn
        self.router_weights[name] = weight
        conn.start()
        self.events.emit("link_up", neighbour=name, weight=weight, capacity_bps=capacity)
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
        lsp = LinkStatePacket(self.name, self._seq, links, self._local_sub_keys(),
                              {k: v for k, v in extra.items() if v})
        self.lsdb.update(lsp)
        if flood:
            self._flood(lsp, exclude=None)
            self._schedule_recompute()

    def set_link_weight(self, neighbour: str, weight: int, weight_set: str = "", reason: str = "") -> None:
        """Change the weight of the link to ``neighbour`` in ``weight_set`` ("" =
        the base weights used by the default trees; another name = a weight map
        carried in the LSPs' ``extra`` for a second tree set).  Floods a new LSP
        and emits ``weight_changed``.  The hook for a congestion monitor."""
        if not isinstance(weight, int) or not 1 <= weight <= 65535:
            raise ValueError(f"link weight must be an integer 1..65535, got {weight!r}")
        current = self.weight_overrides.get(weight_set, {}).get(neighbour)
        if current is None and weight_set == "":
            current = self.router_weights.get(neighbour)
        self.weight_overrides.setdefault(weight_set, {})[neighbour] = weight
        self.events.emit("weight_changed", neighbour=neighbour, weight_set=weight_set or "base",
                         old=current, new=weight, reason=reason)
        self._originate_lsp()

    def clear_link_weight(self, neighbour: str, weight_set: str = "", reason: str = "") -> None:
        """Undo ``set_link_weight``: back to the configured weight (or no override)."""
        old = self.weight_overrides.get(weight_set, {}).pop(neighbour, None)
        if old is not None:
            self.events.emit("weight_changed", neighbour=neighbour, weight_set=weight_set or "base", old=old,
                             new=self.router_weights.get(neighbour) if weight_set == "" else None, reason=reason)
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
        if self.lsdb.update(lsp):
            self._flood(lsp, exclude=conn)
            self._schedule_recompute()

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
        self._invalidate_caches()
        self.events.emit("trees_recomputed", duration_ns=result.duration_ns, routers=result.routers,
                         links=result.links, tree_sets=[s.name for s in self.routing.specs])

    def _invalidate_caches(self) -> None:
        self._remote_cache.clear()

    # ------------------------------------------------------------ data plane

    def _targets(self, tree_set: int, origin: int, key: bytes) -> Tuple[Connection, ...]:
        key_s = key.decode("utf-8")
        out: List[Connection] = []
        origin_name = self.name if origin == self.id else self.routing.origin_name(origin)
        if origin_name is not None:
            for hop in self.routing.next_hops_in_set(tree_set, origin_name, key_s):
                conn = self.routers.get(hop)
                if conn is not None:
                    out.append(conn)
        for st in self.clients.values():
            if any(keyexpr.intersects(s, key_s) for s in st.subs.values()):
                out.append(st.conn)
        return tuple(out)

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
            targets = cache.get(ck)
            if targets is None:
                try:
                    targets = self._targets(ck[0], origin, key)
                except UnicodeDecodeError:
                    raise CodecError(f"key at offset {offset} is not valid UTF-8") from None
                if len(cache) >= ROUTE_CACHE_MAX:
                    cache.clear()
                cache[ck] = targets
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
            "neighbours": {n: {"weight": self.router_weights.get(n)} for n in sorted(self.routers)},
            "weight_overrides": {k or "base": dict(v) for k, v in self.weight_overrides.items()},
            "clients": sorted(c.peer_name for c in self.clients),
            "linkstate": [lsp.to_json() for lsp in self.lsdb.all()],
            "routing": self.routing.describe(),
        }
