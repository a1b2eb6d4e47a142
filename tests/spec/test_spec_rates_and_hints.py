"""One rate grammar wherever a rate is read (topology fields, scenario events, expectations, command-line router
settings, suite minimum effects), and "did you mean" on values and references as on keys, at file:line."""
from __future__ import annotations

import re
import textwrap

import pytest

from testbed.spec import SpecError, load_spec_text
from testbed.spec.overrides import RouterOverrideError, parse_router_settings, typed_router_settings
from testbed.suite.spec import parse_min_effect

#: every field of a topology that holds a rate, marked RATE (one at a time gets the value under test, the
#: others a plain 1mbit)
RATES = textwrap.dedent("""\
    name: t
    duration: 60s
    defaults:
      link: {bw: RATE_defaults}
    nodes:
      r1:
        router:
          limits: {clients: {input_rate: RATE_input}}
      r2: {}
    links:
      - endpoints: [r1, r2]
        bw: RATE_link
        egress:
          r2: {bw: RATE_egress}
    traffic:
      - {profile: zpub, node: r1, subscribers: [r2], rate: RATE_zpub}
      - profile: constant
        name: c
        from: r1
        to: [r2]
        rate: RATE_constant
        slow_subscribers:
          - {node: r2, read_rate: RATE_read}
      - {profile: burst, name: b, from: r2, to: [r1], rate: RATE_burst, on: 1s, off: 1s}
    scenario:
      - {at: 5s, action: set_link, link: r1-r2, bw: RATE_set_link}
    expect:
      - {metric: throughput, op: ">=", value: RATE_expect, flow: c}
    """)

#: (marker, YAML path of the field, how to read the parsed value from the spec)
FIELDS = [
    ("defaults", "defaults.link.bw", lambda s: s.defaults.link.bw),
    ("input", "nodes.r1.router.limits.clients.input_rate", lambda s: s.nodes["r1"].router.limits.clients.input_rate),
    ("link", "links[0].bw", lambda s: s.links[0].bw),
    ("egress", "links[0].egress.r2.bw", lambda s: s.links[0].egress["r2"].bw),
    ("zpub", "traffic[0].rate", lambda s: s.traffic[0].rate),
    ("constant", "traffic[1].rate", lambda s: s.traffic[1].rate),
    ("read", "traffic[1].slow_subscribers[0].read_rate", lambda s: s.traffic[1].slow_subscribers[0].read_rate),
    ("burst", "traffic[2].rate", lambda s: s.traffic[2].rate),
    ("set_link", "scenario[0].bw", lambda s: s.scenario[0].bw),
    ("expect", "expect[0].value", lambda s: s.expect[0].value),
]


def _topology(marker: str, value: str) -> str:
    return re.sub(r"RATE_\w+", "1mbit", RATES.replace(f"RATE_{marker}", value))


def _line_of(marker: str) -> int:
    return next(i for i, line in enumerate(RATES.splitlines(), 1) if f"RATE_{marker}" in line)


@pytest.mark.parametrize("marker, path, read", FIELDS, ids=[f[0] for f in FIELDS])
@pytest.mark.parametrize("text, bps", [("2MB/s", 16_000_000), ("2mbit", 2_000_000), ("2Mbit/s", 2_000_000),
                                       ("250kB/s", 2_000_000)])
def test_every_rate_field_reads_bits_and_bytes(marker, path, read, text, bps):
    spec = load_spec_text(_topology(marker, text), filename="t.yaml")
    assert read(spec) == bps


