"""Every unit form people write, every unit error, and format/parse round trips."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from testbed.spec.units import (
    UnitError, format_bandwidth, format_duration, format_percent, format_size,
    parse_bandwidth, parse_duration, parse_percent, parse_size,
)


@pytest.mark.parametrize("text, bps", [
    ("10mbit", 10_000_000), ("2Mbps", 2_000_000), ("500kbit", 500_000), ("1gbit", 1_000_000_000),
    ("1.5mbit", 1_500_000), ("100bit", 100), ("64bps", 64), ("10kbps", 10_000), ("1Gbps", 10**9),
    ("10MBIT", 10_000_000), ("10 mbit", 10_000_000), ("2mbit/s", 2_000_000), ("3Mb/s", 3_000_000),
    ("1tbit", 10**12), ("1kibit", 1024), ("2mibit", 2 * 2**20), ("1gibit", 2**30), (".5mbit", 500_000),
    (" 7mbit ", 7_000_000),
])
def test_bandwidth_forms(text, bps):
    assert parse_bandwidth(text) == bps


@pytest.mark.parametrize("value, fragment", [
    ("10 mbps/s", "'10 mbps/s' is not a bandwidth (examples: 10mbit, 500kbit, 1gbit); unknown unit 'mbps/s'"),
    ("10", "'10' has no unit; write e.g. 10mbit or 10kbit"),
    (10, "10 has no unit"),
    (2.5, "2.5 has no unit"),
    ("0mbit", "must be greater than zero"),
    ("0.0001bit", "must be greater than zero"),
    ("-5mbit", "must be greater than zero"),
    ("10M", "unknown unit 'M'"),
    ("10MB", "unknown unit 'MB'"),
    ("mbit", "'mbit' is not a bandwidth"),
    ("", "'' is not a bandwidth"),
    ("1.2.3mbit", "is not a bandwidth"),
    (True, "True is not a bandwidth"),
    (None, "None is not a bandwidth"),
    ([10], "[10] is not a bandwidth"),
    (float("nan"), "nan is not a bandwidth"),
])
def test_bandwidth_errors(value, fragment):
    with pytest.raises(UnitError) as info:
        parse_bandwidth(value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("text, ns", [
    ("5ms", 5_000_000), ("1.5s", 1_500_000_000), ("250us", 250_000), ("250µs", 250_000), ("250μs", 250_000),
    ("100ns", 100), ("2m", 120 * 10**9), ("1min", 60 * 10**9), ("1h", 3600 * 10**9), ("1m30s", 90 * 10**9),
    ("1s500ms", 1_500_000_000), ("0", 0), (0, 0), ("0s", 0), ("5MS", 5_000_000), ("5 ms", 5_000_000),
    ("0.5ns", 0), ("1.5ns", 2),
])
def test_duration_forms(text, ns):
    assert parse_duration(text) == ns


@pytest.mark.parametrize("value, fragment", [
    ("5", "'5' has no unit; write e.g. 5s or 5ms"),
    (5, "5 has no unit"),
    ("-5ms", "a duration cannot be negative"),
    (-1, "a duration cannot be negative"),
    ("5 parsecs", "unknown unit 'parsecs'"),
    ("1m30x", "unknown unit 'x'"),
    ("ms", "'ms' is not a duration"),
    (False, "False is not a duration"),
    ("5ms!", "unknown unit 'ms!'"),
])
def test_duration_errors(value, fragment):
    with pytest.raises(UnitError) as info:
        parse_duration(value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("value, pct", [
    ("0.1%", 0.1), ("5%", 5.0), ("100%", 100.0), ("0%", 0.0), (0, 0.0), ("0", 0.0), (0.0, 0.0), ("1.25 %", 1.25),
])
def test_percent_forms(value, pct):
    assert parse_percent(value) == pct


@pytest.mark.parametrize("value, fragment", [
    ("0.5", "'0.5' has no % sign; write 0.5% (a bare number could be a fraction or a percent)"),
    (0.5, "0.5 has no % sign"),
    (5, "5 has no % sign"),
    ("101%", "a percentage cannot be over 100%"),
    ("-1%", "a percentage cannot be negative"),
    ("5pc", "'5pc' is not a percentage"),
    ("%", "'%' is not a percentage"),
])
def test_percent_errors(value, fragment):
    with pytest.raises(UnitError) as info:
        parse_percent(value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("value, size", [
    ("64KiB", 65536), ("1500b", 1500), ("1500B", 1500), ("100kb", 100_000), (1024, 1024), ("1MiB", 2**20),
    ("2mb", 2_000_000), ("1GiB", 2**30), ("1gb", 10**9), ("10 bytes", 10), ("0", 0), ("1.5KiB", 1536),
])
def test_size_forms(value, size):
    assert parse_size(value) == size


@pytest.mark.parametrize("value, fragment", [
    ("-1b", "a size cannot be negative"),
    ("10 parsecs", "unknown unit 'parsecs'"),
    (1.5, "a bare size must be a whole number of bytes"),
    ("1.5b", "is not a whole number of bytes"),
    ("KiB", "'KiB' is not a size"),
])
def test_size_errors(value, fragment):
    with pytest.raises(UnitError) as info:
        parse_size(value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("bps, text", [
    (10_000_000, "10mbit"), (1_500_000, "1.5mbit"), (500_000, "500kbit"), (10**9, "1gbit"), (999, "999bit"),
    (1_234_567, "1234.567kbit"), (1, "1bit"),
])
def test_format_bandwidth(bps, text):
    assert format_bandwidth(bps) == text


@pytest.mark.parametrize("ns, text", [
    (5_000_000, "5ms"), (1_500_000_000, "1.5s"), (0, "0s"), (250_000, "250us"), (7, "7ns"), (90 * 10**9, "90s"),
])
def test_format_duration(ns, text):
    assert format_duration(ns) == text


def test_format_percent_and_size():
    assert format_percent(0.1) == "0.1%"
    assert format_percent(1e-05) == "0.00001%"
    assert format_percent(100.0) == "100%"
    assert format_size(65536) == "64KiB"
    assert format_size(1500) == "1500B"


@given(st.integers(min_value=1, max_value=10**13))
def test_bandwidth_round_trip(bps):
    assert parse_bandwidth(format_bandwidth(bps)) == bps


@given(st.integers(min_value=0, max_value=10**15))
def test_duration_round_trip(ns):
    assert parse_duration(format_duration(ns)) == ns


@given(st.floats(min_value=0, max_value=100, allow_nan=False))
def test_percent_round_trip(pct):
    assert parse_percent(format_percent(pct)) == pct


@given(st.integers(min_value=0, max_value=2**40))
def test_size_round_trip(size):
    assert parse_size(format_size(size)) == size
