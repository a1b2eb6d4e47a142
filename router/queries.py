"""Queries (request/response): queryables declared by clients, queries routed to
the routers that serve them and replies routed back (docs/protocol.md "Queries").

The router where a query enters (its *ingress*) schedules it with
:mod:`router.queryscheduler`: every router that has a matching queryable is a
peer with ``query_channels`` channels (at most that many of this router's
queries outstanding there), queries wait by priority for a channel, each
attempt has a timeout, a serving router that becomes unreachable fails the
attempts in flight to it, and a ``first`` query is retried on another serving
router within its time budget.  Routers between the ingress and the serving
router forward QUERY and REPLY frames toward their ``target`` / ``origin`` along
the base-weight shortest paths and keep no state.  The serving router hands the
query to each matching local queryable client and reports back when all of
them are done.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Dict, List, Optional, Set, Tuple

from . import keyexpr
from .codec import DEFAULT_TTL, CodecError, FrameKind, required_field
from .connection import Connection
from .queryscheduler import FailureReason, MessageScheduler, Outcome, PeerError, RetryingRequest
from .routecontrol import DEFAULT_TREE_SET

log = logging.getLogger(__name__)

CONSOLIDATIONS = ("all", "first", "latest")
MAX_QUERY_TIMEOUT_MS = 3_600_000
#: how the answers of a serving router are told to the ingress (REPLY ``status``)
REPLY_STATUSES = ("reply", "final", "error", "failed")
#: the largest payload of a query or a reply: they travel on the control path, whose budget is 1 MiB
MAX_QUERY_PAYLOAD = 64 * 1024
#: the final word to a querier lists at most this many attempts (and how many there were)
MAX_ATTEMPTS_LISTED = 16
#: the most keys whose serving routers an ingress keeps between queries
CANDIDATES_CACHED = 4096
#: how often a serving router forgets the queries whose time is up (a reply later than that is dropped)
SERVING_SWEEP_S = 0.1


@dataclass(eq=False)
class IngressQuery:
    """A client's query at the router it entered."""
    client: Connection
    cid: int
    key: str
    payload: bytes
    priority: int
    consolidation: str
    deadline: float  # on the event loop's clock
    attempt_s: float = 0.0  # an attempt's timeout at a serving router (within the deadline)
    open: int = 0  # scheduled requests not yet done
    outcomes: List[Outcome] = field(default_factory=list)
    latest: Dict[str, Tuple[int, Dict[str, Any], bytes]] = field(default_factory=dict)
    replies: int = 0
    requests: Tuple[RetryingRequest, ...] = ()  # its scheduled requests, once all are made
    #: the last reply, held for the final word to ride on (it came with its serving router's final word,
    #: and no other serving router is still answering)
    held: Optional[Tuple[Dict[str, Any], bytes]] = None
    #: the client reads a final word that carries a reply (its QUERY said ``"final_on_reply": true``)
    final_on_reply: bool = False


@dataclass(eq=False)
class ServingQuery:
    """A query this router serves for its local queryables."""
    origin: str
    qid: int
    epoch: Any = None  # the ingress's, copied into every reply
    pending: Dict[int, Connection] = field(default_factory=dict)  # local id -> queryable client
    answered: int = 0
    error: Optional[str] = None
    expires: float = 0.0  # on the event loop's clock: then its ingress has given up on it