@pytest.mark.parametrize("marker, path, read", FIELDS, ids=[f[0] for f in FIELDS])
@pytest.mark.parametrize("text, message", [
    ("2Mbps", "'2Mbps' is ambiguous: Mbps means bits per second to most people but bytes per second to tc; "
              "write 2mbit for bits per second, or 2MB/s for bytes per second (= 16mbit)"),
    ("2MB", "'2MB' is a size, not a rate; write 2mbit for bits per second, or 2MB/s for bytes per second "
            "(= 16mbit)"),
    ("2mb/s", "'2mb/s' is ambiguous: a lowercase b can mean bits or bytes (in a size, 2mb is bytes); write 2mbit "
              "for bits per second, or 2MB/s for bytes per second (= 16mbit)"),
])
def test_every_rate_field_refuses_ambiguous_spellings_at_its_line(marker, path, read, text, message):
    with pytest.raises(SpecError) as info:
        load_spec_text(_topology(marker, text), filename="t.yaml")
    problems = [str(p) for p in info.value.problems]
    prefix = f"t.yaml:{_line_of(marker)} {path}: " + ("throughput is a bandwidth: " if marker == "expect" else "")
    suffix = "; or a multiple of a link's rate, e.g. 10x r2-r3" if marker in ("constant", "burst") else ""
    assert problems == [prefix + message + suffix]


def test_command_line_router_settings_use_the_rate_grammar():
    settings = typed_router_settings(parse_router_settings(["limits={clients: {input_rate: 1MB/s}}"],
                                                           "--router-setting"))
    assert settings["limits"].clients.input_rate == 8_000_000
    with pytest.raises(RouterOverrideError) as info:
        parse_router_settings(["limits={clients: {input_rate: 1Mbps}}"], "--router-setting")
    assert str(info.value) == ("--router-setting: limits.clients.input_rate: '1Mbps' is ambiguous: Mbps means bits "
                               "per second to most people but bytes per second to tc; write 1mbit for bits per "
                               "second, or 1MB/s for bytes per second (= 8mbit)")


def test_suite_minimum_effects_use_the_rate_grammar():
    assert parse_min_effect("1MB/s", "throughput").amount == 8_000_000
    assert parse_min_effect("1mbit", "throughput").amount == 1_000_000
    with pytest.raises(ValueError, match=r"'1Mbps' is ambiguous: .* write 1mbit for bits per second, or 1MB/s"):
        parse_min_effect("1Mbps", "throughput")


# --- "did you mean" on values and references ----------------------------------------------------------------

HINTS = textwrap.dedent("""\
    name: t
    nodes:
      r1: {}
      r2: {}
      host: {kind: host}
    links:
      - endpoints: [r1, r2]
      - endpoints: [r2, host]
    """)
# Lines of HINTS: 1 name, 2 nodes, 3-5 r1, r2, host, 6 links, 7 link 0, 8 link 1


