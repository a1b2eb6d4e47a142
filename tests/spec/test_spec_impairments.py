"""The impairment keys of a link direction (distribution, correlation, loss models, duplicate, corrupt, reorder,
qdisc): parsed where shaping is set (defaults, link, egress, set_link), every bad value refused at its line, and
what they resolve to (Shaping's fields, describe(), features())."""
from __future__ import annotations

import json
import textwrap
from dataclasses import asdict

import pytest

from testbed.spec import SpecError, load_spec_text
from testbed.spec.resolve import (
    FEATURES, Cake, FqCodel, GilbertElliott, Pie, QUEUE_DISCIPLINES, Red, Reorder, Shaping, event_shaping,
)
from testbed.spec.topology import Spec

BASE = """\
name: t
nodes: {a: {}, b: {}}
links:
  - endpoints: [a, b]
"""
# Lines of BASE: 1 name, 2 nodes, 3 links, 4 the link; a key added under the link is on line 5


def link_with(keys: str) -> str:
    return BASE + textwrap.indent(textwrap.dedent(keys), "    ")


def shape(text: str, node: str = "a") -> Shaping:
    spec = load_spec_text(text)
    return spec.resolved_links()[0].end(node).egress


#: (YAML of the keys, beside delay and jitter, the Shaping fields they give)
KEYS = [
    ("distribution: normal", {"jitter_distribution": "normal"}),
    ("correlation: 25%", {"delay_correlation_pct": 25.0}),
    ("loss: 1%", {"loss_pct": 1.0}),
    ("loss: {model: gilbert-elliott, p: 1%, r: 25%}", {"loss_gemodel": GilbertElliott(1.0, 25.0, 100.0, 0.0)}),
    ("loss: {model: gilbert-elliott, p: 1%, r: 25%, loss_bad: 90%, loss_good: 0.5%}",
     {"loss_gemodel": GilbertElliott(1.0, 25.0, 90.0, 0.5)}),
    ("loss: {model: random, rate: 1%, correlation: 25%}", {"loss_pct": 1.0, "loss_correlation_pct": 25.0}),
    ("loss: {model: random, rate: 1%}", {"loss_pct": 1.0}),
    ("duplicate: 0.5%", {"duplicate_pct": 0.5}),
    ("corrupt: 0.1%", {"corrupt_pct": 0.1}),
    ("reorder: 25%", {"reorder": Reorder(25.0)}),
    ("reorder: {rate: 25%, gap: 5, correlation: 50%}", {"reorder": Reorder(25.0, 5, 50.0)}),
    ("qdisc: pfifo", {}),
    ("qdisc: fq_codel", {"qdisc": FqCodel()}),
    ("qdisc: {kind: fq_codel, target: 5ms, interval: 100ms, limit: 1000, flows: 1024, ecn: true}",
     {"qdisc": FqCodel(5_000_000, 100_000_000, 1000, 1024, True)}),
    ("qdisc: {kind: cake, rtt: 50ms}", {"qdisc": Cake(50_000_000)}),
    ("qdisc: {kind: red, min: 30kb, max: 90kb, probability: 2%, burst: 55, limit: 1mb, ecn: true}",
     {"qdisc": Red(30_000, 90_000, 2.0, 55, 1_000_000, True)}),
    ("qdisc: {kind: pie, target: 15ms, limit: 500, ecn: false}", {"qdisc": Pie(15_000_000, 500, False)}),
]
DELAYED = {"delay_ns": 10_000_000, "jitter_ns": 2_000_000}


@pytest.mark.parametrize("keys,fields", KEYS, ids=[k for k, _ in KEYS])
def test_each_key_in_defaults_link_and_egress(keys, fields):
    expected = Shaping(**DELAYED, **fields)
    in_link = shape(link_with(f"delay: 10ms\njitter: 2ms\n{keys}\n"))
    in_defaults = shape(f"defaults:\n  link: {{delay: 10ms, jitter: 2ms, {keys}}}\n" + BASE)
    in_egress = link_with(f"delay: 10ms\njitter: 2ms\negress:\n  a: {{{keys}}}\n")
    assert in_link == in_defaults == shape(in_egress) == expected
    assert shape(in_egress, "b") == Shaping(**DELAYED)  # egress a is a's direction only


