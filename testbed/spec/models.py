"""The typed topology: pydantic models for every section of a topology file.

Values are stored parsed: bandwidths in bits/s, durations in nanoseconds,
percentages as floats (0..100), sizes in bytes, priorities as ``Priority``.
Field-level rules (types, units, ranges, names, unknown keys) live here; rules
that relate several parts (links to nodes, flows to nodes, references from the
scenario) live in ``checks.py`` and run in the after-validator of ``Spec``
(``topology.py``), so a ``Spec`` that exists is always consistent. The router
settings' fields (``RouterSettings``, ``Limits``, ``RoleLimits``) are made from
the router's own declarations (router/settings.py) by ``settingfields.py``.
"""
from __future__ import annotations

import ipaddress
import re
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

from pydantic import (
    BaseModel, ConfigDict, Discriminator, Field, StrictBool, Tag, ValidationInfo, create_model, field_validator,
    model_validator,
)
from pydantic import AfterValidator, BeforeValidator, PlainSerializer
from typing_extensions import Annotated, Literal

from router.codec import PAYLOAD_HEADER_SIZE
from router.keyexpr import KeyExprError, validate as validate_key
from router.queries import MAX_QUERY_PAYLOAD
from router.settings import LIMITS_SETTINGS, ROLE_SETTINGS, ROUTER_SETTINGS

from runfolder import units
from runfolder.expectations import (Expectation, ExpectationError,
                                     check_metric, check_selectors, parse_value, split_compact)
from runfolder.priorities import Priority
from runfolder.wording import did_you_mean
from .settingfields import spec_fields
from .fieldtypes import (
    Bandwidth, Duration, EndpointValue, FlowCount, FlowName, FlowRate, IPv4Address, IPv4Pool, LinkRef, LinkRefValue,
    LossPercent, NodeName, Percent, PositiveDuration, PositiveInt, PositivePercent, PositiveSize, PriorityValue,
    QueueLength, SpecName, Weight, user_error, _link_ref,
)

__all__ = [
    "StrictModel", "ShapingParams", "LinkParams", "SHAPING_FIELDS", "JITTER_DISTRIBUTIONS", "LOSS_MODELS",
    "QDISC_KINDS", "GilbertElliottLossParams", "RandomLossParams", "ReorderParams", "PfifoParams", "FqCodelParams",
    "CakeParams", "RedParams", "PieParams", "RouterSettings", "Defaults", "NodeSpec", "LinkSpec",
    "ZpubFlow", "ConstantFlow", "BurstFlow", "QueryFlow", "QueryableSpec", "Flow",
    "SetLinkEvent", "LinkDownEvent", "LinkUpEvent", "StartFlowEvent", "StopFlowEvent",
    "KillRouterEvent", "RestartRouterEvent", "Event",
    "CaptureSpec", "ExpectationEntry", "ExpectationValue", "MetricName", "DEFAULT_WEIGHT",
]

DEFAULT_WEIGHT = 100
_MS = 10**6
_S = 10**9


class StrictModel(BaseModel):
    """Unknown keys are errors; parsed values never change."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# --- links -------------------------------------------------------------------

#: the keys of one direction's shaping, as a topology writes them (docs/spec.md "Link shaping")
SHAPING_FIELDS = ("bw", "delay", "jitter", "distribution", "correlation", "loss", "duplicate", "corrupt", "reorder",
                  "queue", "qdisc")

#: the distributions netem draws a delay's jitter from (``uniform``: netem's own, without a table)
JITTER_DISTRIBUTIONS = ("normal", "pareto", "paretonormal", "uniform")
LOSS_MODELS = ("gilbert-elliott", "random")
QDISC_KINDS = ("pfifo", "fq_codel", "cake", "red", "pie")


class GilbertElliottLossParams(StrictModel):
    """``loss: {model: gilbert-elliott, p: 1%, r: 25%}``: netem's ``loss gemodel p r 1-h 1-k``."""

    model: Literal["gilbert-elliott"]
    p: PositivePercent = Field(description="chance per packet of going from the good state to the bad one")
    r: PositivePercent = Field(description="chance per packet of going from the bad state back to the good one")
    loss_bad: Percent = Field(default=100.0, description="loss in the bad state (netem's 1-h)")
    loss_good: Percent = Field(default=0.0, description="loss in the good state (netem's 1-k)")


