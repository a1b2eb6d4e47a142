"""The traffic planner (orchestrator side): builds, from the spec, the flows table and one plan per traffic
process, as runfolder/trafficplan.py values (their to_json is the file a process reads on its node).

    plan = plan_traffic(spec, run_dir, t0_ns, {"r1": ("10.0.0.1", 7447), ...})
    plan.write_flows()                      # <run_dir>/traffic/flows.json
    paths = plan.write_plans()              # <run_dir>/traffic/plans/<process>.json
    for p in plan.launch_order():           # start_at_ns == 0: launch now, before t0 (it sleeps until
                                            # its first tick); else at t0 + start_at_ns.
                                            # SIGTERM at t0 + stop_at_ns when set.
        argv = argv_for(p, paths[p.name])

Profiles become flows with phases (docs/traffic.md):

* ``zpub`` -> three publisher flows ``<name>.pub1`` (data priority, drop,
  ``[start_delay, pub1_stop)``), ``<name>.pub2`` (data priority, drop,
  ``[pub2_start, end)``) and ``<name>.realtime`` (realtime priority, block,
  ``[start_delay, end)``) on keys ``<key_prefix>/pub1`` ... ; every publisher
  sends ``rate`` in ticks of ``tick``; messages of ``size`` (default
  ``rate*tick/8``, one message per tick).
* ``constant`` -> one flow ``[start, stop or end)``; ``burst`` -> the same with
  on/off periods.  Their tick is the message interval ``size*8/rate``, clamped
  to [5 ms, 1 s] (see ``constant_tick_ns``).

One process per publisher flow (``pub-<flow>``) and one subscriber process per
node that subscribes to anything (``sub-<node>``).  A ``query`` flow is a querier
``qry-<flow>`` on its ``from`` node (paced like a publisher: one query every
``1/per_second`` in its phases) and a queryable ``qbl-<flow>-<node>`` on each of its
queryable nodes (launched with the subscribers, ready when its log says so).

Scenario ``start_flow``/``stop_flow`` events (on a publisher or query flow, or on a zpub
name meaning its three publishers) switch a flow on and off: a flow whose
first event is ``start_flow`` is off until then.  The on-intervals are
intersected with the profile's phases *in the plan*, so the publisher sends
exactly on the timeline even if a signal comes late; on top of that:

* a process whose flow is off at 0 is launched later: ``start_at_ns`` =
  first on-time minus ``launch_lead_ns`` (default 1 s, so it is connected when
  its first tick is due; 0 launches it exactly at the event);
* a process whose flow is stopped for good by ``stop_flow`` has
  ``stop_at_ns`` = that event's time: the orchestrator sends SIGTERM then (the
  process has already stopped publishing; SIGTERM makes it flush and exit).

``plan.controls`` lists every start/stop event with the processes it concerns,
for the orchestrator's events.jsonl.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from router.codec import PAYLOAD_HEADER_SIZE, PRIORITY_NAMES
from testbed.spec import BurstFlow, ConstantFlow, QueryFlow, Spec, StartFlowEvent, StopFlowEvent, ZpubFlow
from runfolder.layout import LAYOUT
from traffic.logs import ready_text
from runfolder.trafficplan import CLIENTS, Burst, FlowPlan, ProcessPlan
from traffic.querying import FINAL_GRACE_S

_S = 1_000_000_000
_MS = 1_000_000
MIN_CONSTANT_TICK_NS = 5 * _MS
MAX_CONSTANT_TICK_NS = _S
DEFAULT_SUB_LINGER_NS = 2 * _S
DEFAULT_LAUNCH_LEAD_NS = _S

__all__ = [
    "TrafficPlanError", "PlannedFlow", "PlannedQuery", "PlannedProcess", "FlowControl", "TrafficPlan",
    "plan_traffic", "scheduled_flows", "argv_for", "env_for", "constant_tick_ns", "write_flows_json",
]


class TrafficPlanError(ValueError):
    """The topology's traffic cannot be planned (the message names the flow and the fix)."""


