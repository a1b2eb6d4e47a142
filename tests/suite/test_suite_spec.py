"""Suite files: the shipped suites load; every bad input is refused at its file and line."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from spark.regression import MinEffect
from testbed.spec import SpecError
from testbed.suite.spec import effective_topology, higher_is_worse, load_suite, parse_min_effect

ROOT = Path(__file__).resolve().parents[2]
DIAMOND = ROOT / "topologies" / "diamond.yaml"


def write_suite(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(textwrap.dedent(text).replace("DIAMOND", str(DIAMOND)))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_suite(path)
    return [str(p) for p in err.value.problems]


@pytest.mark.parametrize("name", ["smoke", "nightly"])
def test_shipped_suites_load(name):
    suite = load_suite(ROOT / "suites" / f"{name}.yaml")
    assert suite.name == name
    for case in suite.cases.values():
        assert case.metrics, case.name
        assert case.repetitions >= 3
        # the effective topology is what every repetition's folder will hold, and it loads on its own
        assert yaml.safe_load(case.topology_text)["name"] == case.spec.name


def test_nightly_has_the_cases_the_issue_lists():
    suite = load_suite(ROOT / "suites" / "nightly.yaml")
    cases = suite.cases
    assert cases["diamond-on"].spec.router_settings("r1").congestion_aware is True
    assert cases["diamond-off"].spec.router_settings("r1").congestion_aware is False
    assert any(e.action == "link_down" for e in cases["triangle-failure"].spec.scenario)
    assert cases["grid12-congestion"].spec.name == "grid12" and cases["grid12-congestion"].spec.scenario
    assert {e.action for e in cases["diamond-router-restart"].spec.scenario} == {"kill_router", "restart_router"}
    assert cases["diamond-wrr"].spec.router_settings("r3").scheduler == "wrr"
    assert all(c.repetitions == 5 for c in cases.values())


def test_smoke_case_overrides_are_applied():
    case = load_suite(ROOT / "suites" / "smoke.yaml").cases["diamond-short"]
    assert case.spec.duration == 18 * 10**9
    assert [e.at for e in case.spec.scenario] == [8 * 10**9, 14 * 10**9]
    assert {f.name for f in case.spec.traffic} == {"zpub", "bulk"}
    assert len(case.spec.expect) == 3
    assert case.overrides == ("duration", "traffic", "scenario", "expect")
    keys = [m.key for m in case.metrics]
    assert "loss for flow bulk" in keys and "latency.p99 for priority real_time" in keys


def test_variant_router_settings_and_repetitions_override(tmp_path):
    suite = load_suite(ROOT / "suites" / "smoke.yaml", {"congestion_aware": False}, repetitions=7)
    case = suite.cases["diamond-short"]
    assert case.spec.router_settings("r2").congestion_aware is False
    assert case.repetitions == 7


def test_router_override_reaches_nodes_with_their_own_settings():
    text = textwrap.dedent("""\
        name: t
        nodes:
          a: {router: {congestion_aware: true, scheduler: strict}}
          b: {}
        links: [{endpoints: [a, b]}]
    """)
    merged = yaml.safe_load(effective_topology(text, {"congestion_aware": False, "router": {"scheduler": "wrr"}}))
    assert merged["defaults"]["router"] == {"scheduler": "wrr", "congestion_aware": False}
    assert merged["nodes"]["a"]["router"] == {"congestion_aware": False, "scheduler": "wrr"}


@pytest.mark.parametrize("text,key,effect", [
    ("latency.p99 for priority realtime 25 %", "latency.p99 for priority real_time", MinEffect("relative", 0.25)),
    ("latency.p99 for priority realtime: 25%", "latency.p99 for priority real_time", MinEffect("relative", 0.25)),
    ("loss for flow bulk, 2 points", "loss for flow bulk", MinEffect("absolute", 2.0)),
    ("reroute.time 50ms", "reroute.time for all flows", MinEffect("absolute", 50e6)),
])
def test_compact_metrics(tmp_path, text, key, effect):
    path = write_suite(tmp_path, f"""\
        name: s
        cases:
          a: {{topology: DIAMOND, metrics: ["{text}"]}}
     """)
    (metric,) = load_suite(path).cases["a"].metrics
    assert (metric.key, metric.min_effect) == (key, effect)


@pytest.mark.parametrize("value,metric,expected", [
    ("20%", "latency.p99", MinEffect("relative", 0.2)),
    ("+50 %", "reroute.time", MinEffect("relative", 0.5)),
    ("1pt", "loss", MinEffect("absolute", 1.0)),
    ("2 points", "delivery", MinEffect("absolute", 2.0)),
    ("10%", "loss", MinEffect("relative", 0.1)),
    ("50ms", "latency.p99", MinEffect("absolute", 50e6)),
    ("2", "reroutes", MinEffect("absolute", 2.0)),
    ("1mbit", "throughput", MinEffect("absolute", 1e6)),
])
def test_min_effects(value, metric, expected):
    assert parse_min_effect(value, metric) == expected


@pytest.mark.parametrize("value,metric,message", [
    ("1pt", "latency.p99", "percentage points are for loss and delivery"),
    ("1", "loss", "relative effect (20%) or percentage points (1pt)"),
    ("fast", "latency.p99", "is not a minimum effect for latency.p99"),
    ("0%", "latency.p99", "above zero"),
    (True, "latency.p99", "is not a minimum effect"),
])
def test_bad_min_effects(value, metric, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_min_effect(value, metric)


def test_directions():
    assert higher_is_worse("latency.p99") and higher_is_worse("loss") and higher_is_worse("reroute.time")
    assert not higher_is_worse("throughput") and not higher_is_worse("delivery")


BAD = [
    # (suite text, expected substrings of one problem: "file:line path: message")
    ("""\
        name: s
        cases:
          a:
            topology: DIAMOND
            repetitons: 3
            metrics: ["loss for flow bulk 1pt"]
     """, ":5 cases.a.repetitons: unknown key 'repetitons' (did you mean 'repetitions'?"),
    ("""\
        name: s
        cases:
          a:
            topology: DIAMOND
            metrics:
              - {metric: latency.p99, priority: realtime, min_effect: 1pt}
     """, ":6 cases.a.metrics[0]: min_effect: '1pt': percentage points are for loss and delivery"),
    ("""\
        name: s
        cases:
          a:
            topology: DIAMOND
            metrics: ["latency.p42 for flow bulk 20%"]
     """, ":5 cases.a.metrics[0]: 'latency.p42' is not a metric"),
    ("""\
        name: s
        cases:
          a:
            topology: DIAMOND
            metrics: ["loss for flow bulk 1pt"]
            scenario:
              - {at: 10s, action: link_down, link: r1-r4}
     """, ":6 cases.a.scenario: with "),
    ("""\
        name: s
        cases:
          a:
            topology: no-such-topology.yaml
            metrics: ["loss for flow bulk 1pt"]
     """, "no-such-topology.yaml: no such file"),
    ("""\
        name: s
        cases:
          a:
            topology: DIAMOND
            metrics: ["loss for flow nosuchflow 1pt"]
     """, ":5 cases.a.metrics: loss for flow nosuchflow: case a's topology has no flow 'nosuchflow'"),
    ("""\
        name: s
        cases:
          a:
            topology: DIAMOND
     """, ":3 cases.a: no metrics"),
    ("""\
        name: s
        cases:
          a:
            topology: DIAMOND
            duration: 5s
            scenario: [{at: 10s, action: set_link, link: r2-r4, bw: 6mbit}]
            metrics: ["loss for flow bulk 1pt"]
     """, ":6 cases.a.scenario[0].at: set_link r2-r4 at 10s is after the end (5s): not applied (the case's duration "
         "is 5s)"),
    ("""\
        name: s
        repetitions: 0
        cases: {}
     """, ":2 repetitions: "),
    ("""\
        name: s
        alpha: 0.7
        cases:
          a: {topology: DIAMOND, metrics: ["loss for flow bulk 1pt"]}
     """, ":2 alpha: "),
    ("""\
        name: s
        cases:
          a:
            topology: DIAMOND
            congestion_aware: "no"
            metrics: ["loss for flow bulk 1pt"]
     """, ":5 cases.a.congestion_aware: 'no' is not true or false"),
    ("""\
        name: s
        cases:
          a:
            topology: DIAMOND
            router: {scheduler: fifo}
            metrics: ["loss for flow bulk 1pt"]
     """, ":5 cases.a.router.scheduler: 'fifo' is not allowed"),
    ("""\
        name: s
        cases:
          a:
            topology: DIAMOND
            metrics: ["loss for flow bulk"]
     """, "cases.a.metrics[0]"),
    ("""\
        name: s
        baseline: {nights: [x], revision: abc}
        cases:
          a: {topology: DIAMOND, metrics: ["loss for flow bulk 1pt"]}
     """, ":2 baseline: "),
    ("", ":1: the file is empty; a suite needs at least 'name' and 'cases'"),
    ("name: Nightly!\ncases:\n  a: {topology: DIAMOND, metrics: ['loss 1pt']}\n", ":1 name: 'Nightly!' is not a suite name"),
    ("name: s\ncases:\n  A b: {topology: DIAMOND, metrics: ['loss 1pt']}\n", "'A b' is not a case name"),
    ("- a\n- b\n", "the file must be a mapping of keys (name, repetitions, metrics, cases, ...), not a list"),
    ("name: s\ncases: {a: {topology: DIAMOND, metrics: [x]\n", "YAML syntax error"),
]


@pytest.mark.parametrize("text,expected", BAD)
def test_bad_suites_are_refused_at_their_line(tmp_path, text, expected):
    path = write_suite(tmp_path, text)
    found = problems(path)
    assert any(expected in p for p in found), found
    assert all(p.startswith(str(path)) or "topolog" in p for p in found), found


def test_topology_problems_are_shown_at_the_topology_line(tmp_path):
    topo = tmp_path / "broken.yaml"
    topo.write_text("name: broken\nnodes:\n  a: {}\nlinks:\n  - endpoints: [a, zz]\n")
    path = write_suite(tmp_path, """\
        name: s
        cases:
          a:
            topology: broken.yaml
            metrics: ["loss 1pt"]
     """)
    found = problems(path)
    assert any(p.startswith(f"{path}:4 cases.a.topology: broken.yaml: the topology has problems") for p in found)
    assert any(p.startswith(f"{topo}:5") and "zz" in p for p in found), found


def test_a_missing_suite_file(tmp_path):
    assert problems(tmp_path / "nope.yaml") == [f"{tmp_path / 'nope.yaml'}: no such file"]


def test_a_case_with_a_command_router_finds_its_template_and_is_preflighted(tmp_path, monkeypatch):
    """A topology's own router block: its template is relative to the topology (not the suite, not the
    working folder), and the case's driver is checked before a night is made."""
    from testbed.drivers import DriverError
    from testbed.suite.runner import preflight_cases

    (tmp_path / "topos").mkdir()
    (tmp_path / "topos" / "r.conf.j2").write_text("node {{ node }}\n")
    (tmp_path / "topos" / "mine.yaml").write_text(DIAMOND.read_text() + "\nrouter: {driver: command, command: 'myrouter "
                                                  "{config}', config_template: r.conf.j2, client: testbed}\n")
    path = write_suite(tmp_path, """\
        name: s
        cases:
          mine:
            topology: topos/mine.yaml
            metrics: ["loss 1pt"]
     """)
    monkeypatch.chdir(ROOT)
    case = load_suite(path).cases["mine"]
    assert case.spec.router.config_template == str(tmp_path / "topos" / "r.conf.j2")
    (tmp_path / "topos" / "r.conf.j2").write_text("node {{ nodes }}\n")
    with pytest.raises(DriverError, match=r"(?s)case mine: router driver command cannot run this topology:.*r.conf.j2:1: 'nodes' is undefined"):
        preflight_cases(load_suite(path), ["mine"])


