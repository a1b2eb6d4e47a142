"""What a run shorter than its topology leaves out (issue 27.3), listed before anything is built by
`run --duration`, a suite case's `duration` and `validate --duration`, each item at its file:line."""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

import testbed.cli.app as cli
from testbed.spec import load_spec
from testbed.spec.shortened import Shortening, dropped_by, shorten

ROOT = Path(__file__).resolve().parents[2]
DIAMOND = ROOT / "topologies" / "diamond.yaml"
S = 10**9

#: every kind of item a shorter run can leave out; the lines are those of this text
TOPOLOGY = textwrap.dedent("""\
    name: short
    duration: 60s
    nodes: {r1: {}, r2: {}, r3: {}}
    links:
      - endpoints: [r1, r2]
      - endpoints: [r2, r3]
    traffic:
      - profile: constant
        name: early
        from: r1
        to: [r3]
        rate: 1mbit
        stop: 30s
        slow_subscribers: [{node: r2, from: 25s}]
      - profile: constant
        name: late
        from: r1
        to: [r3]
        rate: 1mbit
        priority: background
        start: 40s
      - profile: constant
        name: switched
        from: r3
        to: [r1]
        rate: 1mbit
        priority: data_high
    scenario:
      - {at: 10s, action: set_link, link: r1-r2, bw: 5mbit}
      - {at: 35s, action: link_down, link: r2-r3}
      - {at: 45s, action: start_flow, flow: switched}
    expect:
      - "loss <= 1% for flow early"
      - "loss <= 1% for flow late"
      - "latency.p99 <= 50ms for priority background"
      - "latency.p99 <= 50ms for priority data_high"
      - "router.memory <= 1GiB"
""")


@pytest.fixture
def topology(tmp_path) -> Path:
    path = tmp_path / "short.yaml"
    path.write_text(TOPOLOGY)
    return path


def test_each_item_at_its_line(topology):
    spec = load_spec(topology)
    shortened = shorten(spec, 20 * S, str(topology), TOPOLOGY)
    assert [str(p) for p in shortened.items] == [
        f"{topology}:13 traffic[0].stop: flow early is cut short: it sends until 20s instead of 30s",
        f"{topology}:14 traffic[0].slow_subscribers[0].from: the slow subscriber on r2 never slows down: it would "
        "from 25s, after the end (20s)",
        f"{topology}:21 traffic[1].start: flow late never sends: it starts at 40s, not before the end (20s)",
        f"{topology}:30 scenario[1].at: link_down r2-r3 at 35s is after the end (20s): not applied",
        f"{topology}:31 scenario[2].at: flow switched never sends: it starts at 45s, not before the end (20s)",
        f"{topology}:31 scenario[2].at: start_flow switched at 45s is after the end (20s): not applied",
        f"{topology}:34 expect[1]: loss <= 1% for flow late cannot be measured: flow late sends nothing before the "
        "end",
        f"{topology}:35 expect[2]: latency.p99 <= 50ms for priority background cannot be measured: every flow of "
        "priority background sends nothing before the end",
        f"{topology}:36 expect[3]: latency.p99 <= 50ms for priority data_high cannot be measured: every flow of "
        "priority data_high sends nothing before the end",
    ]
    assert shortened.unmeasurable == {
        "loss <= 1% for flow late": "flow late sends nothing before the end",
        "latency.p99 <= 50ms for priority background": "every flow of priority background sends nothing before the end",
        "latency.p99 <= 50ms for priority data_high": "every flow of priority data_high sends nothing before the end"}


def test_nothing_left_out_by_a_run_as_long_or_longer(topology):
    spec = load_spec(topology)
    assert shorten(spec, 60 * S, str(topology), TOPOLOGY) is None
    assert shorten(spec, 90 * S, str(topology), TOPOLOGY) is None
    assert dropped_by(spec, 60 * S) == []


def test_a_run_that_still_holds_everything(topology):
    """At 50 s every flow still sends (the one switched on at 45 s until the end, as it would) and every event
    happens: nothing is left out, and the head line says so."""
    spec = load_spec(topology)
    shortened = shorten(spec, 50 * S, str(topology), TOPOLOGY)
    assert shortened.items == () and shortened.unmeasurable == {}
    assert shortened.lines("--duration 50s") == ["--duration 50s: a 50s run instead of the topology's 60s leaves "
                                                 "out nothing the topology schedules"]


def test_expectation_on_all_flows_when_none_sends(tmp_path):
    text = TOPOLOGY.replace("    stop: 30s\n", "    start: 30s\n")
    path = tmp_path / "t.yaml"
    path.write_text(text + '  - "loss <= 1%"\n')
    spec = load_spec(path)
    shortened = shorten(spec, 20 * S, str(path), path.read_text())
    assert list(shortened.unmeasurable)[-1] == "loss <= 1%"
    assert str(shortened.items[-1]) == (f"{path}:38 expect[5]: loss <= 1% cannot be measured: every flow sends "
                                        "nothing before the end")


def _diamond_line(text: str) -> int:
    return next(i for i, line in enumerate(DIAMOND.read_text().splitlines(), 1) if text in line)