class Queries:
    """Mixin of :class:`router.node.RouterNode`: queryables, query routing and scheduling."""

    def _queries_init(self) -> None:
        self.query_scheduler: Optional[MessageScheduler] = None
        self._serving: Dict[int, ServingQuery] = {}  # local id -> the query it serves
        self._local_ids = itertools.count(1)
        self.query_outcomes: Dict[str, int] = {}
        self.query_retries = 0
        #: each client's queries in progress here (cancelled when it goes away)
        self._ingress: Dict[Connection, Set[RetryingRequest]] = {}
        #: told in every query and copied into its replies: a reply to this router's previous life is ignored
        self._query_epoch = time.time_ns()
        #: key -> serving routers for it, nearest first; emptied whenever the scheduler's peers, the
        #: link-state database or the trees change (``_candidates_stamp``)
        self._candidates_cache: Dict[str, Tuple[str, ...]] = {}
        self._candidates_stamp: Optional[Tuple[int, int, Any]] = None
        #: one timer forgets the served queries whose time is up (not a timer per query)
        self._serving_sweep: Optional[asyncio.TimerHandle] = None

    # ------------------------------------------------------------ peers: routers with queryables

    def _scheduler(self) -> MessageScheduler:
        if self.query_scheduler is None:
            self.query_scheduler = MessageScheduler(asyncio.get_running_loop(), self._transmit_query)
        return self.query_scheduler

    def _distances(self) -> Dict[str, int]:
        tree = self.routing.trees.get(DEFAULT_TREE_SET, {}).get(self.name)
        return dict(tree.distance) if tree is not None else {self.name: 0}

    def _sync_query_peers(self) -> None:
        """Serving routers = reachable routers (this one included) with queryables; one that is no
        longer there fails the attempts in flight to it (they are retried elsewhere)."""
        reachable = self._distances()
        want = {name for name in self.lsdb.queryables() if name in reachable or name == self.name}
        if not want and self.query_scheduler is None:
            return
        qs = self._scheduler()
        have = qs.peers()
        gone = sorted(set(have) - want)
        for name in gone:
            qs.remove_peer(name)
        for name in sorted(want - set(have)):
            qs.add_peer(name, self.config.query_channels)
        if gone:  # a query waiting for a channel that no router can serve any more ends now
            for req in [r for reqs in self._ingress.values() for r in reqs]:
                req.recheck()

    def _query_candidates(self, key: str) -> Tuple[str, ...]:
        """Serving routers with a queryable matching ``key``, nearest first, cached per key while the
        scheduler's peers (each peer added or removed, also one by one inside ``_sync_query_peers``,
        whose callbacks ask again), the link-state database (a stored LSP) and the trees (a recompute)
        stay as they were."""
        qs = self.query_scheduler
        if qs is None:
            return ()
        trees = self.routing.trees.get(DEFAULT_TREE_SET)
        stamp = self._candidates_stamp
        if stamp is None or stamp[0] != self.lsdb.version or stamp[1] != qs.peer_changes or stamp[2] is not trees:
            self._candidates_cache.clear()  # (the trees by identity: comparing them would cost more than it saves)
            self._candidates_stamp = (self.lsdb.version, qs.peer_changes, trees)
        found = self._candidates_cache.get(key)
        if found is None:
            if len(self._candidates_cache) >= CANDIDATES_CACHED:  # many distinct keys: start again
                self._candidates_cache.clear()
            found = self._candidates_cache[key] = self._find_query_candidates(key)
        return found

    def _find_query_candidates(self, key: str) -> Tuple[str, ...]:
        assert self.query_scheduler is not None
        peers = self.query_scheduler.peers()
        dist = self._distances()
        tables = self.lsdb.queryables()
        found = [name for name in peers
                 if any(keyexpr.intersects(q, key) for q in tables.get(name, ()))]
        return tuple(sorted(found, key=lambda n: (dist.get(n, 1 << 30), n)))

    def _next_hop_to(self, target: str) -> Optional[Connection]:
        tree = self.routing.trees.get(DEFAULT_TREE_SET, {}).get(self.name)
        if tree is None or target not in tree.parent:
            return None
        node = target
        while tree.parent.get(node) not in (self.name, None):
            node = tree.parent[node]
        return self.routers.get(node) if tree.parent.get(node) == self.name else None

    # ------------------------------------------------------------ frames

    def on_query(self, conn: Connection, kind: int, header: Dict[str, Any], payload: bytes) -> None:
        if conn.main is not None:
            raise CodecError(f"unexpected {FrameKind(kind).name} frame on a stream connection")
        if conn.kind == "router":
            if kind == FrameKind.QUERY:
                self._query_from_router(header, payload)
            else:
                self._route_reply(header, payload)
        elif conn in self.clients:
            if kind == FrameKind.QUERY:
                self._query_from_client(conn, header, payload)
            else:
                self._reply_from_queryable(conn, header, payload)

    # ------------------------------------------------------------ the ingress router

    def _query_from_client(self, conn: Connection, header: Dict[str, Any], payload: bytes) -> None:
        cid = required_field(header, "id", int, "QUERY")
        key = required_field(header, "key", str, "QUERY")
        timeout_ms = required_field(header, "timeout_ms", int, "QUERY")
        consolidation = header.get("consolidation", "all")
        priority = header.get("priority", 3)
        if not 0 < timeout_ms <= MAX_QUERY_TIMEOUT_MS:
            raise CodecError(f"QUERY timeout_ms must be 1..{MAX_QUERY_TIMEOUT_MS}, got {timeout_ms}")
        if consolidation not in CONSOLIDATIONS:
            raise CodecError(f"QUERY consolidation must be one of {', '.join(CONSOLIDATIONS)}, got {consolidation!r}")
        if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 7:
            raise CodecError(f"QUERY priority must be 0..7, got {priority!r}")
        loop = asyncio.get_running_loop()
        attempt_s = min(self.config.query_attempt_timeout_ms, timeout_ms) / 1000.0
        q = IngressQuery(conn, cid, key, payload, priority, consolidation, loop.time() + timeout_ms / 1000.0,
                         attempt_s, final_on_reply=header.get("final_on_reply") is True)
        if len(payload) > MAX_QUERY_PAYLOAD:
            self._finish_query(q, "error", reason=f"a query's payload is at most {MAX_QUERY_PAYLOAD} bytes, "
                                                  f"this one has {len(payload)}")
            return
        if key not in self._candidates_cache:  # a key in the cache was checked already
            try:
                keyexpr.validate(key)
            except keyexpr.KeyExprError as exc:
                self._finish_query(q, "error", reason=str(exc))
                return
        candidates = self._query_candidates(key)
        if not candidates:
            self._finish_query(q, "no_match")
            return
        common = dict(priority=priority, deadline_s=q.deadline, now=loop.time,
                      on_done=partial(self._query_part_done, q), on_reply=partial(self._query_reply, q))
        if consolidation == "first":
            q.open = 1
            requests = (RetryingRequest(self._scheduler(), q, attempt_timeout_s=attempt_s,
                                        candidates=partial(self._query_candidates, key), **common),)
        else:
            q.open = len(candidates)  # every serving router: all replies count
            requests = tuple(RetryingRequest(self._scheduler(), q, attempt_timeout_s=attempt_s,
                                             candidates=partial(self._still_candidate, peer, key), **common)
                             for peer in candidates)
        if q.open > 0:  # else they all ended already (no match, ...)
            q.requests = requests
            self._ingress.setdefault(conn, set()).update(requests)

    def _still_candidate(self, peer: str, key: str) -> Tuple[str, ...]:
        return (peer,) if peer in self._query_candidates(key) else ()

    def _transmit_query(self, peer: str, rid: int, q: IngressQuery) -> None:
        loop = asyncio.get_running_loop()
        timeout_ms = max(1, int(min(q.attempt_s, q.deadline - loop.time()) * 1000))
        if peer == self.name:
            loop.call_soon(self._serve_query, self.name, rid, q.key, q.priority, timeout_ms, q.payload,
                           self._query_epoch)
            return
        conn = self._next_hop_to(peer)
        if conn is None:
            loop.call_soon(self._scheduler().fail, rid, FailureReason.DISCONNECT)
            return
        conn.send_query_frame(FrameKind.QUERY, {"qid": rid, "origin": self.name, "target": peer, "key": q.key,
                                                "priority": q.priority, "timeout_ms": timeout_ms,
                                                "ttl": DEFAULT_TTL, "epoch": self._query_epoch}, q.payload)

    def _reply_at_origin(self, header: Dict[str, Any], payload: bytes) -> None:
        if self.query_scheduler is None:
            return
        rid = required_field(header, "qid", int, "REPLY")
        if header.get("epoch") != self._query_epoch:
            return  # an answer to a query of this router's previous life (it was restarted)
        status = header.get("status")
        if status == "reply":
            if header.get("final"):  # the serving router's last reply and its final word in one
                self.query_scheduler.complete(rid, header, last=(header, payload))
            else:
                self.query_scheduler.reply(rid, (header, payload))
        elif status == "final":
            self.query_scheduler.complete(rid, header)
        elif status == "error":
            self.query_scheduler.complete(rid, PeerError(header.get("reason", "")))
        elif status == "failed":
            self.query_scheduler.fail(rid, FailureReason.DISCONNECT)
        else:
            raise CodecError(f"REPLY status must be one of {', '.join(REPLY_STATUSES)}, got {status!r}")

    def _query_reply(self, q: IngressQuery, reply: Tuple[Dict[str, Any], bytes]) -> None:
        header, payload = reply
        key, ts_ns = header.get("key"), header.get("ts_ns", 0)
        q.replies += 1
        if q.consolidation == "latest":
            kept = q.latest.get(key)
            if kept is None or ts_ns > kept[0]:
                q.latest[key] = (ts_ns, header, payload)
            return
        if q.final_on_reply and header.get("final") and q.open == 1:  # the query ends with it (on_success next)
            q.held = (header, payload)
            return
        self._reply_to_client(q, header, payload)

    @staticmethod
    def _client_reply(q: IngressQuery, header: Dict[str, Any]) -> Dict[str, Any]:
        return {"id": q.cid, "key": header.get("key"), "ts_ns": header.get("ts_ns", 0),
                "replier": header.get("replier")}

    def _reply_to_client(self, q: IngressQuery, header: Dict[str, Any], payload: bytes) -> None:
        if not q.client.closed:
            q.client.send_query_frame(FrameKind.REPLY, self._client_reply(q, header), payload)

    def _query_part_done(self, q: IngressQuery, outcome: Outcome) -> None:
        q.outcomes.append(outcome)
        q.open -= 1
        if q.open > 0:
            return
        mine = self._ingress.get(q.client)
        if mine is not None:
            mine.difference_update(q.requests)
            if not mine and q.client.closed:
                del self._ingress[q.client]
        statuses = [o.status for o in q.outcomes]
        for status in ("ok", "error", "shutdown", "cancelled", "timeout", "no_match"):
            if status in statuses:
                break
        reason = next((str(o.reply.detail) for o in q.outcomes if isinstance(o.reply, PeerError)), "")
        last = sorted(q.latest.values(), key=lambda kept: str(kept[1].get("key")))
        if last and q.final_on_reply:  # latest: the kept replies now, the final word on the last of them
            q.held = last.pop()[1:]
        for _, header, payload in last:
            self._reply_to_client(q, header, payload)
        self._finish_query(q, status, reason=reason)

    def _finish_query(self, q: IngressQuery, status: str, reason: str = "") -> None:
        attempts = [list(a) for o in q.outcomes for a in o.attempts]
        tried = len(attempts)
        retries = sum(o.retries for o in q.outcomes)
        self.query_outcomes[status] = self.query_outcomes.get(status, 0) + 1
        self.query_retries += retries
        served_by = sorted({o.served_by for o in q.outcomes if o.served_by})
        if retries:
            self.events.emit("query_failover", client=q.client.peer_name, key=q.key, outcome=status,
                             served_by=served_by, attempts=attempts)
        final = {"id": q.cid, "final": True, "outcome": status, "served_by": served_by,
                 "retries": retries, "attempts": attempts[:MAX_ATTEMPTS_LISTED], "attempts_total": tried,
                 "replies": q.replies}
        if reason:
            final["reason"] = reason
        held, q.held = q.held, None
        if q.client.closed:
            return
        if held is not None:  # the last reply and the final word in one frame
            header, payload = held
            try:
                q.client.send_query_frame(FrameKind.REPLY, dict(final, **self._client_reply(q, header)), payload)
                return
            except CodecError:  # together too large for one header: the reply, then the final word on its own
                self._reply_to_client(q, header, payload)
        try:
            q.client.send_query_frame(FrameKind.REPLY, final)
        except CodecError as exc:  # never the peer's fault: said here, not blamed on a connection
            log.error("query %s of %s: the final reply could not be sent: %s", q.cid, q.client.peer_name, exc)

    # ------------------------------------------------------------ routers between, and the serving router

    def _query_from_router(self, header: Dict[str, Any], payload: bytes) -> None:
        target = required_field(header, "target", str, "QUERY")
        origin = required_field(header, "origin", str, "QUERY")
        qid = required_field(header, "qid", int, "QUERY")
        if target == self.name:
            self._serve_query(origin, qid, required_field(header, "key", str, "QUERY"), header.get("priority", 3),
                              required_field(header, "timeout_ms", int, "QUERY"), payload, header.get("epoch"))
            return
        ttl = required_field(header, "ttl", int, "QUERY") - 1
        conn = self._next_hop_to(target)
        if ttl <= 0 or conn is None:
            self._send_reply(origin, {"qid": qid, "origin": origin, "replier": self.name, "status": "failed",
                                      "reason": f"no route from {self.name} to {target}",
                                      "epoch": header.get("epoch")})
            return
        conn.send_query_frame(FrameKind.QUERY, dict(header, ttl=ttl), payload)

    def _route_reply(self, header: Dict[str, Any], payload: bytes) -> None:
        origin = required_field(header, "origin", str, "REPLY")
        if origin == self.name:
            self._reply_at_origin(header, payload)
            return
        ttl = required_field(header, "ttl", int, "REPLY") - 1
        conn = self._next_hop_to(origin)
        if ttl > 0 and conn is not None:  # else lost: the ingress times the attempt out
            conn.send_query_frame(FrameKind.REPLY, dict(header, ttl=ttl), payload)

    def _send_reply(self, origin: str, header: Dict[str, Any], payload: bytes = b"") -> None:
        if origin == self.name:
            self._reply_at_origin(header, payload)
            return
        conn = self._next_hop_to(origin)
        if conn is not None:  # else lost: the ingress times the attempt out
            conn.send_query_frame(FrameKind.REPLY, dict(header, ttl=DEFAULT_TTL), payload)

    def _serve_query(self, origin: str, qid: int, key: str, priority: int, timeout_ms: int,
                     payload: bytes, epoch: Any = None) -> None:
        matching = [conn for conn, st in self.clients.items()
                    if not conn.closed and any(keyexpr.intersects(k, key) for k in st.queryables.values())]
        if not matching:
            self._send_reply(origin, {"qid": qid, "origin": origin, "replier": self.name, "status": "failed",
                                      "reason": f"no queryable for {key} at {self.name}", "epoch": epoch})
            return
        loop = asyncio.get_running_loop()
        sq = ServingQuery(origin, qid, epoch, expires=loop.time() + timeout_ms / 1000.0)
        for conn in matching:
            lid = next(self._local_ids)
            sq.pending[lid] = conn
            self._serving[lid] = sq
            conn.send_query_frame(FrameKind.QUERY, {"id": lid, "key": key, "priority": priority,
                                                    "timeout_ms": timeout_ms}, payload)
        if self._serving_sweep is None:
            self._serving_sweep = loop.call_later(SERVING_SWEEP_S, self._sweep_serving)

    def _sweep_serving(self) -> None:
        """Forget the served queries whose time is up (their ingress has given up on them; a reply
        that comes later is not forwarded): every ``SERVING_SWEEP_S`` while any is being served."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for lid, sq in list(self._serving.items()):
            if sq.expires <= now:
                self._serving.pop(lid, None)
                sq.pending.pop(lid, None)
        self._serving_sweep = loop.call_later(SERVING_SWEEP_S, self._sweep_serving) if self._serving else None

    def _reply_from_queryable(self, conn: Connection, header: Dict[str, Any], payload: bytes) -> None:
        lid = required_field(header, "id", int, "REPLY")
        sq = self._serving.get(lid)
        if sq is None or sq.pending.get(lid) is not conn:
            return  # late: the query is over
        base = {"qid": sq.qid, "origin": sq.origin, "replier": self.name, "epoch": sq.epoch}
        if len(payload) > MAX_QUERY_PAYLOAD:
            header = {"id": lid, "error": f"a reply's payload is at most {MAX_QUERY_PAYLOAD} bytes, this one "
                                         f"has {len(payload)}"}
        elif isinstance(header.get("key"), str):  # (its type is checked below, with the other fields)
            try:
                keyexpr.check_length(header["key"])
            except keyexpr.KeyExprError as exc:
                header = {"id": lid, "error": f"a reply's key: {exc}"}
        if "error" in header:
            sq.error = f"queryable {conn.peer_name} raised: {header['error']}"
            self._serving_done(sq, lid)
            return
        if "key" not in header and header.get("final"):
            self._serving_done(sq, lid)
            return
        key = required_field(header, "key", str, "REPLY")
        sq.answered += 1
        reply = dict(base, status="reply", key=key, ts_ns=header.get("ts_ns", 0))
        if header.get("final"):  # its last reply and its final word in one frame
            self._serving_done(sq, lid, last_reply=(reply, payload))
        else:
            self._send_reply(sq.origin, reply, payload)

    def _serving_done(self, sq: ServingQuery, lid: int, failed: str = "",
                      last_reply: Optional[Tuple[Dict[str, Any], bytes]] = None) -> None:
        """A local queryable is done with the query (``last_reply``: with this reply); when it was the last,
        the ingress is told how it went -- in the last reply's frame when it went well."""
        del sq.pending[lid]
        self._serving.pop(lid, None)
        if last_reply is not None and (sq.pending or sq.error):  # the final word cannot ride on it: on its own
            self._send_reply(sq.origin, *last_reply)
            last_reply = None
        if sq.pending:
            return
        base = {"qid": sq.qid, "origin": sq.origin, "replier": self.name, "epoch": sq.epoch}
        if sq.error:
            self._send_reply(sq.origin, dict(base, status="error", reason=sq.error))
        elif failed and not sq.answered:
            self._send_reply(sq.origin, dict(base, status="failed", reason=failed))
        elif last_reply is not None:
            header, payload = last_reply
            self._send_reply(sq.origin, dict(header, final=True, replies=sq.answered), payload)
        else:
            self._send_reply(sq.origin, dict(base, status="final", replies=sq.answered))

    def _client_queries_closed(self, state: Any) -> None:
        """A client left: its own queries end here (their channels freed: nobody waits for them), and
        the queries its queryables were serving end without it."""
        for req in list(self._ingress.pop(state.conn, ())):
            req.cancel()
        for lid, sq in list(self._serving.items()):
            if sq.pending.get(lid) is state.conn:
                self._serving_done(sq, lid, failed=f"queryable {state.conn.peer_name} disconnected")

    def _queries_stop(self) -> None:
        """Every query waiting or in flight at this ingress ends with "shutdown"."""
        if self.query_scheduler is not None:
            self.query_scheduler.stop()
        if self._serving_sweep is not None:
            self._serving_sweep.cancel()
            self._serving_sweep = None
