"""Malformed topology files: each must give exactly the expected file:line, YAML path and message."""
from __future__ import annotations

import textwrap

import pytest

from testbed.spec import SpecError, load_spec_text

BASE = """\
name: t
nodes:
  r1: {}
  r2: {}
  r3: {}
links:
  - endpoints: [r1, r2]
  - endpoints: [r2, r3]
"""
# Lines of BASE:      1 name, 2 nodes, 3-5 r1..r3, 6 links, 7 link 0, 8 link 1


def with_base(extra: str) -> str:
    return BASE + textwrap.dedent(extra)


QUERY = with_base("""\
    traffic:
      - profile: query
        name: q
        from: r1
        per_second: 20
        queryables:
          - {node: r3}
    """)
# Lines of QUERY: 9 traffic, 10 profile, 11 name, 12 from, 13 per_second, 14 queryables, 15 its first item


def query_with(after: str, line: str) -> str:
    """QUERY with ``line`` (a key of the flow, or a queryable item) inserted after the line ``after``."""
    old = {"from": "    from: r1\n", "per_second": "    per_second: 20\n", "item": "      - {node: r3}\n"}[after]
    return QUERY.replace(old, old + line + "\n")


QUERY_CASES = [
    ("query-key-empty-chunk", query_with("from", "    key: svc//x"), 13, "traffic[0].key",
     "key expression 'svc//x' has an empty chunk"),
    ("query-key-bad-wildcard", query_with("from", "    key: svc/a*b"), 13, "traffic[0].key",
     "chunk 'a*b' may be '*', '**' or a literal"),
    ("query-rate-zero", QUERY.replace("per_second: 20", "per_second: 0"), 13, "traffic[0].per_second",
     "0 is not a number of queries per second in (0, 1000]"),
    ("query-rate-too-high", QUERY.replace("per_second: 20", "per_second: 1001"), 13, "traffic[0].per_second",
     "1001 is not a number of queries per second in (0, 1000]"),
    ("query-rate-missing", QUERY.replace("    per_second: 20\n", ""), 10, "traffic[0].per_second",
     "missing required key 'per_second'"),
    ("query-timeout-too-long", query_with("per_second", "    timeout: 61s"), 14, "traffic[0].timeout",
     "61s is longer than 60s, the longest query timeout"),
    ("query-timeout-zero", query_with("per_second", "    timeout: 0s"), 14, "traffic[0].timeout",
     "must be longer than zero"),
    ("query-consolidation", query_with("per_second", "    consolidation: any"), 14, "traffic[0].consolidation",
     "'any' is not allowed (allowed: all, first, latest)"),
    ("query-priority", query_with("per_second", "    priority: urgent"), 14, "traffic[0].priority",
     "'urgent' is not a priority"),
    ("query-size-below-header", query_with("per_second", "    size: 23"), 14, "traffic[0].size",
     "23 bytes is smaller than the 24-byte traffic header every query carries"),
    ("query-reply-size-below-header", QUERY.replace("{node: r3}", "{node: r3, reply_size: 10}"), 15,
     "traffic[0].queryables[0].reply_size", "10 bytes is smaller than the 24-byte traffic header every reply"),
    ("query-service-time-negative", QUERY.replace("{node: r3}", "{node: r3, service_time: -1ms}"), 15,
     "traffic[0].queryables[0].service_time", "a duration cannot be negative"),
    ("query-size-above-the-limit", query_with("per_second", "    size: 65537"), 14, "traffic[0].size",
     "65537 bytes is more than a query may carry (65536 bytes: queries and replies travel on the routers' control"),
    ("query-reply-size-above-the-limit", QUERY.replace("{node: r3}", "{node: r3, reply_size: 1MiB}"), 15,
     "traffic[0].queryables[0].reply_size", "1048576 bytes is more than a reply may carry"),
    ("query-service-time-past-the-attempt-timeout", QUERY.replace("{node: r3}", "{node: r3, service_time: 1s}"), 15,
     "traffic[0].queryables[0].service_time",
     "1s is not shorter than the querier's router's attempt timeout (1s: the least of the flow's timeout and "
     "query_attempt_timeout on its node): every attempt would time out"),
    ("query-no-queryables", QUERY.replace("    queryables:\n      - {node: r3}\n", "    queryables: []\n"), 14,
     "traffic[0].queryables", "must not be empty"),
    ("query-queryable-unknown-node", QUERY.replace("{node: r3}", "{node: r9}"), 15,
     "traffic[0].queryables[0].node", "unknown node 'r9' (known: r1, r2, r3)"),
    ("query-queryable-on-a-host", QUERY.replace("  r3: {}", "  r3: {kind: host}"), 15,
     "traffic[0].queryables[0].node", "r3 is a host; a queryable is a client of a router"),
    ("query-queryable-twice", query_with("item", "      - {node: r3, service_time: 1ms}"), 16,
     "traffic[0].queryables[1].node", "r3 is already listed at queryables[0]"),
    ("query-unknown-from", QUERY.replace("from: r1", "from: r7"), 12, "traffic[0].from", "unknown node 'r7'"),
    ("query-unknown-key", query_with("per_second", "    rate: 1mbit"), 14, "traffic[0].rate",
     "unknown key 'rate' (allowed: profile, name, from, key, per_second, timeout"),
    ("query-stop-after-end", query_with("per_second", "    stop: 2m"), 14, "traffic[0].stop",
     "120s is after the end of the run (60s)"),
]

