"""`validate` refuses traffic no path of routers carries and expectations on a priority no flow sends at
(issue 27.3), each at its file:line: a host in the middle used to run 40 s to 100 % loss."""
from __future__ import annotations

import textwrap

import pytest
from typer.testing import CliRunner

import testbed.cli.app as cli
from testbed.spec import SpecError, load_spec_text

#: r1 - h - r2: a host in the middle; r3 on an island of its own; lines are those of this text
HEAD = textwrap.dedent("""\
    name: hosts
    nodes: {r1: {}, r2: {}, r3: {}, r4: {}, h: {kind: host}}
    links:
      - endpoints: [r1, h]
      - endpoints: [h, r2]
      - endpoints: [r3, r4]
""")


def problems(text: str) -> list:
    with pytest.raises(SpecError) as err:
        load_spec_text(HEAD + textwrap.dedent(text), "t.yaml")
    return [str(p) for p in err.value.problems]


HOST_WHY = "every path crosses a host (r1-h-r2 crosses h), and a host runs no router and forwards nothing; link the " \
           "routers around it, or make it kind: router"


@pytest.mark.parametrize("traffic, expected", [
    ("""\
        traffic:
          - {profile: constant, name: f, from: r1, to: [r2], rate: 1mbit}
     """, [f"t.yaml:8 traffic[0].to[0]: no path of routers from r1 to r2: {HOST_WHY}"]),
    ("""\
        traffic:
          - profile: zpub
            node: r1
            subscribers:
              - r3
     """, ["t.yaml:11 traffic[0].subscribers[0]: no path of routers from r1 to r3: no links join them"]),
    ("""\
        traffic:
          - {profile: constant, name: f, from: h, to: [r2], rate: 1mbit}
     """, ["t.yaml:8 traffic[0].from: h is a host: a publisher is a client of the router on its node, and a host "
           "runs none (docs/spec.md \"Hosts\"); put it on a router node"]),
    ("""\
        traffic:
          - {profile: constant, name: f, from: r3, to: [r4, h], rate: 1mbit}
     """, ["t.yaml:8 traffic[0].to[1]: h is a host: a subscriber is a client of the router on its node, and a host "
           "runs none (docs/spec.md \"Hosts\"); put it on a router node"]),
    ("""\
        traffic:
          - profile: constant
            name: f
            from: r3
            to: [r4]
            rate: 1mbit
            slow_subscribers: [{node: r1}]
     """, ["t.yaml:13 traffic[0].slow_subscribers[0].node: no path of routers from r3 to r1: no links join them"]),
    ("""\
        traffic:
          - profile: query
            name: q
            from: r2
            per_second: 5
            queryables: [{node: r1}]
     """, [f"t.yaml:12 traffic[0].queryables[0].node: no path of routers from r2 to r1: {HOST_WHY.replace('r1-h-r2', 'r2-h-r1')}"]),
])
def test_traffic_no_path_of_routers_carries_is_refused_at_its_line(traffic, expected):
    assert problems(traffic) == expected


def test_an_expectation_on_a_priority_no_flow_sends_at():
    found = problems("""\
        traffic:
          - {profile: constant, name: f, from: r3, to: [r4], rate: 1mbit, priority: data_low}
        expect:
          - "latency.p99 <= 50ms for priority data_low"
          - "latency.p99 <= 50ms for priority realtime"
     """)
    assert found == ["t.yaml:11 expect[1]: no flow has priority real_time, so there is nothing to measure (the "
                     "flows' priorities: data_low)"]


def test_reachable_traffic_and_expectations_are_kept():
    spec = load_spec_text(HEAD + textwrap.dedent("""\
        traffic:
          - {profile: zpub, node: r3, subscribers: [r4]}
        expect:
          - "latency.p99 <= 50ms for priority realtime"
          - "loss <= 1% for priority data"
     """), "t.yaml")
    assert spec.hosts() == ["h"] and len(spec.expect) == 2


def test_validate_exits_2_with_the_line(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(HEAD + "traffic:\n  - {profile: constant, name: f, from: r1, to: [r2], rate: 1mbit}\n")
    result = CliRunner().invoke(cli.app, ["validate", str(path)])
    assert result.exit_code == 2
    assert f"{path}:8 traffic[0].to[0]: no path of routers from r1 to r2: every path crosses a host" in result.output
