"""testbed.clocksync: the NTP-style exchange against real local processes running the remote clock loop (as is,
shifted by +37 ms, behind a channel that delays one direction), chrony's tracking lines, the readings'
JSON, and the errors a user gets when the loop dies or answers garbage."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time

import pytest

from runfolder.records import ClockReading, clocks_from_json, clocks_json
from testbed.clocksync import (CLOCK_LOOP_CODE, ChronyUnusable, ClockError, clock_loop_argv, clock_loop_command,
                            clock_reading_from_chrony, exchange_offset, measure_exchange, parse_chrony_tracking,
                            read_chrony_tracking, read_clock, same_host_reading, stream_channel,
                            subprocess_channel)

MS = 1_000_000
US = 1_000
#: the remote loop runs under the node's python3 (>= 3.9); here, this machine's
PYTHON = shutil.which("python3") or sys.executable
SHIFT_NS = 37_000_000


def shifted(code: str, shift_ns: int) -> str:
    """The remote loop of a node whose clock is ``shift_ns`` ahead of the controller's."""
    assert code.count("time.time_ns()") == 1
    return code.replace("time.time_ns()", f"(time.time_ns()+{shift_ns})")


def loop(code: str = CLOCK_LOOP_CODE):
    return subprocess_channel(clock_loop_argv(PYTHON, code))


# ---------------------------------------------------------------- the exchange


def test_exchange_with_a_local_loop_finds_no_offset_within_its_bound():
    with loop() as ch:
        r = exchange_offset(ch, "n1")
    assert (r.node, r.method, r.samples) == ("n1", "exchange", 16)
    assert 0 < r.bound_ns < 5 * MS          # a local pipe: tens of microseconds, never more than milliseconds
    assert r.rtt_ns is not None and r.bound_ns == (r.rtt_ns + 1) // 2
    assert abs(r.offset_ns) <= r.bound_ns   # the same clock: the true offset 0 is inside offset ± bound
    assert abs(r.at_ns - time.time_ns()) < 10 * 10**9
    assert "smallest round trip of 16" in r.detail and "warm-up" in r.detail


def test_exchange_finds_a_clock_37ms_ahead():
    with loop(shifted(CLOCK_LOOP_CODE, SHIFT_NS)) as ch:
        r = exchange_offset(ch, "ahead", rounds=8)
    assert r.samples == 8
    assert abs(r.offset_ns - SHIFT_NS) <= r.bound_ns < 5 * MS
    # and one 37 ms behind
    with loop(shifted(CLOCK_LOOP_CODE, -SHIFT_NS)) as ch:
        r = exchange_offset(ch, "behind")
    assert abs(r.offset_ns + SHIFT_NS) <= r.bound_ns


class DelayedChannel:
    """A channel whose requests take ``out_s`` longer to arrive and whose answers ``back_s`` longer: the
    asymmetric path the exchange cannot see, only bound."""

    def __init__(self, inner, out_s: float, back_s: float):
        self.inner, self.out_s, self.back_s = inner, out_s, back_s

    def write_line(self, line: str) -> None:
        time.sleep(self.out_s)
        self.inner.write_line(line)

    def read_line(self, timeout: float) -> str:
        line = self.inner.read_line(timeout)
        time.sleep(self.back_s)
        return line

    def close(self) -> None:
        self.inner.close()


def test_an_asymmetric_path_widens_the_bound_which_still_holds_the_true_offset():
    with loop(shifted(CLOCK_LOOP_CODE, SHIFT_NS)) as ch:
        direct = exchange_offset(ch, "n", rounds=6)
    with loop(shifted(CLOCK_LOOP_CODE, SHIFT_NS)) as ch:
        slow = exchange_offset(DelayedChannel(ch, out_s=0.020, back_s=0.002), "n", rounds=6)
    # the request spends 20 ms more on its way than the answer: the midpoint estimate is off by ~(20-2)/2 ms
    assert slow.rtt_ns >= 22 * MS and slow.bound_ns >= 11 * MS > 10 * direct.bound_ns
    assert 8 * MS <= slow.offset_ns - SHIFT_NS <= slow.bound_ns
    assert abs(slow.offset_ns - SHIFT_NS) <= slow.bound_ns   # the bound holds the truth whatever the asymmetry
    assert abs(direct.offset_ns - SHIFT_NS) <= direct.bound_ns