@pytest.mark.parametrize("keys,fields", KEYS, ids=[k for k, _ in KEYS])
def test_each_key_in_a_set_link_event(keys, fields):
    text = link_with("delay: 10ms\njitter: 2ms\n") + f"scenario:\n  - {{at: 1s, action: set_link, link: a-b, {keys}}}\n"
    spec = load_spec_text(text)
    changes = event_shaping(spec.scenario[0])
    assert {k: v for k, v in asdict(changes).items() if v is not None} == \
        {k: v for k, v in asdict(Shaping(**fields)).items() if v is not None}


def test_a_spec_with_every_key_survives_its_json():
    """The manifest stores the spec as JSON (units as text): read back, it is the same spec."""
    text = link_with("""\
        delay: 10ms
        jitter: 2ms
        distribution: pareto
        correlation: 10%
        loss: {model: gilbert-elliott, p: 1%, r: 25%}
        duplicate: 1%
        corrupt: 0.1%
        reorder: {rate: 25%, gap: 5}
        queue: 100
        qdisc: {kind: red, min: 30kb, max: 90kb, probability: 2%}
        egress:
          b: {loss: {model: random, rate: 1%, correlation: 5%}, qdisc: {kind: fq_codel, target: 5ms}}
        """) + "scenario:\n  - {at: 1s, action: set_link, link: a-b, qdisc: pie, reorder: 5%}\n"
    spec = load_spec_text(text)
    again = Spec.model_validate(json.loads(spec.model_dump_json(by_alias=True)))
    assert again.resolved_links() == spec.resolved_links() and again.scenario == spec.scenario


def test_shaping_survives_asdict():
    """A lab's state and `testbed link` keep a direction's shaping as ``asdict``: ``from_dict`` reads it back."""
    for qdisc in (FqCodel(5_000_000, ecn=False), Cake(1), Red(1, 2, 3.0), Pie(limit_packets=7), None):
        full = Shaping(1, 2, 3, None, 5, "normal", 10.0, None, GilbertElliott(1.0, 2.0), 0.5, 0.1,
                       Reorder(25.0, 5), qdisc)
        assert Shaping.from_dict(json.loads(json.dumps(asdict(full)))) == full
    assert set(QUEUE_DISCIPLINES) == {"fq_codel", "cake", "red", "pie"}


# --- bad values, each at its line --------------------------------------------------------------------------------