@dataclass(frozen=True)
class PlannedQuery:
    """What a query flow has beyond a publisher flow's fields (its ``tick_ns`` is the query interval)."""

    per_second: float
    timeout_ns: int
    consolidation: str
    #: (node, service_time_ns, reply_size) per queryable
    queryables: Tuple[Tuple[str, int, int], ...]


@dataclass(frozen=True)
class PlannedFlow:
    """One publisher or query flow: a row of flows.json plus what its processes need."""

    name: str
    flow_id: int
    profile: str
    priority: int
    congestion_control: str
    express: bool
    key: str
    publisher: str
    subscribers: Tuple[str, ...]
    size: int
    rate_bps: int
    tick_ns: int
    phases: Tuple[Tuple[int, int], ...]  # after scenario start/stop, run clock
    burst: Optional[Tuple[int, int]] = None  # (on_ns, off_ns)
    parent: Optional[str] = None  # the zpub flow a publisher belongs to
    #: slow subscribers: (label, node, read_rate_bps, from_ns); label = the receiver in its logs
    slow: Tuple[Tuple[str, str, int, int], ...] = ()
    #: a query flow (``publisher`` is then the querier's node)
    query: Optional[PlannedQuery] = None

    @property
    def priority_name(self) -> str:
        return PRIORITY_NAMES[self.priority]

    @property
    def kind(self) -> str:
        """``pubsub`` (publications to subscribers) or ``query`` (queries to queryables)."""
        return "pubsub" if self.query is None else "query"

    def flows_json_row(self) -> Dict[str, Any]:
        """The row of traffic/flows.json (docs/results.md), exactly those keys."""
        if self.query is not None:
            q = self.query
            return {
                "name": self.name, "flow_id": self.flow_id, "kind": "query", "profile": self.profile,
                "priority": self.priority, "priority_name": self.priority_name, "key": self.key,
                "from": self.publisher, "queryables": [node for node, _, _ in q.queryables],
                "queryable_settings": [{"node": node, "service_time_ns": service, "reply_size": size}
                                       for node, service, size in q.queryables],
                "per_second": q.per_second, "interval_ns": self.tick_ns, "timeout_ns": q.timeout_ns,
                "consolidation": q.consolidation, "size": self.size,
            }
        return {
            "name": self.name, "flow_id": self.flow_id, "kind": "pubsub", "profile": self.profile,
            "priority": self.priority,
            "priority_name": self.priority_name, "congestion_control": self.congestion_control,
            "express": self.express, "key": self.key, "publisher": self.publisher,
            "subscribers": list(self.subscribers), "size": self.size, "rate_bps": self.rate_bps,
            "slow_subscribers": [{"label": label, "node": node, "read_rate_bps": rate, "from_ns": start}
                                 for label, node, rate, start in self.slow],
        }

    def pub_flow(self) -> FlowPlan:
        return FlowPlan(self.name, self.flow_id, self.key, priority=int(self.priority),
                        congestion_control=self.congestion_control, express=self.express, size=self.size,
                        rate_bps=self.rate_bps, tick_ns=self.tick_ns, phases=tuple(map(tuple, self.phases)),
                        burst=None if self.burst is None else Burst(*self.burst))

    def sub_flow(self) -> FlowPlan:
        return FlowPlan(self.name, self.flow_id, self.key)

    def query_flow(self) -> FlowPlan:
        """The flow in its querier's plan."""
        assert self.query is not None
        return FlowPlan(self.name, self.flow_id, self.key, priority=int(self.priority), size=self.size,
                        interval_ns=self.tick_ns, timeout_ns=self.query.timeout_ns,
                        consolidation=self.query.consolidation, phases=tuple(map(tuple, self.phases)))

    def queryable_flow(self, service_time_ns: int, reply_size: int) -> FlowPlan:
        """The flow in the plan of one of its queryables."""
        return FlowPlan(self.name, self.flow_id, self.key, service_time_ns=service_time_ns, reply_size=reply_size)


