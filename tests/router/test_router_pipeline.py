from __future__ import annotations

import asyncio
import time

import pytest

from router import codec
from router.config import PipelineConfig
from router.pipeline import BACKOFF, EMPTY, TransmissionPipeline
from router.scheduler import StrictPriorityScheduler, WeightedRoundRobinScheduler


def msg(key: str = "k", size: int = 10, prio: int = 5):
    m = codec.encode_message(key, b"x" * size, prio)
    return m[:12], m[12:]


def run(coro):
    return asyncio.run(coro)


def decode(frame):
    frames, consumed = codec.decode_frames(bytes(frame))
    assert consumed == len(frame) and len(frames) == 1
    return codec.decode_messages(frames[0].body)


T0 = 1_700_000_000_000_000_000  # a simulated clock (ns): the pipeline is told the time, no test reads it


def test_messages_are_batched_and_sent_when_the_producer_goes_idle():
    async def go():
        p = TransmissionPipeline(PipelineConfig(batch_time_limit_us=1000))
        for i in range(5):
            assert p.try_push(5, False, *msg(), T0 + i * 10_000)
        assert p.pull(T0 + 50_000) is BACKOFF  # new bytes since last look, time limit not reached: wait
        prio, frame, n = p.pull(T0 + 60_000)  # nothing new: leave now
        assert (prio, n) == (5, 5)
        assert len(decode(frame)) == 5
        assert p.pull(T0 + 70_000) is EMPTY
        st = p.queues[5].stats
        assert st.in_queue == 0 and st.avg_qdelay_ns > 0
        assert p.tx.messages[5] == 5
    run(go())


def test_a_writer_woken_from_idle_takes_the_filling_batch_at_once():
    """The writer pulls without back-off right after a producer woke it (router/connection.py):
    what is filling leaves at once, all of it; otherwise the back-off rule holds as before."""
    async def go():
        p = TransmissionPipeline(PipelineConfig(batch_time_limit_us=1000))
        for i in range(3):
            assert p.try_push(5, False, *msg(), T0 + i * 10_000)
        prio, frame, n = p.pull(T0 + 30_000, backoff=False)
        assert (prio, n) == (5, 3) and len(decode(frame)) == 3
        assert p.try_push(5, False, *msg(), T0 + 40_000)
        assert p.pull(T0 + 50_000) is BACKOFF
    run(go())


def test_filling_batch_leaves_at_the_time_limit_while_the_producer_keeps_writing():
    async def go():
        p = TransmissionPipeline(PipelineConfig(batch_time_limit_us=1000))
        t = T0
        assert p.try_push(5, False, *msg(), t)
        while True:  # a producer that writes before every look of the writer
            t += 100_000
            assert p.try_push(5, False, *msg(), t)
            item = p.pull(t)
            if item is not BACKOFF:
                break
        assert t - T0 >= 1_000_000 and item[2] == (t - T0) // 100_000 + 1
    run(go())


def test_batch_leaves_when_threshold_passed_and_queue_bound_holds():
    async def go():
        cfg = PipelineConfig(queue_sizes=(1, 1, 1, 1, 1, 2, 1, 1), batch_size_bytes=300, batch_threshold_bytes=250)
        p = TransmissionPipeline(cfg)
        pushed = 0
        while p.try_push(5, False, *msg(size=40), time.time_ns()):
            pushed += 1
        # 2 batches of 300 bytes, 53-byte messages: 5 per batch
        assert pushed == 10
        prio, frame, n = p.pull(time.time_ns())
        assert n == 5 and len(frame) <= 300
        assert p.try_push(5, False, *msg(size=40), time.time_ns())
    run(go())


def test_express_message_gets_its_own_batch_and_keeps_order():
    async def go():
        p = TransmissionPipeline(PipelineConfig(queue_sizes=(1, 1, 1, 1, 1, 4, 1, 1)))
        assert p.try_push(5, False, *msg("a"), time.time_ns())
        assert p.try_push(5, True, *msg("b"), time.time_ns())
        keys = []
        for _ in range(2):
            _, frame, _ = p.pull(time.time_ns())
            keys.append([m.key for m in decode(frame)])
        assert keys == [["a"], ["b"]]
    run(go())