class RandomLossParams(StrictModel):
    """``loss: {model: random, rate: 1%, correlation: 25%}``: netem's ``loss random P [CORRELATION]``."""

    model: Literal["random"]
    rate: LossPercent
    correlation: Optional[Percent] = None


def _loss_kind(value: Any) -> str:
    if isinstance(value, dict):
        return value.get("model")
    if isinstance(value, BaseModel):
        return getattr(value, "model")
    return "rate"


def _known_loss_model(value: Any) -> Any:
    if isinstance(value, dict) and value.get("model") not in LOSS_MODELS:
        given = value.get("model")
        what = "has no 'model'" if given is None else f"model {given!r} is not a loss model"
        hint = did_you_mean(given, LOSS_MODELS, {"ge": "gilbert-elliott", "gemodel": "gilbert-elliott"}) if given else ""
        raise user_error("loss", f"{what} ({hint}allowed: {', '.join(LOSS_MODELS)}); e.g. loss: {{model: gilbert-elliott, "
                                 "p: 1%, r: 25%}, or a rate: loss: 1%")
    return value


#: ``loss``: a rate (``1%``) or a loss model (a mapping with ``model``)
LossValue = Annotated[
    Union[Annotated[LossPercent, Tag("rate")], Annotated[GilbertElliottLossParams, Tag("gilbert-elliott")],
          Annotated[RandomLossParams, Tag("random")]],
    Discriminator(_loss_kind), BeforeValidator(_known_loss_model)]


class ReorderParams(StrictModel):
    """``reorder: 25%`` or ``{rate: 25%, gap: 5, correlation: 50%}``: netem's ``reorder P [CORR] gap N``."""

    rate: Percent
    gap: Optional[PositiveInt] = None
    correlation: Optional[Percent] = None


def _reorder_mapping(value: Any) -> Any:
    return value if isinstance(value, (dict, BaseModel)) else {"rate": value}


ReorderValue = Annotated[ReorderParams, BeforeValidator(_reorder_mapping)]


class PfifoParams(StrictModel):
    """``qdisc: pfifo``: a FIFO of ``queue`` packets (what a link has without ``qdisc``)."""

    kind: Literal["pfifo"]


class FqCodelParams(StrictModel):
    """``qdisc: {kind: fq_codel, target: 5ms, interval: 100ms, limit: 1000, flows: 1024, ecn: true}``."""

    kind: Literal["fq_codel"]
    target: Optional[PositiveDuration] = None
    interval: Optional[PositiveDuration] = None
    limit: Optional[QueueLength] = None
    flows: Optional[FlowCount] = None
    ecn: Optional[StrictBool] = None


class CakeParams(StrictModel):
    """``qdisc: {kind: cake, rtt: 100ms}`` (cake shapes no rate here: the link's htb does)."""

    kind: Literal["cake"]
    rtt: Optional[PositiveDuration] = None


class RedParams(StrictModel):
    """``qdisc: {kind: red, min: 30kb, max: 90kb, probability: 2%, burst: 55, limit: 1mb, ecn: true}``."""

    kind: Literal["red"]
    min: Optional[PositiveSize] = None
    max: Optional[PositiveSize] = None
    probability: Optional[PositivePercent] = None
    burst: Optional[PositiveInt] = None
    limit: Optional[PositiveSize] = None
    ecn: Optional[StrictBool] = None

    @field_validator("max")
    @classmethod
    def _max_above_min(cls, value: Optional[int], info: ValidationInfo) -> Optional[int]:
        low = info.data.get("min")
        if value is not None and low is not None and value <= low:
            raise user_error("red", f"max ({units.format_size(value)}) must be above min ({units.format_size(low)}): "
                                    "RED marks with a rising chance between the two")
        return value

    @field_validator("limit")
    @classmethod
    def _limit_holds_max(cls, value: Optional[int], info: ValidationInfo) -> Optional[int]:
        high = info.data.get("max")
        if value is not None and high is not None and value < high:
            raise user_error("red", f"limit ({units.format_size(value)}) must be at least max "
                                    f"({units.format_size(high)}): the queue must hold what RED lets in")
        return value


class PieParams(StrictModel):
    """``qdisc: {kind: pie, target: 15ms, limit: 1000, ecn: true}``."""

    kind: Literal["pie"]
    target: Optional[PositiveDuration] = None
    limit: Optional[QueueLength] = None
    ecn: Optional[StrictBool] = None