def test_exchange_over_a_socket_as_over_a_paramiko_channel():
    """``stream_channel`` takes anything with sendall/recv/settimeout/close: a paramiko exec channel, or (here)
    a socket whose other end is the loop's stdin and stdout."""
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen(clock_loop_argv(PYTHON, shifted(CLOCK_LOOP_CODE, SHIFT_NS)), stdin=theirs,
                            stdout=theirs)
    theirs.close()
    ch = stream_channel(ours)
    try:
        r = exchange_offset(ch, "sock")
    finally:
        ch.close()
        proc.wait(timeout=10)
    assert abs(r.offset_ns - SHIFT_NS) <= r.bound_ns < 5 * MS
    assert proc.returncode == 0  # the loop ends when its input closes


def test_measure_exchange_runs_the_command_it_is_given():
    commands = []

    def open_channel(command: str):
        commands.append(command)
        return subprocess_channel(["sh", "-c", command])

    r = measure_exchange("n", open_channel, clock_loop_command(PYTHON, shifted(CLOCK_LOOP_CODE, SHIFT_NS)),
                         rounds=4)
    assert abs(r.offset_ns - SHIFT_NS) <= r.bound_ns
    assert commands[0].startswith(f"{PYTHON} -u -c '") and "+37000000" in commands[0]
    assert clock_loop_command().startswith("python3 -u -c 'import sys,time;")


def test_the_remote_loop_is_one_line_for_python3():
    cmd = clock_loop_command()
    assert "\n" not in cmd and "\n" not in CLOCK_LOOP_CODE
    out = subprocess.run(["sh", "-c", cmd.replace("python3", PYTHON, 1)], input="a\nb\n", capture_output=True,
                         text=True, timeout=30)
    values = [int(x) for x in out.stdout.split()]
    assert out.returncode == 0 and len(values) == 2 and values[0] <= values[1]


def test_a_loop_that_dies_is_an_error_naming_the_node():
    dies = ('import sys,time\nfor _ in range(3): sys.stdin.readline(); print(time.time_ns(), flush=True)\n'
            'sys.exit("lost the clock")')
    with loop(dies) as ch:
        with pytest.raises(ClockError) as err:
            exchange_offset(ch, "r7")
    msg = str(err.value)
    assert "node r7" in msg and "round 3 of 16" in msg and "ended" in msg
    assert "status 1" in msg and "lost the clock" in msg


def test_a_missing_python_is_an_error_naming_the_node():
    def open_channel(command: str):
        return subprocess_channel(["sh", "-c", command])

    with pytest.raises(ClockError) as err:
        measure_exchange("r8", open_channel, clock_loop_command("python3-not-installed"))
    msg = str(err.value)
    assert "node r8" in msg and "status 127" in msg and "python3-not-installed" in msg


def test_garbage_answers_are_an_error_naming_the_node():
    chatty = 'import sys\nfor _ in iter(sys.stdin.readline, ""): print("Welcome to the lab!", flush=True)'
    with loop(chatty) as ch:
        with pytest.raises(ClockError) as err:
            exchange_offset(ch, "r9")
    assert "node r9" in str(err.value) and "'Welcome to the lab!'" in str(err.value)
    assert "warm-up" in str(err.value)


def test_a_silent_loop_times_out_naming_the_node():
    silent = 'import sys\nfor _ in iter(sys.stdin.readline, ""): pass'
    with loop(silent) as ch:
        t = time.monotonic()
        with pytest.raises(ClockError) as err:
            exchange_offset(ch, "r10", first_timeout_s=0.5)
    assert time.monotonic() - t < 5
    assert "node r10" in str(err.value) and "did not answer" in str(err.value)