def test_strict_priority_serves_most_urgent_ready_queue_first():
    async def go():
        p = TransmissionPipeline(PipelineConfig(batch_size_bytes=256, batch_threshold_bytes=1))
        p.try_push(7, False, *msg(prio=7), time.time_ns())
        p.try_push(5, False, *msg(prio=5), time.time_ns())
        p.try_push(1, False, *msg(prio=1), time.time_ns())
        p.send_control(codec.encode_frame(codec.FrameKind.KEEPALIVE))
        order = [p.pull(time.time_ns())[0] for _ in range(4)]
        assert order == [-1, 1, 5, 7]
    run(go())


def test_drop_deadline_then_counted_by_caller():
    async def go():
        cfg = PipelineConfig(queue_sizes=(1,) * 8, batch_size_bytes=64, batch_threshold_bytes=1, drop_deadline_ms=20,
                             close_deadline_ms=60_000)
        p = TransmissionPipeline(cfg)
        assert p.try_push(5, False, *msg(size=30), time.time_ns())
        assert not p.try_push(5, False, *msg(size=30), time.time_ns())
        t0 = time.monotonic()
        ok = await p.push_wait(5, False, *msg(size=30), block=False)
        waited = time.monotonic() - t0
        assert not ok and waited >= 0.020  # never less than the deadline (a lower bound: load cannot break it)
        # room appears while a Block message waits -> accepted (the close deadline is a hang guard here)
        task = asyncio.ensure_future(p.push_wait(5, False, *msg(size=30), block=True))
        while not p._room_waiters:
            await asyncio.sleep(0)
        assert not task.done()
        p.pull(time.time_ns())
        assert await task
    run(go())


def test_strict_scheduler():
    s = StrictPriorityScheduler()
    assert s.choose([2, 5, 6]) == 2


def test_wrr_shares_follow_weights_in_bytes():
    s = WeightedRoundRobinScheduler([1, 1, 1, 1, 1, 2, 4, 1])
    served = {4: 0, 5: 0, 6: 0}
    for _ in range(7000):
        p = s.choose([4, 5, 6])
        size = 1000 if p != 6 else 500  # unequal batch sizes: shares still by bytes
        served[p] += size
        s.charge(p, size)
    total = sum(served.values())
    assert abs(served[4] / total - 1 / 7) < 0.01
    assert abs(served[5] / total - 2 / 7) < 0.01
    assert abs(served[6] / total - 4 / 7) < 0.01


def test_wrr_idle_priority_does_not_bank_credit():
    s = WeightedRoundRobinScheduler([1] * 8)
    for _ in range(100):
        s.charge(s.choose([5]), 1000)
    picks = []
    for _ in range(10):
        p = s.choose([5, 6])
        picks.append(p)
        s.charge(p, 1000)
    assert picks.count(6) <= 6  # 6 was idle: it gets its share, not 100 batches in a row


# ------------------------------------------------------------------ push_run: a run of messages at once

def _run_case(limits, batch: int, threshold: int, sizes, prefill: bool, charged: bool, count: int = 200):
    """Two identical pipelines, one fed a run of ``count`` same-header messages by ``push_run`` (the rest,
    if it stops early, one by one as router/forwarding.py does), the other message by message; their
    state is returned side by side."""
    from router.limits import Ledger

    size, new_head = 100, bytes([5, 31, 0xDE, 0xAD, 0xBE, 0xEF])
    one = codec.encode_message("run/key", b"p" * (size - 12 - 7), 5, ttl=32, origin=7)
    run_bytes = b"".join(one[:-8] + i.to_bytes(8, "big") for i in range(count))  # payloads differ
    states = []
    for use_run in (True, False):
        ledger = Ledger(limits)
        acct = ledger.open("sub", "client", T0)
        src = ledger.open("pub", "client", T0) if charged else None
        p = TransmissionPipeline(PipelineConfig(queue_sizes=sizes, batch_size_bytes=batch,
                                                batch_threshold_bytes=threshold), account=acct, ledger=ledger)
        st = p.queues[5].stats
        if prefill:  # the filling batch starts at an odd length
            st.record_offer()
            assert p.try_push(5, False, *msg(size=33), T0 - 5, src)
        view = memoryview(run_bytes)
        taken = p.push_run(5, new_head, view, count, size, T0, src) if use_run else 0
        for i in range(taken, count):  # message by message: the forwarding's path
            st.record_offer()
            if not p.try_push(5, False, new_head, view[i * size + 6:(i + 1) * size], T0, src):
                break
            taken = i + 1
        q = p.queues[5]
        batches = [(bytes(b.buf), list(b.times), b.sizes) for b in list(q.ready) + [q.current] if b is not None]
        qsize, st.avg_qsize = st.avg_qsize, 0.0  # compared to rounding: push_run averages a run in one step
        states.append((taken, batches, st, qsize, {k: getattr(acct, k) for k in type(acct).__slots__ if k != "limits"}, ledger.total, ledger.peak,
                       src.queued_from if src else None))
    return states


