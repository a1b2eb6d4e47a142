"""The traffic processes: a paced publisher and a logging subscriber, driven by a plan.

``run_publisher(plan, logger, stop)`` publishes every flow of a pub plan on one
session, each flow on its own tick schedule (traffic/pacing.py), and logs every
message it hands to the client library in ``send-<flow>.csv``.
``run_subscriber(plan, logger, stop)`` subscribes to the keys of the plan's
flows and logs every sample of a known flow in ``recv-<flow>-<node>.csv``.

Both connect before the run clock's origin, retry with back-off when the
router cannot be reached or the session is lost (until ``end_ns``), and return a
summary when the plan ends or ``stop`` is set (SIGTERM/SIGINT in the CLI).  The
profiles (zpub, constant, burst) are all expressed as plans by the
orchestrator (testbed/trafficplanner.py): a profile is a set of flows with
phases, a rate, a size, a tick and optionally on/off periods.  The query
profile's processes (traffic/querier.py) use the same clock, session keeping
(:func:`keep_declared`), log flushing and pacing.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from router.codec import (
    PAYLOAD_HEADER, PAYLOAD_HEADER_SIZE, PAYLOAD_MAGIC, PAYLOAD_VERSION, CongestionControl,
)
from runfolder.layout import LAYOUT
from runfolder.records import RECV_HEADER, SEND_HEADER
from runfolder.trafficplan import FlowPlan, ProcessPlan

from .client import ClosedError, Publisher, Sample, Session
from .clients import UnsupportedByClient
from .logs import READY, CsvLog
from .pacing import Tick, TickSchedule, active_windows
from .sessions import client_drops, open_session

_S = 1_000_000_000
WARN_EVERY_NS = _S  # rate limit of repeated warnings (skipped ticks, retries)


class RunClock:
    """The run clock: ns since ``t0_ns``, read from the monotonic clock (immune to wall-clock steps)."""

    def __init__(self, t0_ns: int) -> None:
        self.t0_ns = t0_ns
        self._offset = time.time_ns() - time.monotonic_ns() - t0_ns

    def now(self) -> int:
        return time.monotonic_ns() + self._offset


async def _sleep_or_stop(seconds: float, stop: asyncio.Event) -> bool:
    """Sleep; True if ``stop`` was set meanwhile."""
    if seconds <= 0:
        return stop.is_set()
    try:
        await asyncio.wait_for(stop.wait(), seconds)
        return True
    except asyncio.TimeoutError:
        return False


async def connect_with_retry(plan: ProcessPlan, clock: RunClock, logger: logging.Logger,
                             stop: asyncio.Event, deadline_ns: int) -> Optional[Session]:
    """A session to the plan's router (with the plan's client library, traffic/sessions.py), retrying
    with back-off until ``deadline_ns`` (run clock) or stop."""
    delay = 0.1
    attempts = 0
    last_warn = -WARN_EVERY_NS * 10
    while not stop.is_set():
        remaining = deadline_ns - clock.now()
        if remaining <= 0:
            logger.error("could not connect to router %s:%d before the end (%d attempts)",
                         plan.host, plan.port, attempts)
            return None
        attempts += 1
        try:
            session = await open_session(plan, min(plan.connect_timeout_ns, remaining) / _S,
                                         slow_reader=plan.read_rate_bps is not None, logger=logger)
        except UnsupportedByClient:  # no retry can help
            raise
        except Exception as exc:  # OSError, TimeoutError, CodecError, IncompleteReadError, zenoh.ZError...
            now = clock.now()
            if now - last_warn >= WARN_EVERY_NS:
                logger.warning("connect to router %s:%d failed (attempt %d): %s: %s; retrying in %.2fs",
                               plan.host, plan.port, attempts, type(exc).__name__, exc, delay)
                last_warn = now
            if await _sleep_or_stop(min(delay, max(0, deadline_ns - clock.now()) / _S), stop):
                return None
            delay = min(delay * 2, plan.retry_max_ns / _S)
            continue
        logger.info("connected to router %s:%d (%s) after %d attempt(s)", plan.host, plan.port,
                    session.router_name or "?", attempts)
        return session
    return None


async def flush_periodically(logs: List[CsvLog], interval_ns: int) -> None:
    while True:
        await asyncio.sleep(interval_ns / _S)
        for log in logs:
            log.flush()


async def stop_flushing(flusher: "asyncio.Future[None]", logs: List[CsvLog]) -> None:
    """Stop the periodic flush and close the logs (flushing what is buffered)."""
    flusher.cancel()
    await asyncio.gather(flusher, return_exceptions=True)
    for log in logs:
        log.close()


async def _close_session(session: Session, logger: logging.Logger, timeout: float = 2.0) -> None:
    try:
        await asyncio.wait_for(session.close(timeout), timeout + 1)
    except Exception as exc:
        logger.warning("closing the session: %s: %s", type(exc).__name__, exc)
        try:
            session.abort("traffic process exiting")
        except Exception:
            pass


async def next_tick(sched: TickSchedule, clock: RunClock) -> Optional[Tuple[int, Tick]]:
    """Sleep until the schedule's next tick is due and take it: ``(now, tick)`` on the run clock, or
    None when the schedule is finished."""
    while True:
        due = sched.next_due()
        if due is None:
            return None
        wait = due - clock.now()
        if wait > 0:
            await asyncio.sleep(wait / _S)
            continue
        now = clock.now()
        tick = sched.take(now)
        if tick is not None:
            return now, tick


# ------------------------------------------------------------------ publisher


class FlowSender:
    """One flow of a publisher: its schedule, sequence numbers, send log and counters."""

    def __init__(self, flow: FlowPlan, end_ns: int, log_dir: str) -> None:
        self.flow = flow
        burst = flow.burst
        windows = active_windows(flow.phases, end_ns, burst.on_ns if burst else None,
                                 burst.off_ns if burst else None)
        self.schedule = TickSchedule(windows, flow.tick_ns, flow.rate_bps, flow.size, flow.catch_up_ticks)
        self.log = CsvLog(os.path.join(log_dir, LAYOUT.send_log_name(flow.name)), SEND_HEADER)
        self._tail = bytes(flow.size - PAYLOAD_HEADER_SIZE)
        self.seq = 0
        self.dropped = 0
        self.client_drops: Optional[Dict[str, int]] = None  # by reason, if the client says (zenoh)
        self.ticks = 0
        self.skipped_ticks = 0
        self.skipped_messages = 0
        self.caught_up_ticks = 0
        self.max_late_ns = 0
        self.started_ns: Optional[int] = None
        self._last_warn = -WARN_EVERY_NS * 10
        self._skips_since_warn = 0

    @property
    def finished(self) -> bool:
        return self.schedule.finished

    def summary(self) -> Dict[str, Any]:
        return {"flow": self.flow.name, "flow_id": self.flow.flow_id, "sent": self.seq,
                "dropped_by_client": self.dropped, "ticks": self.ticks, "skipped_ticks": self.skipped_ticks,
                "skipped_messages": self.skipped_messages, "caught_up_ticks": self.caught_up_ticks, "max_late_ns": self.max_late_ns,
                "finished": self.finished, **({"client_drops": self.client_drops} if self.client_drops else {})}

    def count_client_drops(self, pub: Any) -> None:
        """After the session is closed: what the client dropped after put returned True (sessions.py)."""
        late, reasons = client_drops(pub)
        self.dropped += late
        if reasons is not None:
            self.client_drops = {r: (self.client_drops or {}).get(r, 0) + n for r, n in reasons.items()}

    async def run(self, pub: Publisher, clock: RunClock, logger: logging.Logger) -> None:
        """Publish until the schedule ends; ClosedError propagates when the session is lost."""
        flow = self.flow
        pack = PAYLOAD_HEADER.pack
        tail = self._tail
        size = flow.size
        fid = flow.flow_id
        write = self.log.write_send
        sched = self.schedule
        while True:
            taken = await next_tick(sched, clock)
            if taken is None:
                return
            now, tick = taken
            self.ticks += 1
            if self.started_ns is None:
                self.started_ns = now
                logger.info("flow %s (id %d) started at run time %.3fs: %d B x %d msg/tick every %.1f ms",
                            flow.name, fid, now / _S, size, tick.count, flow.tick_ns / 1e6)
            self.caught_up_ticks += tick.caught_up_ticks
            late = now - tick.due_ns
            if late > self.max_late_ns:
                self.max_late_ns = late
            if tick.skipped_ticks:
                self.skipped_ticks += tick.skipped_ticks
                self.skipped_messages += tick.skipped_messages
                self._skips_since_warn += tick.skipped_ticks
                if now - self._last_warn >= WARN_EVERY_NS:
                    logger.warning("flow %s: %d late tick(s) skipped (%d total, %d messages not sent)",
                                   flow.name, self._skips_since_warn, self.skipped_ticks, self.skipped_messages)
                    self._last_warn = now
                    self._skips_since_warn = 0
            for _ in range(tick.count):
                seq = self.seq
                send_ns = time.time_ns()
                ok = await pub.put(pack(PAYLOAD_MAGIC, PAYLOAD_VERSION, 0, fid, seq, send_ns) + tail)
                # no await between put and the log line: a cancelled put is neither sent nor logged
                write(seq, send_ns, size)
                self.seq = seq + 1
                if not ok:
                    self.dropped += 1


async def run_publisher(plan: ProcessPlan, logger: logging.Logger, stop: asyncio.Event) -> Dict[str, Any]:
    """Run a pub plan to its end (or until ``stop``); return the summary also written to the log."""
    clock = RunClock(plan.t0_ns)
    senders = [FlowSender(f, plan.end_ns, plan.log_dir) for f in plan.flows]
    flusher = asyncio.ensure_future(flush_periodically([s.log for s in senders], plan.flush_interval_ns))
    connections = 0
    losses = 0
    how = "completed"
    logger.info("publisher %s on %s: %d flow(s) %s, run clock t0 %d (now %.3fs), end %.3fs", plan.name, plan.node,
                len(senders), ",".join(f.name for f in plan.flows), plan.t0_ns, clock.now() / _S, plan.end_ns / _S)
    try:
        while True:
            if stop.is_set():
                how = "stopped"
                break
            if all(s.finished for s in senders):
                break
            if clock.now() >= plan.end_ns:
                break
            session = await connect_with_retry(plan, clock, logger, stop, plan.end_ns)
            if session is None:
                how = "stopped" if stop.is_set() else "no connection"
                break
            connections += 1
            pubs = [session.declare_publisher(s.flow.key, s.flow.priority,
                                              CongestionControl.BLOCK if s.flow.congestion_control == "block"
                                              else CongestionControl.DROP, s.flow.express) for s in senders]
            tasks = [asyncio.ensure_future(s.run(p, clock, logger)) for s, p in zip(senders, pubs) if not s.finished]
            stop_wait = asyncio.ensure_future(stop.wait())
            closed_wait = asyncio.ensure_future(session.closed.wait())
            pending = set(tasks)
            lost = False
            try:
                while pending:
                    done, _ = await asyncio.wait(pending | {stop_wait, closed_wait},
                                                 return_when=asyncio.FIRST_COMPLETED)
                    for t in done & pending:
                        pending.discard(t)
                        exc = t.exception()
                        if isinstance(exc, ClosedError):
                            lost = True
                        elif exc is not None:
                            raise exc
                    if stop_wait in done or closed_wait in done or lost:
                        lost = lost or (closed_wait in done and not stop_wait.done())
                        break
            finally:
                for t in list(pending) + [stop_wait, closed_wait]:
                    t.cancel()
                await asyncio.gather(*pending, stop_wait, closed_wait, return_exceptions=True)
            losses += getattr(session, "losses", 0)  # a session that reconnects by itself (zenoh) counts its own
            if lost and not stop.is_set():
                losses += 1
                logger.warning("connection to router lost (%s); reconnecting", session.close_reason or "closed")
                await _close_session(session, logger, 0.5)
                for sender, pub in zip(senders, pubs):
                    sender.count_client_drops(pub)
                continue
            await _close_session(session, logger)
            for sender, pub in zip(senders, pubs):
                sender.count_client_drops(pub)
    finally:
        await stop_flushing(flusher, [s.log for s in senders])
    summary = {"process": plan.name, "role": "pub", "node": plan.node, "end": how, "connections": connections,
               "connection_losses": losses, "flows": [s.summary() for s in senders]}
    return summary


# ------------------------------------------------------------------ subscriber


class FlowReceiver:
    def __init__(self, flow: FlowPlan, node: str, log_dir: str) -> None:
        self.flow = flow
        self.log = CsvLog(os.path.join(log_dir, LAYOUT.recv_log_name(flow.name, node)), RECV_HEADER)
        self.received = 0
        self.first_recv_ns: Optional[int] = None


class Receiver:
    """The sample callback: parse the payload header, route to the flow's receive log."""

    def __init__(self, plan: ProcessPlan) -> None:
        self.flows: Dict[int, FlowReceiver] = {f.flow_id: FlowReceiver(f, plan.log_as or plan.node, plan.log_dir)
                                               for f in plan.flows}
        self.invalid = 0
        self.foreign = 0
        self.foreign_ids: Dict[int, int] = {}

    def __call__(self, sample: Sample) -> None:
        p = sample.payload
        n = len(p)
        if n < PAYLOAD_HEADER_SIZE or p[:2] != PAYLOAD_MAGIC or p[2] != PAYLOAD_VERSION:
            self.invalid += 1
            return
        _m, _v, _f, fid, seq, send_ns = PAYLOAD_HEADER.unpack_from(p)
        rx = self.flows.get(fid)
        if rx is None:
            self.foreign += 1
            if len(self.foreign_ids) < 64 or fid in self.foreign_ids:
                self.foreign_ids[fid] = self.foreign_ids.get(fid, 0) + 1
            return
        rx.received += 1
        rx.log.write_recv(seq, send_ns, sample.recv_ns, n)

    def logs(self) -> List[CsvLog]:
        return [r.log for r in self.flows.values()]


