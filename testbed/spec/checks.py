"""Rules that relate parts of a topology to each other.

``check_spec`` runs after every field has validated on its own; it returns
``(location, message)`` pairs, one per problem, so that all of them can be
reported at once with the line each comes from.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from runfolder import units
from runfolder.wording import did_you_mean

from .errors import Loc
from .models import (
    SHAPING_FIELDS, ConstantFlow, KillRouterEvent, LinkDownEvent, LinkUpEvent, QueryFlow, RestartRouterEvent,
    SetLinkEvent, StartFlowEvent, StopFlowEvent, ZpubFlow,
)
from .fieldtypes import LinkMultiple
from .resolve import (
    AddressPoolExhausted, Shaping, allocate_addresses, egress_params, egress_shaping, find_link, link_rate,
    set_fields,
)

if TYPE_CHECKING:  # pragma: no cover
    from .topology import Spec

__all__ = ["check_spec", "Problems"]

Problems = List[Tuple[Loc, str]]


def _hint(name: str, known: Iterable[str]) -> str:
    known = sorted(known)
    listed = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
    return f"({did_you_mean(name, known)}known: {listed or 'none'})"


def check_spec(spec: "Spec") -> Problems:
    problems: Problems = []
    problems += _check_nodes(spec)
    problems += _check_links(spec)
    problems += _check_addresses(spec)
    problems += _check_traffic(spec)
    problems += _check_scenario(spec)
    problems += _check_capture(spec)
    problems += _check_expect(spec)
    if spec.clock_error_max_share is not None and spec.clock_error_max_share <= 0:
        problems.append((("clock_error_max_share",), "the clock check needs a share above 0%, e.g. 10%"))
    return problems


def _unknown_node(spec: "Spec", name: str) -> str:
    return f"unknown node {name!r} {_hint(name, spec.nodes)}"


def _check_nodes(spec: "Spec") -> Problems:
    problems: Problems = []
    if not spec.nodes:
        problems.append((("nodes",), "a topology needs at least one node, e.g. nodes: {r1: {}, r2: {}}"))
    seen: Set[Loc] = set()
    for name, node in spec.nodes.items():
        if node.kind == "host" and node.router is not None:
            problems.append((("nodes", name, "router"),
                             "a host runs no router; remove 'router:' or make the node kind: router"))
            continue
        settings = spec.router_settings(name)
        if settings.keepalive >= settings.lease:
            own = node.router.model_fields_set if node.router else set()
            if own & {"keepalive", "lease"}:
                loc: Loc = ("nodes", name, "router", "keepalive" if "keepalive" in own else "lease")
            else:
                given = spec.defaults.router.model_fields_set
                loc = ("defaults", "router", "lease" if "lease" in given and "keepalive" not in given else "keepalive")
            if loc not in seen:
                seen.add(loc)
                problems.append((loc, f"keepalive ({units.format_duration(settings.keepalive)}) must be shorter "
                                      f"than lease ({units.format_duration(settings.lease)})"))
    return problems


def _check_links(spec: "Spec") -> Problems:
    problems: Problems = []
    seen_links: Dict[FrozenSet, int] = {}
    seen_ifaces: Dict[Tuple[str, str], int] = {}
    reported: Set[Loc] = set()
    for i, link in enumerate(spec.links):
        a, b = link.endpoints
        known = True
        for j, end in enumerate((a, b)):
            if end.node not in spec.nodes:
                problems.append((("links", i, "endpoints", j), _unknown_node(spec, end.node)))
                known = False
        if a.node == b.node:
            problems.append((("links", i, "endpoints"), f"a link cannot connect {a.node} to itself"))
            continue
        key = frozenset((a, b))
        if key in seen_links:
            problems.append((("links", i, "endpoints"),
                             f"duplicate of links[{seen_links[key]}] ({a} - {b}); parallel links between the "
                             f"same nodes need distinct interface names, e.g. [\"{a.node}:eth2\", \"{b.node}:eth2\"]"))
            continue
        seen_links[key] = i
        for j, end in enumerate((a, b)):
            if end.ifname is None:
                continue
            iface = (end.node, end.ifname)
            if iface in seen_ifaces:
                problems.append((("links", i, "endpoints", j),
                                 f"interface {end} is already used by links[{seen_ifaces[iface]}]; "
                                 "an interface belongs to one link only"))
            else:
                seen_ifaces[iface] = i
        ends = {a.node, b.node}
        for node in link.egress:
            if node not in ends:
                problems.append((("links", i, "egress", node),
                                 f"{node!r} is not an end of this link (egress keys must be {a.node} or {b.node})"))
        if not known:
            continue
        for node in (a.node, b.node):
            for key, needed, why in egress_shaping(spec, i, node).unmet_needs():
                    if node in link.egress and getattr(link.egress[node], key) is not None:
                        loc: Loc = ("links", i, "egress", node, key)
                    elif getattr(link, key) is not None:
                        loc = ("links", i, key)
                    else:
                        loc = ("defaults", "link", key)
                    if loc not in reported:
                        reported.add(loc)
                        problems.append((loc, why))
    return problems


def _check_addresses(spec: "Spec") -> Problems:
    problems: Problems = []
    explicit: List[Tuple[int, object]] = []
    for i, link in enumerate(spec.links):
        if not link.addresses:
            continue
        ia, ib = link.addresses
        loc: Loc = ("links", i, "addresses")
        if ia.network != ib.network:
            problems.append((loc, f"{ia} and {ib} are not in the same subnet"))
            continue
        if ia.ip == ib.ip:
            problems.append((loc + (1,), f"both ends have the address {ia.ip}"))
            continue
        bad = False
        if ia.network.prefixlen <= 30:
            for j, iface in enumerate((ia, ib)):
                if iface.ip in (iface.network.network_address, iface.network.broadcast_address):
                    problems.append((loc + (j,), f"{iface.ip} is the network or broadcast address of {iface.network}"))
                    bad = True
        if bad:
            continue
        for k, other in explicit:
            if ia.network.overlaps(other):  # type: ignore[arg-type]
                problems.append((loc, f"subnet {ia.network} overlaps links[{k}] ({other})"))
                break
        else:
            explicit.append((i, ia.network))
    if not problems:
        try:
            allocate_addresses(spec)
        except AddressPoolExhausted as err:
            problems.append((("defaults", "address_pool"), str(err)))
    return problems


def _on_a_host(node: str, role: str) -> str:
    return (f"{node} is a host: a {role} is a client of the router on its node, and a host runs none (docs/spec.md "
            f"\"Hosts\"); put it on a router node")


def router_islands(spec: "Spec") -> Dict[str, int]:
    """Each router -> the number of its island: the routers that links between routers join (a host runs no
    router and forwards nothing, so a path through one carries no flow)."""
    island = {name: k for k, name in enumerate(spec.routers())}
    for link in spec.links:
        a, b = (end.node for end in link.endpoints)
        if a in island and b in island and island[a] != island[b]:
            old, new = island[b], island[a]
            island = {n: new if k == old else k for n, k in island.items()}
    return island


def _unreachable(spec: "Spec", islands: Dict[str, int], loc: Loc, source: str, sink: str) -> Problems:
    """A problem at ``loc`` when no path of routers joins ``source`` and ``sink`` (both routers)."""
    if source not in islands or sink not in islands or islands[source] == islands[sink]:
        return []
    path = _shortest_path(spec, source, sink)
    if path is None:
        why = "no links join them"
    else:
        hosts = [n for n in path if spec.nodes[n].kind == "host"]
        why = (f"every path crosses a host ({'-'.join(path)} crosses {', '.join(hosts)}), and a host runs no router "
               "and forwards nothing; link the routers around it, or make it kind: router")
    return [(loc, f"no path of routers from {source} to {sink}: {why}")]


def _shortest_path(spec: "Spec", source: str, sink: str) -> Optional[List[str]]:
    """The nodes of a shortest path of links (any nodes) from ``source`` to ``sink``, or None."""
    before: Dict[str, Optional[str]] = {source: None}
    todo = [source]
    while todo:
        node = todo.pop(0)
        if node == sink:
            path = [node]
            while before[path[-1]] is not None:
                path.append(before[path[-1]])
            return path[::-1]
        for link in spec.links:
            a, b = (end.node for end in link.endpoints)
            other = b if a == node else a if b == node else None
            if other is not None and other in spec.nodes and other not in before:
                before[other] = node
                todo.append(other)
    return None


def _check_traffic(spec: "Spec") -> Problems:
    problems: Problems = []
    names: Dict[str, int] = {}
    islands = router_islands(spec)
    run_end = spec.duration
    run_text = units.format_duration(run_end)
    for i, flow in enumerate(spec.traffic):
        own = [flow.name] + (list(flow.sub_flows) if isinstance(flow, ZpubFlow) else [])
        for name in own:
            if name in names:
                problems.append((("traffic", i, "name"),
                                 f"flow name {name!r} is already used by traffic[{names[name]}]"))
                break
        for name in own:
            names.setdefault(name, i)
        if isinstance(flow, ZpubFlow):
            source_field, source, sinks_field, sinks = "node", flow.node, "subscribers", flow.subscribers
        elif isinstance(flow, QueryFlow):
            source_field, source, sinks_field, sinks = "from", flow.from_, "queryables", []
            problems += _check_queryables(spec, flow, i)
        else:
            source_field, source, sinks_field, sinks = "from", flow.from_, "to", flow.to
        role = "querier" if isinstance(flow, QueryFlow) else "publisher"
        if source not in spec.nodes:
            problems.append((("traffic", i, source_field), _unknown_node(spec, source)))
        elif spec.nodes[source].kind != "router":
            problems.append((("traffic", i, source_field), _on_a_host(source, role)))
        seen_sinks: Set[str] = set()
        for j, sink in enumerate(sinks):
            if sink not in spec.nodes:
                problems.append((("traffic", i, sinks_field, j), _unknown_node(spec, sink)))
            elif sink == source:
                problems.append((("traffic", i, sinks_field, j),
                                 f"{sink} is the publisher itself; a flow must cross the network"))
            elif sink in seen_sinks:
                problems.append((("traffic", i, sinks_field, j), f"{sink} is listed twice"))
            elif spec.nodes[sink].kind != "router":
                problems.append((("traffic", i, sinks_field, j), _on_a_host(sink, "subscriber")))
            else:
                problems += _unreachable(spec, islands, ("traffic", i, sinks_field, j), source, sink)
            seen_sinks.add(sink)
        for j, slow in enumerate(getattr(flow, "slow_subscribers", [])):
            loc: Loc = ("traffic", i, "slow_subscribers", j, "node")
            if slow.node not in spec.nodes:
                problems.append((loc, _unknown_node(spec, slow.node)))
            elif slow.node == source:
                problems.append((loc, f"{slow.node} is the publisher itself; a slow subscriber must be across the "
                                      "network"))
            elif spec.nodes[slow.node].kind != "router":
                problems.append((loc, _on_a_host(slow.node, "slow subscriber")))
            else:
                problems += _unreachable(spec, islands, loc, source, slow.node)
            if slow.from_ >= run_end:
                problems.append((("traffic", i, "slow_subscribers", j, "from"),
                                 f"{units.format_duration(slow.from_)} is not before the end of the run ({run_text})"))
        problems += _flow_times(flow, i, run_end, run_text)
        if isinstance(getattr(flow, "rate", None), LinkMultiple):
            _, why = link_rate(spec, flow.rate.link)
            if why:
                problems.append((("traffic", i, "rate"), why))
    return problems


def _check_queryables(spec: "Spec", flow: QueryFlow, i: int) -> Problems:
    problems: Problems = []
    seen: Dict[str, int] = {}
    for j, q in enumerate(flow.queryables):
        loc: Loc = ("traffic", i, "queryables", j, "node")
        if q.node not in spec.nodes:
            problems.append((loc, _unknown_node(spec, q.node)))
        elif spec.nodes[q.node].kind != "router":
            problems.append((loc, f"{q.node} is a host; a queryable is a client of a router, on a router node"))
        elif q.node in seen:
            problems.append((loc, f"{q.node} is already listed at queryables[{seen[q.node]}]; one queryable "
                                  "per node and flow"))
        else:
            seen[q.node] = j
            if flow.from_ in spec.nodes and spec.nodes[flow.from_].kind == "router":
                problems += _unreachable(spec, router_islands(spec), loc, flow.from_, q.node)
            if flow.from_ in spec.nodes:
                attempt = min(spec.router_settings(flow.from_).query_attempt_timeout, flow.timeout)
                if q.service_time >= attempt:
                    fmt = units.format_duration
                    problems.append((("traffic", i, "queryables", j, "service_time"),
                                     f"{fmt(q.service_time)} is not shorter than the querier's router's attempt "
                                     f"timeout ({fmt(attempt)}: the least of the flow's timeout and "
                                     "query_attempt_timeout on its node): every attempt would time out; lower it "
                                     "or raise the router setting query_attempt_timeout"))
    return problems


def _flow_times(flow, i: int, run_end: int, run_text: str) -> Problems:
    fmt = units.format_duration
    out: Problems = []
    if isinstance(flow, ZpubFlow):
        end = flow.duration if flow.duration is not None else run_end
        if flow.duration is not None and flow.duration > run_end:
            out.append((("traffic", i, "duration"), f"{fmt(flow.duration)} is longer than the run (duration {run_text})"))
        if flow.start_delay >= end:
            out.append((("traffic", i, "start_delay"), f"{fmt(flow.start_delay)} is not before the end ({fmt(end)})"))
        elif flow.pub1_stop <= flow.start_delay:
            out.append((("traffic", i, "pub1_stop"),
                        f"pub1 must stop after it starts (start_delay {fmt(flow.start_delay)})"))
        if flow.pub2_start >= end:
            out.append((("traffic", i, "pub2_start"), f"{fmt(flow.pub2_start)} is not before the end ({fmt(end)})"))
    elif isinstance(flow, (ConstantFlow, QueryFlow)):
        if flow.start >= run_end:
            out.append((("traffic", i, "start"), f"{fmt(flow.start)} is not before the end of the run ({run_text})"))
        if flow.stop is not None:
            if flow.stop <= flow.start:
                out.append((("traffic", i, "stop"), f"{fmt(flow.stop)} is not after start ({fmt(flow.start)})"))
            elif flow.stop > run_end:
                out.append((("traffic", i, "stop"), f"{fmt(flow.stop)} is after the end of the run ({run_text})"))
    return out


def _check_scenario(spec: "Spec") -> Problems:
    problems: Problems = _check_set_link_needs(spec)
    flows = spec.flow_names()
    for i, event in enumerate(spec.scenario):
        loc: Loc = ("scenario", i)
        if event.at > spec.duration:
            problems.append((loc + ("at",), f"{units.format_duration(event.at)} is after the end of the run "
                                            f"(duration {units.format_duration(spec.duration)})"))
        if isinstance(event, (SetLinkEvent, LinkDownEvent, LinkUpEvent)):
            index, why = find_link(spec, event.link)
            if index is None:
                problems.append((loc + ("link",), why))
            elif isinstance(event, SetLinkEvent):
                problems += _check_set_link(spec, event, index, loc)
        elif isinstance(event, (StartFlowEvent, StopFlowEvent)):
            if event.flow not in flows:
                problems.append((loc + ("flow",), f"unknown flow {event.flow!r} {_hint(event.flow, flows)}"))
        elif isinstance(event, (KillRouterEvent, RestartRouterEvent)):
            if event.node not in spec.nodes:
                problems.append((loc + ("node",), _unknown_node(spec, event.node)))
            elif spec.nodes[event.node].kind != "router":
                problems.append((loc + ("node",), f"{event.node} is a host; only routers can be killed or restarted"))
    return problems


def _check_set_link(spec: "Spec", event: SetLinkEvent, index: int, loc: Loc) -> Problems:
    problems: Problems = []
    ends = [e.node for e in spec.links[index].endpoints]
    if event.node is not None and event.node not in ends:
        problems.append((loc + ("node",), f"{event.node!r} is not an end of link {index} ({ends[0]}-{ends[1]})"))
    if all(getattr(event, k) is None for k in SHAPING_FIELDS):
        problems.append((loc, f"set_link changes nothing; give at least one of {', '.join(SHAPING_FIELDS)}"))
    return problems


def _check_set_link_needs(spec: "Spec") -> Problems:
    """Each direction's shaping followed through the ``set_link`` events in time order: an event after which a
    key is left without the key it needs (a jitter without a delay, ...) that was not so before it is refused at
    that event, at the key it sets (or, if it set the needed key to 0, at that key)."""
    problems: Problems = []
    state: Dict[Tuple[int, str], Dict[str, object]] = {}
    order = sorted(range(len(spec.scenario)), key=lambda i: (spec.scenario[i].at, i))
    for i in order:
        event = spec.scenario[i]
        if not isinstance(event, SetLinkEvent):
            continue
        index, _ = find_link(spec, event.link)
        if index is None:
            continue
        ends = [e.node for e in spec.links[index].endpoints]
        reported: Set[str] = set()
        for node in ([event.node] if event.node in ends else ends):
            params = state.setdefault((index, node), egress_params(spec, index, node))
            before = Shaping.from_params(params).unmet_needs()  # the link's own are reported at the link
            params.update(set_fields(event))
            for key, needed, why in [n for n in Shaping.from_params(params).unmet_needs() if n not in before]:
                at = key if getattr(event, key) is not None else needed
                if at not in reported:
                    reported.add(at)
                    problems.append((("scenario", i, at), f"{why} (after this event: on the link, in an earlier "
                                                          "event or in this one)"))
    return problems


def _check_capture(spec: "Spec") -> Problems:
    problems: Problems = []
    if isinstance(spec.capture.links, tuple):
        seen: Dict[int, int] = {}
        for j, ref in enumerate(spec.capture.links):
            index, why = find_link(spec, ref)
            if index is None:
                problems.append((("capture", "links", j), why))
            elif index in seen:
                problems.append((("capture", "links", j), f"link {index} is already listed at capture.links[{seen[index]}]"))
            else:
                seen[index] = j
    return problems


def _check_expect(spec: "Spec") -> Problems:
    problems: Problems = []
    flows = spec.flow_names()
    used = flow_priorities(spec)
    for i, exp in enumerate(spec.expect):
        if exp.flow is not None and exp.flow not in flows:
            problems.append((("expect", i, "flow"), f"unknown flow {exp.flow!r} {_hint(exp.flow, flows)}"))
        if exp.flow is not None and exp.priority is not None:
            problems.append((("expect", i), "give flow or priority, not both"))
        elif exp.priority is not None and exp.priority not in used:
            problems.append((("expect", i), f"no flow has priority {exp.priority.label}, so there is nothing to "
                                            f"measure (the flows' priorities: "
                                            f"{', '.join(p.label for p in sorted(used)) or 'none'})"))
    return problems


def flow_priorities(spec: "Spec") -> Set:
    """The priorities the traffic sends at (a zpub flow: its data and realtime priorities)."""
    used: Set = set()
    for flow in spec.traffic:
        used |= {flow.data_priority, flow.realtime_priority} if isinstance(flow, ZpubFlow) else {flow.priority}
    return used