@pytest.mark.parametrize("case", [
    dict(limits={}, batch=4096, threshold=4096, sizes=(4,) * 8, prefill=False, charged=False),  # queue fills
    dict(limits={}, batch=4096, threshold=1000, sizes=(8,) * 8, prefill=True, charged=True),  # threshold seals
    dict(limits=dict(client={"endpoint_bytes": 2500}), batch=4096, threshold=4096, sizes=(64,) * 8,
         prefill=True, charged=True),  # the endpoint's limit
    dict(limits=dict(total_bytes=5000), batch=1024, threshold=1024, sizes=(64,) * 8, prefill=False,
         charged=True),  # the total, checked as batches open
    dict(limits={}, batch=65535, threshold=32768, sizes=(2,) * 8, prefill=True, charged=False),  # defaults
])
def test_push_run_queues_exactly_what_try_push_would_one_by_one(case):
    from router.limits import LimitsConfig, RoleLimits

    limits = dict(case["limits"])
    if "client" in limits:
        limits["client"] = RoleLimits(**limits["client"])
    by_run, by_message = _run_case(LimitsConfig(**limits), case["batch"], case["threshold"], case["sizes"],
                                   case["prefill"], case["charged"])
    assert 0 < by_run[0] < 200 if case["sizes"][5] != 2 else by_run[0] == 200  # stopped where a limit says
    assert by_run[:3] == by_message[:3] and by_run[4:] == by_message[4:]
    assert by_run[3] == pytest.approx(by_message[3], rel=1e-9)  # the queue-size average, to rounding
    queued = b"".join(b[0] for b in by_run[1])
    assert queued.count(bytes([5, 31, 0xDE, 0xAD, 0xBE, 0xEF])) == by_run[0]  # every head rewritten
    assert bytes([5, 32, 0, 0, 0, 7]) not in queued


def test_queue_size_average_of_a_run_is_the_per_message_average():
    from router.stats import QueueStats

    one, run = QueueStats(5, avg_qsize=3.25, in_queue=7, tried=11), QueueStats(5, avg_qsize=3.25, in_queue=7, tried=11)
    for _ in range(250):
        one.record_offer()
        one.in_queue += 1
    run.record_queued_run(250)
    assert (run.tried, run.in_queue) == (one.tried, one.in_queue)
    assert run.avg_qsize == pytest.approx(one.avg_qsize, rel=1e-12)


def test_queue_delay_average_of_a_batch_is_the_per_message_average():
    """record_pulled steps over a run of equal enqueue times at once: the same average, to rounding."""
    from router.stats import EMA_ALPHA, QueueStats

    times = [T0] * 300 + [T0 + 5_000] + [T0 + 7_000] * 40 + [T0 + 1_000]
    st = QueueStats(5, avg_qdelay_ns=123_456.0, in_queue=len(times))
    st.record_pulled(times, T0 + 90_000)
    avg = 123_456.0
    for t in times:
        avg += EMA_ALPHA * ((T0 + 90_000 - t) - avg)
    assert st.avg_qdelay_ns == pytest.approx(avg, rel=1e-12) and st.in_queue == 0