#: (id, keys under the link (from line 5), the line, the path, a fragment of the message)
BAD = [
    ("distribution-unknown", "delay: 5ms\njitter: 1ms\ndistribution: gaussian\n", 7, "links[0].distribution",
     "'gaussian' is not allowed (allowed: normal, pareto, paretonormal, uniform)"),
    ("correlation-over-100", "delay: 5ms\njitter: 1ms\ncorrelation: 150%\n", 7, "links[0].correlation",
     "cannot be over 100%"),
    ("correlation-bare", "delay: 5ms\njitter: 1ms\ncorrelation: 25\n", 7, "links[0].correlation", "no % sign"),
    ("loss-100", "loss: 100%\n", 5, "links[0].loss", "lets nothing through"),
    ("loss-model-unknown", "loss:\n  model: gilbert\n  p: 1%\n", 5, "links[0].loss",
     "did you mean 'gilbert-elliott'? allowed: gilbert-elliott, random"),
    ("loss-model-missing", "loss: {p: 1%, r: 5%}\n", 5, "links[0].loss", "has no 'model'"),
    ("ge-p-zero", "loss:\n  model: gilbert-elliott\n  p: 0%\n  r: 25%\n", 7, "links[0].loss.p",
     "must be above 0% and at most 100%"),
    ("ge-r-over-100", "loss:\n  model: gilbert-elliott\n  p: 1%\n  r: 101%\n", 8, "links[0].loss.r",
     "cannot be over 100%"),
    ("ge-r-missing", "loss:\n  model: gilbert-elliott\n  p: 1%\n", 5, "links[0].loss.r", "missing required key 'r'"),
    ("ge-loss-bad-bare", "loss:\n  model: gilbert-elliott\n  p: 1%\n  r: 25%\n  loss_bad: 0.5\n", 9,
     "links[0].loss.loss_bad", "no % sign"),
    ("random-unknown-key", "loss:\n  model: random\n  rate: 1%\n  p: 3%\n", 8, "links[0].loss.p",
     "unknown key 'p' (allowed: model, rate, correlation)"),
    ("duplicate-bare", "duplicate: 5\n", 5, "links[0].duplicate", "no % sign"),
    ("corrupt-negative", "corrupt: -1%\n", 5, "links[0].corrupt", "cannot be negative"),
    ("reorder-gap-zero", "delay: 5ms\nreorder:\n  rate: 25%\n  gap: 0\n", 8, "links[0].reorder.gap",
     "0 is out of range"),
    ("reorder-bare", "delay: 5ms\nreorder: 0.25\n", 6, "links[0].reorder", "no % sign"),
    ("qdisc-unknown", "qdisc: fq-codel\n", 5, "links[0].qdisc",
     "'fq-codel' is not a queue discipline (did you mean 'fq_codel'? allowed: pfifo, fq_codel, cake, red, pie)"),
    ("qdisc-no-kind", "qdisc: {target: 5ms}\n", 5, "links[0].qdisc", "has no 'kind'"),
    ("fq-codel-target-bare", "qdisc:\n  kind: fq_codel\n  target: 5\n", 7, "links[0].qdisc.target", "has no unit"),
    ("fq-codel-flows", "qdisc:\n  kind: fq_codel\n  flows: 100000\n", 7, "links[0].qdisc.flows", "1..65536"),
    ("fq-codel-ecn", "qdisc:\n  kind: fq_codel\n  ecn: maybe\n", 7, "links[0].qdisc.ecn", "is not true or false"),
    ("fq-codel-limit-bytes", "qdisc:\n  kind: fq_codel\n  limit: 10kb\n", 7, "links[0].qdisc.limit",
     "counted in packets"),
    ("cake-unknown-key", "qdisc:\n  kind: cake\n  target: 5ms\n", 7, "links[0].qdisc.target",
     "unknown key 'target' (allowed: kind, rtt)"),
    ("red-max-not-above-min", "qdisc:\n  kind: red\n  min: 90kb\n  max: 30kb\n", 8, "links[0].qdisc.max",
     "max (30000B) must be above min (90000B)"),
    ("red-limit-below-max", "qdisc:\n  kind: red\n  max: 90kb\n  limit: 30kb\n", 8, "links[0].qdisc.limit",
     "must be at least max"),
    ("red-probability-zero", "qdisc:\n  kind: red\n  probability: 0%\n", 7, "links[0].qdisc.probability",
     "above 0%"),
    ("pie-target-zero", "qdisc:\n  kind: pie\n  target: 0\n", 7, "links[0].qdisc.target", "longer than zero"),
    # the rules between keys, at the key that needs the other
    ("distribution-without-jitter", "delay: 5ms\ndistribution: normal\n", 6, "links[0].distribution",
     "it needs a jitter"),
    ("correlation-without-jitter", "delay: 5ms\ncorrelation: 25%\n", 6, "links[0].correlation", "it needs a jitter"),
    ("reorder-without-delay", "reorder: 25%\n", 5, "links[0].reorder", "it needs a delay"),
    ("egress-reorder-without-delay", "egress:\n  b:\n    reorder: {rate: 5%, gap: 3}\n", 7,
     "links[0].egress.b.reorder", "it needs a delay"),
]