@dataclass(frozen=True)
class PlannedProcess:
    """A traffic process to run on a node."""

    name: str                    # pub-<flow> | sub-<node> | qry-<flow> | qbl-<flow>-<node>; log traffic/<name>.log
    node: str
    role: str                    # pub | sub | query | queryable
    plan: ProcessPlan            # its to_json is the plan file the process reads on its node
    flows: Tuple[str, ...]
    start_at_ns: int = 0         # run clock: when to launch it; 0 = at once, before t0
    stop_at_ns: Optional[int] = None  # run clock: when to SIGTERM it (None: it ends by itself)
    #: how long it may take after SIGTERM beyond a publisher (a querier waits for its outstanding queries)
    drain_ns: int = 0

    @property
    def log_files(self) -> List[str]:
        """The files it writes, relative to the plan's log_dir."""
        out = [LAYOUT.process_log_name(self.name)]
        if self.role == "pub":
            out += [LAYOUT.send_log_name(f) for f in self.flows]
        elif self.role == "query":
            out += [LAYOUT.query_log_name(f) for f in self.flows]
        elif self.role == "queryable":
            out += [LAYOUT.served_log_name(f, self.node) for f in self.flows]
        else:
            out += [LAYOUT.recv_log_name(f, self.plan.log_as or self.node) for f in self.flows]
        return out

    @property
    def ready_line(self) -> Optional[str]:
        """What its process log says once it can receive (subscribers, queryables): wait for it before t0."""
        return ready_text(self.role)


@dataclass(frozen=True)
class FlowControl:
    """A scenario start_flow/stop_flow event and the publisher (or querier) processes it concerns."""

    at_ns: int
    action: str                  # start_flow | stop_flow
    flow: str                    # as written in the scenario (a flow, a zpub name or a zpub publisher)
    flows: Tuple[str, ...]       # the publisher flows it switches
    processes: Tuple[str, ...]


@dataclass
class TrafficPlan:
    t0_ns: int
    end_ns: int
    log_dir: str
    flows: List[PlannedFlow]
    processes: List[PlannedProcess]
    controls: List[FlowControl] = field(default_factory=list)

    def flows_json(self) -> Dict[str, Any]:
        return {"flows": [f.flows_json_row() for f in self.flows]}

    def write_flows(self, path: Union[str, Path, None] = None) -> Path:
        """Write traffic/flows.json (default: in the plan's log_dir)."""
        return write_flows_json(self, path or Path(self.log_dir) / LAYOUT.in_traffic_dir(LAYOUT.flows))

    def write_plans(self, directory: Union[str, Path, None] = None) -> Dict[str, Path]:
        """Write every process plan as ``<directory>/<process>.json`` (default: log_dir/plans)."""
        d = Path(directory) if directory is not None \
            else Path(self.log_dir) / LAYOUT.in_traffic_dir(LAYOUT.plans_dir)
        d.mkdir(parents=True, exist_ok=True)
        out: Dict[str, Path] = {}
        for p in self.processes:
            path = d / LAYOUT.plan_name(p.name)
            path.write_text(json.dumps(p.plan.to_json(), indent=1) + "\n")
            out[p.name] = path
        return out

    def starting_at(self, t0_ns: int) -> "TrafficPlan":
        """The same plan with the run clock's origin at ``t0_ns``, in every process plan too (a run plans with
        t0 0, starts the processes, then sets it: testbed/run/phases.py)."""
        t0 = int(t0_ns)
        return replace(self, t0_ns=t0, processes=[replace(p, plan=replace(p.plan, t0_ns=t0)) for p in self.processes])

    def process(self, name: str) -> PlannedProcess:
        for p in self.processes:
            if p.name == name:
                return p
        raise KeyError(f"no traffic process {name!r} (known: {', '.join(p.name for p in self.processes)})")

    def processes_for_flow(self, flow: str) -> List[PlannedProcess]:
        """The publisher (querier) processes of a flow name as a scenario writes it (zpub names mean all three)."""
        names = set(_targets(self.flows, flow))
        if not names:
            raise KeyError(f"no flow {flow!r} (known: {', '.join(f.name for f in self.flows)})")
        return [p for p in self.processes if p.role in _SENDERS and names & set(p.flows)]

    def publishers(self) -> List[PlannedProcess]:
        return [p for p in self.processes if p.role == "pub"]

    def subscribers(self) -> List[PlannedProcess]:
        return [p for p in self.processes if p.role == "sub"]

    def queriers(self) -> List[PlannedProcess]:
        return [p for p in self.processes if p.role == "query"]

    def queryables(self) -> List[PlannedProcess]:
        return [p for p in self.processes if p.role == "queryable"]

    def pubsub_flows(self) -> List[PlannedFlow]:
        """The flows of publishers and subscribers (not the query flows)."""
        return [f for f in self.flows if f.query is None]

    def launch_order(self) -> List[PlannedProcess]:
        """Receivers (subscribers, queryables) first, then senders (publishers, queriers), each by start time."""
        return sorted(self.processes, key=lambda p: (p.start_at_ns, p.role in _SENDERS, p.name))


