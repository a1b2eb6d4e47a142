"""The query traffic processes: a paced querier and the queryables that answer it, driven by a plan.

``run_querier(plan, logger, stop)`` sends one query per tick of each flow's schedule
(traffic/pacing.py: query ``k`` at ``window start + k * interval_ns``, absolute times; a query
late by a whole interval is skipped and counted), each in its own task so that several are
outstanding at once, and logs every query when it ends in ``query-<flow>.csv``.
``run_queryable(plan, logger, stop)`` declares a queryable on each flow's key and answers every
query after the flow's service time with one reply, logged in ``served-<flow>-<node>.csv``.

Sessions, reconnection, log flushing and summaries are those of the publisher and subscriber
(traffic/profiles.py); the payloads carry the traffic header (docs/protocol.md) with the query id
as sequence number, so queries and replies can be found in the captures.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Dict, List, Optional

from router.codec import make_payload, unpack_payload_header
from runfolder.layout import LAYOUT
from runfolder.records import QUERY_HEADER, SERVED_HEADER
from runfolder.trafficplan import FlowPlan, ProcessPlan

from .client import Query, QueryResult, Session
from .logs import READY_QUERYABLE, CsvLog
from .pacing import TickSchedule, active_windows
from .profiles import WARN_EVERY_NS, RunClock, flush_periodically, stop_flushing, keep_declared, next_tick
from .querying import FINAL_GRACE_S

_S = 1_000_000_000
#: outcomes of a query in the log and the summary; "stopped": still outstanding when the process ended
OUTCOMES = ("ok", "timeout", "no_match", "error", "shutdown", "stopped")
#: after its stop, a querier waits this long beyond a query's timeout (and the client library's grace)
_DRAIN_MARGIN_S = 0.5


class SessionHolder:
    """The querier's current session (None while it is connecting)."""

    def __init__(self) -> None:
        self.session: Optional[Session] = None

    async def declare(self, session: Session) -> None:
        self.session = session

    @property
    def usable(self) -> Optional[Session]:
        s = self.session
        return None if s is None or s.closed.is_set() else s