def _qdisc_mapping(value: Any) -> Any:
    kind = value.get("kind") if isinstance(value, dict) else value
    if isinstance(value, BaseModel):
        return value
    if kind not in QDISC_KINDS:
        what = "has no 'kind'" if kind is None else f"{kind!r} is not a queue discipline"
        hint = did_you_mean(kind, QDISC_KINDS, {"fifo": "pfifo", "codel": "fq_codel"}) if kind is not None else ""
        raise user_error("qdisc", f"{what} ({hint}allowed: {', '.join(QDISC_KINDS)}); e.g. qdisc: fq_codel, or qdisc: "
                                  "{kind: fq_codel, target: 5ms}")
    return value if isinstance(value, dict) else {"kind": kind}


#: ``qdisc``: a queue discipline's name, or a mapping with its ``kind`` and parameters
QdiscValue = Annotated[Union[PfifoParams, FqCodelParams, CakeParams, RedParams, PieParams],
                       Field(discriminator="kind"), BeforeValidator(_qdisc_mapping)]


class ShapingParams(StrictModel):
    """How one direction of a link is shaped; every field optional (docs/spec.md "Link shaping")."""

    bw: Optional[Bandwidth] = None
    delay: Optional[Duration] = None
    jitter: Optional[Duration] = None
    distribution: Optional[Literal["normal", "pareto", "paretonormal", "uniform"]] = None
    correlation: Optional[Percent] = Field(default=None, description="delay correlation (netem)")
    loss: Optional[LossValue] = None
    duplicate: Optional[Percent] = None
    corrupt: Optional[Percent] = None
    reorder: Optional[ReorderValue] = None
    queue: Optional[QueueLength] = Field(default=None, description="queue limit in packets")
    qdisc: Optional[QdiscValue] = None


class LinkParams(ShapingParams):
    """Shaping plus the link's routing weight (weight is per link, not per direction)."""

    weight: Optional[Weight] = None


def _two(kind: str, example: str):
    def validate(value: Any) -> Any:
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise user_error(kind, f"{value!r} must be a list of exactly two items, e.g. {example}")
        return value

    return BeforeValidator(validate)


EndpointPair = Annotated[Tuple[EndpointValue, EndpointValue], _two("endpoints", '[r1, r2] or ["r1:eth1", "r2:eth1"]')]
AddressPair = Annotated[Tuple[IPv4Address, IPv4Address], _two("addresses", "[10.0.0.1/30, 10.0.0.2/30]")]


class LinkSpec(LinkParams):
    """A point-to-point link; ``egress`` shapes one direction (traffic leaving that node)."""

    endpoints: EndpointPair
    addresses: Optional[AddressPair] = None
    egress: Dict[str, ShapingParams] = Field(default_factory=dict)

    def params(self) -> LinkParams:
        """The link's own shaping and weight, without endpoints, addresses and egress."""
        return LinkParams.model_construct(**{k: getattr(self, k) for k in LinkParams.model_fields})


# --- routers and nodes ------------------------------------------------------

class _RoleLimitsRules(StrictModel):
    @model_validator(mode="after")
    def _burst_needs_rate(self) -> "RoleLimits":
        if self.input_burst is not None and self.input_rate is None:
            raise user_error("input_burst", "input_burst is the depth of the input_rate bucket: give input_rate too")
        return self


#: Resource limits for one role of endpoint (clients, or neighbour routers): docs/router.md "Resource limits".
#: One field per router.settings.ROLE_SETTINGS; unset keys keep the router's own defaults.
RoleLimits = create_model("RoleLimits", __base__=_RoleLimitsRules, __module__=__name__,
                          **spec_fields(ROLE_SETTINGS, all_optional=True))


def merge_set_keys(base: Any, override: Any) -> Any:
    """``base`` with every key that ``override`` sets explicitly replaced; a key holding a model on both
    sides is merged the same way (so a node can change one limit and keep the others)."""
    if override is None:
        return base
    update: Dict[str, Any] = {}
    for key in override.model_fields_set:
        mine, theirs = getattr(base, key), getattr(override, key)
        both_models = isinstance(mine, BaseModel) and isinstance(theirs, BaseModel)
        update[key] = merge_set_keys(mine, theirs) if both_models else theirs
    return base.model_copy(update=update)


#: The router's resource limits (router key ``limits``): one field per router.settings.LIMITS_SETTINGS;
#: unset keys keep the router's defaults.
Limits = create_model("Limits", __base__=StrictModel, __module__=__name__,
                      **spec_fields(LIMITS_SETTINGS, {"role": RoleLimits}, all_optional=True))