def test_validate_duration_lists_what_the_diamond_leaves_out():
    """pub2 of the diamond at 20 s: today's run ended 'FAIL ... 0 of 0 deliveries lost', the 40 s event skipped
    silently."""
    result = CliRunner().invoke(cli.app, ["validate", str(DIAMOND), "--duration", "20s"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    listed = lines[next(i for i, line in enumerate(lines) if line.startswith("--duration 20s")):]
    assert listed == [
        "--duration 20s: a 20s run instead of the topology's 60s leaves out or cuts short 5 items:",
        f"  {DIAMOND}:{_diamond_line('pub1_stop: 30s')} traffic[0].pub1_stop: flow zpub.pub1 is cut short: it sends "
        "until 20s instead of 30s",
        f"  {DIAMOND}:{_diamond_line('pub2_start: 30s')} traffic[0].pub2_start: flow zpub.pub2 never sends: it "
        "starts at 30s, not before the end (20s)",
        f"  {DIAMOND}:{_diamond_line('stop: 40s')} traffic[1].stop: flow bulk is cut short: it sends until 20s "
        "instead of 40s",
        f"  {DIAMOND}:{_diamond_line('at: 40s')} scenario[1].at: set_link r2-r4 at 40s is after the end (20s): not "
        "applied",
        f"  {DIAMOND}:{_diamond_line('for flow zpub.pub2')} expect[4]: loss <= 2% for flow zpub.pub2 cannot be "
        "measured: flow zpub.pub2 sends nothing before the end",
    ]


def test_validate_duration_json_and_bad_values():
    result = CliRunner().invoke(cli.app, ["validate", str(DIAMOND), "--json", "--duration", "20"])
    assert result.exit_code == 0, result.output
    shortened = json.loads(result.output)["shortened"]
    assert shortened["duration_ns"] == 20 * S and shortened["topology_duration_ns"] == 60 * S
    assert shortened["unmeasurable"] == {
        "loss <= 2% for flow zpub.pub2": "flow zpub.pub2 sends nothing before the end"}
    assert [item["path"] for item in shortened["items"]] == ["traffic[0].pub1_stop", "traffic[0].pub2_start",
                                                             "traffic[1].stop", "scenario[1].at", "expect[4]"]
    assert "shortened" not in json.loads(CliRunner().invoke(cli.app, ["validate", str(DIAMOND), "--json"]).output)
    for bad in ("0", "-3s"):
        result = CliRunner().invoke(cli.app, ["validate", str(DIAMOND), "--duration", bad])
        assert result.exit_code == 2, result.output


@pytest.fixture
def recorded_run(monkeypatch):
    """`testbed run` up to the experiment, which records its options and when the lab would have been checked."""
    import testbed.run.experiment as experiment
    from testbed.backends import BackendOptions

    seen = {"order": []}

    def stand_in(spec, path, caps, options, progress):
        seen["options"] = options
        raise FileExistsError("stand-in: nothing is run")

    monkeypatch.setattr(cli, "need_root", lambda: None)
    def check_backend_and_kernel(*args, **kwargs):  # returns the probed capabilities and the backend's options
        seen["order"].append("kernel checked")
        return None, BackendOptions("mininet")

    monkeypatch.setattr(cli, "_check_backend_and_kernel", check_backend_and_kernel)
    monkeypatch.setattr(cli, "_check_machine_fit", lambda *a, **k: None)
    monkeypatch.setattr(experiment, "run_experiment", stand_in)
    return seen


def _plain(output: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", output)


def test_run_duration_warns_before_anything_is_built_and_records_it(recorded_run):
    result = CliRunner().invoke(cli.app, ["run", str(DIAMOND), "--duration", "20s"])
    assert result.exit_code == 2 and "stand-in: nothing is run" in result.stderr, result.stderr
    err = _plain(result.stderr).splitlines()
    assert err[0] == "warning: --duration 20s: a 20s run instead of the topology's 60s leaves out or cuts short " \
                     "5 items:"
    assert err[2] == f"  {DIAMOND}:{_diamond_line('pub2_start: 30s')} traffic[0].pub2_start: flow zpub.pub2 never " \
                     "sends: it starts at 30s, not before the end (20s)"
    assert recorded_run["order"] == ["kernel checked"]
    shortened = recorded_run["options"].shortened
    assert list(shortened.unmeasurable) == ["loss <= 2% for flow zpub.pub2"] and len(shortened.items) == 5
    assert shortened.to_json()["items"][1]["line"] == _diamond_line("pub2_start: 30s")


def test_run_without_duration_or_longer_says_nothing(recorded_run):
    for args in ([], ["--duration", "2m"]):
        result = CliRunner().invoke(cli.app, ["run", str(DIAMOND), *args])
        assert "warning" not in result.stderr and recorded_run["options"].shortened is None, result.stderr


def test_run_duration_warns_even_when_the_machine_then_refuses(recorded_run, monkeypatch):
    """The list comes before the machine is checked and anything is built."""
    def refuse(*args, **kwargs):
        cli.fail("stand-in: this machine cannot run it", 2)

    monkeypatch.setattr(cli, "_check_backend_and_kernel", refuse)
    result = CliRunner().invoke(cli.app, ["run", str(DIAMOND), "--duration", "20s"])
    assert result.exit_code == 2 and "options" not in recorded_run
    err = _plain(result.stderr)
    assert err.index("zpub.pub2 never sends") < err.index("stand-in: this machine cannot run it")


def test_the_head_line_says_an_before_a_vowel_sound():
    """`validate --duration 8s` said "a 8s run": the article follows the number's sound."""
    assert Shortening(8 * S, 60 * S).lines("--duration 8s") == [
        "--duration 8s: an 8s run instead of the topology's 60s leaves out nothing the topology schedules"]
    assert Shortening(20 * S, 60 * S).lines("--duration 20s")[0].startswith("--duration 20s: a 20s run")