class FlowQuerier:
    """One query flow: its schedule, query ids, the queries outstanding, the query log and counters."""

    def __init__(self, flow: FlowPlan, end_ns: int, log_dir: str) -> None:
        self.flow = flow
        self.schedule = TickSchedule.one_per_tick(active_windows(flow.phases, end_ns), flow.interval_ns)
        self.log = CsvLog(os.path.join(log_dir, LAYOUT.query_log_name(flow.name)), QUERY_HEADER)
        self.next_qid = 0
        self.sent = 0
        self.skipped = 0
        self.max_late_ns = 0
        self.outcomes: Dict[str, int] = {o: 0 for o in OUTCOMES}
        self.outstanding: Dict[asyncio.Task, int] = {}
        self.started_ns: Optional[int] = None
        self._last_warn = {"skipped": -WARN_EVERY_NS * 10, "shutdown": -WARN_EVERY_NS * 10}
        self._since_warn = {"skipped": 0, "shutdown": 0}

    def summary(self) -> Dict[str, Any]:
        return {"flow": self.flow.name, "flow_id": self.flow.flow_id, "sent": self.sent, **self.outcomes,
                "skipped": self.skipped, "max_late_ns": self.max_late_ns}

    def _warn(self, what: str, count: int, now: int, logger: logging.Logger, text: str) -> None:
        """A warning about ``count`` more queries, at most once a second per kind."""
        self._since_warn[what] += count
        if now - self._last_warn[what] >= WARN_EVERY_NS:
            logger.warning(text, self.flow.name, self._since_warn[what])
            self._last_warn[what] = now
            self._since_warn[what] = 0

    def _record(self, qid: int, send_ns: int, done_ns: Optional[int], outcome: str,
                result: Optional[QueryResult] = None) -> None:
        self.outcomes[outcome] += 1
        if result is None:
            self.log.write_row(qid, send_ns, None, done_ns, outcome, 0, 0, "", "")
            return
        first = min((r.recv_ns for r in result), default=None)
        attempts = ";".join(f"{router}:{how}" for router, how in result.attempts)
        self.log.write_row(qid, send_ns, first, done_ns, outcome, len(result), result.retries,
                           ";".join(result.served_by), attempts)

    async def run(self, holder: SessionHolder, clock: RunClock, logger: logging.Logger) -> None:
        """Issue the flow's queries until its schedule ends (cancelled to stop earlier)."""
        while True:
            taken = await next_tick(self.schedule, clock)
            if taken is None:
                return
            now, tick = taken
            if tick.skipped_ticks:
                self.skipped += tick.skipped_ticks
                self.next_qid += tick.skipped_ticks
                self._warn("skipped", tick.skipped_ticks, now, logger,
                           "flow %s: %d late query(s) skipped (the process was late by more than an interval)")
            for _ in range(tick.count):
                self.max_late_ns = max(self.max_late_ns, now - tick.due_ns)
                if self.started_ns is None:
                    self.started_ns = now
                    logger.info("flow %s (id %d) started at run time %.3fs: a query on %s every %.1f ms",
                                self.flow.name, self.flow.flow_id, now / _S, self.flow.key,
                                self.flow.interval_ns / 1e6)
                self._issue(self.next_qid, holder.usable, now, logger)
                self.next_qid += 1

    def _issue(self, qid: int, session: Optional[Session], now: int, logger: logging.Logger) -> None:
        self.sent += 1
        send_ns = time.time_ns()
        if session is None:  # no session now: the query ends at once, as the client library's would
            self._record(qid, send_ns, send_ns, "shutdown")
            self._warn("shutdown", 1, now, logger, "flow %s: %d query(s) issued while not connected: shutdown")
            return
        task = asyncio.ensure_future(self._query(qid, send_ns, session, logger))
        self.outstanding[task] = qid
        task.add_done_callback(self.outstanding.pop)

    async def _query(self, qid: int, send_ns: int, session: Session, logger: logging.Logger) -> None:
        f = self.flow
        try:
            result = await session.get(f.key, timeout=f.timeout_ns / _S, consolidation=f.consolidation,
                                       payload=make_payload(f.flow_id, qid, send_ns, f.size), priority=f.priority)
        except asyncio.CancelledError:
            self._record(qid, send_ns, None, "stopped")
            raise
        except Exception as exc:  # never expected from the client library; logged, and the querier goes on
            logger.warning("flow %s: query %d failed: %s: %s", f.name, qid, type(exc).__name__, exc)
            self._record(qid, send_ns, time.time_ns(), "error")
            return
        self._record(qid, send_ns, time.time_ns(), result.outcome if result.outcome in OUTCOMES else "error",
                     result)

    async def drain(self, logger: logging.Logger) -> None:
        """Wait for the queries outstanding (each ends by its timeout); cut those that do not."""
        if not self.outstanding:
            return
        tasks = list(self.outstanding)
        logger.info("flow %s: waiting for %d outstanding query(s)", self.flow.name, len(tasks))
        _done, late = await asyncio.wait(tasks, timeout=self.flow.timeout_ns / _S + FINAL_GRACE_S + _DRAIN_MARGIN_S)
        for t in late:
            t.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        if late:
            logger.warning("flow %s: %d query(s) still outstanding at exit: logged as stopped", self.flow.name,
                           len(late))


