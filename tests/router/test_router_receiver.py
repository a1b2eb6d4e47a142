"""The connection's receiving side (router/receiver.py): frames cut out of its own buffer whatever
the reads' sizes, the buffer reused (moved, grown) without losing or changing a byte, and reading
paused while too much waits to be handled."""
import random

import pytest

from router import codec
from router.receiver import INITIAL_BUFFER, MIN_READ, FrameReceiver


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


@pytest.mark.parametrize("handle_every,pause_at", [(3, 512 * 1024), (40, 2 << 20), (2, 64 * 1024)])
def test_frames_come_out_whole_and_in_order_whatever_the_reads(handle_every, pause_at):
    rng = random.Random(7)
    for _ in range(5):
        frames = _frames(rng, 60)
        data = b"".join(codec.encode_frame(k, b) for k, b in frames)
        rx = FrameReceiver(FakeTransport(), pause_at=pause_at, received=data[:5])
        got = _receive(rx, data[5:], rng, handle_every)
        assert got == [(int(k), b) for k, b in frames]
        assert not rx.transport.paused and rx.held == 0


def test_a_reader_far_behind_leaves_its_waiting_frames_in_place():
    """Frames of 64 KiB arrive in reads that end mid-frame while the reader handles nothing (its
    sender is ahead by up to the pause mark): the buffers stay at their first size, the waiting
    frames are not moved to make room, and they come out in order, each read's bytes as sent."""
    pause_at = 2 << 20
    rx = FrameReceiver(FakeTransport(), pause_at=pause_at)
    frames = [codec.encode_frame(codec.FrameKind.DATA, bytes([i]) * 65_000) for i in range(40)]
    data = b"".join(frames)
    pos = 0
    buffers = set()
    while not rx.transport.paused:
        view = rx.get_buffer(-1)
        assert len(view) >= MIN_READ
        n = min(len(view), 100_000, len(data) - pos)
        view[:n] = data[pos:pos + n]
        del view
        rx.buffer_updated(n)
        pos += n
        buffers.add(id(rx.buf))
        assert len(rx.buf) == INITIAL_BUFFER
    assert rx.held == pos >= pause_at and len(buffers) > 1
    got = []
    frame = rx.next_frame()
    while frame is not None:
        got.append(frame[2])
        frame = rx.next_frame()
    assert got == [f[8:] for f in frames[:len(got)]] and len(got) == pos // len(frames[0])
    assert not rx.transport.paused and rx.held == pos % len(frames[0])


def test_a_malformed_header_behind_waiting_frames_is_raised_when_reached():
    rx = FrameReceiver(FakeTransport(), pause_at=1 << 20)
    good = codec.encode_frame(codec.FrameKind.DATA, b"z" * 60_000)
    data = good * 4 + b"XX" + bytes(200_000)
    pos = 0
    while pos < len(data):
        view = rx.get_buffer(-1)
        n = min(len(view), 90_000, len(data) - pos)
        view[:n] = data[pos:pos + n]
        del view
        rx.buffer_updated(n)
        pos += n
    for _ in range(4):
        assert rx.next_frame()[2] == b"z" * 60_000
    with pytest.raises(codec.CodecError):
        rx.next_frame()


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
