"""The connection's receiving side (router/receiver.py): frames cut out of its own buffer whatever
the reads' sizes, the buffer reused (moved, grown) without losing or changing a byte, and reading
paused while too much waits to be handled."""
import random

from router import codec
from router.receiver import FrameReceiver


class FakeTransport:
    def __init__(self):
        self.paused = False

    def pause_reading(self):
        assert not self.paused
        self.paused = True

    def resume_reading(self):
        assert self.paused
        self.paused = False


def _frames(rng, n):
    out = []
    for i in range(n):
        size = rng.choice([0, 1, 12, 500, 3000, 70_000, 300_000])  # some larger than the buffer
        body = bytes(rng.getrandbits(8) for _ in range(min(size, 64))) * (size // 64 + 1)
        out.append((codec.FrameKind.DATA if size else codec.FrameKind.KEEPALIVE, body[:size]))
    return out


def _receive(rx, data, rng, handle_every=3):
    """Feed ``data`` through get_buffer/buffer_updated in reads of random sizes (as a transport does),
    taking frames out now and then; returns the frames in order."""
    got, pos = [], 0
    while True:
        if pos < len(data) and not rx.transport.paused:
            view = rx.get_buffer(-1)
            assert len(view) > 0
            n = min(len(view), len(data) - pos, rng.choice([1, 7, 100, 4096, 65536, 1 << 20]))
            view[:n] = data[pos:pos + n]
            del view
            rx.buffer_updated(n)
            pos += n
        if rng.randrange(handle_every) == 0 or rx.transport.paused or pos == len(data):
            frame = rx.next_frame()
            while frame is not None:
                got.append((frame[0], frame[2]))
                frame = rx.next_frame()
            if pos == len(data):
                break
    return got


def test_frames_come_out_whole_and_in_order_whatever_the_reads():
    rng = random.Random(7)
    for _ in range(5):
        frames = _frames(rng, 60)
        data = b"".join(codec.encode_frame(k, b) for k, b in frames)
        rx = FrameReceiver(FakeTransport(), pause_at=512 * 1024, received=data[:5])
        got = _receive(rx, data[5:], rng)
        assert got == [(int(k), b) for k, b in frames]
        assert not rx.transport.paused


def test_reading_pauses_while_complete_frames_wait_and_resumes_once_they_are_handled():
    rx = FrameReceiver(FakeTransport(), pause_at=10_000)
    frame = codec.encode_frame(codec.FrameKind.DATA, b"x" * 3000)
    for _ in range(4):  # 12 032 bytes of complete frames, nobody handles them
        view = rx.get_buffer(-1)
        view[:len(frame)] = frame
        del view
        rx.buffer_updated(len(frame))
    assert rx.transport.paused
    assert rx.next_frame() is not None and not rx.transport.paused  # 9 024 left: under the mark, read again
    # a frame larger than the mark, not yet whole, never pauses (it would wait for itself)
    rx = FrameReceiver(FakeTransport(), pause_at=10_000)
    big = codec.encode_frame(codec.FrameKind.DATA, b"y" * 50_000)
    view = rx.get_buffer(-1)
    view[:20_000] = big[:20_000]
    del view
    rx.buffer_updated(20_000)
    assert not rx.transport.paused and rx.next_frame() is None