async def _read_slowly(session: Session, plan: ProcessPlan, clock: RunClock, logger: logging.Logger) -> None:
    """A slow subscriber: from ``slow_from_ns`` on, the session reads at ``read_rate_bps`` (0: not at all)."""
    wait = (plan.slow_from_ns - clock.now()) / _S
    if wait > 0:
        await asyncio.sleep(wait)
    session.read_rate_bps = float(plan.read_rate_bps or 0)
    logger.info("reading %s from now on", "nothing" if not plan.read_rate_bps
                else f"at {plan.read_rate_bps} bit/s")


@dataclass
class SessionStats:
    """How a process's sessions went: ``end`` completed | stopped | no connection."""

    end: str = "completed"
    connections: int = 0
    losses: int = 0


async def keep_declared(plan: ProcessPlan, clock: RunClock, logger: logging.Logger, stop: asyncio.Event,
                        declare: Callable[[Session], Awaitable[Optional[str]]], until_ns: int,
                        during: Optional[Callable[[Session], Awaitable[None]]] = None,
                        close_timeout: float = 2.0) -> SessionStats:
    """Hold a session to the plan's router until ``until_ns`` (run clock) or ``stop``: connect,
    ``declare`` on it (what it returns, if anything, is logged as the ready line), run ``during`` beside
    it, and on connection loss log it and start again (back-off in :func:`connect_with_retry`)."""
    stats = SessionStats()
    while True:
        if stop.is_set():
            stats.end = "stopped"
            return stats
        if clock.now() >= until_ns:
            return stats
        session = await connect_with_retry(plan, clock, logger, stop, until_ns)
        if session is None:
            stats.end = "stopped" if stop.is_set() else "no connection"
            return stats
        stats.connections += 1
        beside = None if during is None else asyncio.ensure_future(during(session))
        try:
            ready = await declare(session)
        except Exception as exc:
            if beside is not None:
                beside.cancel()
            stats.losses += 1
            logger.warning("declaring on the session failed: %s: %s; reconnecting", type(exc).__name__, exc)
            await _close_session(session, logger, 0.5)
            await _sleep_or_stop(0.1, stop)
            continue
        if ready:
            logger.info("%s", ready)
        stop_wait = asyncio.ensure_future(stop.wait())
        closed_wait = asyncio.ensure_future(session.closed.wait())
        end_wait = asyncio.ensure_future(asyncio.sleep(max(0, until_ns - clock.now()) / _S))
        try:
            done, _ = await asyncio.wait({stop_wait, closed_wait, end_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (stop_wait, closed_wait, end_wait):
                t.cancel()
            await asyncio.gather(stop_wait, closed_wait, end_wait, return_exceptions=True)
        if beside is not None:  # e.g. a slow reader stays slow to the end: what it has not read is not logged
            beside.cancel()
        stats.losses += getattr(session, "losses", 0)  # a session that reconnects by itself (zenoh) counts its own
        if closed_wait in done and not stop.is_set() and clock.now() < until_ns:
            stats.losses += 1
            logger.warning("connection to router lost (%s); reconnecting", session.close_reason or "closed")
            await _close_session(session, logger, 0.5)
            continue
        await _close_session(session, logger, close_timeout)


async def run_subscriber(plan: ProcessPlan, logger: logging.Logger, stop: asyncio.Event) -> Dict[str, Any]:
    """Run a sub plan until ``end_ns`` (or ``stop``); return the summary also written to the log."""
    clock = RunClock(plan.t0_ns)
    receiver = Receiver(plan)
    keys = sorted({f.key for f in plan.flows})
    flusher = asyncio.ensure_future(flush_periodically(receiver.logs(), plan.flush_interval_ns))
    logger.info("subscriber %s on %s: %d flow(s) %s on key(s) %s, t0 %d (now %.3fs), end %.3fs", plan.name,
                plan.node, len(plan.flows), ",".join(f.name for f in plan.flows), ",".join(keys), plan.t0_ns,
                clock.now() / _S, plan.end_ns / _S)

    async def declare(session: Session) -> str:
        for key in keys:
            await session.declare_subscriber(key, callback=receiver)
        return f"{READY} {','.join(keys)}"

    slow = plan.read_rate_bps is not None
    try:
        stats = await keep_declared(plan, clock, logger, stop, declare, plan.end_ns,
                                    during=(lambda s: _read_slowly(s, plan, clock, logger)) if slow else None,
                                    close_timeout=0.5 if slow else 2.0)
    finally:
        await stop_flushing(flusher, receiver.logs())
    flows = [{"flow": r.flow.name, "flow_id": r.flow.flow_id, "received": r.received}
             for r in receiver.flows.values()]
    if receiver.invalid:
        logger.warning("%d sample(s) without a valid payload header were ignored", receiver.invalid)
    if receiver.foreign:
        logger.warning("%d sample(s) of flows not in this plan were ignored (flow ids %s)", receiver.foreign,
                       sorted(receiver.foreign_ids))
    return {"process": plan.name, "role": "sub", "node": plan.node, "end": stats.end,
            "connections": stats.connections, "connection_losses": stats.losses, "invalid": receiver.invalid,
            "foreign": receiver.foreign, "flows": flows}