# (id, yaml text, line, path, fragment of the message)
CASES = QUERY_CASES + [
    ("yaml-syntax", "name: t\nnodes: [r1\nlinks: []\n", 3, "", "YAML syntax error"),
    ("yaml-tab", "name: t\nnodes:\n\tr1: {}\n", 3, "", "YAML syntax error: found character '\\t'"),
    ("empty-file", "", 1, "", "the file is empty"),
    ("only-comments", "# nothing here\n", 1, "", "the file is empty"),
    ("top-level-list", "- r1\n- r2\n", 1, "", "must be a mapping of keys (name, nodes, links, ...), not a list"),
    ("two-documents", BASE + "---\nname: u\n", 9, "", "YAML syntax error"),
    ("unknown-top-key", BASE + "nodez: {}\n", 9, "nodez", "unknown key 'nodez' (did you mean 'nodes'?"),
    ("unknown-link-key", BASE.replace("[r2, r3]", "[r2, r3]\n    colour: red"), 9, "links[1].colour",
     "unknown key 'colour' (allowed: bw, delay"),
    ("unknown-key-synonym", BASE.replace("[r2, r3]", "[r2, r3]\n    bandwidth: 10mbit"), 9, "links[1].bandwidth",
     "unknown key 'bandwidth' (did you mean 'bw'? allowed: bw, delay, jitter, distribution, correlation, loss, "
     "duplicate, corrupt, reorder, queue, qdisc, weight, endpoints"),
    ("unknown-node-router-key", BASE.replace("  r1: {}", "  r1: {router: {leese: 3s}}"), 3, "nodes.r1.router.leese",
     "did you mean 'lease'?"),
    ("unknown-flow-key", with_base("traffic:\n  - {profile: constant, name: a, from: r1, to: [r3], rate: 1mbit,"
                                   " prio: 1}\n"), 10, "traffic[0].prio", "unknown key 'prio' ("),
    ("unknown-event-key", with_base("scenario:\n  - {at: 5s, action: link_down, link: 0, when: now}\n"), 10,
     "scenario[0].when", "unknown key 'when' (allowed: at, action, link)"),
    ("unknown-router-key", with_base("defaults:\n  router: {schedular: wrr}\n"), 10, "defaults.router.schedular",
     "did you mean 'scheduler'?"),
    ("duplicate-node", BASE.replace("  r3: {}\n", "  r3: {}\n  r2: {kind: host}\n"), 6, "nodes.r2",
     "duplicate key 'r2' (first defined at line 4)"),
    ("duplicate-link-key", BASE.replace("[r2, r3]", "[r2, r3]\n    bw: 1mbit\n    bw: 2mbit"), 10, "links[1].bw",
     "duplicate key 'bw' (first defined at line 9)"),
    ("link-unknown-node", BASE.replace("[r2, r3]", "[r2, r9]"), 8, "links[1].endpoints[1]",
     "unknown node 'r9' (known: r1, r2, r3)"),
    ("link-unknown-node-typo", BASE.replace("[r2, r3]", "[r2, rr3]"), 8, "links[1].endpoints[1]",
     "unknown node 'rr3' (did you mean 'r3'? known: r1, r2, r3)"),
    ("duplicate-link", BASE.replace("[r2, r3]", "[r1, r2]"), 8, "links[1].endpoints", "duplicate of links[0]"),
    ("duplicate-link-reversed", BASE.replace("[r2, r3]", "[r2, r1]"), 8, "links[1].endpoints",
     "parallel links between the same nodes need distinct interface names"),
    ("self-loop", BASE.replace("[r2, r3]", "[r3, r3]"), 8, "links[1].endpoints", "a link cannot connect r3 to itself"),
    ("zero-bandwidth", BASE.replace("[r2, r3]", "[r2, r3]\n    bw: 0mbit"), 9, "links[1].bw",
     "'0mbit': a bandwidth must be greater than zero"),
    ("negative-bandwidth", BASE.replace("[r2, r3]", "[r2, r3]\n    bw: -5mbit"), 9, "links[1].bw",
     "a bandwidth must be greater than zero"),
    ("bad-bandwidth-unit", BASE.replace("[r2, r3]", "[r2, r3]\n    bw: 10 mbps/s"), 9, "links[1].bw",
     "'10 mbps/s' is not a bandwidth (examples: 10mbit, 500kbit, 1gbit)"),
    ("bandwidth-without-unit", BASE.replace("[r2, r3]", "[r2, r3]\n    bw: 10"), 9, "links[1].bw",
     "10 has no unit; write e.g. 10mbit"),
    ("loss-over-100", BASE.replace("[r2, r3]", "[r2, r3]\n    loss: 150%"), 9, "links[1].loss",
     "a percentage cannot be over 100%"),
    ("loss-100", BASE.replace("[r2, r3]", "[r2, r3]\n    loss: 100%"), 9, "links[1].loss",
     "loss of 100% lets nothing through"),
    ("loss-bare-number", BASE.replace("[r2, r3]", "[r2, r3]\n    loss: 0.5"), 9, "links[1].loss",
     "has no % sign; write 0.5%"),
    ("delay-negative", BASE.replace("[r2, r3]", "[r2, r3]\n    delay: -5ms"), 9, "links[1].delay",
     "a duration cannot be negative"),
    ("delay-bad-unit", BASE.replace("[r2, r3]", "[r2, r3]\n    delay: 5 fortnights"), 9, "links[1].delay",
     "unknown unit 'fortnights'"),
    ("interface-named-twice", BASE.replace("[r1, r2]", '["r1:eth1", r2]').replace("[r2, r3]", '["r3", "r1:eth1"]'),
     8, "links[1].endpoints[1]", "interface r1:eth1 is already used by links[0]"),
    ("bad-node-name", BASE.replace("  r3: {}", "  R3: {}"), 5, "nodes.R3",
     "'R3' is not a valid node name: 1-10 lowercase letters or digits"),
    ("node-name-too-long", BASE.replace("  r3: {}", "  router12345: {}"), 5, "nodes.router12345",
     "it becomes part of namespace and interface names"),
    ("bad-ifname", BASE.replace("[r2, r3]", '["r2:Eth-1", r3]'), 8, "links[1].endpoints[0]",
     "'Eth-1' in 'r2:Eth-1' is not a valid interface name"),
    ("three-endpoints", BASE.replace("[r2, r3]", "[r1, r2, r3]"), 8, "links[1].endpoints",
     "must be a list of exactly two items"),
    ("jitter-without-delay", BASE.replace("[r2, r3]", "[r2, r3]\n    jitter: 2ms"), 9, "links[1].jitter",
     "jitter needs a delay"),
    ("egress-not-an-end", BASE.replace("[r2, r3]", "[r2, r3]\n    egress:\n      r1: {bw: 1mbit}"), 10,
     "links[1].egress.r1", "'r1' is not an end of this link (egress keys must be r2 or r3)"),
    ("egress-weight", BASE.replace("[r2, r3]", "[r2, r3]\n    egress:\n      r2: {weight: 5}"), 10,
     "links[1].egress.r2.weight", "unknown key 'weight' (allowed: bw, delay, jitter, distribution, correlation, loss, "
     "duplicate, corrupt, reorder, queue, qdisc)"),
    ("weight-zero", BASE.replace("[r2, r3]", "[r2, r3]\n    weight: 0"), 9, "links[1].weight",
     "0 is out of range (a routing weight: 1..65534)"),
    ("weight-65535", BASE.replace("[r2, r3]", "[r2, r3]\n    weight: 65535"), 9, "links[1].weight",
     "out of range (a routing weight: 1..65534)"),
    ("queue-negative", BASE.replace("[r2, r3]", "[r2, r3]\n    queue: -1"), 9, "links[1].queue",
     "-1 is not a queue length: a whole number of packets, 1..2147483647 (e.g. queue: 100)"),
    ("queue-not-int", BASE.replace("[r2, r3]", "[r2, r3]\n    queue: lots"), 9, "links[1].queue",
     "'lots' is not a queue length: a whole number of packets"),
    ("missing-name", BASE.replace("name: t\n", "description: x\n"), 1, "name", "missing required key 'name'"),
    ("missing-nodes", "name: t\nlinks: []\n", 1, "nodes", "missing required key 'nodes'"),
    ("no-nodes", "name: t\nnodes: {}\n", 2, "nodes", "a topology needs at least one node"),
    ("bad-topology-name", BASE.replace("name: t", "name: My Lab"), 1, "name",
     "'My Lab' is not a valid topology name"),
    ("bad-kind", BASE.replace("  r3: {}", "  r3: {kind: switch}"), 5, "nodes.r3.kind",
     "'switch' is not allowed (allowed: router, host)"),
    ("node-is-a-list", BASE.replace("  r3: {}", "  r3: [a]"), 5, "nodes.r3",
     "must be a mapping (key: value), not a list"),
    ("host-with-router", BASE.replace("  r3: {}", "  r3:\n    kind: host\n    router: {lease: 3s}"), 7,
     "nodes.r3.router", "a host runs no router"),
    ("keepalive-not-below-lease", with_base("defaults:\n  router: {keepalive: 5s}\n"), 10,
     "defaults.router.keepalive", "keepalive (5s) must be shorter than lease (3s)"),
    ("lease-not-above-keepalive", BASE.replace("  r2: {}", "  r2: {router: {lease: 500ms}}"), 4,
     "nodes.r2.router.lease", "keepalive (1s) must be shorter than lease (500ms)"),
    ("scheduler-unknown", BASE.replace("  r1: {}", "  r1: {router: {scheduler: fifo}}"), 3,
     "nodes.r1.router.scheduler", "'fifo' is not allowed (allowed: strict, wrr, contention_polling)"),
    ("bool-as-string", with_base("defaults:\n  router: {congestion_aware: maybe}\n"), 10,
     "defaults.router.congestion_aware", "'maybe' is not true or false"),
    ("yaml-1.1-boolean", with_base("defaults:\n  router: {congestion_aware: yes}\n"), 10,
     "defaults.router.congestion_aware", "'yes' is not true or false"),
    ("wrr-bad-priority", with_base("defaults:\n  router: {scheduler: wrr, wrr_weights: {urgent: 3}}\n"), 10,
     "defaults.router.wrr_weights.urgent", "'urgent' is not a priority (allowed: control, real_time"),
    ("duration-without-unit", BASE.replace("name: t", "name: t\nduration: 60"), 2, "duration",
     "60 has no unit; write e.g. 60s or 60ms"),
    ("addresses-different-subnets", BASE.replace("[r2, r3]", "[r2, r3]\n    addresses: [10.0.0.1/30, 10.0.1.2/30]"),
     9, "links[1].addresses", "10.0.0.1/30 and 10.0.1.2/30 are not in the same subnet"),
    ("addresses-overlap",
     BASE.replace("[r1, r2]", "[r1, r2]\n    addresses: [10.0.0.1/24, 10.0.0.2/24]")
         .replace("[r2, r3]", "[r2, r3]\n    addresses: [10.0.0.5/30, 10.0.0.6/30]"),
     10, "links[1].addresses", "subnet 10.0.0.4/30 overlaps links[0]"),
    ("address-no-prefix", BASE.replace("[r2, r3]", "[r2, r3]\n    addresses: [10.0.0.1, 10.0.0.2/30]"), 9,
     "links[1].addresses[0]", "'10.0.0.1' is not an address with prefix length"),
    ("address-pool-too-small", with_base("defaults:\n  address_pool: 10.0.0.0/30\n"), 10, "defaults.address_pool",
     "10.0.0.0/30 has too few free /30 subnets for the 2 links"),
    ("traffic-unknown-profile", with_base("traffic:\n  - {profile: poisson, name: x}\n"), 10, "traffic[0].profile",
     "'poisson' is not allowed (allowed: zpub, constant, burst, query)"),
    ("traffic-missing-profile", with_base("traffic:\n  - {name: x}\n"), 10, "traffic[0].profile",
     "missing required key 'profile' (one of: zpub, constant, burst, query)"),
    ("traffic-unknown-subscriber", with_base("traffic:\n  - profile: zpub\n    node: r1\n    subscribers: [r3, r7]\n"),
     12, "traffic[0].subscribers[1]", "unknown node 'r7'"),
    ("traffic-duplicate-name", with_base(
        "traffic:\n  - {profile: constant, name: a, from: r1, to: [r3], rate: 1mbit}\n"
        "  - {profile: constant, name: a, from: r3, to: [r1], rate: 1mbit}\n"),
     11, "traffic[1].name", "flow name 'a' is already used by traffic[0]"),
    ("traffic-to-itself", with_base("traffic:\n  - {profile: constant, name: a, from: r1, to: [r1], rate: 1mbit}\n"),
     10, "traffic[0].to[0]", "r1 is the publisher itself"),
    ("traffic-stop-before-start", with_base(
        "traffic:\n  - {profile: constant, name: a, from: r1, to: [r3], rate: 1mbit, start: 10s, stop: 5s}\n"),
     10, "traffic[0].stop", "5s is not after start (10s)"),
    ("burst-missing-on", with_base("traffic:\n  - {profile: burst, name: a, from: r1, to: [r3], rate: 1mbit, off: 1s}\n"),
     10, "traffic[0].on", "missing required key 'on'"),
    ("scenario-unknown-action", with_base("scenario:\n  - {at: 5s, action: reboot, node: r1}\n"), 10,
     "scenario[0].action", "'reboot' is not allowed (allowed: set_link, link_down"),
    ("scenario-no-such-link", with_base("scenario:\n  - {at: 5s, action: link_down, link: r1-r3}\n"), 10,
     "scenario[0].link", "no link connects r1 and r3"),
    ("scenario-link-index", with_base("scenario:\n  - {at: 5s, action: link_up, link: 7}\n"), 10,
     "scenario[0].link", "there is no link 7 (the topology has links 0..1)"),
    ("scenario-bad-link-ref", with_base("scenario:\n  - {at: 5s, action: link_up, link: r1/r2}\n"), 10,
     "scenario[0].link", "'r1/r2' is not a link"),
    ("scenario-unknown-flow", with_base("scenario:\n  - {at: 5s, action: stop_flow, flow: bulk}\n"), 10,
     "scenario[0].flow", "unknown flow 'bulk'"),
    ("scenario-kill-host", BASE.replace("  r3: {}", "  r3: {kind: host}") +
     "scenario:\n  - {at: 5s, action: kill_router, node: r3}\n", 10, "scenario[0].node", "r3 is a host"),
    ("scenario-after-end", with_base("scenario:\n  - {at: 2m, action: link_down, link: 0}\n"), 10,
     "scenario[0].at", "120s is after the end of the run (duration 60s)"),
    ("set-link-nothing", with_base("scenario:\n  - {at: 5s, action: set_link, link: r1-r2}\n"), 10,
     "scenario[0]", "set_link changes nothing"),
    ("capture-bad-links", with_base("capture: {links: some}\n"), 9, "capture.links",
     "'some' is not allowed (allowed: all, none, or a list of links"),
    ("capture-snaplen-small", with_base("capture: {snaplen: 10}\n"), 9, "capture.snaplen",
     "10: Input should be greater than or equal to 64"),
    ("expect-unknown-metric", with_base('expect:\n  - {metric: latency.p42, op: "<=", value: 5ms}\n'), 10,
     "expect[0].metric", "'latency.p42' is not a metric (did you mean 'latency.p99'? allowed: latency.p50"),
    ("expect-metric-not-a-string", with_base('expect:\n  - {metric: [a], op: "<=", value: 5ms}\n'), 10,
     "expect[0].metric", "['a'] is not a metric"),
    ("control-character", "name: t\x1f\n", 1, "", "YAML syntax error: character 0x1f is not allowed"),
    ("expect-bad-compact", with_base('expect:\n  - "latency.p99 is small"\n'), 10, "expect[0]",
     "is not an expectation; write '<metric> <op> <value>"),
    ("expect-wrong-kind", with_base('expect:\n  - {metric: loss, op: "<=", value: 5ms}\n'), 10, "expect[0].value",
     "loss is a percent: '5ms' is not a percentage"),
    ("expect-bad-op", with_base('expect:\n  - {metric: loss, op: "=<", value: 1%}\n'), 10, "expect[0].op",
     "'=<' is not allowed (did you mean '<='? allowed: <, <=, >, >=, ==)"),
]


