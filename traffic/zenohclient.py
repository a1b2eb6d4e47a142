"""The traffic processes' session interface on top of stock Zenoh (eclipse-zenoh, client mode).

    session = await connect("10.0.0.1", 7447, name="pub1")          # tcp/10.0.0.1:7447, scouting off
    pub = session.declare_publisher("demo/a", priority=Priority.DATA,
                                    congestion_control=CongestionControl.BLOCK, express=False)
    await pub.put(payload)                                            # False: dropped by this client
    await session.declare_subscriber("demo/**", callback=fn)         # fn(Sample) on the event loop
    await session.close()

The same interface as :mod:`traffic.client` (our router's client library) for what the
publisher and subscriber processes use, so that traffic/profiles.py runs unchanged on either.
The payload goes to Zenoh as the very bytes given (the traffic header at its start).

Mapping: our priorities 0..7 are Zenoh's numbering (router/codec.py ``Priority``); Zenoh's
``Control`` (0) is reserved to Zenoh itself and not offered to publishers, so 0 is sent as
``REAL_TIME`` (1); 1..7 map to ``REAL_TIME`` .. ``BACKGROUND``. ``CongestionControl.BLOCK`` /
``DROP`` map to Zenoh's ``BLOCK`` / ``DROP``; ``express`` to the publisher's express flag.

Threads. ``zenoh.open`` runs in a worker thread (bounded by ``timeout``: the thread is left to
finish and its session closed if it comes late). Each publisher has its own sending thread fed by
a small bounded queue: a Zenoh ``put`` blocks the calling thread -- a Block put while the link is
congested, up to Zenoh's ``wait_before_close`` (5 s), a Drop put up to ``wait_before_drop`` (1 ms)
per message -- and one process may hold several flows (e.g. a real-time Block flow beside bulk
data flows): on the event loop, one flow's put would stall every other flow's ticks. zenoh releases
the GIL while it waits, so a stalled flow costs the others nothing. ``put`` returns at once when the
queue has room (the flow's messages stay in order); when full, a Drop put waits up to
``drop_wait_s`` (1 ms, as our client's drop deadline) and then drops (False), a Block put waits for
room. Every message handed to a publisher is counted once, as put to Zenoh or as a client drop with
its reason (``Publisher.drops``): ``queue_full`` and ``disconnected`` when ``put`` returns False;
``put_error`` (Zenoh's put raised: logged at most once a second), ``discarded_at_close`` (still
queued, or in a put that has not returned, when ``close`` runs out of time) and
``discarded_at_abort`` after it returned True (``Publisher.dropped_after_put``, which the caller
adds to its own count once the session is closed). Closing logs each publisher's account.
Samples arrive on Zenoh's callback thread: ``recv_ns`` is stamped there first thing, then the
sample is handed to the event loop (a deque and one ``call_soon_threadsafe`` per batch, not per
sample), where the subscriber's callback runs -- the receive logs are not thread-safe.

Connection loss. A Zenoh client re-connects to its router by itself (``connect.retry``, set here
to 100 ms doubling up to ``retry_max_s``, like the testbed client's back-off) and re-declares its
subscribers; so a lost router connection does **not** close the session: ``closed`` is set only
when the session is closed (``close``/``abort``). While no router is connected, ``connected`` is
False, ``put`` returns False (the message is dropped by the client: Zenoh would have nowhere to
send it), and ``losses`` counts the losses (each logged on ``logger``, if given).

Not offered: slow readers (``slow_reader``/``read_rate_bps``, a feature of our router's client
connection) and queries (``get``/``declare_queryable``): both raise ``UnsupportedByZenohClient``.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import zenoh

from router import keyexpr
from router.codec import CongestionControl, Priority

from .client import ClosedError, Sample
from .client import Subscriber as ClientSubscriber
from runfolder.trafficplan import NO_ZENOH_QUERIES

from .clients import UnsupportedByClient

__all__ = ["Session", "Publisher", "Subscriber", "Sample", "connect", "client_config", "Priority",
           "CongestionControl", "ClosedError", "UnsupportedByZenohClient", "zenoh_priority",
           "zenoh_congestion_control", "NO_QUERIES", "NO_SLOW_READER"]

NO_QUERIES = NO_ZENOH_QUERIES  # "the zenoh client does not do queries"
NO_SLOW_READER = ("a slow reader (read_rate_bps) is a feature of the testbed router's client; "
                  "the zenoh client does not offer it")

#: our priority (Zenoh's numbering) -> zenoh.Priority; 0 (Control) is Zenoh's own: REAL_TIME instead
_TO_ZENOH_PRIORITY = {
    Priority.CONTROL: zenoh.Priority.REAL_TIME,
    Priority.REAL_TIME: zenoh.Priority.REAL_TIME,
    Priority.INTERACTIVE_HIGH: zenoh.Priority.INTERACTIVE_HIGH,
    Priority.INTERACTIVE_LOW: zenoh.Priority.INTERACTIVE_LOW,
    Priority.DATA_HIGH: zenoh.Priority.DATA_HIGH,
    Priority.DATA: zenoh.Priority.DATA,
    Priority.DATA_LOW: zenoh.Priority.DATA_LOW,
    Priority.BACKGROUND: zenoh.Priority.BACKGROUND,
}
#: int(zenoh.Priority.X) -> ours (zenoh-python's enums convert to Zenoh's own numbers)
_FROM_ZENOH_PRIORITY = {int(z): int(p) for p, z in _TO_ZENOH_PRIORITY.items() if p != Priority.CONTROL}
_ZENOH_BLOCK = int(zenoh.CongestionControl.BLOCK)
_WHATAMI_ROUTER = zenoh.WhatAmI.ROUTER
#: a publisher's queue: at most this many bytes (and at least one message) wait for its thread
QUEUE_BYTES = 256 * 1024
DROP_WAIT_S = 0.001
#: put errors are logged at most once per this many seconds (per publisher)
ERROR_LOG_EVERY_S = 1.0
_STOP = object()
_LOG = logging.getLogger(__name__)
#: why a message handed to a publisher was dropped by the client
QUEUE_FULL, DISCONNECTED, PUT_ERROR = "queue_full", "disconnected", "put_error"
DISCARDED_AT_CLOSE, DISCARDED_AT_ABORT = "discarded_at_close", "discarded_at_abort"
DROP_REASONS = (QUEUE_FULL, DISCONNECTED, PUT_ERROR, DISCARDED_AT_CLOSE, DISCARDED_AT_ABORT)
#: the drops of messages ``put`` had returned True for
AFTER_PUT_REASONS = (PUT_ERROR, DISCARDED_AT_CLOSE, DISCARDED_AT_ABORT)


class UnsupportedByZenohClient(UnsupportedByClient):
    """What the testbed client does and the zenoh client does not (slow readers, queries)."""


def zenoh_priority(priority: int) -> "zenoh.Priority":
    try:
        return _TO_ZENOH_PRIORITY[Priority(int(priority))]
    except ValueError:
        raise ValueError(f"priority {priority!r} is not 0..7") from None


def zenoh_congestion_control(cc: int) -> "zenoh.CongestionControl":
    return zenoh.CongestionControl.BLOCK if int(cc) == CongestionControl.BLOCK else zenoh.CongestionControl.DROP


def endpoint(host: str, port: int) -> str:
    return f"tcp/[{host}]:{port}" if ":" in host else f"tcp/{host}:{port}"


def client_config(host: str, port: int, timeout: float = 5.0, retry_max_s: float = 2.0) -> "zenoh.Config":
    """A client-mode config that reaches only ``tcp/host:port`` (no scouting, no gossip)."""
    conf = zenoh.Config()
    conf.insert_json5("mode", '"client"')
    conf.insert_json5("connect/endpoints", f'["{endpoint(host, port)}"]')
    conf.insert_json5("scouting/multicast/enabled", "false")
    conf.insert_json5("scouting/gossip/enabled", "false")
    # Zenoh moves payloads above 3 KiB into shared memory when both ends are on one host (the default
    # since 1.x): on an emulated lab that skips the shaped links altogether. Everything on the wire.
    conf.insert_json5("transport/shared_memory/enabled", "false")
    # one attempt at open (the traffic process retries with its own back-off), then zenoh's own
    # reconnection after a loss, as quick as the testbed client's back-off
    conf.insert_json5("connect/timeout_ms", "0")
    conf.insert_json5("transport/unicast/open_timeout", str(max(1, int(timeout * 1000))))
    conf.insert_json5("connect/retry", "{period_init_ms: 100, period_max_ms: %d, period_increase_factor: 2}"
                      % max(100, int(retry_max_s * 1000)))
    return conf


class _Outbox:
    """A bounded FIFO between the event loop (puts) and a publisher's sending thread, and the
    publisher's account of every message handed to it: put to Zenoh, or dropped (by reason).

    Counted under the one lock, so that a message is counted once whoever gets there first: the
    thread (put done, or failed) or a close/abort (what is still queued, and the message the thread
    is still putting, if any: it is given up then and not counted again when its put returns)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_bytes: int) -> None:
        self._loop = loop
        self._items: Deque[Any] = collections.deque()
        self._bytes = 0
        self._max = max_bytes
        self._cond = threading.Condition(threading.Lock())
        self._room: List["asyncio.Future[None]"] = []  # puts waiting for room (loop side)
        self.stopped = False
        #: the thread has taken a message and not yet counted it (it is in zenoh's put)
        self.in_flight = False
        self.put_ok = 0
        self.drops: Dict[str, int] = dict.fromkeys(DROP_REASONS, 0)

    def try_push(self, payload: bytes) -> bool:
        n = len(payload)
        with self._cond:
            if self.stopped or (self._items and self._bytes + n > self._max):
                return False
            self._items.append(payload)
            self._bytes += n
            self._cond.notify()
        return True

    def room(self) -> "asyncio.Future[None]":
        """A future done when the thread has taken a message (or the outbox stopped)."""
        fut = self._loop.create_future()
        with self._cond:
            if self.stopped or not self._items:
                fut.set_result(None)
            else:
                self._room.append(fut)
        return fut

    def stop(self) -> None:
        """No more puts; the thread sends what is queued, then ends."""
        with self._cond:
            self.stopped = True
            self._items.append(_STOP)
            self._cond.notify()
        self._wake_waiters()

    def take(self) -> Any:
        """(thread) The next message, waiting for one."""
        with self._cond:
            while not self._items:
                self._cond.wait()
            item = self._items.popleft()
            if item is not _STOP:
                self._bytes -= len(item)
                self.in_flight = True
            waiters = bool(self._room)
        if waiters:
            self._wake_waiters()
        return item

    def done(self, error: bool) -> bool:
        """(thread) The taken message's put returned (``error``: it raised); False if a close/abort
        gave it up meanwhile (already counted)."""
        with self._cond:
            if not self.in_flight:
                return False
            self.in_flight = False
            if error:
                self.drops[PUT_ERROR] += 1
            else:
                self.put_ok += 1
            return True

    def drop(self, reason: str) -> None:
        """(loop) A message put did not take (put returned False)."""
        with self._cond:
            self.drops[reason] += 1

    def discard(self, reason: str, give_up_put: bool = True) -> int:
        """Drop what is queued and (``give_up_put``) give up the message in zenoh's put, if any (a
        close that ran out of time, an abort), counted under ``reason``; how many messages that was."""
        with self._cond:
            n = sum(1 for i in self._items if i is not _STOP)
            if give_up_put and self.in_flight:
                n += 1
                self.in_flight = False
            self._items = collections.deque([_STOP])
            self._bytes = 0
            self.stopped = True
            self.drops[reason] += n
            self._cond.notify()
        self._wake_waiters()
        return n

    @property
    def pending(self) -> bool:
        """Messages queued or in zenoh's put."""
        with self._cond:
            return self.in_flight or any(i is not _STOP for i in self._items)

    def counts(self) -> Tuple[int, Dict[str, int]]:
        with self._cond:
            return self.put_ok, dict(self.drops)

    def _wake_waiters(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._release)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _release(self) -> None:
        with self._cond:
            waiters, self._room = self._room, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


