from __future__ import annotations

import asyncio
import time

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