@pytest.mark.parametrize("text, line, path, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_input_is_reported_precisely(text, line, path, fragment):
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="bad.yaml")
    problems = info.value.problems
    assert len(problems) == 1, "\n".join(map(str, problems))
    problem = problems[0]
    assert (problem.file, problem.line, problem.path) == ("bad.yaml", line, path), str(problem)
    assert fragment in problem.message, str(problem)
    where = f"bad.yaml:{line} {path}: " if path else f"bad.yaml:{line}: "
    assert str(info.value) == where + problem.message


def test_there_are_at_least_25_malformed_cases():
    assert len(CASES) >= 25
    assert len({c[0] for c in CASES}) == len(CASES)


def test_the_issue_example_message_verbatim():
    text = BASE.replace("[r2, r3]", "[r2, r3]\n    bw: 10 mbps/s")
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="diamond.yaml")
    assert str(info.value).startswith(
        "diamond.yaml:9 links[1].bw: '10 mbps/s' is not a bandwidth (examples: 10mbit, 500kbit, 1gbit)"
    )


def test_all_field_problems_are_reported_together_in_line_order():
    text = textwrap.dedent("""\
        name: t
        nodes:
          r1: {kind: hub}
          r2: {}
        links:
          - endpoints: [r1, r2]
            bw: fast
            loss: 200%
            colour: red
        """)
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="x.yaml")
    got = [(p.line, p.path) for p in info.value.problems]
    assert got == [(3, "nodes.r1.kind"), (7, "links[0].bw"), (8, "links[0].loss"), (9, "links[0].colour")]
    assert len(str(info.value).splitlines()) == 4


