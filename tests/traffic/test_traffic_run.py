"""The orchestrator's sequence on loopback: plan_traffic -> flows.json + plans -> launch at start_at_ns,
SIGTERM at stop_at_ns -> send/recv logs follow the zpub phases and the scenario's start/stop_flow."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from testbed.spec import load_spec_text
from testbed.trafficplanner import argv_for, default_python, env_for, plan_traffic
from traffic.logs import READY, read_summary

S = 1_000_000_000
MS = 1_000_000

SPEC = """
name: loop
duration: 4s
nodes: {a: {}, b: {}}
links: [{endpoints: [a, b]}]
traffic:
  - {profile: zpub, name: z, node: a, subscribers: [b], rate: 200kbit, tick: 50ms,
     start_delay: 500ms, pub1_stop: 2s, pub2_start: 2s}
  - {profile: constant, name: late, from: a, to: [b], rate: 300kbit, size: 600b, priority: data_high}
scenario:
  - {at: 1500ms, action: start_flow, flow: late}
  - {at: 3s, action: stop_flow, flow: late}
"""


def rows(path: Path):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    return r[0], [tuple(map(int, x)) for x in r[1:]]


def test_orchestrator_sequence_zpub_phases_and_start_stop_flow(router, tmp_path):
    spec = load_spec_text(SPEC)
    t0 = time.time_ns() + 4 * S
    addr = ("127.0.0.1", router.client_port)
    plan = plan_traffic(spec, tmp_path, t0, {"a": addr, "b": addr}, sub_linger_ns=S)
    plan.write_flows()
    paths = plan.write_plans()
    late = plan.process("pub-late")
    assert (late.start_at_ns, late.stop_at_ns) == (500 * MS, 3 * S)  # launch_lead_ns default 1 s

    env = dict(os.environ, **env_for())
    running = {}
    sigterm_at = {}
    try:
        pending = plan.launch_order()
        logs = tmp_path.resolve() / "traffic"
        while pending and pending[0].role == "sub":  # subscribers first, and ready before publishers
            p = pending.pop(0)
            running[p.name] = subprocess.Popen(argv_for(p, paths[p.name], python=default_python()), env=env,
                                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                               start_new_session=True)
            deadline = time.monotonic() + 10
            while READY not in ((logs / f"{p.name}.log").read_text() if (logs / f"{p.name}.log").exists() else ""):
                assert time.monotonic() < deadline and running[p.name].poll() is None, f"{p.name} not ready"
                time.sleep(0.02)
        stops = sorted((p.stop_at_ns, p.name) for p in plan.processes if p.stop_at_ns is not None)
        while pending or stops:
            now = time.time_ns() - t0
            # start_at_ns 0: at once (before t0; it sleeps until its first tick); else on the run clock
            while pending and (pending[0].start_at_ns == 0 or pending[0].start_at_ns <= now):
                p = pending.pop(0)
                running[p.name] = subprocess.Popen(argv_for(p, paths[p.name], python=default_python()), env=env,
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                                   start_new_session=True)
            while stops and stops[0][0] <= now:
                _, name = stops.pop(0)
                running[name].send_signal(signal.SIGTERM)
                sigterm_at[name] = time.time_ns()
            time.sleep(0.01)
        for name, proc in running.items():
            assert proc.wait(15) == 0, (name, proc.stderr.read().decode())
    finally:
        for proc in running.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            if proc.stderr:
                proc.stderr.close()

    table = json.loads((logs / "flows.json").read_text())["flows"]
    ids = {f["name"]: f["flow_id"] for f in table}
    assert ids == {"z.pub1": 1, "z.pub2": 2, "z.realtime": 3, "late": 4}
    expected = {"z.pub1": (500 * MS, 2 * S), "z.pub2": (2 * S, 4 * S), "z.realtime": (500 * MS, 4 * S),
                "late": (1500 * MS, 3 * S)}
    for flow, (start, stop) in expected.items():
        header, sent = rows(logs / f"send-{flow}.csv")
        assert header == ["seq", "send_ns", "size"]
        assert sent, f"{flow}: nothing sent"
        times = [s[1] - t0 for s in sent]
        assert start <= min(times) < start + 300 * MS, (flow, min(times))
        assert max(times) < stop + 20 * MS and max(times) > stop - 300 * MS, (flow, max(times))
        header, recv = rows(logs / f"recv-{flow}-b.csv")
        assert header == ["seq", "send_ns", "recv_ns", "size"]
        sent_ns = {s[0]: s[1] for s in sent}
        assert all(sent_ns[r[0]] == r[1] and r[2] > r[1] for r in recv)
        assert len(recv) >= 0.98 * len(sent), (flow, len(recv), len(sent))
        summary = read_summary(str(logs / f"pub-{flow}.log"))
        assert summary["flows"][0]["flow_id"] == ids[flow]
    # zpub: one 1250-byte message per 50 ms tick (200 kbit/s * 50 ms / 8)
    _, rt = rows(logs / "send-z.realtime.csv")
    assert {s[2] for s in rt} == {1250}
    assert 60 <= len(rt) <= 70  # 3.5 s / 50 ms = 70 ticks; late ticks may be skipped under load
    # the flow stopped by the scenario ended by its plan; SIGTERM then made it exit
    assert read_summary(str(logs / "pub-late.log"))["end"] in ("completed", "stopped")
    sub = read_summary(str(logs / "sub-b.log"))
    assert sub["invalid"] == 0 and sub["foreign"] == 0


PAIR = """
name: pair
duration: 2s
nodes: {a: {}, b: {}}
links: [{endpoints: [a, b]}]
traffic:
  - {profile: constant, name: c, from: a, to: [b], rate: 100kbit, size: 500b}
