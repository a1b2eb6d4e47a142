"""How far each node's clock is from the controller's, and how sure we are of it.

One-way latency is a receive time read on the subscriber's clock minus a send time read on the publisher's
clock. On Mininet and Docker every node reads the controller's own kernel clock (``same_host_reading``). On
real lab machines (the ``ssh`` backend) the clocks differ, so the run records, before and after the traffic,
each node's **offset** to the controller (node clock minus controller clock, ns) and its **error bound** (the
true offset lies within ``offset_ns ± bound_ns``), by one of:

* ``chrony``: both the node and the controller run a synchronised chronyd; each one's ``chronyc -c tracking``
  gives its own offset to NTP time and chrony's documented bound on it; the node's offset to the controller
  is the difference (``clock_reading_from_chrony``).
* ``exchange``: an NTP-style exchange over the management connection: a remote loop (``CLOCK_LOOP_CODE``)
  answers every line it reads with its ``time.time_ns()``; the controller notes its own time before sending
  (t0) and after the answer (t3): offset = T - (t0 + t3) / 2, bound = (t3 - t0) / 2 (the answer was read at
  some instant between t0 and t3, whatever the path's asymmetry). The round with the smallest round trip of
  ``rounds`` (after one warm-up round) is kept (``exchange_offset``).

``read_clock`` picks chrony where both ends are synchronised and falls back to the exchange, saying why.
The readings (``runfolder.records.ClockReading``) go into ``manifest.json`` as ``clocks_json(before, after)``
(docs/results.md) and the analysis
corrects latencies with them (docs/reports.md, "Clocks"). Standard library only.
"""
from __future__ import annotations

import os
import selectors
import shlex
import socket
import statistics
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Tuple

from runfolder.records import ClockReading

__all__ = [
    "ClockError", "ChronyUnusable", "LineChannel", "SubprocessChannel", "StreamChannel",
    "CLOCK_LOOP_CODE", "clock_loop_argv", "clock_loop_command", "subprocess_channel", "stream_channel",
    "exchange_offset", "measure_exchange", "ChronyTracking", "read_chrony_tracking", "parse_chrony_tracking",
    "clock_reading_from_chrony", "CHRONY_TRACKING_ARGV", "local_chrony_tracking", "same_host_reading",
    "read_clock",
]

class ClockError(RuntimeError):
    """A node's clock could not be read; the message names the node and what went wrong."""


class ChronyUnusable(ClockError):
    """chrony's state cannot give an offset to the controller (not running, not synchronised, unreadable)."""


def same_host_reading(node: str, at_ns: Optional[int] = None) -> ClockReading:
    """A node that reads the controller's own kernel clock (a Mininet host, a Docker container): offset 0,
    bound 0."""
    return ClockReading(node=node, method="same-host", offset_ns=0, bound_ns=0, rtt_ns=None,
                        at_ns=time.time_ns() if at_ns is None else int(at_ns), samples=0,
                        detail="shares the controller's kernel clock")


# ---------------------------------------------------------------- line channels


class LineChannel(Protocol):
    """A two-way line stream to a command running on a node (or locally)."""

    def write_line(self, line: str) -> None:
        """Send ``line`` and a newline. Raises EOFError when the other end is gone."""

    def read_line(self, timeout: float) -> str:
        """The next line, without its newline. Raises TimeoutError after ``timeout`` seconds, EOFError when
        the stream ended (the message says how, e.g. the command's exit status and error output)."""

    def close(self) -> None:
        """End the command (closing its input ends the clock loop) and release everything."""


_MAX_LINE = 65536


