"""Every router setting declared once: its key in the router's config, its name in a topology's
``router:`` settings, its kind, default, range, unit and one line of doc.

From these tables follow the router's config classes and parser (router/config.py), the topology's
pydantic fields (testbed/spec/settingfields.py), the driver's key mapping (testbed/drivers/routerconfig.py)
and the settings tables of docs/router.md and docs/spec.md (router/settingsdocs.py; a test fails when
they differ). Adding a setting is one :class:`Setting` line here, plus the code that uses its value.

Standard library only: the router ships without the testbed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from .codec import DEFAULT_MAX_MESSAGE
from .scheduler import SCHEDULERS

MIB = 1024 * 1024
#: nanoseconds per unit of a duration setting (the topology holds durations in nanoseconds)
UNIT_NS = {"ms": 10**6, "us": 10**3}
#: the roles of endpoint that have limits of their own: router key -> name in a topology
ROLES = {"client": "clients", "router": "routers"}


@dataclass(frozen=True)
class Setting:
    """One router setting.

    ``kind``: ``int``, ``number``, ``bool``, ``choice``, ``per_priority`` (8 values, a list or a mapping
    priority -> value, of ``item`` kind), ``priorities`` (a list of priorities), ``string``, and the
    structured ``name``, ``address``, ``addresses``, ``neighbours``, ``limits``, ``role`` the parser
    knows one by one. ``unit``: ``ms`` / ``us`` (a duration: the topology writes ``200ms``), ``bytes``
    (a size: ``64KiB``), ``bit/s`` (a bandwidth: ``3mbit``) or none.
    """

    key: str
    spec: Optional[str]
    kind: str
    default: Any
    doc: str
    low: Optional[float] = None
    high: Optional[float] = None
    unit: str = ""
    #: null is allowed, and means this (``""``: null is refused; ``off``: a topology may write ``off``)
    null: str = ""
    #: 0 means the same as null (off)
    zero_is_null: bool = False
    choices: Tuple[str, ...] = ()
    #: ``per_priority``: the kind of each value (``int`` or ``number``)
    item: str = "int"
    #: ``per_priority`` in a topology: ``mapping`` (``{priority: value}``, the router's defaults for the rest)
    #: or ``all`` (one value for all eight priorities)
    spec_form: str = "mapping"
    #: the default as the docs say it, when it follows from other keys
    default_doc: str = ""
    #: the testbed's default in the router's unit when it is not the router's (None: the router's)
    spec_default: Any = None
    #: where the value lives: ``pipeline`` (``RouterConfig.pipeline``) or the config itself
    section: str = ""
    #: ``role`` settings: the default of each role (``LimitsConfig.client`` / ``.router``) when not ``default``
    by_role: Mapping[str, Any] = field(default_factory=dict)


S = Setting

#: The router's top-level config keys (docs/router.md "Configuration"), in the docs' order.
ROUTER_SETTINGS: Tuple[Setting, ...] = (
    S("node", None, "name", None, "router name, unique in the network, no `/`", default_doc="required"),
    S("router_listen", None, "addresses", (), "where neighbour routers connect"),
    S("client_listen", None, "addresses", (),
      "where clients connect (at least one of the two lists is required)"),
    S("neighbours", None, "neighbours", (),
      "routers this one dials (see below); a link needs to be configured on one side only"),
    S("lease_ms", "lease", "int", 3000, "a connection silent this long is declared dead", low=100, unit="ms"),
    S("keepalive_ms", "keepalive", "int", 750,
      "send a keep-alive after this long without sending; must be shorter than [[lease_ms]]", low=10, unit="ms",
      default_doc="lease/4", spec_default=1000),
    S("reconnect_initial_ms", None, "int", 100, "first retry delay when dialling a neighbour fails", low=1,
      unit="ms"),
    S("reconnect_max_ms", None, "int", 2000, "retry delays double up to this", low=1, unit="ms"),
    S("route_debounce_ms", None, "int", 20, "tree recomputation waits this long after a link-state change", low=0,
      unit="ms"),
    S("route_hold_factor", None, "int", 10,
      "and not less than this many times the last computation's duration after its end (a flood of changes — a "
      "hundred routers starting — costs at most about 1/10 of the router's time; a single change after a quiet "
      "spell is acted on after the debounce alone); 0: the debounce only. Only changes of links and weights wait: "
      "an LSP that changes a router's subscriptions alone changes no tree and is applied at once "
      "(`subscriptions_updated`)", low=0),
    S("route_hold_max_ms", None, "int", 2000,
      "the hold above never exceeds this (0: no ceiling). The duration is wall time, so on a crowded machine it is "
      "mostly time spent waiting for a core; a router that holds a change back forwards on stale trees, and its "
      "neighbours' newer trees send it messages it has no route for", low=0, unit="ms"),
    S("query_channels", "query_channels", "int", 8,
      "queries: at most this many of a router's queries outstanding at one serving router at once "
      "([protocol.md, Queries](protocol.md#queries))", low=1, high=1024),
    S("query_attempt_timeout_ms", "query_attempt_timeout", "int", 1000,
      "queries: one attempt at a serving router times out after this, within the query's own timeout (then a "
      "`first` query is retried on another); keep it above the queryables' `service_time`", low=1, unit="ms"),
    S("queue_sizes", "queue_batches", "per_priority", (1, 1, 1, 1, 2, 4, 2, 1),
      "per-priority queue size **in batches** on router links (Zenoh's defaults); a topology gives one number "
      "for all eight priorities", low=1, spec_form="all", section="pipeline"),
    S("client_queue_sizes", None, "per_priority", None, "the same for router → client connections", low=1,
      null="= `queue_sizes`"),
    S("batch_size_bytes", "batch_bytes", "int", 65535, "maximum DATA frame size (bytes per batch)", low=256,
      high=16 * MIB, unit="bytes", section="pipeline"),
    S("batch_threshold_bytes", None, "int", 32768, "a filling batch leaves once it holds this many bytes (at most "
      "the batch size)", low=1, unit="bytes", default_doc="min(32768, batch size)", section="pipeline"),
    S("batch_time_limit_us", "batch_time", "int", 1000,
      "a filling batch leaves at the latest this long after its first write", low=0, unit="us", section="pipeline"),
    S("drop_deadline_ms", "drop_deadline", "number", 1.0,
      "a Drop message waits at most this long for queue room, then is dropped and counted", low=0, unit="ms",
      section="pipeline"),
    S("drop_deadlines_ms", "drop_deadlines", "per_priority", None, "the drop deadline of each priority given "
      "(`{data_low: 0}`: never wait for room at data_low)", low=0, unit="ms", item="number",
      null="[[drop_deadline_ms]]", section="pipeline"),
    S("close_deadline_ms", "close_deadline", "number", 5000.0,
      "a Block message waits at most this long, then the outgoing link is closed and reported", low=0,
      unit="ms", section="pipeline"),
    S("scheduler", "scheduler", "choice", "strict",
      "link scheduler over the priority queues ([router.md, Transmission pipeline]"
      "(router.md#transmission-pipeline)); `contention_polling` is the reference's contention window (by "
      "priority) and polling window (by [[wrr_weights]])", choices=SCHEDULERS,
      section="pipeline"),
    S("wrr_weights", "wrr_weights", "per_priority", (8, 8, 8, 8, 4, 2, 1, 1),
      "per-priority weights for `wrr` and for the polling windows of `contention_polling`", low=1,
      section="pipeline"),
    S("contention_window_us", None, "int", 20_000,
      "`contention_polling`: length of the contention window (served by priority)", low=0, high=60_000_000,
      unit="us", section="pipeline"),
    S("polling_window_us", None, "int", 80_000,
      "`contention_polling`: length of the polling window (served by weight); the two windows may not both be 0",
      low=0, high=60_000_000, unit="us", section="pipeline"),
    S("metrics_listen", None, "address", None, "HTTP endpoint for `/metrics` and `/admin/*`", null="none"),
    S("admin_token", None, "string", None,
      "bearer token for `/admin/*`; without it `/admin/*` answers only loopback clients", low=8, null="none"),
    S("event_log", None, "string", None, "JSON-lines event log (appended)", null="stdout"),
    S("log_level", "log_level", "choice", "INFO",
      "the router's log level; the environment variable `ROUTER_LOG_LEVEL` overrides it",
      choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")),
    S("event_loop", "event_loop", "choice", "auto",
      "the event loop: `auto` is uvloop when it is importable (the node bundle ships its wheel where one exists "
      "for the node), else asyncio's standard loop; `asyncio` forces the standard loop; `uvloop` refuses to start "
      "without it. The `ready` event says which ran",
      choices=("auto", "asyncio", "uvloop")),
    S("congestion_aware", "congestion_aware", "bool", True,
      "the switch: false = no congestion monitor and no flow pinning (data trees still exist and follow data "
      "weights set through the admin API)"),
    S("monitor_interval_ms", "monitor_interval", "int", 1000,
      "congestion monitor period (the reference uses 5 s)", low=10, unit="ms"),
    S("monitor_buffer_bps", None, "int", None, "the `buffer` in `cap_limit`", low=0, unit="bit/s",
      null="5% of the link's `link_capacity_bps`"),
    S("recovery_ratio", None, "number", 0.2,
      "restore a blocked link when data throughput < this × `cap_limit` (below 1)", low=0),
    S("block_weight", None, "int", 65535, "data weight of a blocked link", low=1, high=65535),
    S("restore_weight", None, "int", None,
      "data weight set when the link is restored (below [[block_weight]]); null: back to the link's configured "
      "data weight (its `data_weight`, else its `weight` — 100 by default, as in the reference)", low=1,
      high=65535, null="the link's data weight"),
    S("flow_ttl_ms", "flow_ttl", "int", 5000, "a flow idle this long expires (and is unpinned)", low=1, unit="ms"),
    S("flow_sweep_ms", None, "int", 1000, "how often expired flows are swept", low=1, unit="ms"),
    S("data_priorities", "data_priorities", "priorities", (4, 5, 6, 7),
      "priorities routed on the data trees (congestion-aware routing); the others use the default trees"),
    S("high_priorities", None, "priorities", (0, 1, 2, 3),
      "what counts as high-priority throughput in `cap_limit`"),
    S("tcp_notsent_lowat", None, "int", 32768, "`TCP_NOTSENT_LOWAT` on router-to-router sockets (see below); 0 or null: off",
      low=0, high=64 * MIB, unit="bytes", null="off", zero_is_null=True),
    S("client_tcp_notsent_lowat", None, "int", 262144,
      "the same on router-to-client sockets: larger, so a fast local client costs no throughput, yet bounded, so "
      "what a slow reader has not read stays in its pipeline where the resource limits count it; 0 or null: off", low=0,
      high=64 * MIB, unit="bytes", null="off", zero_is_null=True),
    S("limits", "limits", "limits", None,
      "resource limits: bytes per endpoint and in total, noisy senders, slow readers ([router.md, Resource "
      "limits](router.md#resource-limits))", default_doc="see [Resource limits](router.md#resource-limits)"),
    S("fragmentation", "fragmentation", "bool", True,
      "a message larger than a batch leaves as FRAGMENT frames no larger than a batch, other priorities between "
      "them; false: one oversize DATA frame ([router.md, Large messages](router.md#large-messages))",
      section="pipeline"),
    S("max_message_bytes", "max_message", "int", DEFAULT_MAX_MESSAGE,
      "the largest message a connection reassembles from fragments", low=1024, high=1024 * MIB, unit="bytes",
      section="pipeline"),
    S("streaming_links", "streaming_links", "bool", True,
      "a message of at least [[streaming_threshold_bytes]] goes to the next router or the subscriber over a "
      "stream connection of its pool, not the shared connection"),
    S("streaming_threshold_bytes", "streaming_threshold", "int", 262144,
      "the size (encoded message) from which a message is streaming", low=1, unit="bytes"),
    S("stream_pool_max_idle", "stream_pool_idle", "int", 4,
      "free stream connections kept per endpoint; more are closed after [[stream_idle_ms]] free", low=0,
      high=1024),
    S("stream_pool_max_busy", "stream_pool_busy", "int", 4,
      "stream connections carrying a message at once per endpoint; a large message beyond them goes on the "
      "shared connection", low=1, high=1024),
    S("stream_idle_ms", "stream_idle", "int", 10000,
      "how long a free stream connection beyond [[stream_pool_max_idle]] is kept", low=1, unit="ms"),
    S("stream_pacing", "stream_pacing", "number", 0.8,
      "stream connections to a router are paced by the kernel at this share of the link's capacity "
      "(`link_capacity_bps`, the link's `bw`), so a large message never fills the link's queue ahead of the "
      "shared connection; 0: not paced", low=0, high=1),
)

#: The keys of ``limits`` (docs/router.md "Resource limits").
LIMITS_SETTINGS: Tuple[Setting, ...] = (
    S("total_bytes", "total", "int", 64 * MIB,
      "DATA bytes in all pipelines together; a message that would pass it finds no room (it waits or is dropped "
      "as its congestion control says). Checked when a message opens a batch (on every message the check would "
      "cost the fast path ~40 ns): a batch being filled can take the total past the limit by at most its own size "
      "(`batch_size_bytes`), so the total is bounded by [[total_bytes]] + one batch per connection and priority "
      "in use", low=1, unit="bytes", null="no limit"),
    S("control_bytes", "control", "int", 1 * MIB,
      "control bytes waiting for one endpoint. Control frames never count against the data limits and are always "
      "written first, so data can never take their room; an endpoint past this limit does not read its control "
      "messages and is **disconnected** (reason `control queue over its limit ...`), as AllJoyn's "
      "`maxControlMessages`", low=1024, unit="bytes"),
    S("client", "clients", "role", None, "the limits of each client (the keys below)"),
    S("router", "routers", "role", None, "the limits of each neighbour router (the keys below)"),
    S("check_interval_ms", None, "int", 100,
      "period of the check that notices slow readers nobody pushes to and ends noisy / slow states", low=10,
      high=10_000, unit="ms"),
    S("declarations_per_client", "declarations", "int", 10_000,
      "subscriptions and queryables one client may hold together; the declaration past it **disconnects** the "
      "client with a CLOSE whose reason names the limit (`too many declarations: N subscriptions and M "
      "queryables held, limit L (limits.declarations_per_client); ...`; the client library raises it as "
      "`ClosedError`), an event `declarations_refused` and `router_declarations_refused_total`. Re-declaring an "
      "id replaces its key and does not count again", low=1, null="off"),
)

#: The keys of ``limits.client`` and ``limits.router``, the limits of one role of endpoint.
ROLE_SETTINGS: Tuple[Setting, ...] = (
    S("endpoint_bytes", "endpoint", "int", None,
      "DATA bytes waiting for one endpoint; past it the endpoint's queue counts as full", low=1, unit="bytes",
      null="no limit", by_role={"client": 8 * MIB, "router": 16 * MIB}),
    S("sender_bytes", "sender", "int", None,
      "DATA bytes from one endpoint waiting in all pipelines; past it the sender is **noisy** (cause "
      "`sender_bytes`). They include bytes waiting for slow readers.", low=1, unit="bytes", null="no limit"),
    S("input_rate_bps", "input_rate", "int", None,
      "input rate (token bucket) above which the sender is **noisy** (cause `input_rate`)", low=1, unit="bit/s",
      null="no limit"),
    S("input_burst_bytes", "input_burst", "int", None,
      "the token bucket's depth (only with [[input_rate_bps]])", low=1, unit="bytes", null="100 ms at the rate, "
      "≥ 64 KiB"),
    S("noisy_policy", "noisy_policy", "choice", "throttle",
      "`throttle`: the router stops reading the sender for as long as its bucket is in debt (10 ms per frame "
      "while it holds more than [[sender_bytes]]), so TCP pushes back on it and its input is read at the rate; "
      "`drop`: while it is over, its messages at [[drop_priorities]] are dropped on arrival (only the messages "
      "forwarded count against its rate, so it is policed down to the rate) and its other priorities pass; "
      "`disconnect`: its connection is closed", choices=("throttle", "drop", "disconnect")),
    S("drop_priorities", "drop_priorities", "priorities", (4, 5, 6, 7),
      "the priorities the `drop` policy drops (numbers or names)"),
    S("slow_reader_ms", "slow_reader", "int", None,
      "an endpoint whose own queue refuses a message after holding data this long without emptying is a **slow "
      "reader**, cause `backlog` (a reader slower than what is sent to it never empties its queue). A message "
      "refused because the router's `total_bytes` is full is not the reader's doing under either rule and waits "
      "or is dropped as `queue_full` as its congestion control says", low=1, unit="ms", null="none"),
    S("stalled_reader_ms", "stalled_reader", "int", None,
      "an endpoint whose own queue refuses a message (its [[endpoint_bytes]] or its queue's batches are full) "
      "while nothing has left that queue for this long is a **slow reader**, cause `stalled`: it stopped reading. "
      "What counts as leaving is a frame pulled by the connection's writer, which takes a frame (up to a batch, "
      "64 KiB) only once the socket has taken the last: a client reading slower than about a batch per "
      "[[stalled_reader_ms]] (2.6 Mbit/s at 200 ms) while its queue is full counts as stalled too — the spec's "
      "`slow_subscribers` with a `read_rate` below that are cut by this rule (topologies/slow-reader.yaml "
      "switches it off to show the backlog rule)", low=1, unit="ms", null="off",
      by_role={"client": 200, "router": None}),
    S("slow_reader_policy", "slow_reader_policy", "choice", "drop",
      "`drop`: from then on a message for it that finds no room is dropped at once — nothing waits for it, not "
      "even a Block message — until its queue has emptied and then refused nothing for a second (event "
      "`slow_reader_cleared`); `disconnect`: its connection is closed", choices=("drop", "disconnect")),
)

del S


def by_key(settings: Tuple[Setting, ...]) -> Dict[str, Setting]:
    return {s.key: s for s in settings}


def spec_settings(settings: Tuple[Setting, ...]) -> Tuple[Setting, ...]:
    """The settings a topology may give (those with a name in the spec)."""
    return tuple(s for s in settings if s.spec is not None)


_REFERENCE = re.compile(r"\[\[(\w+)\]\]")


def with_names(text: str, spec: bool) -> str:
    """``text`` with each ``[[key]]`` written as the router's key or, for a topology (``spec``), the
    setting's name in the spec."""
    names = {s.key: (s.spec or s.key) if spec else s.key for s in ROUTER_SETTINGS + LIMITS_SETTINGS + ROLE_SETTINGS}
    return _REFERENCE.sub(lambda m: f"`{names[m.group(1)]}`", text)