"""


def _started(proc: subprocess.Popen, timeout_s: float = 20) -> str:
    """The first line a process started with --wait-for-plan prints (it has started: interpreter, imports)."""
    line = proc.stdout.readline()
    assert line, f"exit {proc.wait(timeout_s)}: {proc.stderr.read()}"
    return line.strip()


def test_processes_started_before_their_plans_wait_for_them_and_keep_the_run_clock(router, tmp_path):
    """testbed run's sequence (testbed/run/phases.py TrafficPhase): the processes are started first, with
    --wait-for-plan; each says it has started; then the plans are written with the run clock's zero half a second
    ahead, and the processes run them: the subscriber is ready before the zero, the publisher sends from it."""
    from traffic.logs import WAITING_FOR_PLAN

    spec = load_spec_text(PAIR)
    addr = ("127.0.0.1", router.client_port)
    unset = plan_traffic(spec, tmp_path, 0, {"a": addr, "b": addr}, sub_linger_ns=S)
    plans = tmp_path / "traffic" / "plans"
    plans.mkdir(parents=True)
    env = dict(os.environ, **env_for())
    running = {}
    try:
        for p in unset.launch_order():
            argv = argv_for(p, plans / f"{p.name}.json", python=default_python(), wait_for_plan_s=30)
            assert argv[-2:] == ["--wait-for-plan", "30"]
            running[p.name] = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                               text=True, start_new_session=True)
        for name, proc in running.items():
            assert _started(proc) == f"traffic: {WAITING_FOR_PLAN} {plans / f'{name}.json'}"
        time.sleep(0.3)
        assert all(proc.poll() is None for proc in running.values())  # still waiting: no plan yet
        t0 = time.time_ns() + 500 * MS
        plan = unset.starting_at(t0)
        assert plan.t0_ns == t0 and {p.plan.t0_ns for p in plan.processes} == {t0}
        plan.write_flows()
        for name, written in plan.write_plans(tmp_path / "written").items():  # whole, as the run delivers them
            os.replace(written, plans / written.name)
        for name, proc in running.items():
            assert proc.wait(15) == 0, (name, proc.stderr.read())
    finally:
        for proc in running.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            proc.stdout.close()
            proc.stderr.close()
    logs = tmp_path.resolve() / "traffic"
    ready = [line for line in (logs / "sub-b.log").read_text().splitlines() if READY in line]
    assert ready and int(ready[0].split()[0]) < t0
    _, sent = rows(logs / "send-c.csv")
    assert sent and t0 <= sent[0][1] < t0 + 100 * MS
    _, recv = rows(logs / "recv-c-b.csv")
    assert len(recv) >= 0.98 * len(sent)


def test_a_process_waiting_for_its_plan_stops_on_sigterm_and_gives_up_after_its_time(tmp_path):
    env = dict(os.environ, **env_for())
    plan = tmp_path / "never.json"
    argv = [default_python(), "-m", "traffic", "pub", "--plan", str(plan)]
    proc = subprocess.Popen([*argv, "--wait-for-plan", "30"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _started(proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
    gave_up = subprocess.run([*argv, "--wait-for-plan", "0.2"], env=env, capture_output=True, text=True, timeout=30)
    assert gave_up.returncode == 2 and f"no plan at {plan} after 0.2 s" in gave_up.stderr
