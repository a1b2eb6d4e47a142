"""The meter: small measuring programs run inside lab nodes (standard library only: it is put on the
nodes by testbed.links.measure and run with their python3, which on a lab machine of the ssh backend
is all there is — no iperf3).

    python3 meter.py send ADDR PORT INTERVAL_MS COUNT [MAX_BURST]
    python3 meter.py recv ADDR PORT SECONDS     (prints `<seq> <arrival time_ns> <send time_ns>` per datagram;
                                                 the arrival is the kernel's receive timestamp)
    python3 meter.py tcp-send ADDR PORT SECONDS
    python3 meter.py tcp-recv ADDR PORT SECONDS (prints `<time_ns> <bytes received so far>` samples,
                                                 for SECONDS after the first byte at most)
    python3 meter.py udp-blast ADDR PORT RATE_BPS SECONDS [PAYLOAD]
    python3 meter.py udp-count ADDR PORT SECONDS (the same samples of UDP payload bytes)
    python3 meter.py echo-server ADDR PORT SECONDS
    python3 meter.py echo ADDR PORT INTERVAL_MS COUNT [WAIT_S [HELLO_S]]  (prints `<seq> <round-trip ns>`
                                                 per reply)

`send`/`recv` measure loss (iperf3's UDP mode aborts when its own set-up datagram is lost) and
the timing of link down/up. `tcp-send`/`tcp-recv` measure TCP goodput: the receiver samples the
bytes received with timestamps, and :func:`goodput_from_samples` takes the rate over a window
that starts after a warm-up (slow start, the shaper's initial burst). `udp-blast`/`udp-count`
measure the rate a shaper delivers to paced UDP offered above it. `echo` measures round trips.

Every receiver (and the echo server) ends after SECONDS or at SIGTERM, writing what it has.
"""
from __future__ import annotations

import errno
import select
import signal
import socket
import struct
import sys
import time

#: how often the counting receivers write a sample (seconds)
SAMPLE_INTERVAL_S = 0.05


class _Stop:
    """Set by SIGTERM: a receiver stops at its next wake-up and writes what it has."""

    def __init__(self) -> None:
        self.now = False
        signal.signal(signal.SIGTERM, self._set)

    def _set(self, *_: object) -> None:
        self.now = True