class _RouterSettingsBase(StrictModel):
    """Settings of the router under test on a node (defaults, then per-node overrides)."""

    def merged(self, override: Optional["RouterSettings"]) -> "RouterSettings":
        """These settings with every key that ``override`` sets explicitly replaced (``limits``
        key by key, so a node can change one limit and keep the others)."""
        return merge_set_keys(self, override)


#: One field per router setting with a name in the spec (router.settings.ROUTER_SETTINGS): docs/spec.md
#: "Router settings".
RouterSettings = create_model("RouterSettings", __base__=_RouterSettingsBase, __module__=__name__,
                              **spec_fields(ROUTER_SETTINGS, {"limits": Limits}))


class Defaults(StrictModel):
    link: LinkParams = Field(default_factory=LinkParams)
    router: RouterSettings = Field(default_factory=RouterSettings)
    address_pool: IPv4Pool = ipaddress.IPv4Network("10.10.0.0/16")


class NodeSpec(StrictModel):
    kind: Literal["router", "host"] = "router"
    router: Optional[RouterSettings] = None
    #: the ssh backend: the inventory host this node runs on (default: the host named like the node)
    host: Optional[str] = None


def _empty_is_default(value: Any) -> Any:
    return {} if value is None else value


NodeValue = Annotated[NodeSpec, BeforeValidator(_empty_is_default)]

# --- traffic -----------------------------------------------------------------

_KEY_RE = re.compile(r"[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*")


def _key_expr(value: Any) -> Any:
    if not isinstance(value, str) or not _KEY_RE.fullmatch(value):
        raise user_error(
            "key", f"{value!r} is not a key: use '/'-separated words of letters, digits, '_', '-', '.', "
            "without wildcards, e.g. demo/example"
        )
    return value


KeyExpr = Annotated[str, BeforeValidator(_key_expr)]
NodeList = Annotated[List[NodeName], Field(min_length=1)]


