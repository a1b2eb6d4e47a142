"""Enforcement of the resource limits (router/limits.py): the noisy-sender and
slow-reader decisions, their events, and the periodic check that notices
endpoints whose state changed while no message passed.

The fast path (router/forwarding.py) calls :meth:`LimitEnforcement._on_noisy`
when a sender is over its limit and :meth:`LimitEnforcement._on_slow_reader`
when a target's queue stayed full too long; everything else happens here.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional

from .connection import Connection
from .limits import CLEAR_AFTER_NS, EndpointAccount

log = logging.getLogger(__name__)

#: while a sender holds more than ``sender_bytes`` and is throttled, its reader pauses this long per frame
SENDER_BYTES_PAUSE_S = 0.01


def _rounded(value: Optional[float]) -> Optional[int]:
    return None if value is None else round(value)


class LimitEnforcement:
    """Mixin of :class:`router.node.RouterNode`: noisy senders and slow readers."""

    def _on_noisy(self, conn: Connection, acct: EndpointAccount, cause: str, now_ns: int) -> str:
        """``conn``'s sender is over a limit now (``cause``): mark it noisy (one event
        when it becomes so) and return its policy; ``disconnect`` closes it here."""
        acct.calm_since_ns = 0
        policy = acct.limits.noisy_policy
        if not acct.noisy:
            acct.noisy = True
            acct.noisy_bytes = 0
            acct.noisy_since_ns = now_ns
            acct.noisy_cause = cause
            acct.count("noisy_sender", policy)
            ledger = self.ledger
            self.events.emit(
                "noisy_sender", endpoint=acct.name, kind=acct.kind, policy=policy, cause=cause,
                input_rate_bps=_rounded(acct.input_rate_bps(now_ns)), input_rate_limit_bps=acct.limits.input_rate_bps,
                over_bucket_bytes=max(0, round(-acct.tokens)),
                queued_from_bytes=acct.queued_from, sender_limit_bytes=acct.limits.sender_bytes,
                share_of_total=round(acct.queued_from / ledger.limit, 4) if ledger.config.total_bytes else None,
                total_bytes=ledger.total, total_limit_bytes=ledger.config.total_bytes)
        if policy == "disconnect" and not conn.closed:
            conn.close(f"noisy sender ({cause}): disconnected by the router's resource limits")
        return policy

    def _on_slow_reader(self, conn: Connection, acct: EndpointAccount, now_ns: int, cause: str) -> str:
        """``conn``'s own queue refused a message and it is ``cause`` (``stalled``: nothing left its
        queue for ``stalled_reader_ms``; ``backlog``: it held data without emptying for
        ``slow_reader_ms``): mark it slow (one event, one count) and return its policy;
        ``disconnect`` closes it here."""
        policy = acct.limits.slow_reader_policy
        if not acct.slow:
            acct.slow = True
            acct.slow_cause = cause
            acct.slow_since_ns = now_ns
            acct.count("slow_reader", policy)
            key = (acct.kind, cause, policy)
            self.counters.slow_readers[key] = self.counters.slow_readers.get(key, 0) + 1
            self.events.emit(
                "slow_reader", endpoint=acct.name, kind=acct.kind, policy=policy, cause=cause,
                stalled_ms=acct.stalled_ns(now_ns) // 1_000_000, stalled_reader_ms=acct.limits.stalled_reader_ms,
                backlog_ms=acct.backlog_ns(now_ns) // 1_000_000, full_for_ms=acct.full_for_ns(now_ns) // 1_000_000,
                slow_reader_ms=acct.limits.slow_reader_ms,
                queued_to_bytes=acct.queued_to, endpoint_limit_bytes=acct.limits.endpoint_bytes)
        if policy == "disconnect" and not conn.closed:
            what = (f"nothing left its queue for {acct.stalled_ns(now_ns) // 1_000_000} ms (stalled_reader_ms "
                    f"{acct.limits.stalled_reader_ms})" if cause == "stalled" else
                    f"its queue held data for {acct.backlog_ns(now_ns) // 1_000_000} ms without emptying "
                    f"(slow_reader_ms {acct.limits.slow_reader_ms})")
            conn.close(f"slow reader: {what} and it is full; disconnected by the router's resource limits")
        return policy

    async def _throttle(self, conn: Connection, acct: EndpointAccount) -> None:
        """A noisy sender holding more than ``sender_bytes``: its reading pauses a while (TCP pushes back).
        (Over its input rate, forwarding paces it message by message instead.)"""
        start = time.monotonic_ns()
        await asyncio.sleep(SENDER_BYTES_PAUSE_S)
        acct.throttled_ns += time.monotonic_ns() - start

    # ------------------------------------------------------------ periodic check

    async def _limits_loop(self) -> None:
        interval = self.config.limits.check_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                self.limits_tick()
            except Exception:  # a bug here must not stop the checks for good
                log.exception("resource limits check failed")

    def limits_tick(self, now_ns: Optional[int] = None) -> None:
        """Slow readers whose queue stayed full with no push in between, and the end
        of noisy / slow states (after ``CLEAR_AFTER_NS`` without cause)."""
        now = time.time_ns() if now_ns is None else now_ns
        if self.ledger.total > self.ledger.peak:
            self.ledger.peak = self.ledger.total
        conns = {c.pipeline.account: c for c in list(self.routers.values()) + list(self.clients)}
        for acct, conn in conns.items():
            if acct is None or conn.closed:
                continue
            if acct.queued_from > acct.peak_from:
                acct.peak_from = acct.queued_from
            if acct.queued_to > acct.peak_to:
                acct.peak_to = acct.queued_to
            if acct.queued_to == 0:
                acct.full_since_ns = acct.backlog_since_ns = 0  # emptied (the writer's pull also notices this)
            if not acct.slow and acct.full_since_ns:
                cause = acct.slow_cause_now(now)
                if cause:
                    self._on_slow_reader(conn, acct, now, cause)
            if acct.slow and not acct.full_since_ns:
                if not acct.slow_calm_since_ns:
                    acct.slow_calm_since_ns = now
                elif now - acct.slow_calm_since_ns >= CLEAR_AFTER_NS:
                    self.events.emit("slow_reader_cleared", endpoint=acct.name, kind=acct.kind,
                                     cause=acct.slow_cause,
                                     duration_ms=(now - acct.slow_since_ns) // 1_000_000,
                                     dropped=acct.dropped_slow)
                    acct.slow = False
                    acct.slow_calm_since_ns = 0
            elif acct.slow:
                acct.slow_calm_since_ns = 0
            if acct.noisy:
                debt = acct.observe_input(0, now)
                if acct.noisy_reason(debt):
                    acct.calm_since_ns = 0
                elif not acct.calm_since_ns:
                    acct.calm_since_ns = now
                elif now - acct.calm_since_ns >= CLEAR_AFTER_NS:
                    span = now - acct.noisy_since_ns
                    self.events.emit("noisy_sender_cleared", endpoint=acct.name, kind=acct.kind,
                                     policy=acct.limits.noisy_policy,
                                     duration_ms=span // 1_000_000,
                                     mean_input_rate_bps=round(acct.noisy_bytes * 8e9 / span) if span else None,
                                     dropped=acct.dropped_noisy, throttled_ms=acct.throttled_ns // 1_000_000)
                    acct.noisy = False
                    acct.calm_since_ns = 0

    def limits_view(self) -> dict:
        """GET /admin/limits: the totals and every endpoint's account."""
        return self.ledger.view(time.time_ns())