#: the roles that send on a schedule (switched by start_flow/stop_flow); the others receive
_SENDERS = ("pub", "query")


def write_flows_json(plan: TrafficPlan, path: Union[str, Path]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.flows_json(), indent=1) + "\n")
    return path


def constant_tick_ns(rate_bps: int, size: int) -> int:
    """The tick of a constant/burst flow: the message interval, clamped to [5 ms, 1 s]."""
    interval = size * 8 * _S // rate_bps
    return max(MIN_CONSTANT_TICK_NS, min(MAX_CONSTANT_TICK_NS, interval))


def slow_label(node: str, index: int) -> str:
    """The name of a flow's slow subscriber in its receive log: ``<node>.slow<n>`` (n from 1)."""
    return f"{node}.slow{index + 1}"


def _targets(flows: Sequence[PlannedFlow], name: str) -> List[str]:
    return [f.name for f in flows if f.name == name or f.parent == name]


def _intersect(phases: Sequence[Tuple[int, int]], intervals: Sequence[Tuple[int, int]]) -> Tuple[Tuple[int, int], ...]:
    out = []
    for a, b in phases:
        for c, d in intervals:
            lo, hi = max(a, c), min(b, d)
            if hi > lo:
                out.append((lo, hi))
    return tuple(sorted(out))


def _expand(spec: Spec) -> List[PlannedFlow]:
    """Every publisher flow of the spec with its profile phases (before the scenario), ids 1..N."""
    out: List[PlannedFlow] = []
    run_end = spec.duration
    for flow in spec.traffic:
        if isinstance(flow, ZpubFlow):
            end = flow.duration if flow.duration is not None else run_end
            size = flow.message_size()
            common = dict(profile="zpub", express=False, publisher=flow.node, subscribers=tuple(flow.subscribers),
                          size=size, rate_bps=int(flow.rate), tick_ns=int(flow.tick), parent=flow.name)
            dp, rp = int(flow.data_priority), int(flow.realtime_priority)
            pub1, pub2, realtime = flow.sub_flows
            for name, suffix, prio, cc, phase in (
                (pub1, "pub1", dp, "drop", (flow.start_delay, flow.pub1_stop)),
                (pub2, "pub2", dp, "drop", (flow.pub2_start, end)),
                (realtime, "realtime", rp, "block", (flow.start_delay, end)),
            ):
                out.append(PlannedFlow(name=name, flow_id=0, priority=prio, congestion_control=cc,
                                       key=f"{flow.key_prefix}/{suffix}",
                                       phases=((int(phase[0]), int(min(phase[1], end))),), **common))
        elif isinstance(flow, ConstantFlow):  # BurstFlow is a ConstantFlow
            stop = flow.stop if flow.stop is not None else run_end
            burst = (int(flow.on), int(flow.off)) if isinstance(flow, BurstFlow) else None
            out.append(PlannedFlow(
                name=flow.name, flow_id=0, profile=flow.profile, priority=int(flow.priority),
                congestion_control=flow.congestion_control, express=bool(flow.express), key=flow.key_expr,
                publisher=flow.from_, subscribers=tuple(flow.to), size=int(flow.size), rate_bps=int(flow.rate),
                tick_ns=constant_tick_ns(int(flow.rate), int(flow.size)),
                phases=((int(flow.start), int(min(stop, run_end))),), burst=burst,
                slow=tuple((slow_label(s.node, j), s.node, int(s.read_rate or 0), int(s.from_))
                           for j, s in enumerate(flow.slow_subscribers))))
        elif isinstance(flow, QueryFlow):
            stop = flow.stop if flow.stop is not None else run_end
            out.append(PlannedFlow(
                name=flow.name, flow_id=0, profile="query", priority=int(flow.priority), congestion_control="block",
                express=False, key=flow.key_expr, publisher=flow.from_, subscribers=(), size=int(flow.size),
                rate_bps=0, tick_ns=flow.interval_ns, phases=((int(flow.start), int(min(stop, run_end))),),
                query=PlannedQuery(float(flow.per_second), int(flow.timeout), flow.consolidation,
                                   tuple((q.node, int(q.service_time), int(q.reply_size)) for q in flow.queryables))))
        else:  # pragma: no cover - the spec's union has exactly these profiles
            raise TrafficPlanError(f"flow {getattr(flow, 'name', '?')}: profile {flow.profile!r} is not supported")
    for f in out:
        if f.size < PAYLOAD_HEADER_SIZE:
            raise TrafficPlanError(
                f"flow {f.name}: size {f.size} bytes is smaller than the {PAYLOAD_HEADER_SIZE}-byte traffic "
                f"header every message carries; set size >= {PAYLOAD_HEADER_SIZE} bytes in the topology file")
    return [_replace(f, flow_id=i + 1) for i, f in enumerate(out)]