def send(addr: str, port: int, interval_ms: float, count: int, max_burst: int = 0) -> None:
    """``count`` sequenced, timestamped datagrams, one per ``interval_ms``. A sender that fell behind (not
    scheduled for a while) catches up at once; with ``max_burst`` it sends at most that many back to
    back and lets its schedule slip instead (a burst could overflow a short queue on the link, which
    a loss measurement would count as the link's loss)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    interval = interval_ms / 1000
    start = time.monotonic()
    run = 1  # datagrams sent less than half an interval apart, this one included
    for seq in range(count):
        try:
            sock.sendto(seq.to_bytes(8, "big") + time.time_ns().to_bytes(8, "big") + bytes(48), (addr, port))
        except OSError:
            pass  # link down: the kernel may refuse to send; keep the pace
        pause = start + (seq + 1) * interval - time.monotonic()
        if max_burst and pause < interval / 2 and run >= max_burst:
            start += interval - pause  # the next one a full interval from now: the schedule slips
            pause = interval
        if pause > 0:
            time.sleep(pause)
        run = 1 if pause >= interval / 2 else run + 1  # less than half an interval apart: the same burst


#: the kernel's receive timestamp as a struct timespec (SO_TIMESTAMPNS; Python names no constant for it)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
TIMESPEC = struct.Struct("@ll")


def _enable_timestamps(sock: socket.socket) -> bool:
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        return True
    except OSError:
        return False


def _receive_stamped(sock: socket.socket, stamped: bool) -> tuple[bytes, int]:
    """A datagram and when it arrived (ns, this machine's real-time clock): the kernel's receive timestamp,
    so that a receiver scheduled late does not add its lateness to the delay; the time it is read where the
    kernel gives none, or one that is not from the last 10 s."""
    if not stamped:
        data = sock.recv(256)
        return data, time.time_ns()
    data, ancillary, _, _ = sock.recvmsg(256, socket.CMSG_SPACE(TIMESPEC.size))
    now = time.time_ns()
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack(value[:TIMESPEC.size])
            kernel = sec * 1_000_000_000 + nsec
            if now - 10_000_000_000 <= kernel <= now:
                return data, kernel
    return data, now


def recv(addr: str, port: int, seconds: float) -> None:
    stop = _Stop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    stamped = _enable_timestamps(sock)
    sock.bind((addr, port))
    sock.settimeout(0.1)
    end = time.monotonic() + seconds
    out = []

    def arrived(data: bytes, at_ns: int) -> None:
        out.append(f"{int.from_bytes(data[:8], 'big')} {at_ns} {int.from_bytes(data[8:16], 'big')}")

    while time.monotonic() < end and not stop.now:
        try:
            arrived(*_receive_stamped(sock, stamped))
        except (socket.timeout, InterruptedError):
            continue
    # Stopped: what already arrived in the socket's buffer (a receiver short of CPU lags behind) counts.
    sock.setblocking(False)
    while True:
        try:
            arrived(*_receive_stamped(sock, stamped))
        except (BlockingIOError, InterruptedError):
            break
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()


def parse_arrivals(text: str) -> list[tuple[int, int, int]]:
    """``(seq, arrival time_ns, send time_ns)`` per datagram received."""
    return [(int(a), int(b), int(c)) for a, b, c in (line.split() for line in text.splitlines() if line.strip())]


# -- TCP goodput ----------------------------------------------------------------

def tcp_send(addr: str, port: int, seconds: float, connect_s: float = 10.0) -> None:
    """Connect (retrying while the receiver is not yet listening) and send as fast as TCP lets for
    ``seconds`` or until SIGTERM; prints the bytes sent. Fails only when it cannot connect or sends
    nothing (a receiver that closes first, having what it wanted, is normal)."""
    deadline = time.monotonic() + connect_s
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(2.0)
        try:
            sock.connect((addr, port))
            break
        except OSError as exc:
            sock.close()
            if time.monotonic() > deadline or exc.errno not in (errno.ECONNREFUSED, errno.ETIMEDOUT, None):
                sys.exit(f"tcp-send: cannot connect to {addr}:{port}: {exc}")
            time.sleep(0.02)
    stop = _Stop()
    sock.settimeout(0.5)
    chunk = bytes(128 * 1024)
    sent = 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end and not stop.now:
            try:
                sent += sock.send(chunk)
            except socket.timeout:
                continue  # the link is slow or stalled: look at the clock and the signal again
        sock.shutdown(socket.SHUT_WR)
    except OSError as exc:
        if not sent:
            sys.exit(f"tcp-send: {exc} before anything was sent")
    finally:
        sock.close()
    print(sent, flush=True)


def tcp_recv(addr: str, port: int, seconds: float, accept_s: float = 15.0) -> None:
    """Accept one connection (waiting up to ``accept_s``) and read it until its end, ``seconds`` after
    its first byte, or SIGTERM, sampling the bytes received every :data:`SAMPLE_INTERVAL_S`:
    `<time_ns> <bytes so far>` lines, the first at the first byte."""
    stop = _Stop()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((addr, port))
    listener.listen(1)
    listener.settimeout(0.1)
    give_up = time.monotonic() + accept_s
    conn = None
    while conn is None and time.monotonic() < give_up and not stop.now:
        try:
            conn, _ = listener.accept()
        except (socket.timeout, InterruptedError):
            continue
    listener.close()
    samples: list[tuple[int, int]] = []
    if conn is not None:
        conn.settimeout(0.1)
        buf = bytearray(1024 * 1024)
        total = 0
        next_sample = 0.0
        end = give_up + seconds
        while time.monotonic() < end and not stop.now:
            try:
                n = conn.recv_into(buf)
            except (socket.timeout, InterruptedError):
                continue
            except OSError:
                break
            if n == 0:
                break
            total += n
            now = time.monotonic()
            if not samples:
                end = now + seconds
            if now >= next_sample:
                samples.append((time.time_ns(), total))
                next_sample = now + SAMPLE_INTERVAL_S
        if samples and samples[-1][1] != total:
            samples.append((time.time_ns(), total))
        conn.close()
    _write_samples(samples)


def _write_samples(samples: list[tuple[int, int]]) -> None:
    sys.stdout.write("".join(f"{t} {b}\n" for t, b in samples))
    sys.stdout.flush()


def parse_samples(text: str) -> list[tuple[int, int]]:
    """``(time_ns, bytes so far)`` per sample of a counting receiver."""
    return [(int(a), int(b)) for a, b in (line.split() for line in text.splitlines() if line.strip())]


def goodput_from_samples(samples: list[tuple[int, int]], warmup_s: float, window_s: float) -> tuple[float, float]:
    """``(bits per second, seconds measured)`` over the window that starts ``warmup_s`` after the first
    byte arrived and lasts at most ``window_s``: from the first sample at or after its start to the last
    sample at or before its end. Raises ValueError when less than half the window was covered."""
    if not samples:
        raise ValueError("nothing arrived")
    first = samples[0][0]
    start, stop = first + int(warmup_s * 1e9), first + int((warmup_s + window_s) * 1e9)
    inside = [s for s in samples if start <= s[0] <= stop]
    if len(inside) < 2 or inside[-1][0] - inside[0][0] < window_s * 1e9 / 2:
        covered = (samples[-1][0] - first) / 1e9
        raise ValueError(f"data arrived for {covered:.2f} s only, less than the {warmup_s:g} s warm-up and half "
                         f"the {window_s:g} s window")
    (t0, b0), (t1, b1) = inside[0], inside[-1]
    return (b1 - b0) * 8 * 1e9 / (t1 - t0), (t1 - t0) / 1e9


# -- UDP rate -----------------------------------------------------------------------

def udp_blast(addr: str, port: int, rate_bps: float, seconds: float, payload: int = 1472) -> None:
    """Send ``payload``-byte datagrams paced at ``rate_bps`` counted on the wire (payload + 42 bytes of
    UDP, IP and Ethernet headers) for ``seconds`` or until SIGTERM; prints the datagrams sent and the
    seconds taken. A blocking socket: when the shaper's queue holds all the socket may have in flight,
    sending waits (the shaper is busy all the same)."""
    stop = _Stop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    data = bytes(payload)
    per_s = rate_bps / ((payload + 42) * 8)
    start = time.monotonic()
    end = start + seconds
    sent = 0
    while not stop.now:
        now = time.monotonic()
        if now >= end:
            break
        due = int((now - start) * per_s) + 1
        while sent < due and not stop.now:
            try:
                sock.sendto(data, (addr, port))
            except OSError:
                pass  # e.g. ICMP port unreachable reported back: keep the pace
            sent += 1
        time.sleep(0.001)
    print(sent, f"{time.monotonic() - start:.6f}", flush=True)


def udp_count(addr: str, port: int, seconds: float, first_s: float = 15.0) -> None:
    """Count the payload bytes of datagrams arriving on ``port`` (waiting up to ``first_s`` for the first)
    until ``seconds`` after the first one, or SIGTERM, sampling like :func:`tcp_recv`."""
    stop = _Stop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    sock.bind((addr, port))
    sock.settimeout(0.1)
    end = time.monotonic() + first_s
    buf = bytearray(65536)
    total = 0
    next_sample = 0.0
    samples: list[tuple[int, int]] = []
    while time.monotonic() < end and not stop.now:
        try:
            n = sock.recv_into(buf)
        except (socket.timeout, InterruptedError):
            continue
        total += n
        now = time.monotonic()
        if not samples:
            end = now + seconds
        if now >= next_sample:
            samples.append((time.time_ns(), total))
            next_sample = now + SAMPLE_INTERVAL_S
    if samples and samples[-1][1] != total:
        samples.append((time.time_ns(), total))
    _write_samples(samples)


# -- round trips ------------------------------------------------------------------

def echo_server(addr: str, port: int, seconds: float) -> None:
    """Send every datagram back where it came from, until ``seconds`` or SIGTERM."""
    stop = _Stop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((addr, port))
    sock.settimeout(0.1)
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stop.now:
        try:
            data, peer = sock.recvfrom(2048)
            sock.sendto(data, peer)
        except (socket.timeout, InterruptedError):
            continue
        except OSError:
            continue


def echo(addr: str, port: int, interval_ms: float, count: int, wait_s: float = 1.0, hello_s: float = 5.0) -> None:
    """Round trips of ``count`` datagrams paced ``interval_ms`` apart to an echo server: `<seq> <rtt ns>` per
    reply. First waits (up to ``hello_s``) for one reply to a hello, so that a server still starting
    does not count as loss; then waits ``wait_s`` after the last send for late replies."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((addr, port))
    deadline = time.monotonic() + hello_s
    hello = (2**64 - 1).to_bytes(8, "big") + bytes(8)
    ready = False
    while not ready and time.monotonic() < deadline:
        try:
            sock.send(hello)
        except OSError:
            pass  # ICMP port unreachable from a server not yet bound
        r, _, _ = select.select([sock], [], [], 0.05)
        if r:
            try:
                ready = sock.recv(64)[:8] == hello[:8]
            except OSError:
                pass
    if not ready:
        sys.exit(f"echo: no reply from {addr}:{port} within {hello_s:g} s")
    sent: dict[int, int] = {}
    out = []
    start = time.monotonic()
    seq = 0
    end = None
    while True:
        now = time.monotonic()
        if seq < count and now >= start + seq * interval_ms / 1000:
            sent[seq] = time.monotonic_ns()
            try:
                sock.send(seq.to_bytes(8, "big") + bytes(56))
            except OSError:
                pass
            seq += 1
            if seq == count:
                end = time.monotonic() + wait_s
            continue
        if end is not None and (now >= end or len(out) == count):
            break
        timeout = (start + seq * interval_ms / 1000 - now) if seq < count else (end - now)
        r, _, _ = select.select([sock], [], [], max(0.0, timeout))
        if r:
            try:
                data = sock.recv(2048)
            except OSError:
                continue
            got = time.monotonic_ns()
            n = int.from_bytes(data[:8], "big")
            if n in sent:
                out.append(f"{n} {got - sent.pop(n)}")
    sys.stdout.write("".join(line + "\n" for line in out))
    sys.stdout.flush()


def parse_round_trips(text: str) -> list[int]:
    """Round-trip times (ns) of the echo replies, in order of arrival."""
    return [int(b) for _, b in (line.split() for line in text.splitlines() if line.strip())]


#: mode -> (function, argument types, how many of them are required)
COMMANDS = {
    "send": (send, (str, int, float, int, int), 4),
    "recv": (recv, (str, int, float), 3),
    "tcp-send": (tcp_send, (str, int, float), 3),
    "tcp-recv": (tcp_recv, (str, int, float), 3),
    "udp-blast": (udp_blast, (str, int, float, float, int), 4),
    "udp-count": (udp_count, (str, int, float), 3),
    "echo-server": (echo_server, (str, int, float), 3),
    "echo": (echo, (str, int, float, int, float, float), 4),
}


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in COMMANDS:
        sys.exit(f"unknown mode {argv[0] if argv else ''!r}: use {', '.join(COMMANDS)}")
    func, types, required = COMMANDS[argv[0]]
    args = argv[1:]
    if not required <= len(args) <= len(types):
        sys.exit(f"{argv[0]}: expected {required} to {len(types)} arguments, got {len(args)} "
                 "(see meter.py's docstring)")
    func(*(t(a) for t, a in zip(types, args)))


if __name__ == "__main__":
    main(sys.argv[1:])
