"""Queries for the client library: ``Session.get`` and ``Session.declare_queryable``.

    replies = await session.get("demo/**", timeout=2.0, consolidation="first")
    for r in replies: print(r.key, r.payload, r.replier)
    print(replies.outcome, replies.served_by, replies.retries)

    async def handler(query): return [(query.key, b"value")]   # or a plain function; raising sends an error reply
    queryable = await session.declare_queryable("demo/**", handler)

The session's own queries go through :class:`router.queryscheduler.MessageScheduler`
with one peer, its router, of ``max_queries`` channels: at most that many are
outstanding, the others wait in priority order; each has its timeout.
"""
from __future__ import annotations

import asyncio
import inspect
import math
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Tuple, Union

from router import keyexpr
from router.codec import CodecError, FrameKind, Priority
from router.connection import Connection
from router.queries import CONSOLIDATIONS, MAX_QUERY_PAYLOAD
from router.queryscheduler import MessageScheduler, Outcome, RetryingRequest

ROUTER = "router"
#: how long after its timeout a query waits for the router's final word before it ends "timeout" by itself
FINAL_GRACE_S = 1.0


@dataclass(frozen=True)
class Reply:
    key: str
    payload: bytes
    replier: Optional[str]  # the router whose queryable answered
    ts_ns: int  # when the queryable answered
    recv_ns: int


class QueryResult(List[Reply]):
    """The replies of a query, and how it ended: ``outcome`` ok | timeout | no_match | error |
    shutdown; ``served_by`` (routers whose queryables answered), ``retries`` (attempts after the
    first, at the router), ``attempts`` ([router, result] per attempt), ``reason`` (for an error)."""

    def __init__(self, replies: Iterable[Reply] = (), outcome: str = "ok", served_by: Iterable[str] = (),
                 retries: int = 0, attempts: Iterable[Any] = (), reason: str = "") -> None:
        super().__init__(replies)
        self.outcome, self.served_by, self.retries = outcome, list(served_by), retries
        self.attempts, self.reason = list(attempts), reason


@dataclass(frozen=True)
class Query:
    """A query as a queryable's handler sees it."""
    key: str
    payload: bytes
    priority: int
    timeout_ms: int


ReplyItems = Iterable[Tuple[str, bytes]]
Handler = Callable[[Query], Union[ReplyItems, Awaitable[ReplyItems], None]]


@dataclass(eq=False)
class Queryable:
    session: Any
    id: int
    key: str
    handler: Handler

    async def undeclare(self) -> None:
        self.session._undeclare_queryable(self)


@dataclass(eq=False)
class _PendingGet:
    key: str
    payload: bytes
    priority: int
    consolidation: str
    deadline: float  # the loop's clock: when the query's own timeout ends
    replies: List[Reply] = field(default_factory=list)


