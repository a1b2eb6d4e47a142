"""Forwarding: the publication fast path.  Every message of a DATA frame is
routed (route cache keyed by tree set, origin and key; a miss asks the trees,
the flow table and the local subscriptions) and pushed into the transmission
pipeline of each target connection, waiting for room as its congestion
control says (Drop: the drop deadline; Block: the close deadline).  Drops are
summarised as one event per second per peer, priority and reason.

Resource limits (router/limits.py, router/enforcement.py) act here: every
frame is metered against its sender's input rate (a noisy sender is throttled,
has its low priorities dropped, or is disconnected).  A message is first
offered to every target without waiting; only then is room waited for in the
targets that refused it, each wait bounded for that target alone (the drop
deadline once per stall for Drop, the close deadline for Block, and never past
the moment the target counts as a slow reader: router/limits.py).  A slow
reader gets nothing waited for (its messages are dropped at once, or it is
disconnected), so one stuck reader never stalls the delivery to the others.

Streaming links (router/streaming.py): a message of at least the streaming
threshold goes to each target over a stream connection of that target's pool,
so the small messages on the shared connection do not wait behind it; what
arrives on a stream connection is forwarded as if it came on the shared one.
"""
from __future__ import annotations

import asyncio
import struct
import time
from typing import List, Optional

from .codec import (
    DEFAULT_TTL,
    FLAG_BLOCK,
    FLAG_EXPRESS,
    KNOWN_MESSAGE_FLAGS,
    MAX_KEY_LEN,
    MESSAGE_HEADER,
    MESSAGE_HEADER_SIZE,
    CodecError,
    same_header_run,
)
from .connection import Connection
from .flows import Flow
from .pipeline import drop_deadline_ms

ROUTE_CACHE_MAX = 65536
DROP_EVENT_INTERVAL_S = 1.0
_HOP_HEAD = struct.Struct(">BBI")  # flags, ttl, origin: first 6 bytes of a message