class Publisher:
    """A zenoh publisher behind our client's publisher interface (``put`` -> bool).

    Every message handed to it (a ``put`` that returned, True or False) ends up counted once:
    ``put_to_zenoh`` (zenoh's put returned) or a client drop in ``drops`` by reason -- ``queue_full``
    (a Drop put found no room in time) and ``disconnected`` (no router) when ``put`` returns False;
    ``put_error`` (zenoh's put raised: logged, at most once a second), ``discarded_at_close`` (still
    queued when ``close`` ran out of time) and ``discarded_at_abort`` after it returned True
    (``dropped_after_put``: the caller saw True and cannot know). Once the session is closed (or
    aborted) nothing is pending: ``sent == put_to_zenoh + dropped_after_put``."""

    def __init__(self, session: "Session", key: str, priority: int, congestion_control: int,
                 express: bool) -> None:
        keyexpr.validate(key)
        self.session = session
        self.key = key
        self.priority = int(priority)
        self.congestion_control = int(congestion_control)
        self.express = bool(express)
        self.block = self.congestion_control == CongestionControl.BLOCK
        #: the zenoh publisher (its priority and congestion_control show the mapping)
        self.zenoh = session.zenoh.declare_publisher(key, priority=zenoh_priority(self.priority),
                                                     congestion_control=zenoh_congestion_control(
                                                         self.congestion_control),
                                                     express=self.express)
        #: messages accepted by put (True): handed to the sending thread
        self.sent = 0
        self.last_error = ""
        self._errors_logged_at = -ERROR_LOG_EVERY_S
        self._errors_unlogged = 0
        self._outbox = _Outbox(session._loop, QUEUE_BYTES)
        self._thread = threading.Thread(target=self._send_loop, name=f"zenoh-put-{key}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ the account

    @property
    def drops(self) -> Dict[str, int]:
        """Client drops by reason (every reason, 0 included)."""
        return self._outbox.counts()[1]

    @property
    def dropped(self) -> int:
        """Every client drop: those ``put`` returned False for and those after it returned True."""
        return sum(self._outbox.counts()[1].values())

    @property
    def dropped_after_put(self) -> int:
        """The drops ``put`` returned True for: put errors, discarded at close or abort."""
        drops = self._outbox.counts()[1]
        return sum(drops[r] for r in AFTER_PUT_REASONS)

    @property
    def put_to_zenoh(self) -> int:
        return self._outbox.counts()[0]

    @property
    def errors(self) -> int:
        """Zenoh puts that raised (``last_error`` the last one)."""
        return self._outbox.counts()[1][PUT_ERROR]

    def account(self) -> str:
        put_ok, drops = self._outbox.counts()
        text = f"{self.sent + drops[QUEUE_FULL] + drops[DISCONNECTED]} handed, {put_ok} put to zenoh, " \
               f"{sum(drops.values())} dropped by the client"
        reasons = ", ".join(f"{r} {n}" for r, n in drops.items() if n)
        return f"{text} ({reasons})" if reasons else text

    # ------------------------------------------------------------ the sending thread

    def _send_loop(self) -> None:
        take = self._outbox.take
        done = self._outbox.done
        while True:
            payload = take()
            if payload is _STOP:
                return
            try:
                self.zenoh.put(payload)
            except Exception as exc:  # a closed session or publisher, mostly
                self.last_error = f"{type(exc).__name__}: {exc}"
                if done(True):
                    self._log_put_error()
            else:
                done(False)

    def _log_put_error(self) -> None:
        """(thread) The first put error at once, then at most one line a second."""
        self._errors_unlogged += 1
        now = time.monotonic()
        if now - self._errors_logged_at < ERROR_LOG_EVERY_S:
            return
        more = self._errors_unlogged - 1
        self._errors_logged_at = now
        self._errors_unlogged = 0
        self.session._log().warning("zenoh session %s: publisher %s: put failed (%s): dropped by the client%s; "
                                    "%d put error(s) so far", self.session.name, self.key, self.last_error,
                                    f" with {more} more since the last report" if more else "", self.errors)

    # ------------------------------------------------------------ puts (event loop)

    def _closed(self) -> ClosedError:
        return ClosedError(f"session closed: {self.session.close_reason or 'closing'}")

    def put_nowait(self, payload: bytes) -> bool:
        """Queue without waiting; False if it could not be queued (counted as a drop)."""
        outbox = self._outbox
        if self.session.closed.is_set() or outbox.stopped:
            raise self._closed()
        if not self.session.connected:
            outbox.drop(DISCONNECTED)
            return False
        if outbox.try_push(payload):
            self.sent += 1
            return True
        if outbox.stopped:
            raise self._closed()
        outbox.drop(QUEUE_FULL)
        return False

    async def put(self, payload: bytes) -> bool:
        """Hand one message to the publisher's thread. Drop: waits up to ``DROP_WAIT_S`` for room,
        False if dropped; Block: waits for room. False too while no router is connected.
        Raises ClosedError once the session is closed (or closing): the message is not handed."""
        session = self.session
        outbox = self._outbox
        if session.closed.is_set() or outbox.stopped:
            raise self._closed()
        if not session.connected:
            outbox.drop(DISCONNECTED)
            return False
        if outbox.try_push(payload):
            self.sent += 1
            return True
        deadline = None if self.block else time.monotonic() + DROP_WAIT_S
        while True:
            room = outbox.room()
            try:
                if deadline is None:
                    await room
                else:
                    await asyncio.wait_for(room, max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                pass
            finally:
                room.cancel()
            if session.closed.is_set() or outbox.stopped:
                raise self._closed()
            if outbox.try_push(payload):
                self.sent += 1
                return True
            if deadline is not None and time.monotonic() >= deadline:
                outbox.drop(QUEUE_FULL)
                return False

    def _stop(self) -> None:
        self._outbox.stop()

    def _join(self, timeout: Optional[float]) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _undeclare(self) -> None:
        try:
            self.zenoh.undeclare()
        except Exception:
            pass


class Subscriber(ClientSubscriber):
    """Our client's subscriber (callback or async iteration, undeclare), holding its Zenoh subscriber."""

    def __init__(self, session: "Session", key: str, callback: Optional[Callable[[Sample], Any]]) -> None:
        super().__init__(session, 0, key, callback)  # type: ignore[arg-type]
        self.zenoh: Any = None


class Session:
    """A zenoh client session behind the testbed client's session interface."""

    def __init__(self, name: str, z: "zenoh.Session", loop: asyncio.AbstractEventLoop,
                 logger: Optional[logging.Logger] = None) -> None:
        self.name = name
        self.zenoh = z
        self._loop = loop
        self.logger = logger
        self.closed = asyncio.Event()
        self.close_reason = ""
        routers = z.info.routers_zid()
        #: the router's Zenoh id (our client has the router's name here)
        self.router_name = str(routers[0]) if routers else ""
        self.connected = True  # open succeeded: a router is connected
        self.losses = 0
        self.read_rate_bps: Optional[float] = None  # a slow reader: refused by connect()
        self._pubs: List[Publisher] = []
        self._subs: Dict[int, Subscriber] = {}
        self._inbox: Deque[Tuple[Subscriber, Sample]] = collections.deque()
        self._drain_scheduled = False
        self._accounted = False
        self._routers = len(routers)
        self._events = z.info.declare_transport_events_listener(self._on_transport_event, history=False)
        if not z.info.routers_zid():  # lost between open and the listener
            self._on_router_lost("the router connection was lost right after open")

    # ---------------------------------------------------------------- API

    def declare_publisher(self, key: str, priority: int = Priority.DATA,
                          congestion_control: int = CongestionControl.DROP, express: bool = False) -> Publisher:
        if self.closed.is_set():
            raise ClosedError(f"session closed: {self.close_reason}")
        pub = Publisher(self, key, priority, congestion_control, express)
        self._pubs.append(pub)
        return pub

    async def declare_subscriber(self, key: str, callback: Optional[Callable[[Sample], Any]] = None) -> Subscriber:
        if self.closed.is_set():
            raise ClosedError(f"session closed: {self.close_reason}")
        keyexpr.validate(key)
        sub = Subscriber(self, key, callback)
        sub.zenoh = self.zenoh.declare_subscriber(key, self._sample_callback(sub))
        self._subs[id(sub)] = sub
        return sub

    async def get(self, *_args: Any, **_kwargs: Any) -> Any:
        raise UnsupportedByZenohClient(NO_QUERIES)

    async def declare_queryable(self, *_args: Any, **_kwargs: Any) -> Any:
        raise UnsupportedByZenohClient(NO_QUERIES)

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until the publishers' threads have handed every queued message to zenoh."""
        deadline = time.monotonic() + timeout
        while any(p._outbox.pending for p in self._pubs) and time.monotonic() < deadline:
            await asyncio.sleep(0.001)

    async def close(self, timeout: float = 10.0) -> None:
        """Send what the publishers have queued (up to ``timeout``), then close the zenoh session.
        What is left (still queued, or in a zenoh put that has not returned after the session
        closed) is counted as ``discarded_at_close``: once this returns, every publisher's account
        is complete (and logged)."""
        if self.closed.is_set():
            return
        deadline = time.monotonic() + timeout
        self._drain()  # what zenoh has handed over is still delivered
        for p in self._pubs:
            p._stop()
        for p in self._pubs:
            if not await asyncio.to_thread(p._join, max(0.0, deadline - time.monotonic())):
                p._outbox.discard(DISCARDED_AT_CLOSE, give_up_put=False)  # what is queued; the put may still go
        self._finish("client closed the session")
        try:
            await asyncio.wait_for(asyncio.to_thread(self._close_zenoh), max(0.1, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            pass
        for p in self._pubs:  # a put stalled until the session closed returns now
            if not await asyncio.to_thread(p._join, min(0.5, max(0.05, deadline - time.monotonic()))):
                p._outbox.discard(DISCARDED_AT_CLOSE)
        self._log_accounts()

    def abort(self, reason: str) -> None:
        """Close at once: what the publishers have queued (and a put in progress) is dropped, counted as
        ``discarded_at_abort``; zenoh is closed in the background. Also after a close that did not
        finish (e.g. cancelled): what it left is counted then."""
        for p in self._pubs:
            p._outbox.discard(DISCARDED_AT_ABORT)
        if not self.closed.is_set():
            self._finish(reason)
            threading.Thread(target=self._close_zenoh, name="zenoh-close", daemon=True).start()
        self._log_accounts()

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ---------------------------------------------------------------- internals

    def _log(self) -> logging.Logger:
        return self.logger if self.logger is not None else _LOG

    def _log_accounts(self) -> None:
        """Once, when closed: each publisher's messages, put to zenoh or dropped by the client (why)."""
        if self._accounted:
            return
        self._accounted = True
        log = self._log()
        for p in self._pubs:
            (log.warning if p.dropped else log.info)("zenoh session %s: publisher %s: %s", self.name, p.key,
                                                     p.account())

    def _finish(self, reason: str) -> None:
        self.close_reason = reason
        self.closed.set()
        for s in self._subs.values():
            s._queue.put_nowait(None)

    def _close_zenoh(self) -> None:
        try:
            self._events.undeclare()
        except Exception:
            pass
        try:
            self.zenoh.close()
        except Exception:
            pass

    def _undeclare(self, sub: Subscriber) -> None:
        if self._subs.pop(id(sub), None) is not None:
            try:
                sub.zenoh.undeclare()
            except Exception:
                pass
            sub._queue.put_nowait(None)

    def _sample_callback(self, sub: Subscriber) -> Callable[[Any], None]:
        inbox = self._inbox
        prio = _FROM_ZENOH_PRIORITY
        block = _ZENOH_BLOCK

        def on_sample(zs: Any) -> None:  # zenoh's callback thread
            now = time.time_ns()
            sample = Sample(str(zs.key_expr), zs.payload.to_bytes(), prio.get(int(zs.priority), Priority.DATA),
                            CongestionControl.BLOCK if int(zs.congestion_control) == block else CongestionControl.DROP,
                            bool(zs.express), now)
            inbox.append((sub, sample))
            if not self._drain_scheduled:
                self._drain_scheduled = True
                try:
                    self._loop.call_soon_threadsafe(self._drain)
                except RuntimeError:  # the loop is closed: the process is exiting
                    pass

        return on_sample

    def _drain(self) -> None:
        """(loop) Deliver the samples handed over by zenoh's thread, in arrival order."""
        self._drain_scheduled = False
        inbox = self._inbox
        subs = self._subs
        while inbox:
            sub, sample = inbox.popleft()
            if id(sub) in subs and not self.closed.is_set():
                sub._deliver(sample)

    def _on_transport_event(self, event: Any) -> None:  # zenoh's callback thread
        transport = event.transport
        if transport.whatami != _WHATAMI_ROUTER:
            return
        if event.kind == zenoh.SampleKind.DELETE:
            self._routers = max(0, self._routers - 1)
            if self._routers == 0:
                self._on_router_lost(f"the connection to router {transport.zid} was lost; zenoh reconnects")
        else:
            self._routers += 1
            if not self.connected:
                self.connected = True
                self.router_name = str(transport.zid)
                if self.logger is not None and not self.closed.is_set():
                    self.logger.info("zenoh session %s: reconnected to router %s", self.name, transport.zid)

    def _on_router_lost(self, reason: str) -> None:
        if not self.connected or self.closed.is_set():
            return
        self.connected = False
        self.losses += 1
        self.close_reason = reason
        if self.logger is not None:
            self.logger.warning("zenoh session %s: %s (puts are dropped until then)", self.name, reason)


async def connect(host: str, port: int, name: str = "client", timeout: float = 5.0, slow_reader: bool = False,
                  *, retry_max_s: float = 2.0, logger: Optional[logging.Logger] = None) -> Session:
    """A zenoh client session to the router at ``tcp/host:port``; raises ``zenoh.ZError`` (router
    unreachable) or ``asyncio.TimeoutError`` as the testbed client's ``connect`` raises OSError."""
    if slow_reader:
        raise UnsupportedByZenohClient(NO_SLOW_READER)
    config = client_config(host, port, timeout, retry_max_s)
    loop = asyncio.get_running_loop()
    opening = loop.run_in_executor(None, zenoh.open, config)
    try:
        z = await asyncio.wait_for(asyncio.shield(opening), timeout)
    except asyncio.TimeoutError:
        opening.add_done_callback(_close_late_session)
        raise asyncio.TimeoutError(f"zenoh.open to {endpoint(host, port)} took longer than {timeout:.1f}s") from None
    try:
        return Session(name, z, loop, logger)
    except BaseException:
        z.close()
        raise


def _close_late_session(fut: "asyncio.Future[Any]") -> None:
    if not fut.cancelled() and fut.exception() is None:
        threading.Thread(target=fut.result().close, name="zenoh-close", daemon=True).start()