# ---------------------------------------------------------------- chrony

# `chronyc -c tracking` (chrony >= 3.0, client.c): ref ID, name, stratum, ref time, system time (NTP minus
# system: > 0 = slow), last offset, RMS offset, frequency, residual freq, skew, root delay, root dispersion,
# update interval, leap status
#: the chronyc(1) example ("System time : 0.000006523 seconds slow of NTP time", "Frequency: 3.225 ppm slow")
SYNCED_SLOW = ("CB00710F,203.0.113.15,3,1485510557.000000000,0.000006523,-0.000006747,0.000035822,-3.225,"
               "-0.000,0.129,0.013639022,0.001100737,64.2,Normal\n")
#: a lab host synchronised to the controller (192.168.123.1), its clock 41.2 us fast of NTP time
SYNCED_FAST = ("C0A87B01,192.168.123.1,4,1795450000.123456789,-0.000041200,0.000003100,0.000012000,12.345,"
               "0.010,0.250,0.000200000,0.000030000,16.1,Normal\n")
#: the controller itself, synchronised to a stratum-1 server
CONTROLLER = ("C0A80001,192.168.0.1,2,1795450001.000000000,0.000001000,0.000000500,0.000004000,-7.100,"
              "0.001,0.050,0.000400000,0.000020000,32.0,Normal\n")
#: what a chronyd that never reached a server prints
UNSYNCED = ("00000000,,0,0.000000000,0.000000000,0.000000000,0.000000000,0.000,0.000,0.000,1.000000000,"
            "1.000000000,0.0,Not synchronised\n")
LOCAL_MODE = ("7F7F0101,,10,1795450000.000000000,0.000000000,0.000000000,0.000000000,0.000,0.000,0.000,"
              "0.000000000,0.000010000,16.0,Normal\n")


def test_chrony_tracking_is_parsed_with_its_sign():
    # 6.523 us *slow* of NTP time: the system clock is behind, offset negative
    offset, bound = parse_chrony_tracking(SYNCED_SLOW)
    assert offset == -6523
    assert bound == 6523 + 1_100_737 + 13_639_022 // 2  # |offset| + root dispersion + root delay / 2
    # 41.2 us fast: ahead, offset positive
    offset, bound = parse_chrony_tracking(SYNCED_FAST)
    assert offset == 41_200 and bound == 41_200 + 30_000 + 100_000
    t = read_chrony_tracking(SYNCED_SLOW)
    assert (t.ref_id, t.ref_name, t.stratum, t.frequency_ppm, t.update_interval_s, t.leap_status) == (
        "CB00710F", "203.0.113.15", 3, -3.225, 64.2, "Normal")


def test_unsynchronised_or_unreadable_chrony_is_refused():
    with pytest.raises(ChronyUnusable, match="not synchronised"):
        parse_chrony_tracking(UNSYNCED)
    with pytest.raises(ChronyUnusable, match="not synchronised"):
        parse_chrony_tracking(SYNCED_SLOW.replace("CB00710F", "00000000"))
    with pytest.raises(ChronyUnusable, match="14 comma-separated fields"):
        parse_chrony_tracking("506 Cannot talk to daemon\n")
    with pytest.raises(ChronyUnusable, match="one CSV line"):
        parse_chrony_tracking("")
    with pytest.raises(ChronyUnusable, match="unreadable field"):
        parse_chrony_tracking(SYNCED_SLOW.replace("0.000006523", "six"))