@pytest.mark.parametrize("keys,line,path,fragment", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_values_are_refused_at_their_line(keys, line, path, fragment):
    with pytest.raises(SpecError) as info:
        load_spec_text(link_with(keys), filename="bad.yaml")
    problems = info.value.problems
    assert len(problems) == 1, "\n".join(map(str, problems))
    assert (problems[0].file, problems[0].line, problems[0].path) == ("bad.yaml", line, path), str(problems[0])
    assert fragment in problems[0].message, str(problems[0])


def test_a_rule_broken_by_defaults_is_reported_once_at_defaults():
    text = "defaults:\n  link: {delay: 5ms, distribution: pareto}\n" + BASE + "  - endpoints: [\"a:eth2\", \"b:eth2\"]\n"
    with pytest.raises(SpecError) as info:
        load_spec_text(text)
    assert [(p.line, p.path) for p in info.value.problems] == [(2, "defaults.link.distribution")]


#: (the event's keys, the path of the problem) on a link with no delay
BAD_EVENTS = [
    ("reorder: 5%", "scenario[0].reorder", "it needs a delay"),
    ("jitter: 1ms", "scenario[0].jitter", "jitter needs a delay"),  # its own rule, as before
    ("delay: 5ms, distribution: normal", "scenario[0].distribution", "it needs a jitter"),
    ("delay: 5ms, correlation: 5%", "scenario[0].correlation", "it needs a jitter"),
    ("qdisc: {kind: red, min: 90kb, max: 30kb}", "scenario[0].qdisc.max", "must be above min"),
    ("loss: {model: gilbert-elliott, p: 1%, r: 0%}", "scenario[0].loss.r", "above 0%"),
    ("qdisc: codel", "scenario[0].qdisc", "did you mean 'fq_codel'?"),
]


@pytest.mark.parametrize("keys,path,fragment", BAD_EVENTS, ids=[k for k, _, _ in BAD_EVENTS])
def test_bad_set_link_events_are_refused_at_their_line(keys, path, fragment):
    text = BASE + f"scenario:\n  - {{at: 1s, action: set_link, link: a-b, {keys}}}\n"
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="bad.yaml")
    problems = info.value.problems
    assert [(p.line, p.path) for p in problems] == [(6, path)], "\n".join(map(str, problems))
    assert fragment in problems[0].message


#: (the link's keys, the events, the path of the problem): an event that leaves a direction with a key but not
#: the key it needs, counting the link's own keys and the earlier events (in time, not file, order)
STATEFUL_BAD_EVENTS = [
    ("delay: 5ms\njitter: 1ms\n", ["{at: 1s, action: set_link, link: a-b, delay: 0ms}"], "scenario[0].delay"),
    ("delay: 5ms\n", ["{at: 2s, action: set_link, link: a-b, delay: 0ms}",
                      "{at: 1s, action: set_link, link: a-b, node: a, reorder: 5%}"], "scenario[0].delay"),
    ("delay: 5ms\njitter: 1ms\ndistribution: normal\n",
     ["{at: 1s, action: set_link, link: a-b, node: b, jitter: 0ms}"], "scenario[0].jitter"),
]


@pytest.mark.parametrize("keys,events,path", STATEFUL_BAD_EVENTS, ids=["delay-0-under-jitter",
                                                                       "earlier-in-time-reorder", "jitter-0-under-dist"])
def test_an_event_that_strands_a_key_of_the_link_or_an_earlier_event_is_refused(keys, events, path):
    text = link_with(keys) + "scenario:\n" + "".join(f"  - {e}\n" for e in events)
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="bad.yaml")
    assert [p.path for p in info.value.problems] == [path], "\n".join(map(str, info.value.problems))


def test_a_link_that_breaks_a_rule_is_refused_at_the_link_not_at_each_later_event():
    text = link_with("jitter: 1ms\n") + ("scenario:\n  - {at: 1s, action: set_link, link: a-b, bw: 5mbit}\n"
                                          "  - {at: 2s, action: set_link, link: a-b, bw: 6mbit}\n")
    with pytest.raises(SpecError) as info:
        load_spec_text(text, filename="bad.yaml")
    assert [p.path for p in info.value.problems] == ["links[0].jitter"], "\n".join(map(str, info.value.problems))


