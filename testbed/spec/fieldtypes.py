"""Annotated pydantic types for the values a topology file holds.

Each type parses what people write (``10mbit``, ``5ms``, ``0.1%``, ``r1:eth1``)
in a ``BeforeValidator`` and raises a ``PydanticCustomError`` whose message is
already fit for a user: it says what the value is not and shows examples.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Any, Callable, NamedTuple, Optional, Union

from pydantic import BeforeValidator, PlainSerializer
from pydantic_core import PydanticCustomError
from typing_extensions import Annotated

from runfolder import units
from runfolder.priorities import Priority, parse_priority

__all__ = [
    "Bandwidth", "Duration", "PositiveDuration", "Percent", "LossPercent", "Size", "PositiveSize",
    "PriorityValue", "NodeName", "SpecName", "FlowName", "IfName",
    "Endpoint", "EndpointValue", "LinkRef", "LinkRefValue", "Weight", "PositiveInt",
    "IPv4Pool", "IPv4Address", "NODE_NAME_RULE", "IFNAME_RULE", "user_error",
    "LinkMultiple", "FlowRate", "QueueLength", "PositivePercent", "FlowCount",
]


def user_error(kind: str, message: str) -> PydanticCustomError:
    """A validation error whose text is shown to the user unchanged."""
    return PydanticCustomError(kind, "{message}", {"message": message})


def _unit(kind: str, parse: Callable[[Any], Any]) -> BeforeValidator:
    def validate(value: Any) -> Any:
        try:
            return parse(value)
        except units.UnitError as err:
            raise user_error(kind, str(err)) from None

    return BeforeValidator(validate)


def _positive_duration(value: Any) -> int:
    ns = units.parse_duration(value)
    if ns == 0:
        raise units.UnitError(f"{value!r}: must be longer than zero (examples: {units.DURATION_EXAMPLES})")
    return ns


def _positive_size(value: Any) -> int:
    size = units.parse_size(value)
    if size == 0:
        raise units.UnitError(f"{value!r}: must be larger than zero (examples: {units.SIZE_EXAMPLES})")
    return size


def _loss(value: Any) -> float:
    pct = units.parse_percent(value)
    if pct >= 100:
        raise units.UnitError(
            f"{value!r}: loss of 100% lets nothing through; use a link_down event in the "
            "scenario to cut a link (loss must be below 100%)"
        )
    return pct


# In Python the parsed numbers are kept; JSON gets the unit strings back, so
# that ``Spec.model_validate(json.loads(spec.model_dump_json(by_alias=True)))``
# gives the same spec (the manifest of a run stores the spec this way).
_AS_BANDWIDTH = PlainSerializer(units.format_bandwidth, return_type=str, when_used="json")
_AS_DURATION = PlainSerializer(units.format_duration, return_type=str, when_used="json")
_AS_PERCENT = PlainSerializer(units.format_percent, return_type=str, when_used="json")

#: Bits per second, written ``10mbit``, ``500kbit``, ``1gbit``, ``10Mbit/s`` or in bytes ``2MB/s`` (docs/spec.md).
Bandwidth = Annotated[int, _unit("bandwidth", units.parse_bandwidth), _AS_BANDWIDTH]
#: Nanoseconds (>= 0), written ``5ms``, ``1.5s``, ``250us``, ``1m30s``; bare ``0`` allowed.
Duration = Annotated[int, _unit("duration", units.parse_duration), _AS_DURATION]
#: Nanoseconds (> 0).
PositiveDuration = Annotated[int, _unit("duration", _positive_duration), _AS_DURATION]
#: Percent in 0..100, written ``0.1%``; bare ``0`` allowed.
Percent = Annotated[float, _unit("percent", units.parse_percent), _AS_PERCENT]
#: Percent in 0..100 exclusive of 100.
LossPercent = Annotated[float, _unit("percent", _loss), _AS_PERCENT]


def _positive_percent(value: Any) -> float:
    pct = units.parse_percent(value)
    if pct == 0:
        raise units.UnitError(f"{value!r}: must be above 0% and at most 100% (a chance of 0 never changes state)")
    return pct


#: Percent in (0, 100]: a transition probability that must be able to happen.
PositivePercent = Annotated[float, _unit("percent", _positive_percent), _AS_PERCENT]
#: Bytes, written ``1500b``, ``64KiB``, ``100kb`` or a bare integer.
Size = Annotated[int, _unit("size", units.parse_size)]
PositiveSize = Annotated[int, _unit("size", _positive_size)]


def _size_between(low: int, high: Optional[int]) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        size = units.parse_size(value)
        if size < low or (high is not None and size > high):
            bound = (f"between {units.format_size(low)} and {units.format_size(high)}" if high is not None
                     else f"at least {units.format_size(low)}")
            raise units.UnitError(f"{value!r}: must be {bound} (the router refuses anything else)")
        return size

    return parse


def _int_in(kind: str, low: int, high: int, what: str) -> BeforeValidator:
    def validate(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise user_error(kind, f"{value!r} is not a whole number ({what}: {low}..{high})")
        if not low <= value <= high:
            raise user_error(kind, f"{value} is out of range ({what}: {low}..{high})")
        return value

    return BeforeValidator(validate)


#: Routing weight of a link: 1..65534 (65535 is what the congestion monitor uses to block a link).
Weight = Annotated[int, _int_in("weight", 1, 65534, "a routing weight")]
PositiveInt = Annotated[int, _int_in("positive_int", 1, 2**31 - 1, "a positive whole number")]
#: fq_codel's number of flow queues: 1..65536 (the kernel's limit).
FlowCount = Annotated[int, _int_in("flows", 1, 65536, "a number of flow queues")]


def _queue_length(value: Any) -> int:
    if isinstance(value, str) and not value.strip().isdigit() and _is_size(value):
        raise user_error("queue", f"{value!r}: a queue is counted in packets, not bytes; write a whole number "
                                  "of packets, e.g. queue: 100")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
        raise user_error("queue", f"{value!r} is not a queue length: a whole number of packets, 1..{2**31 - 1} "
                                  "(e.g. queue: 100)")
    return value


def _is_size(value: str) -> bool:
    try:
        units.parse_size(value)
    except units.UnitError:
        return False
    return True


#: The length of a link's queue (the qdisc's limit) in packets: 1..2**31-1.
QueueLength = Annotated[int, BeforeValidator(_queue_length)]


def _priority(value: Any) -> Priority:
    try:
        return parse_priority(value)
    except ValueError as err:
        raise user_error("priority", str(err)) from None


#: A priority given by name (``real_time`` or ``realtime``, ``data``...) or number 0..7; stored as ``Priority``.
PriorityValue = Annotated[Priority, BeforeValidator(_priority), PlainSerializer(lambda p: p.label, return_type=str)]


def _pattern(kind: str, regex: str, rule: str) -> BeforeValidator:
    compiled = re.compile(regex)

    def validate(value: Any) -> str:
        if not isinstance(value, str) or not compiled.fullmatch(value):
            raise user_error(kind, f"{value!r} is not a valid {rule}")
        return value

    return BeforeValidator(validate)


NODE_NAME_RULE = (
    "node name: 1-10 lowercase letters or digits starting with a letter, e.g. r1 "
    "(it becomes part of namespace and interface names, which Linux limits to 15 characters)"
)
IFNAME_RULE = "interface name: 1-15 lowercase letters or digits starting with a letter, e.g. eth1"
#: what a node, an interface and a topology name may be (also what `testbed import` makes names into)
NODE_NAME_RE = r"[a-z][a-z0-9]{0,9}"
IFNAME_RE = r"[a-z][a-z0-9]{0,14}"
SPEC_NAME_RE = r"[a-z](?:[a-z0-9-]{0,18}[a-z0-9])?"

SpecName = Annotated[str, _pattern(
    "name", SPEC_NAME_RE,
    "topology name: 1-20 lowercase letters, digits or hyphens, starting with a letter and not "
    "ending with a hyphen (it becomes a namespace prefix)",
)]
NodeName = Annotated[str, _pattern("node_name", NODE_NAME_RE, NODE_NAME_RULE)]
IfName = Annotated[str, _pattern("ifname", IFNAME_RE, IFNAME_RULE)]
FlowName = Annotated[str, _pattern(
    "flow_name", r"[a-z][a-z0-9_-]{0,31}",
    "flow name: 1-32 lowercase letters, digits, '_' or '-', starting with a letter",
)]


class Endpoint(NamedTuple):
    """One end of a link as written: ``r1`` or ``r1:eth1``."""

    node: str
    ifname: Union[str, None] = None

    def __str__(self) -> str:
        return self.node if self.ifname is None else f"{self.node}:{self.ifname}"


def _endpoint(value: Any) -> Endpoint:
    if isinstance(value, Endpoint):
        return value
    if not isinstance(value, str):
        raise user_error("endpoint", f"{value!r} is not a link endpoint (write r1 or \"r1:eth1\")")
    node, sep, ifname = value.partition(":")
    if not re.fullmatch(NODE_NAME_RE, node):
        raise user_error("endpoint", f"{node!r} in {value!r} is not a valid {NODE_NAME_RULE}")
    if sep and not re.fullmatch(IFNAME_RE, ifname):
        raise user_error("endpoint", f"{ifname!r} in {value!r} is not a valid {IFNAME_RULE}")
    if sep and ifname == "lo":
        raise user_error("endpoint", f"{value!r}: 'lo' is the loopback interface and cannot be a link end")
    return Endpoint(node, ifname if sep else None)


EndpointValue = Annotated[Endpoint, BeforeValidator(_endpoint), PlainSerializer(str, return_type=str)]


class LinkRef(NamedTuple):
    """A reference to a link: its index in ``links``, or its ends (``r1-r2``, ``r1:eth2-r2:eth2``)."""

    index: Union[int, None] = None
    a: Union[Endpoint, None] = None
    b: Union[Endpoint, None] = None

    def __str__(self) -> str:
        return str(self.index) if self.index is not None else f"{self.a}-{self.b}"


_LINKREF_HELP = "a link is named by its index in links (0, 1, ...) or by its ends, e.g. r1-r2 or r1:eth2-r2:eth2"


def _link_ref(value: Any) -> LinkRef:
    if isinstance(value, LinkRef):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise user_error("link_ref", f"{value} is not a link ({_LINKREF_HELP})")
        return LinkRef(index=value)
    if isinstance(value, str):
        parts = value.split("-")
        if len(parts) == 2:
            try:
                return LinkRef(a=_endpoint(parts[0].strip()), b=_endpoint(parts[1].strip()))
            except PydanticCustomError:
                pass
    raise user_error("link_ref", f"{value!r} is not a link ({_LINKREF_HELP})")


LinkRefValue = Annotated[
    LinkRef, BeforeValidator(_link_ref),
    PlainSerializer(lambda r: r.index if r.index is not None else str(r)),
]


class LinkMultiple(NamedTuple):
    """A flow's rate written as a multiple of a link's rate: ``10x r2-r3`` is ten times the rate of link
    r2-r3 in the direction r2 -> r3 (a link named by its index: from its first end to its second)."""

    factor: float
    link: LinkRef

    def __str__(self) -> str:
        return f"{self.factor:g}x {self.link}"


_MULTIPLE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*[x\u00d7]\s*(\S.*?)\s*$")


def _flow_rate(value: Any) -> Union[int, LinkMultiple]:
    if isinstance(value, LinkMultiple):
        return value
    match = _MULTIPLE.match(value) if isinstance(value, str) else None
    if match is None:
        try:
            return units.parse_bandwidth(value)
        except units.UnitError as err:
            raise user_error("bandwidth", f"{err}; or a multiple of a link's rate, e.g. 10x r2-r3") from None
    factor = float(match.group(1))
    if factor <= 0:
        raise user_error("bandwidth", f"{value!r}: the multiple of a link's rate must be greater than zero")
    link_text = match.group(2)
    link = _link_ref(int(link_text) if link_text.isdigit() else link_text)
    return LinkMultiple(factor, link)


def _show_rate(value: Union[int, LinkMultiple]) -> str:
    return str(value) if isinstance(value, LinkMultiple) else units.format_bandwidth(value)


#: A flow's rate: a bandwidth (``60mbit``) or a multiple of a link's rate (``10x r2-r3``), which the
#: topology resolves to bits per second once its links are known (``Spec`` holds only bits per second).
FlowRate = Annotated[Union[int, LinkMultiple], BeforeValidator(_flow_rate),
                     PlainSerializer(_show_rate, return_type=str, when_used="json")]


def _ipv4_pool(value: Any) -> ipaddress.IPv4Network:
    if isinstance(value, ipaddress.IPv4Network):
        return value
    try:
        net = ipaddress.IPv4Network(str(value), strict=True)
    except ValueError as err:
        raise user_error("ipv4_network", f"{value!r} is not an IPv4 network ({err}; example: 10.10.0.0/16)") from None
    if net.prefixlen > 30:
        raise user_error("ipv4_network", f"{value!r} is too small: the pool must hold at least one /30 (example: 10.10.0.0/16)")
    return net


def _ipv4_address(value: Any) -> ipaddress.IPv4Interface:
    if isinstance(value, ipaddress.IPv4Interface):
        return value
    if not isinstance(value, str) or "/" not in value:
        raise user_error("ipv4_interface", f"{value!r} is not an address with prefix length (example: 10.0.0.1/30)")
    try:
        return ipaddress.IPv4Interface(value)
    except ValueError as err:
        raise user_error("ipv4_interface", f"{value!r} is not an IPv4 address with prefix ({err}; example: 10.0.0.1/30)") from None


IPv4Pool = Annotated[ipaddress.IPv4Network, BeforeValidator(_ipv4_pool), PlainSerializer(str, return_type=str)]
IPv4Address = Annotated[ipaddress.IPv4Interface, BeforeValidator(_ipv4_address), PlainSerializer(str, return_type=str)]