def test_all_cross_reference_problems_are_reported_together():
    text = BASE.replace("[r2, r3]", "[r2, r9]") + textwrap.dedent("""\
        scenario:
          - {at: 5s, action: stop_flow, flow: nope}
          - {at: 6s, action: link_down, link: 9}
        """)
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="x.yaml")
    assert [(p.line, p.path) for p in info.value.problems] == [
        (8, "links[1].endpoints[1]"), (10, "scenario[0].flow"), (11, "scenario[1].link"),
    ]


def test_every_duplicate_key_is_reported():
    text = "name: t\nnodes:\n  r1: {}\n  r1: {}\n  r2: {}\n  r2: {}\n"
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="x.yaml")
    assert [(p.line, p.path) for p in info.value.problems] == [(4, "nodes.r1"), (6, "nodes.r2")]


def test_jitter_from_defaults_is_reported_once_at_defaults():
    text = with_base("defaults:\n  link: {jitter: 1ms}\n")
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="x.yaml")
    assert [(p.line, p.path) for p in info.value.problems] == [(10, "defaults.link.jitter")]


def test_ambiguous_link_reference_asks_for_interfaces():
    text = BASE.replace("[r2, r3]", '["r1:eth2", "r2:eth2"]') + "scenario:\n  - {at: 1s, action: link_down, link: r1-r2}\n"
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="x.yaml")
    (problem,) = info.value.problems
    assert problem.path == "scenario[0].link"
    assert "r1-r2 is ambiguous: links 0, 1" in problem.message
