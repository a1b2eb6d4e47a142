"""Every unit form people write, every unit error, and format/parse round trips."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from runfolder.units import (
    UnitError, format_bandwidth, format_duration, format_percent, format_size,
    parse_bandwidth, parse_duration, parse_percent, parse_size,
)


@pytest.mark.parametrize("text, bps", [
    # bits: spelled "bit", prefix and word in any case, "/s" optional
    ("100bit", 100), ("10kbit", 10_000), ("10Kbit", 10_000), ("10mbit", 10_000_000), ("10Mbit", 10_000_000),
    ("10MBIT", 10_000_000), ("1gbit", 10**9), ("1Gbit", 10**9), ("1tbit", 10**12), ("1Tbit", 10**12),
    ("1kibit", 1024), ("2mibit", 2 * 2**20), ("1gibit", 2**30), ("1tibit", 2**40), ("1Mibit", 2**20),
    ("100bit/s", 100), ("10kbit/s", 10_000), ("2mbit/s", 2_000_000), ("3Mbit/s", 3_000_000), ("1Gbit/s", 10**9),
    ("1.5mbit", 1_500_000), (".5mbit", 500_000), ("10 mbit", 10_000_000), (" 7mbit ", 7_000_000),
    ("10 Mbit/s", 10_000_000),
    # bytes per second: an uppercase B and "/s", times 8
    ("1B/s", 8), ("10 B/s", 80), ("1kB/s", 8_000), ("1KB/s", 8_000), ("500KB/s", 4_000_000),
    ("10MB/s", 80_000_000), ("10 MB/s", 80_000_000), ("1mB/s", 8_000_000), ("1GB/s", 8 * 10**9),
    ("1TB/s", 8 * 10**12), ("1KiB/s", 8 * 1024), ("1MiB/s", 8 * 2**20), ("1GiB/s", 8 * 2**30),
    ("1TiB/s", 8 * 2**40), ("1.5MB/s", 12_000_000), ("1MB/S", 8_000_000),
])
def test_bandwidth_forms(text, bps):
    assert parse_bandwidth(text) == bps


_TC_BYTES = "means bits per second to most people but bytes per second to tc"
_LOWER_B = "is ambiguous: a lowercase b can mean bits or bytes"


@pytest.mark.parametrize("text, message", [
    # "bps" in any case: megabits to people, megabytes to tc
    ("64bps", f"'64bps' is ambiguous: bps {_TC_BYTES}; write 64bit for bits per second, or 64B/s for bytes per "
              "second (= 512bit)"),
    ("64Bps", f"'64Bps' is ambiguous: Bps {_TC_BYTES}; write 64bit for bits per second, or 64B/s"),
    ("10kbps", f"'10kbps' is ambiguous: kbps {_TC_BYTES}; write 10kbit for bits per second, or 10kB/s for bytes "
               "per second (= 80kbit)"),
    ("10Kbps", f"'10Kbps' is ambiguous: Kbps {_TC_BYTES}; write 10kbit for bits per second, or 10kB/s"),
    ("10KBps", f"'10KBps' is ambiguous: KBps {_TC_BYTES}; write 10kbit for bits per second, or 10kB/s"),
    ("2Mbps", f"'2Mbps' is ambiguous: Mbps {_TC_BYTES}; write 2mbit for bits per second, or 2MB/s for bytes per "
              "second (= 16mbit)"),
    ("2mbps", f"'2mbps' is ambiguous: mbps {_TC_BYTES}; write 2mbit for bits per second, or 2MB/s"),
    ("10MBps", f"'10MBps' is ambiguous: MBps {_TC_BYTES}; write 10mbit for bits per second, or 10MB/s for bytes "
               "per second (= 80mbit)"),
    ("1Gbps", f"'1Gbps' is ambiguous: Gbps {_TC_BYTES}; write 1gbit for bits per second, or 1GB/s for bytes per "
              "second (= 8gbit)"),
    ("1GBps", f"'1GBps' is ambiguous: GBps {_TC_BYTES}; write 1gbit"),
    ("1Tbps", f"'1Tbps' is ambiguous: Tbps {_TC_BYTES}; write 1tbit for bits per second, or 1TB/s"),
    ("1.5Mbps", f"'1.5Mbps' is ambiguous: Mbps {_TC_BYTES}; write 1.5mbit for bits per second, or 1.5MB/s for "
                "bytes per second (= 12mbit)"),
    # a lowercase b: bits in SI, bytes in a size (100kb is 100000 bytes as a size here and in tc)
    ("3Mb/s", f"'3Mb/s' {_LOWER_B} (in a size, 3Mb is bytes); write 3mbit for bits per second, or 3MB/s for bytes "
              "per second (= 24mbit)"),
    ("3mb/s", f"'3mb/s' {_LOWER_B} (in a size, 3mb is bytes); write 3mbit for bits per second, or 3MB/s"),
    ("1b/s", f"'1b/s' {_LOWER_B} (in a size, 1b is bytes); write 1bit for bits per second, or 1B/s"),
    ("10kb/s", f"'10kb/s' {_LOWER_B} (in a size, 10kb is bytes); write 10kbit for bits per second, or 10kB/s"),
    ("1Gb/s", f"'1Gb/s' {_LOWER_B} (in a size, 1Gb is bytes); write 1gbit for bits per second, or 1GB/s"),
    ("10mb", f"'10mb' {_LOWER_B} (in a size, 10mb is bytes); write 10mbit for bits per second, or 10MB/s for "
             "bytes per second (= 80mbit)"),
    ("10Mb", f"'10Mb' {_LOWER_B} (in a size, 10Mb is bytes); write 10mbit for bits per second, or 10MB/s"),
    ("10kb", f"'10kb' {_LOWER_B} (in a size, 10kb is bytes); write 10kbit for bits per second, or 10kB/s"),
    ("1gb", f"'1gb' {_LOWER_B} (in a size, 1gb is bytes); write 1gbit for bits per second, or 1GB/s"),
    ("1kib", f"'1kib' {_LOWER_B} (in a size, 1kib is bytes); write 1kibit for bits per second, or 1KiB/s"),
    # an uppercase B without "/s" is a size
    ("10MB", "'10MB' is a size, not a rate; write 10mbit for bits per second, or 10MB/s for bytes per second "
             "(= 80mbit)"),
    ("10KB", "'10KB' is a size, not a rate; write 10kbit for bits per second, or 10kB/s"),
    ("10kB", "'10kB' is a size, not a rate; write 10kbit for bits per second, or 10kB/s"),
    ("1GB", "'1GB' is a size, not a rate; write 1gbit for bits per second, or 1GB/s"),
    ("64KiB", "'64KiB' is a size, not a rate; write 64kibit for bits per second, or 64KiB/s for bytes per second "
              "(= 524.288kbit)"),
    ("100B", "'100B' is a size, not a rate; write 100bit for bits per second, or 100B/s"),
])
def test_ambiguous_rates_are_refused_with_both_spellings(text, message):
    with pytest.raises(UnitError) as info:
        parse_bandwidth(text)
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("value, fragment", [
    ("10 mbps/s", "'10 mbps/s' is not a bandwidth (examples: 10mbit, 500kbit, 1gbit); unknown unit 'mbps/s' "
                  "(known: bits/s: bit, kbit, mbit, gbit, tbit, kibit...; bytes/s, x8: B/s, kB/s, MB/s, GB/s, "
                  "KiB/s...; see 'Rates' in docs/spec.md)"),
    ("10", "'10' has no unit; write e.g. 10mbit or 10kbit"),
    (10, "10 has no unit"),
    (2.5, "2.5 has no unit"),
    ("0mbit", "must be greater than zero"),
    ("0MB/s", "'0MB/s': a bandwidth must be greater than zero"),
    ("0.0001bit", "must be greater than zero"),
    ("-5mbit", "must be greater than zero"),
    ("-5Mbps", "'-5Mbps' is ambiguous"),
    ("10M", "unknown unit 'M'"),
    ("10mbits", "unknown unit 'mbits'"),
    ("10 megabit", "unknown unit 'megabit'"),
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


@pytest.mark.parametrize("text", ["10Mbps", "10mb", "10Mb/s", "10MB", "10kbps", "1Gb/s", "64KiB"])
def test_every_suggested_spelling_is_accepted_with_the_value_it_states(text):
    """The two spellings a refusal suggests parse, and the bytes one to the figure the message gives."""
    with pytest.raises(UnitError) as info:
        parse_bandwidth(text)
    message = str(info.value)
    as_bits, as_bytes = [w.rstrip(",") for w in message.split("; write ")[1].split() if w[0].isdigit()][:2]
    stated = message.rsplit("(= ", 1)[1].rstrip(")")
    assert parse_bandwidth(as_bytes) == 8 * parse_bandwidth(as_bits) == parse_bandwidth(stated)


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