def _replace(f: PlannedFlow, **changes: Any) -> PlannedFlow:
    from dataclasses import replace

    return replace(f, **changes)


def _on_intervals(events: List[Tuple[int, str]], end: int) -> Tuple[List[Tuple[int, int]], Optional[int], bool]:
    """On-intervals of a flow from its start/stop events; also the final stop time and whether it starts off."""
    events = sorted(events, key=lambda e: e[0])
    initially_on = not (events and events[0][1] == "start_flow")
    on_since: Optional[int] = 0 if initially_on else None
    intervals: List[Tuple[int, int]] = []
    for at, action in events:
        if action == "start_flow" and on_since is None:
            on_since = at
        elif action == "stop_flow" and on_since is not None:
            if at > on_since:
                intervals.append((on_since, at))
            on_since = None
    final_stop = None
    if on_since is not None:
        intervals.append((on_since, end))
    elif events and events[-1][1] == "stop_flow":
        final_stop = events[-1][0]
    return intervals, final_stop, not initially_on


def _switched(spec: Spec) -> Tuple[List[PlannedFlow], Dict[str, Tuple[List[Tuple[int, int]], Optional[int], bool]],
                                    List[Tuple[int, str, str, Tuple[str, ...]]]]:
    """Every flow with the phases it sends in (its profile's, switched by the scenario's start_flow/stop_flow
    events); each flow's on-intervals, final stop and whether it starts off; and the switching events."""
    end = int(spec.duration)
    flows = _expand(spec)
    per_flow: Dict[str, List[Tuple[int, str]]] = {f.name: [] for f in flows}
    controls: List[Tuple[int, str, str, Tuple[str, ...]]] = []
    for event in spec.scenario:
        if isinstance(event, (StartFlowEvent, StopFlowEvent)):
            targets = _targets(flows, event.flow)
            if not targets:
                raise TrafficPlanError(f"scenario {event.action} at {event.at} ns: no flow {event.flow!r}")
            for t in targets:
                per_flow[t].append((int(event.at), event.action))
            controls.append((int(event.at), event.action, event.flow, tuple(targets)))
    switches = {f.name: _on_intervals(per_flow[f.name], end) for f in flows}
    planned = [_replace(f, phases=_intersect(f.phases, switches[f.name][0])) for f in flows]
    return planned, switches, controls


def scheduled_flows(spec: Spec) -> List[PlannedFlow]:
    """Every publisher (querier) flow of ``spec`` with the phases in which it will send (run clock): a zpub
    flow's three publishers apart. A flow whose ``phases`` are empty sends nothing in this run."""
    return _switched(spec)[0]