def test_an_event_that_clears_a_key_with_what_it_needs_is_accepted():
    text = link_with("delay: 5ms\njitter: 1ms\n") + (
        "scenario:\n  - {at: 1s, action: set_link, link: a-b, delay: 0ms, jitter: 0ms}\n"
        "  - {at: 2s, action: set_link, link: a-b, delay: 3ms, jitter: 1ms}\n")
    assert len(load_spec_text(text).scenario) == 2


def test_a_set_link_event_may_lean_on_the_links_delay():
    text = link_with("delay: 5ms\njitter: 1ms\n") + \
        "scenario:\n  - {at: 1s, action: set_link, link: a-b, reorder: 5%, distribution: normal, correlation: 5%}\n"
    assert load_spec_text(text).scenario[0].reorder.rate == 5.0


# --- describe() and features() ------------------------------------------------------------------------------------

def test_describe_names_every_impairment():
    full = Shaping(bw_bps=10_000_000, delay_ns=20_000_000, jitter_ns=5_000_000, jitter_distribution="normal",
                   loss_gemodel=GilbertElliott(1.0, 25.0), reorder=Reorder(25.0, 5), qdisc=FqCodel(5_000_000))
    assert full.describe() == "10mbit 20ms jitter 5ms normal loss gemodel p 1% r 25% reorder 25% gap 5 " \
                              "fq_codel target 5ms"
    other = Shaping(delay_ns=5_000_000, jitter_ns=1_000_000, delay_correlation_pct=25.0, loss_pct=1.0,
                    loss_correlation_pct=50.0, duplicate_pct=0.5, corrupt_pct=0.1, reorder=Reorder(10.0, None, 5.0),
                    queue_packets=100, qdisc=Red(30_000, 90_000, 2.0, ecn=True))
    assert other.describe() == "5ms jitter 1ms correlation 25% loss 1% correlation 50% duplicate 0.5% corrupt 0.1% " \
                               "reorder 10% correlation 5% queue 100 red min 30000B max 90000B probability 2% ecn"
    assert Shaping(loss_gemodel=GilbertElliott(1.0, 2.0, 90.0, 1.0)).describe() == \
        "loss gemodel p 1% r 2% loss_bad 90% loss_good 1%"
    assert Shaping(qdisc=Pie(15_000_000, 500, False)).describe() == "pie target 15ms limit 500 noecn"
    assert Shaping(qdisc=Cake(100_000_000)).describe() == "cake rtt 100ms"
    assert Shaping().describe() == "unshaped"


@pytest.mark.parametrize("shaping,features", [
    (Shaping(), set()),
    (Shaping(bw_bps=1, queue_packets=10), {"bw", "queue"}),
    (Shaping(delay_ns=1, jitter_ns=1, jitter_distribution="normal", delay_correlation_pct=5.0), {"delay", "jitter"}),
    (Shaping(loss_pct=1.0), {"loss"}),  # plain loss: the host may use iptables
    (Shaping(loss_pct=1.0, loss_correlation_pct=5.0), {"loss_model"}),  # correlated: netem only
    (Shaping(loss_gemodel=GilbertElliott(1.0, 2.0)), {"loss_model"}),
    (Shaping(duplicate_pct=1.0, corrupt_pct=1.0, reorder=Reorder(5.0), delay_ns=1),
     {"duplicate", "corrupt", "reorder", "delay"}),
    (Shaping(queue_packets=100, qdisc=FqCodel()), {"fq_codel"}),  # the queue is fq_codel's limit then
    (Shaping(qdisc=Cake()), {"cake"}), (Shaping(qdisc=Red()), {"red"}), (Shaping(qdisc=Pie()), {"pie"}),
])
def test_features_name_what_a_direction_needs(shaping, features):
    assert shaping.features() == features and features <= set(FEATURES)


def test_spec_features_cover_links_and_events():
    text = link_with("bw: 10mbit\n") + "scenario:\n  - {at: 1s, action: set_link, link: a-b, qdisc: cake}\n"
    assert load_spec_text(text).features() == {"bw", "cake"}