def _diamond_line(text: str) -> int:
    return next(i for i, line in enumerate(DIAMOND.read_text().splitlines(), 1) if text in line)


def test_a_shorter_case_lists_what_it_leaves_out_of_the_topology(tmp_path):
    """A case's shorter duration is not refused for what it cuts off the topology (issue 27.3): each item is listed
    at the topology's line, and the case runs for its own duration."""
    path = write_suite(tmp_path, """\
        name: s
        cases:
          a:
            topology: DIAMOND
            duration: 20s
            metrics: ["loss for flow bulk 1pt"]
          b:
            topology: DIAMOND
            metrics: ["loss for flow bulk 1pt"]
     """)
    suite = load_suite(path)
    case = suite.cases["a"]
    assert case.spec.duration == 20 * 10**9 and case.shortened.duration_ns == 20 * 10**9
    assert [str(p) for p in case.shortened.items][1] == (
        f"{DIAMOND}:{_diamond_line('pub2_start: 30s')} traffic[0].pub2_start: flow zpub.pub2 never sends: it starts "
        "at 30s, not before the end (20s)")
    assert [p.path for p in case.shortened.items] == ["traffic[0].pub1_stop", "traffic[0].pub2_start",
                                                      "traffic[1].stop", "scenario[1].at", "expect[4]"]
    assert list(case.shortened.unmeasurable) == ["loss <= 2% for flow zpub.pub2"]
    assert "duration: 20s" in case.topology_text
    assert suite.cases["b"].shortened is None and suite.cases["b"].spec.duration == 60 * 10**9


def test_a_suite_metric_a_shorter_case_cannot_have_is_listed(tmp_path):
    path = write_suite(tmp_path, """\
        name: s
        metrics: ["loss for flow zpub.pub2 1pt"]
        cases:
          a: {topology: DIAMOND, duration: 20s, metrics: ["latency.p99 for priority data_low 20%"]}
          b: {topology: DIAMOND, duration: 35s}
     """)
    suite = load_suite(path)
    listed = [str(p) for p in suite.cases["a"].shortened.items]
    assert listed[-1] == (f"{path}:2 metrics: loss for flow zpub.pub2 cannot be measured: flow zpub.pub2 sends "
                          "nothing before the end, so the case's repetitions will not have it")
    assert not any("data_low" in p for p in listed)  # bulk still sends until 20s
    assert not any(p.startswith(str(path)) for p in map(str, suite.cases["b"].shortened.items))