def test_chrony_reading_is_node_minus_controller_within_both_bounds():
    r = clock_reading_from_chrony("r1", SYNCED_FAST, CONTROLLER, at_ns=123)
    # node: 41.2 us fast of NTP; controller: 1 us slow of NTP -> the node is 42.2 us ahead of the controller
    assert (r.method, r.offset_ns, r.at_ns, r.rtt_ns, r.samples) == ("chrony", 42_200, 123, None, 1)
    assert r.bound_ns == (41_200 + 30_000 + 100_000) + (1_000 + 20_000 + 200_000)
    assert "chrony on both" in r.detail and "41.2 us fast" in r.detail and "1.0 us slow" in r.detail
    # a node behind its NTP time
    r = clock_reading_from_chrony("r2", SYNCED_SLOW, CONTROLLER, at_ns=1)
    assert r.offset_ns == -6523 - (-1000)


def test_chrony_reading_names_what_cannot_be_used():
    with pytest.raises(ChronyUnusable, match="node r1: the controller's chrony cannot be used: chrony is not sync"):
        clock_reading_from_chrony("r1", SYNCED_FAST, UNSYNCED)
    with pytest.raises(ChronyUnusable, match="node r1: chrony is not synchronised"):
        clock_reading_from_chrony("r1", UNSYNCED, CONTROLLER)
    with pytest.raises(ChronyUnusable, match="node r1: .*local mode"):
        clock_reading_from_chrony("r1", LOCAL_MODE, CONTROLLER)
    # the controller serving its own clock to the lab (local mode) is fine: the nodes share its time
    assert clock_reading_from_chrony("r1", SYNCED_FAST, LOCAL_MODE).offset_ns == 41_200


def test_read_clock_prefers_chrony_and_falls_back_to_the_exchange():
    def open_channel(command: str):
        return subprocess_channel(["sh", "-c", command])

    command = clock_loop_command(PYTHON, shifted(CLOCK_LOOP_CODE, SHIFT_NS))
    r = read_clock("r1", controller_tracking=CONTROLLER, node_tracking=SYNCED_FAST, open_channel=open_channel,
                   command=command, rounds=4)
    assert r.method == "chrony"
    r = read_clock("r1", controller_tracking=UNSYNCED, node_tracking=SYNCED_FAST, open_channel=open_channel,
                   command=command, rounds=4)
    assert r.method == "exchange" and abs(r.offset_ns - SHIFT_NS) <= r.bound_ns
    assert "chrony not used: the controller's chrony cannot be used: chrony is not synchronised" in r.detail
    r = read_clock("r1", controller_tracking=None, node_tracking=None, open_channel=open_channel, command=command,
                   rounds=4)
    assert r.method == "exchange" and "the controller has no chrony" in r.detail
    with pytest.raises(ClockError, match="node r1: chrony cannot be used"):
        read_clock("r1", controller_tracking=None, node_tracking=SYNCED_FAST)


# ---------------------------------------------------------------- readings and the manifest


def test_readings_round_trip_through_the_manifest():
    before = {"r1": same_host_reading("r1", at_ns=10),
              "r2": ClockReading("r2", "exchange", -2 * MS, 200 * US, 400 * US, 11, 16, "x")}
    after = {"r2": ClockReading("r2", "chrony", -2 * MS - 5, 300 * US, None, 99, 1, "y")}
    data = json.loads(json.dumps(clocks_json(before, after)))
    assert set(data) == {"before", "after"} and data["before"]["r1"]["method"] == "same-host"
    assert clocks_from_json(data) == (before, after)
    # the run died before the after readings: no "after"
    data = clocks_json(before)
    assert "after" not in data and clocks_from_json(data) == (before, None)
    assert same_host_reading("r1").bound_ns == 0 and not same_host_reading("r1").measured


def test_malformed_readings_say_what_is_wrong():
    with pytest.raises(ValueError, match="clocks.before.r1: clock reading of r1: 'offset_ns' must be an integer"):
        clocks_from_json({"before": {"r1": {**same_host_reading("r1").to_json(), "offset_ns": "5ms"}}})
    with pytest.raises(ValueError, match="no 'before'"):
        clocks_from_json({"after": {}})
    with pytest.raises(ValueError, match="method 'ntp'"):
        ClockReading("r1", "ntp", 0, 0, None, 0, 0, "")