@pytest.mark.parametrize("extra, problem", [
    ("traffic:\n  - {profile: constant, name: c, from: r1, to: [r2], rate: 1mbit, priority: realtme}\n",
     "t.yaml:10 traffic[0].priority: 'realtme' is not a priority (did you mean 'realtime'? allowed: control, "
     "real_time, interactive_high, interactive_low, data_high, data, data_low, background, or 0..7; realtime is "
     "accepted for real_time)"),
    ("traffic:\n  - {profile: constant, name: c, from: r1, to: [r2], rate: 1mbit, congestion_control: dorp}\n",
     "t.yaml:10 traffic[0].congestion_control: 'dorp' is not allowed (did you mean 'drop'? allowed: block, drop)"),
    ("traffic:\n  - {profile: cbr, name: c, from: r1, to: [r2], rate: 1mbit}\n",
     "t.yaml:10 traffic[0].profile: 'cbr' is not allowed (did you mean 'constant'? allowed: zpub, constant, burst, "
     "query)"),
    ("traffic:\n  - {profile: zpib, node: r1, subscribers: [r2]}\n",
     "t.yaml:10 traffic[0].profile: 'zpib' is not allowed (did you mean 'zpub'? allowed: zpub, constant, burst, "
     "query)"),
    ("scenario:\n  - {at: 5s, action: set_bw, link: r1-r2, bw: 1mbit}\n",
     "t.yaml:10 scenario[0].action: 'set_bw' is not allowed (did you mean 'set_link'? allowed: set_link, link_down, "
     "link_up, start_flow, stop_flow, kill_router, restart_router)"),
    ("scenario:\n  - {at: 5s, action: link_dwn, link: r1-r2}\n",
     "t.yaml:10 scenario[0].action: 'link_dwn' is not allowed (did you mean 'link_down'? allowed: set_link, "
     "link_down, link_up, start_flow, stop_flow, kill_router, restart_router)"),
    ("defaults:\n  router: {scheduler: wr}\n",
     "t.yaml:10 defaults.router.scheduler: 'wr' is not allowed (did you mean 'wrr'? allowed: strict, wrr, "
     "contention_polling)"),
    ("expect:\n  - {metric: latncy.p99, op: '<=', value: 5ms}\n",
     "t.yaml:10 expect[0].metric: 'latncy.p99' is not a metric (did you mean 'latency.p99'? allowed: latency.p50,"),
    ("expect:\n  - {metric: loss, op: '=>', value: 1%}\n",
     "t.yaml:10 expect[0].op: '=>' is not allowed (did you mean '>='? allowed: <, <=, >, >=, ==)"),
    ("traffic:\n  - {profile: constant, name: c, from: r1, to: [hots], rate: 1mbit}\n",
     "t.yaml:10 traffic[0].to[0]: unknown node 'hots' (did you mean 'host'? known: host, r1, r2)"),
    ("scenario:\n  - {at: 5s, action: kill_router, node: rr2}\n",
     "t.yaml:10 scenario[0].node: unknown node 'rr2' (did you mean 'r2'? known: host, r1, r2)"),
    ("scenario:\n  - {at: 5s, action: link_down, link: r1-r5}\n",
     "t.yaml:10 scenario[0].link: no link connects r1 and r5 (did you mean 'r1-r2'? links: r1-r2, r2-host)"),
    ("capture: {links: [r2-hots]}\n",
     "t.yaml:9 capture.links[0]: no link connects r2 and hots (did you mean 'r2-host'? links: r1-r2, r2-host)"),
    ("traffic:\n  - {profile: constant, name: bulk, from: r1, to: [r2], rate: 1mbit}\n"
     "scenario:\n  - {at: 5s, action: stop_flow, flow: bulck}\n",
     "t.yaml:12 scenario[0].flow: unknown flow 'bulck' (did you mean 'bulk'? known: bulk)"),
])
def test_values_and_references_get_did_you_mean(extra, problem):
    with pytest.raises(SpecError) as info:
        load_spec_text(HINTS + extra, filename="t.yaml")
    problems = [str(p) for p in info.value.problems]
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_no_hint_when_nothing_is_close():
    with pytest.raises(SpecError) as info:
        load_spec_text(HINTS + "traffic:\n  - {profile: poisson, name: c}\n", filename="t.yaml")
    assert str(info.value) == "t.yaml:10 traffic[0].profile: 'poisson' is not allowed (allowed: zpub, constant, " \
                              "burst, query)"


@pytest.mark.parametrize("queue, problem", [
    ("64KiB", "t.yaml:9 links[1].queue: '64KiB': a queue is counted in packets, not bytes; write a whole number of "
              "packets, e.g. queue: 100"),
    ("100kb", "t.yaml:9 links[1].queue: '100kb': a queue is counted in packets, not bytes; write a whole number of "
              "packets, e.g. queue: 100"),
    ("0", "t.yaml:9 links[1].queue: 0 is not a queue length: a whole number of packets, 1..2147483647 "
          "(e.g. queue: 100)"),
    ("2.5", "t.yaml:9 links[1].queue: 2.5 is not a queue length: a whole number of packets, 1..2147483647 "
            "(e.g. queue: 100)"),
    ("lots", "t.yaml:9 links[1].queue: 'lots' is not a queue length: a whole number of packets, 1..2147483647 "
             "(e.g. queue: 100)"),
])
def test_queue_errors_say_packets(queue, problem):
    text = HINTS.replace("[r2, host]", f"[r2, host]\n    queue: {queue}")
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="t.yaml")
    assert str(info.value) == problem


def test_set_link_queue_error_says_packets():
    text = HINTS + "scenario:\n  - {at: 5s, action: set_link, link: r1-r2, queue: 1MB}\n"
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="t.yaml")
    assert str(info.value) == ("t.yaml:10 scenario[0].queue: '1MB': a queue is counted in packets, not bytes; write a "
                               "whole number of packets, e.g. queue: 100")