class ZpubFlow(StrictModel):
    """The z_pub/z_sub experiment: data publisher pub1 stops, pub2 starts, a realtime publisher throughout.

    Times are on the run clock (0 = traffic start). pub1 publishes from
    ``start_delay`` to ``pub1_stop``, pub2 from ``pub2_start`` to the end,
    the realtime publisher from ``start_delay`` to the end; the end is
    ``duration`` if given, else the run's duration.
    """

    profile: Literal["zpub"]
    name: FlowName = "zpub"
    node: NodeName
    subscribers: NodeList
    key_prefix: KeyExpr = "demo/example"
    start_delay: Duration = 5 * _S
    pub1_stop: Duration = 30 * _S
    pub2_start: Duration = 30 * _S
    duration: Optional[PositiveDuration] = None
    rate: Bandwidth = 2_000_000
    tick: PositiveDuration = 50 * _MS
    size: Optional[PositiveSize] = Field(default=None, description="bytes per message; default rate*tick/8")
    data_priority: PriorityValue = Priority.DATA
    realtime_priority: PriorityValue = Priority.REAL_TIME

    @property
    def sub_flows(self) -> Tuple[str, str, str]:
        """Names of the three publishers, usable in expect and scenario: ``<name>.pub1`` ..."""
        return (f"{self.name}.pub1", f"{self.name}.pub2", f"{self.name}.realtime")

    def message_size(self) -> int:
        if self.size is not None:
            return self.size
        return max(1, self.rate * self.tick // (8 * _S))


class SlowSubscriber(StrictModel):
    """A subscriber of a flow that reads slowly (``read_rate``) or, without a ``read_rate``, not at
    all, from ``from`` on (run clock): its own client connection on ``node``, beside the flow's
    ordinary subscribers, so the router sees one slow endpoint among fast ones."""

    node: NodeName
    read_rate: Optional[Bandwidth] = None
    from_: Duration = Field(default=0, alias="from")


class ConstantFlow(StrictModel):
    """One publisher at a constant rate to one or more subscribers."""

    profile: Literal["constant"]
    name: FlowName
    from_: NodeName = Field(alias="from")
    to: NodeList
    key: Optional[KeyExpr] = None
    #: a bandwidth, or a multiple of a link's rate (``10x r2-r3``), which the topology turns into bits per second
    rate: FlowRate
    size: PositiveSize = 1024
    priority: PriorityValue = Priority.DATA
    congestion_control: Literal["block", "drop"] = "drop"
    express: StrictBool = False
    start: Duration = 0
    stop: Optional[Duration] = None
    #: subscribers that read slowly or stop reading (the flow's figures are those of ``to``; theirs are apart)
    slow_subscribers: List[SlowSubscriber] = Field(default_factory=list)

    @property
    def key_expr(self) -> str:
        return self.key if self.key is not None else f"flows/{self.name}"


class BurstFlow(ConstantFlow):
    """A constant flow that publishes for ``on``, pauses for ``off``, and repeats."""

    profile: Literal["burst"]  # type: ignore[assignment]
    on: PositiveDuration
    off: PositiveDuration


def _query_key(value: Any) -> Any:
    if not isinstance(value, str):
        raise user_error("key", f"{value!r} is not a key expression (e.g. svc/lookup or svc/**)")
    try:
        validate_key(value)
    except KeyExprError as err:
        raise user_error("key", f"{err} (e.g. svc/lookup or svc/**)") from None
    return value


def _per_second(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_QUERIES_PER_SECOND:
        raise user_error("per_second", f"{value!r} is not a number of queries per second in (0, "
                                       f"{MAX_QUERIES_PER_SECOND}], e.g. 20 or 0.5")
    return value


#: A key expression as the router takes it: ``/``-separated chunks, ``*`` and ``**`` allowed.
QueryKey = Annotated[str, BeforeValidator(_query_key)]
MAX_QUERIES_PER_SECOND = 1000
MAX_QUERY_TIMEOUT = 60 * _S


def _payload_size(value: int, what: str) -> int:
    if value < PAYLOAD_HEADER_SIZE:
        raise user_error("size", f"{value} bytes is smaller than the {PAYLOAD_HEADER_SIZE}-byte traffic header "
                                 f"every {what} carries; use at least {PAYLOAD_HEADER_SIZE}")
    if value > MAX_QUERY_PAYLOAD:
        raise user_error("size", f"{value} bytes is more than a {what} may carry ({MAX_QUERY_PAYLOAD} bytes: queries "
                                 "and replies travel on the routers' control path)")
    return value


class QueryableSpec(StrictModel):
    """A node that answers a query flow's queries: after ``service_time``, one reply of ``reply_size`` bytes."""

    node: NodeName
    service_time: Duration = 0
    reply_size: PositiveSize = 64

    @field_validator("reply_size")
    @classmethod
    def _reply_holds_the_header(cls, value: int) -> int:
        return _payload_size(value, "reply")


class QueryFlow(StrictModel):
    """Queries from ``from`` at ``per_second`` on ``key``, answered by the queryables (docs/traffic.md)."""

    profile: Literal["query"]
    name: FlowName
    from_: NodeName = Field(alias="from")
    key: Optional[QueryKey] = None
    per_second: Annotated[float, BeforeValidator(_per_second)]
    timeout: PositiveDuration = 1 * _S
    consolidation: Literal["all", "first", "latest"] = "first"
    priority: PriorityValue = Priority.INTERACTIVE_LOW
    size: PositiveSize = 64
    queryables: Annotated[List[QueryableSpec], Field(min_length=1)]
    start: Duration = 0
    stop: Optional[Duration] = None

    @field_validator("size")
    @classmethod
    def _query_holds_the_header(cls, value: int) -> int:
        return _payload_size(value, "query")

    @field_validator("timeout")
    @classmethod
    def _timeout_at_most_a_minute(cls, value: int) -> int:
        if value > MAX_QUERY_TIMEOUT:
            raise user_error("duration", f"{units.format_duration(value)} is longer than "
                                         f"{units.format_duration(MAX_QUERY_TIMEOUT)}, the longest query timeout")
        return value

    @property
    def key_expr(self) -> str:
        return self.key if self.key is not None else f"query/{self.name}"

    @property
    def interval_ns(self) -> int:
        """Between two queries: 1 s / ``per_second``, rounded to the nanosecond."""
        return round(_S / self.per_second)


Flow = Annotated[Union[ZpubFlow, ConstantFlow, BurstFlow, QueryFlow], Field(discriminator="profile")]

# --- scenario ----------------------------------------------------------------


class _EventBase(StrictModel):
    at: Duration


class SetLinkEvent(ShapingParams, _EventBase):
    """Change a link's shaping at ``at``; ``node`` limits the change to that end's egress. Its shaping keys are
    ``ShapingParams``' (the same grammar as a link's)."""

    action: Literal["set_link"]
    link: LinkRefValue
    node: Optional[NodeName] = None

    def shaping(self) -> ShapingParams:
        """The shaping fields this event sets (unset ones are None)."""
        return ShapingParams.model_construct(**{k: getattr(self, k) for k in SHAPING_FIELDS})


class LinkDownEvent(_EventBase):
    action: Literal["link_down"]
    link: LinkRefValue


class LinkUpEvent(_EventBase):
    action: Literal["link_up"]
    link: LinkRefValue


class StartFlowEvent(_EventBase):
    action: Literal["start_flow"]
    flow: str


class StopFlowEvent(_EventBase):
    action: Literal["stop_flow"]
    flow: str


class KillRouterEvent(_EventBase):
    action: Literal["kill_router"]
    node: NodeName


class RestartRouterEvent(_EventBase):
    action: Literal["restart_router"]
    node: NodeName


Event = Annotated[
    Union[SetLinkEvent, LinkDownEvent, LinkUpEvent, StartFlowEvent, StopFlowEvent, KillRouterEvent, RestartRouterEvent],
    Field(discriminator="action"),
]

# --- capture -----------------------------------------------------------------


def _capture_links(value: Any) -> Any:
    if value in ("all", "none"):
        return value
    if isinstance(value, (list, tuple)):
        refs = []
        for i, item in enumerate(value):
            try:
                refs.append(_link_ref(item))
            except Exception as err:  # PydanticCustomError
                raise user_error("link_ref", f"item {i}: {err}") from None
        return tuple(refs)
    raise user_error("capture_links", f"{value!r} is not allowed (allowed: all, none, or a list of links such as [0, r1-r2])")


CaptureLinks = Annotated[Union[Literal["all", "none"], Tuple[LinkRefValue, ...]], BeforeValidator(_capture_links)]


class CaptureSpec(StrictModel):
    links: CaptureLinks = "all"
    snaplen: Annotated[int, Field(ge=64, le=262144)] = 262144


# --- expectations ------------------------------------------------------------
# The metric names and the grammar are runfolder.expectations' (the analysis reads them too); this model
# only validates a topology's ``expect:`` entries through them, field by field, for line-exact errors.


@contextmanager
def _shown_as_is() -> Iterator[None]:
    """An ExpectationError raised inside, shown to the user unchanged (kind: the key at fault)."""
    try:
        yield
    except ExpectationError as err:
        raise user_error(err.field or "expectation", str(err)) from None


def _checked(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def validate(value: Any) -> Any:
        with _shown_as_is():
            return check(value)
    return validate


#: the name of a metric of ``METRICS`` (what an expectation or a suite's metric is about)
MetricName = Annotated[str, BeforeValidator(_checked(check_metric))]


class ExpectationEntry(StrictModel):
    """``{metric: latency.p99, op: "<=", value: 50ms, priority: real_time}`` as validated, then read as a
    ``runfolder.expectations.Expectation``."""

    metric: MetricName
    op: Literal["<", "<=", ">", ">=", "=="]
    value: Union[int, float]
    flow: Optional[str] = None
    priority: Optional[PriorityValue] = None

    @field_validator("value", mode="before")
    @classmethod
    def _value_for_metric(cls, value: Any, info: ValidationInfo) -> Any:
        metric = info.data.get("metric")
        if metric is None:
            return 0  # the metric itself is wrong; that error is enough
        with _shown_as_is():
            return parse_value(metric, value)

    @model_validator(mode="after")
    def _selectors(self) -> "ExpectationEntry":
        with _shown_as_is():
            check_selectors(self.metric, self.flow, self.priority)
        return self

    def expectation(self) -> Expectation:
        return Expectation(self.metric, self.op, self.value, self.flow, self.priority)


#: an expectation of ``expect:``, compact (``"loss <= 1% for flow f"``) or a mapping
ExpectationValue = Annotated[ExpectationEntry, BeforeValidator(_checked(split_compact)),
                             AfterValidator(ExpectationEntry.expectation), PlainSerializer(Expectation.to_json)]

# --- the whole file ----------------------------------------------------------
# ``Spec``, the whole file, is testbed/spec/topology.py: it runs checks.py and resolve.py, which read
# the models above, so that no module of the spec package needs one that needs it.