class SubprocessChannel:
    """A local process's stdin/stdout as a line channel (``subprocess_channel``)."""

    def __init__(self, argv: List[str]):
        self.argv = list(argv)
        try:
            self._proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, bufsize=0)
        except OSError as err:
            raise EOFError(f"cannot start {shlex.join(self.argv)}: {err.strerror or err}") from None
        self._fd = self._proc.stdout.fileno()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._fd, selectors.EVENT_READ)
        self._buf = b""

    def write_line(self, line: str) -> None:
        try:
            self._proc.stdin.write((line + "\n").encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            raise EOFError(self._ended()) from None

    def read_line(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            if len(self._buf) > _MAX_LINE:
                raise EOFError(f"{len(self._buf)} bytes without a newline")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no line within {timeout:g} s")
            if not self._sel.select(remaining):
                continue
            chunk = os.read(self._fd, 4096)
            if not chunk:
                raise EOFError(self._ended())
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", "replace")

    def _ended(self) -> str:
        try:
            code = self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "its output ended but it is still running"
        err = b""
        try:
            err = self._proc.stderr.read(2000) or b""
        except (OSError, ValueError):
            pass
        text = err.decode("utf-8", "replace").strip()
        return f"it exited with status {code}" + (f": {text[-500:]}" if text else "")

    def close(self) -> None:
        try:
            self._sel.close()
        except (OSError, ValueError):
            pass
        for stream in (self._proc.stdin,):
            try:
                stream.close()
            except (OSError, ValueError):
                pass
        try:
            self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for stream in (self._proc.stdout, self._proc.stderr):
            try:
                stream.close()
            except (OSError, ValueError):
                pass

    def __enter__(self) -> "SubprocessChannel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def subprocess_channel(argv: List[str]) -> SubprocessChannel:
    """Start ``argv`` locally and talk to it line by line over its stdin/stdout."""
    return SubprocessChannel(argv)


class StreamChannel:
    """A line channel over anything with ``sendall``, ``recv``, ``settimeout`` and ``close``: a paramiko
    ``Channel`` from ``exec_command`` (its stderr and exit status are added to the message when the stream
    ends), or a socket."""

    def __init__(self, chan: Any):
        self._chan = chan
        self._buf = b""

    def write_line(self, line: str) -> None:
        try:
            self._chan.sendall((line + "\n").encode())
        except (OSError, EOFError) as err:
            raise EOFError(f"cannot send: {err}; {self._ended()}") from None

    def read_line(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            if len(self._buf) > _MAX_LINE:
                raise EOFError(f"{len(self._buf)} bytes without a newline")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no line within {timeout:g} s")
            self._chan.settimeout(remaining)
            try:
                chunk = self._chan.recv(4096)
            except socket.timeout:
                continue
            if not chunk:
                raise EOFError(self._ended())
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", "replace")

    def _ended(self) -> str:
        parts = ["its output ended"]
        chan = self._chan
        try:
            if hasattr(chan, "exit_status_ready") and chan.exit_status_ready():
                parts = [f"it exited with status {chan.recv_exit_status()}"]
            if hasattr(chan, "recv_stderr_ready") and chan.recv_stderr_ready():
                text = chan.recv_stderr(2000).decode("utf-8", "replace").strip()
                if text:
                    parts.append(text[-500:])
        except Exception:  # noqa: BLE001 - only decorates the message
            pass
        return ": ".join(parts)

    def close(self) -> None:
        try:
            if hasattr(self._chan, "shutdown_write"):
                self._chan.shutdown_write()
        except Exception:  # noqa: BLE001
            pass
        try:
            self._chan.close()
        except Exception:  # noqa: BLE001
            pass


def stream_channel(chan: Any) -> StreamChannel:
    """A paramiko exec channel (``transport.open_session(); chan.exec_command(clock_loop_command())``) or a
    socket as a line channel."""
    return StreamChannel(chan)


# ---------------------------------------------------------------- the exchange

#: the remote loop: for every line read on stdin, print time.time_ns() (python3 >= 3.7; no import beyond
#: sys and time); it ends when its stdin closes
CLOCK_LOOP_CODE = ('import sys,time;[(sys.stdout.write("%d\\n"%time.time_ns()),sys.stdout.flush()) '
                   'for _ in iter(sys.stdin.readline,"")]')


#: run on the machine as ``python3 -c CODE ADDRESS``: a TCP server for one connection on ADDRESS that prints
#: its port, then answers every line it reads with the machine's time.time_ns() (the clock exchange)
CLOCK_SERVER_CODE = """
import socket, sys, time
s = socket.socket()
s.bind((sys.argv[1], 0))
s.listen(1)
s.settimeout(30)
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
f = c.makefile("rb")
for _ in iter(f.readline, b""):
    c.sendall(b"%d\\n" % time.time_ns())
"""



def clock_loop_argv(python: str = "python3", code: str = CLOCK_LOOP_CODE) -> List[str]:
    """The remote loop as an argument vector (for a local process)."""
    return [python, "-u", "-c", code]


def clock_loop_command(python: str = "python3", code: str = CLOCK_LOOP_CODE) -> str:
    """The remote loop as one shell command line (for ``exec_command`` over SSH)."""
    return shlex.join(clock_loop_argv(python, code))


def _us(ns: float) -> str:
    return f"{ns / 1e3:.1f} us"


def exchange_offset(channel: LineChannel, node: str, rounds: int = 16, timeout_s: float = 5.0,
                    first_timeout_s: float = 30.0) -> ClockReading:
    """The node's offset to the controller by NTP-style exchanges with the clock loop at the other end of
    ``channel``: one warm-up round (it pays for the interpreter's start and the first bytes of the path),
    then ``rounds`` rounds; the one with the smallest round trip is kept. Raises ClockError naming the node
    when the loop dies, is silent for ``timeout_s`` (``first_timeout_s`` for the warm-up), or answers garbage.
    The channel is left open (the caller closes it)."""
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    kept: List[Tuple[int, int, int]] = []  # (t0, T, t3)
    for i in range(rounds + 1):
        what = "warm-up round" if i == 0 else f"round {i} of {rounds}"
        t0 = time.time_ns()
        try:
            channel.write_line(str(i))
            line = channel.read_line(first_timeout_s if i == 0 else timeout_s)
        except TimeoutError as err:
            raise ClockError(f"node {node}: clock exchange, {what}: the clock loop did not answer ({err})") from None
        except EOFError as err:
            raise ClockError(f"node {node}: clock exchange, {what}: the clock loop ended ({err})") from None
        except OSError as err:
            raise ClockError(f"node {node}: clock exchange, {what}: {err}") from None
        t3 = time.time_ns()
        text = line.strip()
        try:
            remote = int(text)
        except ValueError:
            raise ClockError(f"node {node}: clock exchange, {what}: the clock loop answered {text[:80]!r}, "
                             "not a time in ns (is python3 >= 3.7 on the node, and nothing else printing?)") from None
        if remote <= 0:
            raise ClockError(f"node {node}: clock exchange, {what}: the node's clock says {remote} ns")
        if i > 0:
            kept.append((t0, remote, t3))
    t0, remote, t3 = min(kept, key=lambda k: (k[2] - k[0], k[0]))
    rtt = t3 - t0
    rtts = [k[2] - k[0] for k in kept]
    detail = (f"NTP-style exchange: the round with the smallest round trip of {rounds} "
              f"({_us(rtt)}; median {_us(statistics.median(rtts))}, largest {_us(max(rtts))}), "
              "after one warm-up round left out; bound = half that round trip")
    return ClockReading(node=node, method="exchange", offset_ns=remote - (t0 + t3) // 2, bound_ns=(rtt + 1) // 2,
                        rtt_ns=rtt, at_ns=(t0 + t3) // 2, samples=rounds, detail=detail)


def measure_exchange(node: str, open_channel: Callable[[str], LineChannel], command: Optional[str] = None,
                     rounds: int = 16) -> ClockReading:
    """Start the clock loop with ``open_channel(command)`` (default ``clock_loop_command()``), exchange,
    close. ``open_channel`` runs a shell command line on the node and returns its line channel."""
    try:
        channel = open_channel(command or clock_loop_command())
    except (OSError, EOFError) as err:
        raise ClockError(f"node {node}: cannot start the clock loop: {err}") from None
    try:
        return exchange_offset(channel, node, rounds)
    finally:
        channel.close()


# ---------------------------------------------------------------- chrony

#: what to run on a node (or the controller) for its tracking state
CHRONY_TRACKING_ARGV = ["chronyc", "-c", "tracking"]

_NS = 1_000_000_000
#: chrony's reference ID when it is synchronised to its own clock (``local`` directive)
_LOCAL_REFID = "7F7F0101"


@dataclass(frozen=True)
class ChronyTracking:
    """One ``chronyc -c tracking`` line (chrony >= 3.0; client.c's tracking report, CSV mode): 14 fields."""

    ref_id: str              # hex, e.g. C0A87B01; 00000000 when not synchronised
    ref_name: str            # the source's address (CSV mode never resolves names), or a refclock's refid
    stratum: int
    ref_time_s: float
    system_time_s: float     # "System time": NTP time minus system time (> 0: "slow of NTP time")
    last_offset_s: float
    rms_offset_s: float
    frequency_ppm: float
    residual_freq_ppm: float
    skew_ppm: float
    root_delay_s: float
    root_dispersion_s: float
    update_interval_s: float
    leap_status: str         # Normal, Insert second, Delete second, Not synchronised

    @property
    def offset_ns(self) -> int:
        """The system clock minus NTP time (chrony prints the correction still to apply, NTP minus system)."""
        return -round(self.system_time_s * _NS)

    @property
    def bound_ns(self) -> int:
        """chrony's documented absolute bound on the system clock's error (chronyc(1), tracking, Root
        dispersion): |system time offset| + root dispersion + root delay / 2."""
        return round((abs(self.system_time_s) + self.root_dispersion_s + self.root_delay_s / 2) * _NS)

    @property
    def local_mode(self) -> bool:
        return self.ref_id.upper() == _LOCAL_REFID

    def describe(self) -> str:
        fast = "fast" if self.system_time_s < 0 else "slow"
        ref = f"{self.ref_id} ({self.ref_name})" if self.ref_name else self.ref_id
        return (f"ref {ref} stratum {self.stratum}, system time {_us(abs(self.system_time_s) * _NS)} {fast} of "
                f"NTP time, root delay {_us(self.root_delay_s * _NS)}, root dispersion "
                f"{_us(self.root_dispersion_s * _NS)}")


def read_chrony_tracking(text: str) -> ChronyTracking:
    """Parse ``chronyc -c tracking`` output (one CSV line of 14 fields). Raises ChronyUnusable when it is not
    that, or when chrony is not synchronised (leap status "Not synchronised", or reference ID 0)."""
    lines = [x for x in (text or "").splitlines() if x.strip()]
    if len(lines) != 1:
        raise ChronyUnusable(f"chronyc -c tracking: expected one CSV line, got {len(lines)} lines "
                             f"({(text or '').strip()[:120]!r})")
    fields = lines[0].strip().split(",")
    if len(fields) != 14:
        raise ChronyUnusable(f"chronyc -c tracking: expected 14 comma-separated fields, got {len(fields)} "
                             f"({lines[0][:120]!r})")
    try:
        ref_id = fields[0].strip()
        int(ref_id, 16)
        t = ChronyTracking(ref_id=ref_id, ref_name=fields[1].strip(), stratum=int(fields[2]),
                           ref_time_s=float(fields[3]), system_time_s=float(fields[4]),
                           last_offset_s=float(fields[5]), rms_offset_s=float(fields[6]),
                           frequency_ppm=float(fields[7]), residual_freq_ppm=float(fields[8]),
                           skew_ppm=float(fields[9]), root_delay_s=float(fields[10]),
                           root_dispersion_s=float(fields[11]), update_interval_s=float(fields[12]),
                           leap_status=fields[13].strip())
    except ValueError as err:
        raise ChronyUnusable(f"chronyc -c tracking: unreadable field ({err}) in {lines[0][:120]!r}") from None
    if t.leap_status == "Not synchronised" or int(t.ref_id, 16) == 0:
        raise ChronyUnusable(f"chrony is not synchronised (reference ID {t.ref_id}, leap status {t.leap_status})")
    if t.leap_status not in ("Normal", "Insert second", "Delete second"):
        raise ChronyUnusable(f"chronyc -c tracking: unknown leap status {t.leap_status!r}")
    return t


def parse_chrony_tracking(text: str) -> Tuple[int, int]:
    """(offset_ns, bound_ns) of this host's system clock against NTP time from ``chronyc -c tracking``:
    offset = system clock minus NTP time (> 0: the clock is fast; chrony's CSV prints the opposite sign, the
    correction still to apply), bound = |offset| + root dispersion + root delay / 2 (chronyc(1)). Raises
    ChronyUnusable for output that is not that, or a chrony that is not synchronised."""
    t = read_chrony_tracking(text)
    return t.offset_ns, t.bound_ns


def clock_reading_from_chrony(node: str, node_tracking: str, controller_tracking: str,
                              at_ns: Optional[int] = None) -> ClockReading:
    """The node's offset to the controller from both hosts' ``chronyc -c tracking``: each host's offset to
    NTP time is known within its bound, so node - controller = node_offset - controller_offset, within the
    sum of both bounds. Raises ChronyUnusable (naming the node, or the controller) when either is not
    synchronised or unreadable, or when the node is synchronised only to its own clock (local mode: its
    "NTP time" is not one the controller shares)."""
    try:
        ctl = read_chrony_tracking(controller_tracking)
    except ChronyUnusable as err:
        raise ChronyUnusable(f"node {node}: the controller's chrony cannot be used: {err}") from None
    try:
        nt = read_chrony_tracking(node_tracking)
    except ChronyUnusable as err:
        raise ChronyUnusable(f"node {node}: {err}") from None
    if nt.local_mode:
        raise ChronyUnusable(f"node {node}: chrony is synchronised only to the node's own clock (local mode, "
                             f"reference ID {nt.ref_id}): no time it shares with the controller")
    detail = (f"chrony on both: node {nt.describe()}; controller {ctl.describe()}; bound = both hosts' "
              "|system time offset| + root dispersion + root delay/2")
    return ClockReading(node=node, method="chrony", offset_ns=nt.offset_ns - ctl.offset_ns,
                        bound_ns=nt.bound_ns + ctl.bound_ns, rtt_ns=None,
                        at_ns=time.time_ns() if at_ns is None else int(at_ns), samples=1, detail=detail)


def local_chrony_tracking(timeout_s: float = 5.0) -> Optional[str]:
    """This machine's ``chronyc -c tracking`` output, or None when chronyc is missing or chronyd does not
    answer (the exchange is used then)."""
    try:
        out = subprocess.run(CHRONY_TRACKING_ARGV, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 and out.stdout.strip() else None


def read_clock(node: str, *, controller_tracking: Optional[str], node_tracking: Optional[str],
               open_channel: Optional[Callable[[str], LineChannel]] = None, command: Optional[str] = None,
               rounds: int = 16, at_ns: Optional[int] = None) -> ClockReading:
    """chrony where the controller and the node both have a synchronised chronyd (their tracking outputs
    given; None: no chronyc or no answer); otherwise the exchange over ``open_channel`` (see
    ``measure_exchange``), its detail saying why chrony was not used. Raises ClockError when neither works."""
    why = None
    if controller_tracking is None:
        why = "the controller has no chrony"
    elif node_tracking is None:
        why = "the node has no chrony"
    else:
        try:
            return clock_reading_from_chrony(node, node_tracking, controller_tracking, at_ns)
        except ChronyUnusable as err:
            why = str(err).removeprefix(f"node {node}: ")
    if open_channel is None:
        raise ClockError(f"node {node}: chrony cannot be used ({why}) and no channel for the exchange was given")
    reading = measure_exchange(node, open_channel, command, rounds)
    return ClockReading(**{**reading.to_json(), "detail": f"{reading.detail} (chrony not used: {why})"})
