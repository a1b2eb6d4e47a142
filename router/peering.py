"""Peering: the router's side of connection set-up and tear-down.

Dials every configured neighbour (with back-off) and accepts routers and
clients, checks their HELLO, keeps one connection per neighbour router, and
reacts when a connection closes (link down, client gone).  The state it owns:
``routers``, ``router_weights`` and ``clients`` of the node.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from . import keyexpr
from .codec import CodecError, FrameKind, encode_json_frame
from .config import NeighbourConfig
from .connection import Connection, read_frame
from .pipeline import TransmissionPipeline

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 5.0
STREAM_LIMIT = 1 << 20


@dataclass
class ClientState:
    conn: Connection
    subs: Dict[int, str] = field(default_factory=dict)
    queryables: Dict[int, str] = field(default_factory=dict)
    #: the subscriptions' keys, for forwarding's lookups (router/declarations.py keeps it)
    sub_keys: keyexpr.KeySet = field(default_factory=keyexpr.KeySet)


class Peering:
    """Mixin of :class:`router.node.RouterNode`: connection set-up and closing."""

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

    def _check_hello(self, frame: Any, role: str, allow_stream: bool = False) -> Dict[str, Any]:
        if frame.kind != FrameKind.HELLO:
            raise CodecError(f"expected HELLO, got frame kind {frame.kind}")
        hello = frame.json()
        if hello.get("role") not in ((role, "stream") if allow_stream else (role,)):
            raise CodecError(f"expected a {role} HELLO, got role {hello.get('role')!r}")
        name = hello.get("name")
        if not isinstance(name, str) or not name or "/" in name:
            raise CodecError("HELLO name must be a non-empty string without '/'")
        return hello

    async def _read_hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          role: str) -> Optional[Dict[str, Any]]:
        """The HELLO an accepted connection must send first, checked; None when it does not come in
        time or is not one (the connection closed and the failure reported), or when it is a stream
        connection of a ``role`` endpoint (handed to router/streaming.py)."""
        try:
            frame = await asyncio.wait_for(read_frame(reader), HANDSHAKE_TIMEOUT_S)
            hello = self._check_hello(frame, role, allow_stream=True)
            if hello["role"] == "stream":
                self._stream_accepted(hello, reader, writer, role)
                return None
            return hello
        except (CodecError, OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            peer = str(writer.get_extra_info("peername"))
            if role == "router":
                self.events.emit("peer_disconnected", peer=peer, kind="router", reason=f"handshake failed: {exc}")
            else:
                self.events.emit("client_disconnected", client=peer, reason=f"handshake failed: {exc}")
            writer.close()
            return None

    async def _accept_router(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        hello = await self._read_hello(reader, writer, "router")
        if hello is None:
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
        pipeline = TransmissionPipeline(self.config.pipeline, account=self.ledger.open(name, "router", time.time_ns()),
                                        ledger=self.ledger)
        conn = Connection(reader, writer, pipeline, self, name, "router",
                          self.lease_s, self.keepalive_s, capacity, notsent_lowat=self.config.tcp_notsent_lowat)
        self.routers[name] = conn
        self.router_weights[name] = weight
        conn.start()
        self.events.emit("link_up", neighbour=name, weight=weight, capacity_bps=capacity,
                         link_capacity_bps=self.link_capacity(name),
                         data_weight=self._data_weight(name, weight))
        for lsp in self.lsdb.all():
            conn.send_control(FrameKind.LINKSTATE, lsp.to_json())
        self._originate_lsp()

    async def _accept_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        hello = await self._read_hello(reader, writer, "client")
        if hello is None:
            return
        name = f"{hello['name']}@{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else hello["name"]
        writer.write(encode_json_frame(FrameKind.HELLO, {"role": "router", "name": self.name, "id": self.id,
                                                          "lease_ms": self.config.lease_ms}))
        pipeline = TransmissionPipeline(self.config.pipeline, self.config.client_queue_sizes,
                                        account=self.ledger.open(name, "client", time.time_ns()), ledger=self.ledger)
        # TCP_NOTSENT_LOWAT here too: what a client has yet to read stays in its pipeline, where the
        # priorities and the resource limits act, not in a socket buffer of megabytes
        conn = Connection(reader, writer, pipeline, self, name, "client", self.lease_s, self.keepalive_s,
                          notsent_lowat=self.config.client_tcp_notsent_lowat)
        self.clients[conn] = ClientState(conn)
        conn.start()
        self.events.emit("client_connected", client=name)

    # ------------------------------------------------------------ closing

    def on_closed(self, conn: Connection, reason: str) -> None:
        if conn.pipeline.account is not None:
            self.ledger.close(conn.pipeline.account)
        if conn.main is not None:  # a stream connection: its endpoint is still there
            conn.main.streams.closed(conn, reason)
            return
        if conn.streams is not None:
            conn.streams.close_all(f"the shared connection closed: {reason}")
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
            if state is not None:
                self._client_queries_closed(state)
            if state is not None and (state.subs or state.queryables):
                self._local_subs_changed()
        self._invalidate_caches()
