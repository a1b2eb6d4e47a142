"""Units as people write them in topology files, and back again.

Every parser takes what YAML gives (a string, or a bare number) and returns an
exact integer (or a float percent).  Every error is a ``UnitError`` whose text
says what was wrong and shows examples of what is allowed, so that a caller can
show it to a user as is.

Bandwidth is in **bits per second**, and every accepted spelling has one
meaning (docs/spec.md, "Rates"): bits are spelled with ``bit`` (``10mbit``,
``10Mbit/s``, ``500kbit``, ``1gbit``, ``1kibit``; any case), bytes per second
with an uppercase ``B`` and ``/s`` (``10MB/s``, ``500kB/s``, ``1GiB/s``), which
is multiplied by 8.  Spellings that people and ``tc`` read differently are
refused with the two unambiguous ones suggested: ``Mbps``/``MBps``/``bps``
(megabits to most people, megabytes to ``tc``), a lowercase ``b`` (``10mb``,
``10Mb/s``: sizes read ``mb`` as megabytes) and a size without ``/s``
(``10MB``).  Multipliers are decimal (k = 1000) except the binary
``ki``/``mi``/``gi``/``ti`` (1024), as in tc.

Durations are integer **nanoseconds**: ``ns``, ``us`` (also ``µs``), ``ms``,
``s``, ``m`` (minutes), ``h``, and sequences such as ``1m30s``.  A bare ``0``
is allowed (zero needs no unit); any other bare number is refused because
``5`` could mean seconds or milliseconds; on a command line (``parse_seconds``)
a bare number is seconds, as it always was there.

Percentages are floats in 0..100 written with a ``%`` sign: ``0.1%``.  A bare
``0`` is allowed; any other bare number is refused because ``0.5`` could mean
half a percent or fifty percent.

Sizes are integer **bytes**: a bare integer, or ``b``/``B``/``byte(s)``,
``kb`` (1000), ``kib`` (1024), ``mb``, ``mib``, ``gb``, ``gib`` (any case).
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation, ROUND_HALF_EVEN
from typing import Dict, Tuple, Union

__all__ = [
    "UnitError",
    "BANDWIDTH_EXAMPLES",
    "RATE_UNITS_HELP",
    "DURATION_EXAMPLES",
    "PERCENT_EXAMPLES",
    "SIZE_EXAMPLES",
    "parse_bandwidth",
    "parse_duration",
    "parse_seconds",
    "parse_percent",
    "parse_size",
    "format_bandwidth",
    "format_duration",
    "format_percent",
    "format_size",
]

Number = Union[int, float]

BANDWIDTH_EXAMPLES = "10mbit, 500kbit, 1gbit"
DURATION_EXAMPLES = "5ms, 1.5s, 250us, 2m"
PERCENT_EXAMPLES = "0.1%, 5%, 0%"
SIZE_EXAMPLES = "1500b, 64KiB, 100kb, 1024"


class UnitError(ValueError):
    """A value that is not a valid quantity; the message is meant for users."""


_NUMBER = r"(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"

#: rate prefixes (any case) and their multipliers; the binary ones as in tc
_RATE_PREFIXES: Dict[str, int] = {
    "": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
    "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40,
}
_RATE_PREFIX = "(?P<prefix>(?:[kmgt]i?)?)"
_RATE_BITS = re.compile(_RATE_PREFIX + r"bit(?:/s)?", re.I)           # 10mbit, 10Mbit/s
_RATE_BYTES = re.compile(_RATE_PREFIX + r"B/s", re.I)                 # 10MB/s (B checked to be uppercase)
_RATE_PER_SECOND = re.compile(_RATE_PREFIX + r"(?:bps|b/s|b)", re.I)  # ambiguous: Mbps, 10mb, 10Mb/s, 10MB
RATE_UNITS_HELP = ("bits/s: bit, kbit, mbit, gbit, tbit, kibit...; bytes/s, x8: B/s, kB/s, MB/s, GB/s, "
                   "KiB/s...; see 'Rates' in docs/spec.md")


_DURATION_UNITS: Dict[str, int] = {
    "ns": 1,
    "us": 10**3,
    "µs": 10**3,  # U+00B5 MICRO SIGN
    "μs": 10**3,  # U+03BC GREEK SMALL LETTER MU
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "min": 60 * 10**9,
    "h": 3600 * 10**9,
}

_SIZE_UNITS: Dict[str, int] = {
    "b": 1, "byte": 1, "bytes": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9,
    "kib": 2**10, "mib": 2**20, "gib": 2**30,
}

_QUANTITY = re.compile(_NUMBER + r"\s*(?P<unit>[^\s0-9.+-][^\s]*)?")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([a-zµμ]+)")


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _split(value: object, kind: str, examples: str) -> Tuple[Decimal, str]:
    """Split ``value`` into (signed number, lowercase unit or '')."""
    if isinstance(value, bool) or value is None:
        raise UnitError(f"{_show(value)} is not {kind} (examples: {examples})")
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise UnitError(f"{_show(value)} is not {kind} (examples: {examples})")
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value), ""
    if not isinstance(value, str):
        raise UnitError(f"{_show(value)} is not {kind} (examples: {examples})")
    match = _QUANTITY.fullmatch(value.strip())
    if not match:
        raise UnitError(f"{_show(value)} is not {kind} (examples: {examples})")
    try:
        number = Decimal(match["num"])
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        raise UnitError(f"{_show(value)} is not {kind} (examples: {examples})") from None
    if match["sign"] == "-":
        number = -number
    return number, (match["unit"] or "")


def _to_int(number: Decimal) -> int:
    return int(number.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def _bits_unit(prefix: str) -> str:
    return prefix.lower() + "bit"


def _bytes_unit(prefix: str) -> str:
    prefix = prefix.lower()
    return (prefix if prefix == "k" else prefix.capitalize()) + "B/s"


def parse_bandwidth(value: object) -> int:
    """``"10mbit"`` -> ``10_000_000`` bits per second, ``"1MB/s"`` -> ``8_000_000``; refuses zero,
    negatives and every spelling that could mean bits or bytes (``Mbps``, ``10mb``, ``10Mb/s``, ``10MB``)."""
    what, examples = "a bandwidth", BANDWIDTH_EXAMPLES
    number, unit = _split(value, what, examples)
    if not unit:
        raise UnitError(
            f"{_show(value)} has no unit; write e.g. {number}mbit or {number}kbit "
            f"(examples: {examples})"
        )
    bits = _RATE_BITS.fullmatch(unit)
    byte = _RATE_BYTES.fullmatch(unit)
    if bits:
        bps = _to_int(number * _RATE_PREFIXES[bits["prefix"].lower()])
    elif byte and unit[-3] == "B":
        bps = _to_int(number * _RATE_PREFIXES[byte["prefix"].lower()] * 8)
    else:
        raise UnitError(_rate_refusal(value, number, unit))
    if bps <= 0:
        raise UnitError(f"{_show(value)}: a bandwidth must be greater than zero (examples: {examples})")
    return bps


def _rate_refusal(value: object, number: Decimal, unit: str) -> str:
    """Why ``unit`` is not a rate, with the spelling(s) that say what the user meant."""
    ambiguous = _RATE_PER_SECOND.fullmatch(unit)
    if ambiguous is None:
        return (f"{_show(value)} is not a bandwidth (examples: {BANDWIDTH_EXAMPLES}); unknown unit {unit!r} "
                f"(known: {RATE_UNITS_HELP})")
    prefix = ambiguous["prefix"]
    mult = _RATE_PREFIXES[prefix.lower()]
    as_bits = f"{number}{_bits_unit(prefix)}"
    as_bytes = f"{number}{_bytes_unit(prefix)}"
    in_bits = f" (= {format_bandwidth(_to_int(number * mult * 8))})" if number > 0 else ""
    choice = f"write {as_bits} for bits per second, or {as_bytes} for bytes per second{in_bits}"
    if unit.lower().endswith("bps"):
        return (f"{_show(value)} is ambiguous: {unit} means bits per second to most people but bytes per "
                f"second to tc; {choice}")
    if "B" not in unit:
        return (f"{_show(value)} is ambiguous: a lowercase b can mean bits or bytes (in a size, "
                f"{number}{unit.split('/')[0]} is bytes); {choice}")
    return f"{_show(value)} is a size, not a rate; {choice}"


def parse_duration(value: object) -> int:
    """``"5ms"`` -> ``5_000_000`` nanoseconds; ``"1m30s"`` works; refuses negatives."""
    what, examples = "a duration", DURATION_EXAMPLES
    if isinstance(value, str) and value.strip().startswith("-"):
        raise UnitError(f"{_show(value)}: a duration cannot be negative (examples: {examples})")
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        parts = _DURATION_PART.findall(text)
        if len(parts) > 1 and "".join(n + u for n, u in parts) == text:
            total = Decimal(0)
            for num, unit in parts:
                if unit not in _DURATION_UNITS:
                    raise UnitError(
                        f"{_show(value)} is not a duration (examples: {examples}); "
                        f"unknown unit {unit!r} (known: ns, us, ms, s, m, h)"
                    )
                total += Decimal(num) * _DURATION_UNITS[unit]
            return _to_int(total)
    number, unit = _split(value, what, examples)
    if number < 0:
        raise UnitError(f"{_show(value)}: a duration cannot be negative (examples: {examples})")
    if not unit:
        if number == 0:
            return 0
        raise UnitError(
            f"{_show(value)} has no unit; write e.g. {number}s or {number}ms (examples: {examples})"
        )
    mult = _DURATION_UNITS.get(unit.lower())
    if mult is None:
        raise UnitError(
            f"{_show(value)} is not a duration (examples: {examples}); "
            f"unknown unit {unit!r} (known: ns, us, ms, s, m, h)"
        )
    return _to_int(number * mult)


def parse_seconds(value: object) -> float:
    """A command line's duration -> seconds: the spec's grammar (``20s``, ``500ms``, ``1m30s``), or a bare
    number, which on a command line has always meant seconds (``20``, ``0.5``)."""
    if isinstance(value, str) and re.fullmatch(r"\s*\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)\s*", value):
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    try:
        return parse_duration(value) / 1e9
    except UnitError as err:
        raise UnitError(f"{err}; a bare number is seconds") from None


def parse_percent(value: object) -> float:
    """``"0.1%"`` -> ``0.1``; must lie in 0..100; a bare number other than 0 is refused."""
    what, examples = "a percentage", PERCENT_EXAMPLES
    number, unit = _split(value, what, examples)
    if not unit:
        if number == 0:
            return 0.0
        raise UnitError(
            f"{_show(value)} has no % sign; write {number}% "
            f"(a bare number could be a fraction or a percent)"
        )
    if unit != "%":
        raise UnitError(f"{_show(value)} is not a percentage (examples: {examples})")
    if number < 0:
        raise UnitError(f"{_show(value)}: a percentage cannot be negative")
    if number > 100:
        raise UnitError(f"{_show(value)}: a percentage cannot be over 100%")
    return float(number)


def parse_size(value: object) -> int:
    """``"64KiB"`` -> ``65536`` bytes; a bare integer is bytes; refuses negatives."""
    what, examples = "a size", SIZE_EXAMPLES
    if isinstance(value, float):
        raise UnitError(f"{_show(value)} is not a size: a bare size must be a whole number of bytes")
    number, unit = _split(value, what, examples)
    if number < 0:
        raise UnitError(f"{_show(value)}: a size cannot be negative")
    mult = 1 if not unit else _SIZE_UNITS.get(unit.lower())
    if mult is None:
        raise UnitError(
            f"{_show(value)} is not a size (examples: {examples}); "
            f"unknown unit {unit!r} (known: b, kb, kib, mb, mib, gb, gib)"
        )
    size = number * mult
    if size != size.to_integral_value():
        raise UnitError(f"{_show(value)} is not a whole number of bytes")
    return int(size)


def _format(value: int, units: Tuple[Tuple[str, int], ...]) -> str:
    """Largest unit in which ``value`` needs at most three decimals."""
    for name, mult in units:
        if abs(value) >= mult and (value * 1000) % mult == 0:
            text = format(Decimal(value) / Decimal(mult), "f")
            if "." in text:
                text = text.rstrip("0").rstrip(".")
            return text + name
    return f"{value}{units[-1][0]}"


def format_bandwidth(bps: int) -> str:
    """``10_000_000`` -> ``"10mbit"``; ``parse_bandwidth`` reads the result back exactly."""
    return _format(int(bps), (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3), ("bit", 1)))


def format_duration(ns: int) -> str:
    """``5_000_000`` -> ``"5ms"``; ``parse_duration`` reads the result back exactly."""
    if ns == 0:
        return "0s"
    return _format(int(ns), (("s", 10**9), ("ms", 10**6), ("us", 10**3), ("ns", 1)))


def format_percent(pct: float) -> str:
    """``0.1`` -> ``"0.1%"``; ``parse_percent`` reads the result back exactly."""
    text = format(Decimal(repr(float(pct))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text + "%"


def ms_text(ns: float, spec: str = ".3g") -> str:
    """A measured time in milliseconds for people (``12.3 ms``), to the precision ``spec`` (a format spec);
    not for reading back (format_duration is)."""
    return f"{ns / 1e6:{spec}} ms"


def percent_text(pct: float, decimals: int = 2) -> str:
    """A measured share for people (``1.25%``, ``10%``), at most ``decimals`` decimals, trailing zeros dropped."""
    return f"{pct:.{decimals}f}".rstrip("0").rstrip(".") + "%"


def format_size(size: int) -> str:
    """``65536`` -> ``"64KiB"``, ``1500`` -> ``"1500B"``."""
    for name, mult in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= mult and size % mult == 0:
            return f"{size // mult}{name}"
    return f"{size}B"
