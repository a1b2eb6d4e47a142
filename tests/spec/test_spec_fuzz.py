"""Whatever the file holds, loading gives a Spec or a SpecError with located problems — never a crash."""
from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from testbed.spec import Spec, SpecError, load_spec_text

KEYS = [
    "name", "nodes", "links", "traffic", "scenario", "capture", "expect", "defaults", "duration", "endpoints",
    "bw", "delay", "jitter", "loss", "queue", "weight", "egress", "addresses", "kind", "router", "profile",
    "node", "subscribers", "from", "to", "rate", "at", "action", "link", "flow", "metric", "op", "value",
    "priority", "lease", "keepalive", "wrr_weights", "address_pool", "r1", "r2", "zpub", "constant", "set_link",
]
SCALARS = st.one_of(
    st.sampled_from(["r1", "r2", "r1:eth1", "10mbit", "5ms", "0.1%", "r1-r2", "all", "zpub", "constant",
                     "router", "host", "<=", "latency.p99", "10.0.0.1/30", "", "-1", "100%", "link_down"]),
    st.integers(-3, 70000), st.floats(allow_nan=True), st.booleans(), st.none(), st.text(max_size=8),
)
DATA = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)),
    max_leaves=25,
)


def _check(text: str) -> None:
    try:
        spec = load_spec_text(text, filename="f.yaml")
    except SpecError as err:
        assert err.problems
        for problem in err.problems:
            assert problem.file == "f.yaml" and problem.message
            assert problem.line is None or 1 <= problem.line <= text.count("\n") + 2
    else:
        assert isinstance(spec, Spec)
        spec.resolved_links()
        spec.features()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), DATA, max_size=8))
def test_random_documents_never_crash(doc):
    _check(yaml.safe_dump(doc))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_random_text_never_crashes(text):
    _check(text)


NEAR_VALID = {
    "name": "t",
    "nodes": {"r1": {}, "r2": {}, "r3": {"kind": "host"}},
    "links": [{"endpoints": ["r1", "r2"]}, {"endpoints": ["r2", "r3"]}],
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["links", "traffic", "scenario", "capture", "expect", "defaults"]), DATA)
def test_one_random_section_in_a_valid_file_never_crashes(section, value):
    doc = dict(NEAR_VALID)
    doc[section] = value
    _check(yaml.safe_dump(doc))
