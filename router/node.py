"""The router process: one :class:`RouterNode` per node, composed of

- :mod:`router.peering` (connections to neighbours and clients),
- :mod:`router.declarations` (clients' subscriptions and queryables: their limit, batched link state),
- :mod:`router.routecontrol` (link state, weights, trees),
- :mod:`router.pinning` (congestion-aware routing: monitor decisions, flow pinning),
- :mod:`router.forwarding` (the publication fast path),
- :mod:`router.enforcement` (resource limits: noisy senders, slow readers),
- :mod:`router.streaming` (streaming links: large messages on pooled stream connections),
- :mod:`router.queries` (queryables, queries routed and scheduled, replies routed back),
- :mod:`router.adminapi` (admin operations and views).

This module holds the node's state, its lifecycle and the dispatch of control
frames.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .adminapi import AdminViews, LinkMismatch
from .codec import CodecError, FrameKind, router_id
from .config import Address, NeighbourConfig, RouterConfig
from .congestion import CongestionMonitor
from .declarations import Declarations
from .connection import Connection, ConnectionHandler
from .enforcement import LimitEnforcement
from .events import EventLog
from .flows import FlowTable
from .forwarding import Forwarding
from .limits import Ledger
from .linkstate import LinkStateDatabase, LinkStatePacket
from .peering import STREAM_LIMIT, ClientState, Peering
from .pinning import CongestionRouting
from .queries import Queries
from .routecontrol import DATA_TREE_SET, DEFAULT_TREE_SET, RouteControl, tree_sets_for
from .routing import RoutingTable
from .streaming import StreamLinks

__all__ = ["RouterNode", "LinkMismatch", "tree_sets_for", "DATA_TREE_SET", "DEFAULT_TREE_SET"]

log = logging.getLogger(__name__)


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
    #: slow-reader decisions by (peer kind, cause, policy): kept after the endpoint is gone
    slow_readers: Dict[Tuple[str, str, str], int] = field(default_factory=dict)
    #: declarations refused by (peer kind) past limits.declarations_per_client
    declarations_refused: int = 0


class RouterNode(Peering, Declarations, RouteControl, CongestionRouting, AdminViews, Forwarding, LimitEnforcement, StreamLinks,
                 Queries, ConnectionHandler):
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
        #: (loop time at the end, duration in s) of the last route computation
        self._last_recompute: Tuple[float, float] = (0.0, 0.0)
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
        # Resource limits: bytes every endpoint holds in the queues, and the totals.
        self.ledger = Ledger(config.limits)
        # Streaming links: the size from which a message goes on a stream connection (None: never),
        # and the stream connections asked of a peer, by token: (waiter, the endpoint's shared connection).
        self.stream_threshold = config.streaming_threshold_bytes if config.streaming_links else None
        self._stream_requests: Dict[str, Tuple[asyncio.Future, Connection]] = {}
        self._queries_init()
        self._declarations_init()

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
        self._tasks.append(loop.create_task(self._limits_loop(), name="resource-limits"))
        if self.config.congestion_aware:
            self._tasks.append(loop.create_task(self._monitor_loop(), name="congestion-monitor"))

    @staticmethod
    def _bound(srv: asyncio.AbstractServer, addr: Address) -> Address:
        for sock in srv.sockets:
            host, port = sock.getsockname()[:2]
            return Address(addr.host, port)
        return addr

    async def stop(self) -> None:
        self._queries_stop()
        self._declarations_stop()
        for srv in self._servers:
            srv.close()
        for t in self._tasks:
            t.cancel()
        for conn in list(self.routers.values()) + [c.conn for c in self.clients.values()]:
            conn.close("router shutting down")
        self._stopped.set()

    # ------------------------------------------------------------ control plane

    def on_control(self, conn: Connection, kind: int, obj: Dict[str, Any]) -> None:
        if conn.main is not None:
            raise CodecError(f"unexpected frame kind {kind} on a stream connection")
        if conn.kind == "router":
            if kind == FrameKind.LINKSTATE:
                if "pin" in obj:
                    self._on_pin_request(conn, obj["pin"])
                else:
                    self._on_linkstate(conn, LinkStatePacket.from_json(obj))
            elif kind == FrameKind.STREAM:
                self._on_stream_request(conn, obj)
            else:
                raise CodecError(f"unexpected frame kind {kind} from router")
            return
        state = self.clients.get(conn)
        if state is None:
            return
        if kind == FrameKind.DECLARE:
            self._declare(state, state.subs, obj, "DECLARE")
        elif kind == FrameKind.UNDECLARE:
            self._undeclare(state, state.subs, obj, "UNDECLARE")
        elif kind == FrameKind.DECLARE_QUERYABLE:
            self._declare(state, state.queryables, obj, "DECLARE_QUERYABLE")
        elif kind == FrameKind.UNDECLARE_QUERYABLE:
            self._undeclare(state, state.queryables, obj, "UNDECLARE_QUERYABLE")
        else:
            raise CodecError(f"unexpected frame kind {kind} from client")