def doc_text(setting: Setting, spec: bool) -> str:
    """``setting``'s doc as the router's docs (or, ``spec``, a topology's) say it."""
    return with_names(setting.doc, spec)


def role_default(setting: Setting, role: Optional[str]) -> Any:
    """``setting``'s default in ``role`` (``client`` / ``router``), or its plain default without one."""
    return setting.by_role.get(role, setting.default) if role else setting.default


def _python_type(setting: Setting) -> Any:
    """The type of a setting's parsed value (for the config classes' annotations)."""
    base = {"int": "int", "number": "float", "bool": "bool", "choice": "str", "string": "str", "name": "str",
            "per_priority": "Tuple[int, ...]" if setting.item == "int" else "Tuple[Optional[float], ...]",
            "priorities": "Tuple[int, ...]", "address": "Address", "addresses": "Tuple[Address, ...]",
            "neighbours": "Tuple[NeighbourConfig, ...]", "limits": "LimitsConfig", "role": "RoleLimits"}[setting.kind]
    nullable = setting.null or setting.default is None
    return f"Optional[{base}]" if nullable and setting.kind not in ("name", "limits", "role") else base


def config_class(name: str, settings: Tuple[Setting, ...], *, extra: Tuple[Any, ...] = (), factories: Optional[Dict[str, Any]] = None,
                 namespace: Optional[Dict[str, Any]] = None, module: str = __name__,
                 role: Optional[str] = None) -> type:
    """A frozen dataclass with one field per setting, its default the setting's (in ``role``'s, for the
    limits of a role), or made by ``factories[key]`` for a setting that holds an object: the typed form
    of a parsed config; ``extra``: more fields ``(name, type, dataclasses.field)``."""
    factories = factories or {}
    fields = []
    for s in settings:
        if s.kind == "name":
            fields.append((s.key, _python_type(s)))
        elif s.key in factories:
            fields.append((s.key, _python_type(s), field(default_factory=factories[s.key])))
        else:
            fields.append((s.key, _python_type(s), field(default=role_default(s, role))))
    cls = make_dataclass(name, fields + list(extra), frozen=True, namespace=namespace or {})
    cls.__module__ = module
    return cls