class Forwarding:
    """Mixin of :class:`router.node.RouterNode`: the data plane."""

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
            if st.sub_keys.matches(key_s):
                out.append(st.conn)
        return tuple(out), flow

    async def on_data(self, conn: Connection, body: bytes) -> None:
        """Forward every message of one DATA frame (the hot path)."""
        if conn.main is not None:  # from a stream connection: the endpoint is its shared connection's
            conn = conn.main
        now = time.time_ns()
        src = conn.pipeline.account
        debt = src.observe_input(len(body), now) if src is not None else 0.0
        # The sender is charged for what it queues only where a sender limit needs it (costs ~130 ns a message).
        charge = src if src is not None and src.tracks_from else None
        drop_from_src = ()
        police = ""  # a sender over its input rate: "throttle" or "drop", message by message
        if debt > 0 or (src is not None and src.queued_from > src.limit_from):
            policy = self._on_noisy(conn, src, src.noisy_reason(debt), now)
            if policy == "disconnect":
                return
            if debt > 0:
                # message by message from here: the frame is charged as its messages are forwarded, so
                # what leaves is paced at the rate (not a whole frame at once, then a pause)
                src.tokens += len(body)
                police = policy
            if policy == "drop":
                drop_from_src = src.limits.drop_priorities
        from_client = conn.kind == "client"
        my_id = self.id
        rx_bytes = conn.rx.bytes
        rx_msgs = conn.rx.messages
        cache = self._remote_cache
        set_of_priority = self.routing.set_of_priority
        stream_threshold = self.stream_threshold
        unpack = MESSAGE_HEADER.unpack_from
        hop_pack = _HOP_HEAD.pack
        mv = memoryview(body)
        end = len(body)
        offset = 0
        run_end = 0  # where the current run of same-header messages ends
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
            if police:
                size = stop - offset
                tokens = src.refill(now)
                if police == "drop":
                    if tokens < 0 and prio in drop_from_src:  # over its rate: dropped; only what passes counts
                        self._drop_from_noisy(conn, src, prio)
                        offset = stop
                        continue
                    src.tokens = tokens - size
                else:  # throttle: not read, and not forwarded, until the bucket has paid this message
                    src.tokens = tokens - size
                    if src.tokens < 0:
                        pause = -src.tokens / src.rate_Bps
                        await asyncio.sleep(pause)
                        src.throttled_ns += int(pause * 1e9)
                        now = time.time_ns()
            elif drop_from_src and prio in drop_from_src:  # over sender_bytes: its low priorities are dropped
                self._drop_from_noisy(conn, src, prio)
                offset = stop
                continue
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
                express = bool(flags & FLAG_EXPRESS)
                size = stop - offset
                streamed = stream_threshold is not None and size >= stream_threshold
                if len(targets) == 1 and not (police or drop_from_src or express or streamed) \
                        and targets[0] is not conn:
                    # The common case, one target: this message and the ones behind it with the same
                    # header and key are queued at once, as far as the target takes them.
                    if offset >= run_end:  # a new run (one the target took part of is not measured again)
                        run_end = offset + same_header_run(body, offset, pstart, size, end) * size
                    n = (run_end - offset) // size
                    taken = targets[0].pipeline.push_run(prio, head, mv[offset:offset + n * size], n, size,
                                                         now, charge)
                    if taken:
                        rx_bytes[prio] += (taken - 1) * size
                        rx_msgs[prio] += taken - 1
                        offset += taken * size
                        continue
                rest = mv[offset + 6 : stop]
                refused = None
                for target in targets:
                    if target is conn:
                        continue
                    if streamed and await self._send_on_stream(target, prio, express, head, rest, charge):
                        continue
                    pipe = target.pipeline
                    st = pipe.queues[prio].stats
                    st.tried += 1
                    st.avg_qsize += 0.1 * (st.in_queue - st.avg_qsize)
                    if pipe.try_push(prio, express, head, rest, now, charge) or pipe.closed:
                        continue
                    tacct = pipe.account
                    if tacct is not None and tacct.full_since_ns and tacct.slow:
                        # a known slow reader whose own queue is full: never waited for
                        self._slow_reader_refused(target, tacct, prio, now, tacct.slow_cause)
                        continue
                    if refused is None:
                        refused = [target]
                    else:
                        refused.append(target)
                if refused is not None:
                    # every target with room has the message already; the waits below are one
                    # after the other, each bounded for its own target
                    await self._push_refused(refused, flags, prio, express, head, rest, charge)
                    now = time.time_ns()
            else:
                self.counters.no_route += 1
            offset = stop
        if src is not None and not police and src.noisy and src.limits.noisy_policy == "throttle" \
                and src.queued_from > src.limit_from:
            await self._throttle(conn, src)

    async def _push_refused(self, targets: List[Connection], flags: int, prio: int, express: bool, head: bytes,
                            rest, charge) -> None:
        """Wait for room in each target whose queue refused the message, one after the other, as its
        congestion control says, each wait bounded for that target alone:

        - never past the time at which the target would count as a slow reader (its stall or
          backlog threshold, router/limits.py): from then on it is one, and nothing is waited for;
        - Drop: at most the drop deadline *per stall*, not per message: a target from whose full
          queue nothing has left for longer than the drop deadline gets the message dropped at once
          (a stuck reader costs the messages behind it nothing before it counts as slow);
        - Block: up to the close deadline (then the link is closed), as before.
        """
        block = bool(flags & FLAG_BLOCK)
        drop_deadline_ns = int(drop_deadline_ms(self.config.pipeline, prio) * 1_000_000)
        for target in targets:
            pipe = target.pipeline
            if pipe.closed:
                continue
            tacct = pipe.account
            now = time.time_ns()
            max_wait = None
            if tacct is not None and tacct.full_since_ns:
                cause = tacct.slow_cause if tacct.slow else tacct.slow_cause_now(now)
                if cause:
                    self._slow_reader_refused(target, tacct, prio, now, cause)
                    continue
                max_wait = tacct.until_slow_s(now)
                if not block:
                    left_ns = drop_deadline_ns - tacct.stalled_ns(now)
                    if left_ns <= 0:
                        self._drop_queue_full(target, prio)
                        continue
                    max_wait = left_ns / 1e9 if max_wait is None else min(max_wait, left_ns / 1e9)
            if await pipe.push_wait(prio, express, head, rest, block, charge, max_wait) or pipe.closed:
                continue
            now = time.time_ns()
            if tacct is not None and tacct.full_since_ns:
                cause = tacct.slow_cause_now(now)
                if cause:
                    self._slow_reader_refused(target, tacct, prio, now, cause)
                    continue
            if block:
                self.counters.links_closed_block += 1
                self.events.emit("link_closed", peer=target.peer_name, kind=target.kind,
                                 reason=f"Block message waited more than close deadline "
                                        f"{self.config.pipeline.close_deadline_ms} ms",
                                 priority=prio)
                target.close("close deadline exceeded by a Block message")
            else:
                self._drop_queue_full(target, prio)

    def _drop_queue_full(self, target: Connection, prio: int) -> None:
        """A Drop message found no room toward ``target`` in time: counted in its queue's drops."""
        target.pipeline.queues[prio].stats.dropped += 1
        self._note_drop(target, prio, "queue_full")

    async def _send_on_stream(self, target: Connection, prio: int, express: bool, head: bytes, rest,
                              charge) -> bool:
        """Queue one large message on a stream connection of ``target``'s pool; False when none
        could be had, it has no room (the total is full), ``target`` is a slow reader, or what
        ``target`` holds on its shared and stream connections would pass its endpoint limit: the
        shared connection then takes it (where the endpoint's limits and slow-reader policy apply)."""
        pool = self._pool(target)
        acct = target.pipeline.account
        if acct is not None:
            held = pool.held_bytes()
            if acct.slow or (held and held + acct.queued_to + len(head) + len(rest) > acct.limit_to):
                pool.overflow += 1
                return False
        stream = await pool.take()
        if stream is None:
            return False
        if stream.pipeline.try_push(prio, express, head, rest, time.time_ns(), charge):
            return True
        pool.release(stream, sent=False)
        return False

    def _slow_reader_refused(self, target: Connection, acct, prio: int, now_ns: int, cause: str) -> None:
        """A message found a slow reader's queue full: the decision (once), then its policy: the
        message is dropped (counted in the queue's drops and the reader's), or the reader is gone."""
        if self._on_slow_reader(target, acct, now_ns, cause) == "drop":
            target.pipeline.queues[prio].stats.dropped += 1
            acct.dropped_slow += 1
            self._note_drop(target, prio, "slow_reader")

    def _drop_from_noisy(self, conn: Connection, src, prio: int) -> None:
        src.dropped_noisy += 1
        self._note_drop(conn, prio, "noisy_sender")

    def _note_drop(self, peer: Connection, prio: int, reason: str) -> None:
        """Drops are reported as one summary event per second per (peer, priority, reason):
        ``queue_full`` and ``slow_reader`` drops are toward ``peer``, ``noisy_sender`` drops
        are of messages from ``peer``."""
        key = (peer.peer_name, peer.kind, prio, reason)
        self._pending_drops[key] = self._pending_drops.get(key, 0) + 1
        if self._drop_flush is None:
            self._drop_flush = asyncio.get_running_loop().call_later(DROP_EVENT_INTERVAL_S, self._flush_drops)

    def _flush_drops(self) -> None:
        self._drop_flush = None
        pending, self._pending_drops = self._pending_drops, {}
        for (peer, kind, prio, reason), count in sorted(pending.items()):
            self.events.emit("messages_dropped", peer=peer, kind=kind, priority=prio, count=count,
                             interval_s=DROP_EVENT_INTERVAL_S, reason=reason)