def client_problems(spec: Spec, client: str) -> List[str]:
    """What the traffic of ``spec`` needs that the client library ``client`` does not do: slow subscribers
    and query flows are our client library's (the router drivers refuse them before the lab is built;
    ``plan_traffic`` refuses them too)."""
    if client == "testbed":
        return []
    out = []
    for i, flow in enumerate(spec.traffic):
        if getattr(flow, "slow_subscribers", None):
            out.append(f"traffic[{i}] ({flow.name}): slow_subscribers read through our client library's reader; "
                       f"the {client} client cannot read slowly")
        if isinstance(flow, QueryFlow):
            out.append(f"traffic[{i}] ({flow.name}): query flows use our client library's get/queryables; "
                       f"the {client} client does not do queries")
    return out


def plan_traffic(spec: Spec, run_dir: Union[str, Path], t0_ns: int,
                 client_addr: Mapping[str, Tuple[str, int]], *,
                 log_dir: Union[str, Path, None] = None,
                 node_log_dir: Optional[Callable[[str], str]] = None,
                 sub_linger_ns: int = DEFAULT_SUB_LINGER_NS,
                 launch_lead_ns: int = DEFAULT_LAUNCH_LEAD_NS,
                 client: str = "testbed") -> TrafficPlan:
    """The flows table and the traffic processes of a run.

    ``t0_ns`` is the run clock origin (ns since the epoch; ``manifest.traffic_start_ns``).
    ``client_addr`` maps every node that publishes or subscribes to its router's client address.
    Logs go to ``log_dir`` (default ``<run_dir>/traffic``, made absolute) as seen by the processes, or,
    with ``node_log_dir``, to ``node_log_dir(node)`` on each process's node (fetched afterwards).
    Subscribers run until ``duration + sub_linger_ns`` so that messages in flight are logged; queryables
    until ``duration`` + their flow's query timeout + ``sub_linger_ns``, so the last queries are answered.
    ``client`` is the client library every process uses (the router driver's: runfolder.trafficplan.CLIENTS,
    ``"testbed"`` or ``"zenoh"``; the zenoh client has no queries and no slow readers).
    """
    if sub_linger_ns < 0 or launch_lead_ns < 0:
        raise TrafficPlanError("sub_linger_ns and launch_lead_ns must be >= 0")
    if client not in CLIENTS:
        raise TrafficPlanError(f"client {client!r} is not one of {', '.join(repr(c) for c in CLIENTS)}")
    logs = str(Path(log_dir) if log_dir is not None else Path(run_dir).resolve() / LAYOUT.traffic_dir)
    end = int(spec.duration)
    planned, switches, controls = _switched(spec)
    timing: Dict[str, Tuple[int, Optional[int]]] = {}
    for f in planned:
        intervals, final_stop, starts_off = switches[f.name]
        start_at = 0
        if starts_off and intervals:
            start_at = max(0, intervals[0][0] - launch_lead_ns)
        elif starts_off:
            start_at = 0  # never switched on: it will log nothing and exit
        timing[f.name] = (start_at, final_stop)

    def addr(node: str, why: str) -> Tuple[str, int]:
        if node not in client_addr:
            raise TrafficPlanError(f"no router client address for node {node!r} ({why}); "
                                   f"client_addr has {', '.join(sorted(client_addr)) or 'nothing'}")
        host, port = client_addr[node]
        return str(host), int(port)

    def process_plan(role: str, name: str, node: str, why: str, end_ns: int, flows: List[FlowPlan],
                     **more: Any) -> ProcessPlan:
        host, port = addr(node, why)
        return ProcessPlan(role, name, node, host, port, int(t0_ns), end_ns,
                           node_log_dir(node) if node_log_dir else logs, tuple(flows), client=client, **more)

    refused = client_problems(spec, client)
    if refused:
        raise TrafficPlanError("; ".join(refused))

    processes: List[PlannedProcess] = []
    for f in planned:
        start_at, stop_at = timing[f.name]
        if f.query is not None:
            name = f"qry-{f.name}"
            plan = process_plan("query", name, f.publisher, f"querier of {f.name}", end, [f.query_flow()])
            drain = f.query.timeout_ns + int((FINAL_GRACE_S + 1) * _S)
            processes.append(PlannedProcess(name, f.publisher, "query", plan, (f.name,), start_at, stop_at, drain))
            continue
        name = f"pub-{f.name}"
        plan = process_plan("pub", name, f.publisher, f"publisher of {f.name}", end, [f.pub_flow()])
        processes.append(PlannedProcess(name, f.publisher, "pub", plan, (f.name,), start_at, stop_at))
    for f in planned:
        for node, service, reply_size in (f.query.queryables if f.query is not None else ()):
            # it answers until the last query's timeout has passed, and a little longer
            name = f"qbl-{f.name}-{node}"
            plan = process_plan("queryable", name, node, f"queryable of {f.name}",
                                end + f.query.timeout_ns + int(sub_linger_ns), [f.queryable_flow(service, reply_size)])
            processes.append(PlannedProcess(name, node, "queryable", plan, (f.name,)))
    sub_nodes: Dict[str, List[PlannedFlow]] = {}
    for f in planned:
        for node in f.subscribers:
            sub_nodes.setdefault(node, []).append(f)
    for node in sorted(sub_nodes):
        name = f"sub-{node}"
        plan = process_plan("sub", name, node, "subscriber", end + int(sub_linger_ns),
                            [f.sub_flow() for f in sub_nodes[node]])
        processes.append(PlannedProcess(name, node, "sub", plan, tuple(f.name for f in sub_nodes[node])))

    for f in planned:
        for label, node, rate, start in f.slow:
            name = f"slow-{f.name}-{label}"
            plan = process_plan("sub", name, node, f"slow subscriber of {f.name}", end + int(sub_linger_ns),
                                [f.sub_flow()], read_rate_bps=rate, slow_from_ns=start, log_as=label)
            processes.append(PlannedProcess(name, node, "sub", plan, (f.name,)))

    by_flow = {p.flows[0]: p.name for p in processes if p.role in _SENDERS}
    flow_controls = [FlowControl(at, action, flow, targets, tuple(by_flow[t] for t in targets))
                     for at, action, flow, targets in sorted(controls, key=lambda c: c[0])]
    return TrafficPlan(int(t0_ns), end, logs, planned, processes, flow_controls)