async def run_querier(plan: ProcessPlan, logger: logging.Logger, stop: asyncio.Event) -> Dict[str, Any]:
    """Run a query plan to its end (or until ``stop``); return the summary also written to the log."""
    clock = RunClock(plan.t0_ns)
    flows = [FlowQuerier(f, plan.end_ns, plan.log_dir) for f in plan.flows]
    flusher = asyncio.ensure_future(flush_periodically([q.log for q in flows], plan.flush_interval_ns))
    logger.info("querier %s on %s: %d flow(s) %s, run clock t0 %d (now %.3fs), end %.3fs", plan.name, plan.node,
                len(flows), ",".join(f.name for f in plan.flows), plan.t0_ns, clock.now() / _S, plan.end_ns / _S)
    holder = SessionHolder()
    release = asyncio.Event()  # the session is held until every outstanding query has ended
    drain_ns = max(f.timeout_ns for f in plan.flows) + int((FINAL_GRACE_S + 2 * _DRAIN_MARGIN_S) * _S)
    keeper = asyncio.ensure_future(keep_declared(plan, clock, logger, release, holder.declare,
                                                 plan.end_ns + drain_ns))
    senders = [asyncio.ensure_future(q.run(holder, clock, logger)) for q in flows]
    stop_wait = asyncio.ensure_future(stop.wait())
    how = "completed"
    try:
        pending = set(senders)
        while pending:
            done, _ = await asyncio.wait(pending | {stop_wait, keeper}, return_when=asyncio.FIRST_COMPLETED)
            for t in done & pending:
                pending.discard(t)
                if t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
            if stop_wait in done:
                how = "stopped"
                break
            if keeper in done:  # it never connected before the end: nothing more to send
                break
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.gather(*(q.drain(logger) for q in flows))
    finally:
        for t in senders:
            t.cancel()
        for q in flows:  # an unexpected error: what is outstanding is logged as stopped
            for t in list(q.outstanding):
                t.cancel()
        await asyncio.gather(*senders, *(t for q in flows for t in list(q.outstanding)), return_exceptions=True)
        stop_wait.cancel()
        release.set()
        stats = await keeper
        await stop_flushing(flusher, [q.log for q in flows])
    if stats.end == "no connection":
        how = "no connection"
    return {"process": plan.name, "role": "query", "node": plan.node, "end": how,
            "connections": stats.connections, "connection_losses": stats.losses,
            "flows": [q.summary() for q in flows]}


# ------------------------------------------------------------------ queryable


class FlowServer:
    """One flow's queryable: answers each query after the service time, logs it in served-<flow>-<node>.csv."""

    def __init__(self, flow: FlowPlan, node: str, log_dir: str) -> None:
        self.flow = flow
        self.log = CsvLog(os.path.join(log_dir, LAYOUT.served_log_name(flow.name, node)), SERVED_HEADER)
        self.served = 0
        self.invalid = 0
        self._service_s = flow.service_time_ns / _S

    async def handler(self, query: Query) -> List[Any]:
        recv_ns = time.time_ns()
        header = unpack_payload_header(query.payload)
        if header is None:
            self.invalid += 1
            qid = 0
        else:
            qid = header.seq
        if self._service_s > 0:
            await asyncio.sleep(self._service_s)
        reply_ns = time.time_ns()
        if header is not None:
            self.log.write_row(qid, recv_ns, reply_ns)
        self.served += 1
        key = query.key if "*" not in query.key else self.flow.key
        return [(key, make_payload(self.flow.flow_id, qid, reply_ns, self.flow.reply_size))]


async def run_queryable(plan: ProcessPlan, logger: logging.Logger, stop: asyncio.Event) -> Dict[str, Any]:
    """Run a queryable plan until ``end_ns`` (or ``stop``); return the summary also written to the log."""
    clock = RunClock(plan.t0_ns)
    servers = [FlowServer(f, plan.node, plan.log_dir) for f in plan.flows]
    flusher = asyncio.ensure_future(flush_periodically([s.log for s in servers], plan.flush_interval_ns))
    keys = ",".join(f.key for f in plan.flows)
    logger.info("queryable %s on %s: %d flow(s) %s on key(s) %s, t0 %d (now %.3fs), end %.3fs", plan.name,
                plan.node, len(servers), ",".join(f.name for f in plan.flows), keys, plan.t0_ns,
                clock.now() / _S, plan.end_ns / _S)

    async def declare(session: Session) -> str:
        for s in servers:
            await session.declare_queryable(s.flow.key, s.handler)
        return f"{READY_QUERYABLE} {keys}"

    try:
        stats = await keep_declared(plan, clock, logger, stop, declare, plan.end_ns)
    finally:
        await stop_flushing(flusher, [s.log for s in servers])
    invalid = sum(s.invalid for s in servers)
    if invalid:
        logger.warning("%d query(s) without a valid payload header were answered but not logged", invalid)
    return {"process": plan.name, "role": "queryable", "node": plan.node, "end": stats.end,
            "connections": stats.connections, "connection_losses": stats.losses, "invalid": invalid,
            "flows": [{"flow": s.flow.name, "flow_id": s.flow.flow_id, "served": s.served} for s in servers]}