class Querying:
    """Mixin of :class:`traffic.client.Session`."""

    max_queries = 64

    def _querying_init(self) -> None:
        self._queryables: Dict[int, Queryable] = {}
        self._query_scheduler: Optional[MessageScheduler] = None
        self._serving_tasks: set = set()

    def _scheduler(self) -> MessageScheduler:
        if self._query_scheduler is None:
            self._query_scheduler = MessageScheduler(asyncio.get_running_loop(), self._transmit_query)
            self._query_scheduler.add_peer(ROUTER, self.max_queries)
        return self._query_scheduler

    async def get(self, key: str, timeout: float = 5.0, consolidation: str = "all", payload: bytes = b"",
                  priority: int = Priority.INTERACTIVE_LOW) -> QueryResult:
        """Ask every matching queryable of the network (``all``: every router that has one; ``first``:
        the nearest that answers, another one if it fails; ``latest``: per key the newest reply).
        Ends by ``timeout`` at the latest; at once when no queryable matches (outcome no_match)."""
        keyexpr.validate(key)  # a bad key expression is refused here, with the reason
        if consolidation not in CONSOLIDATIONS:
            raise ValueError(f"consolidation must be one of {', '.join(CONSOLIDATIONS)}, got {consolidation!r}")
        if not 0 < timeout <= 3600:
            raise ValueError(f"timeout must be in (0, 3600] seconds, got {timeout!r}")
        if not 0 <= int(priority) <= 7:
            raise ValueError(f"priority must be 0..7, got {priority!r}")
        if len(payload) > MAX_QUERY_PAYLOAD:
            raise ValueError(f"a query's payload is at most {MAX_QUERY_PAYLOAD} bytes, got {len(payload)}")
        if self._conn.closed:
            return QueryResult(outcome="shutdown", reason=self.close_reason)
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        pending = _PendingGet(key, bytes(payload), int(priority), consolidation, loop.time() + timeout)
        RetryingRequest(self._scheduler(), pending, priority=int(priority),
                        deadline_s=loop.time() + timeout + FINAL_GRACE_S, attempt_timeout_s=timeout + FINAL_GRACE_S,
                        candidates=lambda: [] if self._conn.closed else [ROUTER], now=loop.time,
                        on_reply=pending.replies.append,
                        on_done=lambda outcome: done.done() or done.set_result(outcome))
        outcome: Outcome = await done
        if outcome.status != "ok":
            status = "shutdown" if outcome.status in ("shutdown", "no_match") else outcome.status
            return QueryResult(pending.replies, outcome=status, reason=self.close_reason if status == "shutdown" else "")
        final: Dict[str, Any] = outcome.reply
        return QueryResult(pending.replies, outcome=final.get("outcome", "ok"), served_by=final.get("served_by", ()),
                           retries=final.get("retries", 0), attempts=final.get("attempts", ()),
                           reason=final.get("reason", ""))

    def _transmit_query(self, _peer: str, rid: int, q: _PendingGet) -> None:
        """Send with the time it has left: a query that waited for one of the session's channels does not
        start its timeout again; one whose time ran out meanwhile ends now."""
        loop = asyncio.get_running_loop()
        left_ms = math.ceil((q.deadline - loop.time()) * 1000)  # up: never shorter than it was given
        if left_ms <= 0:
            loop.call_soon(self._scheduler().complete, rid, {"final": True, "outcome": "timeout",
                                                             "reason": "it waited for a free channel past its timeout"})
            return
        # final_on_reply: this library reads a final word that carries the last reply (an older one did not)
        self._conn.send_query_frame(FrameKind.QUERY, {"id": rid, "key": q.key, "timeout_ms": left_ms,
                                                      "consolidation": q.consolidation, "priority": q.priority,
                                                      "final_on_reply": True}, q.payload)

    async def declare_queryable(self, key: str, handler: Handler) -> Queryable:
        """Answer the queries that match ``key``: ``handler(query)`` returns (or, async, resolves to)
        (key, payload) pairs; an exception becomes an error reply to the querier."""
        keyexpr.validate(key)
        self.raise_if_closed()
        q = Queryable(self, self._next_id, key, handler)
        self._next_id += 1
        self._queryables[q.id] = q
        self._conn.send_control(FrameKind.DECLARE_QUERYABLE, {"id": q.id, "key": key})
        return q

    def _undeclare_queryable(self, q: Queryable) -> None:
        if self._queryables.pop(q.id, None) is not None and not self._conn.closed:
            self._conn.send_control(FrameKind.UNDECLARE_QUERYABLE, {"id": q.id})

    # ---------------------------------------------------------------- frames from the router

    def on_query(self, conn: Connection, kind: int, header: Dict[str, Any], payload: bytes) -> None:
        rid = header.get("id")
        if not isinstance(rid, int):
            raise CodecError(f"{FrameKind(kind).name} needs an integer 'id'")
        if kind == FrameKind.QUERY:
            query = Query(str(header.get("key")), payload, int(header.get("priority", 3)),
                          int(header.get("timeout_ms", 0)))
            task = asyncio.get_running_loop().create_task(self._serve(rid, query), name=f"queryable-{self.name}")
            self._serving_tasks.add(task)
            task.add_done_callback(self._serving_tasks.discard)
            return
        scheduler = self._query_scheduler
        if scheduler is None:
            return
        final = header.get("final")
        if final and "key" not in header:  # the bare final word
            scheduler.complete(rid, header)
            return
        reply = Reply(str(header.get("key")), payload, header.get("replier"), int(header.get("ts_ns", 0)),
                      time.time_ns())
        if final:  # the last reply, and the final word riding on it
            scheduler.complete(rid, header, last=reply)
        else:
            scheduler.reply(rid, reply)

    async def _serve(self, rid: int, query: Query) -> None:
        """Answer a query with every matching queryable's replies, then the final word; a handler still
        busy when the query's time is up is cancelled (nobody waits for its answer any more)."""
        handlers = [q.handler for q in list(self._queryables.values()) if keyexpr.intersects(q.key, query.key)]
        try:
            await asyncio.wait_for(self._answer(rid, query, handlers), max(query.timeout_ms, 1) / 1000.0)
        except asyncio.TimeoutError:
            return

    async def _answer(self, rid: int, query: Query, handlers: List[Handler]) -> None:
        """The replies as they come, then the final word (or the error); the final word rides on the last
        reply's frame (held back until the handlers are done), so the router reads and forwards one frame
        fewer per query and hop."""
        held: Optional[Tuple[Dict[str, Any], bytes]] = None  # the last reply so far, not sent yet
        try:
            for handler in handlers:
                items = handler(query)
                if inspect.isawaitable(items):
                    if held is not None:  # out before waiting for the next handler
                        self._send_reply(held)
                        held = None
                    items = await items
                for key, value in items or ():
                    keyexpr.check_length(key)
                    value = bytes(value)
                    if len(value) > MAX_QUERY_PAYLOAD:
                        raise ValueError(f"a reply's payload is at most {MAX_QUERY_PAYLOAD} bytes, got {len(value)}")
                    if held is not None:
                        self._send_reply(held)
                    held = ({"id": rid, "key": key, "ts_ns": time.time_ns()}, value)
        except Exception as exc:  # the querier is told; this session and the router go on
            if held is not None:
                self._send_reply(held)
            self._send_reply(({"id": rid, "error": f"{type(exc).__name__}: {exc}"}, b""))
            return
        header, value = held if held is not None else ({"id": rid}, b"")
        self._send_reply((dict(header, final=True), value))

    def _send_reply(self, reply: Tuple[Dict[str, Any], bytes]) -> None:
        if not self._conn.closed:
            self._conn.send_query_frame(FrameKind.REPLY, *reply)

    def _querying_closed(self) -> None:
        """The session ended: every query of it still waiting ends "shutdown"."""
        if self._query_scheduler is not None:
            self._query_scheduler.stop()
        for task in list(self._serving_tasks):
            task.cancel()