def argv_for(process: PlannedProcess, plan_path: Union[str, Path], python: str = "python3",
             code_dir: Optional[str] = None, wait_for_plan_s: Optional[float] = None) -> List[str]:
    """The command that runs a traffic process on its node; with ``code_dir`` (where the bundle put
    ``traffic/``), run from there, so that ``-m traffic`` finds that copy first, whatever the working
    folder the node's access starts processes in. With ``wait_for_plan_s`` the process may start before its
    plan is written: it says so on stdout and waits that long for the file (``--wait-for-plan``)."""
    argv = [python, "-m", "traffic", process.role, "--plan", str(plan_path)]
    if wait_for_plan_s is not None:
        argv += ["--wait-for-plan", f"{wait_for_plan_s:g}"]
    return in_code_dir(argv, code_dir)


def in_code_dir(argv: List[str], code_dir: Optional[str]) -> List[str]:
    """``argv`` run from ``code_dir`` (where the bundle put ``router/`` and ``traffic/`` on a node), so that
    ``python -m traffic...`` finds that copy first; ``argv`` itself when ``code_dir`` is None."""
    return argv if code_dir is None else ["sh", "-c", 'cd "$0" && exec "$@"', code_dir, *argv]


def env_for(pythonpath: Union[str, Path, None] = None) -> Dict[str, str]:
    """Extra environment for a traffic process: PYTHONPATH so that ``traffic`` and ``router`` import
    (in a run: the node's code folder, where the bundle put them, and its ``lib/``: the client's
    dependencies, e.g. zenoh), unbuffered output. Default: this checkout (where testbed/, router/
    and traffic/ live; the client libraries from this Python's site-packages)."""
    if pythonpath is None:
        return {"PYTHONPATH": str(Path(__file__).resolve().parents[1]), "PYTHONUNBUFFERED": "1"}
    return {"PYTHONPATH": f"{pythonpath}/lib:{pythonpath}", "PYTHONUNBUFFERED": "1"}


def default_python() -> str:
    """The interpreter of the orchestrator (for traffic run on this machine, as the tests do)."""
    return sys.executable or "python3"
