"""An Internet Topology Zoo map (its GraphML or GML graph) as a topology: every node with coordinates a router,
every edge a link whose delay is the great-circle distance between its nodes at ``km_per_ms`` and whose
bandwidth is the edge's ``LinkSpeedRaw`` (bit/s) times ``bw_scale``; names made valid and unique.

Refused (a ``SpecError`` at the node's line) or, with ``drop_unlocated``, dropped with a note: nodes without
``Latitude``/``Longitude``. Dropped with a note: nodes without links (after that), self-loops; parallel edges
are one link whose bandwidth is their sum.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from runfolder.units import format_bandwidth, format_duration
from testbed.spec.errors import SpecError, SpecProblem

from .model import Graph, GraphEdge, GraphNode, Imported, ImportedEnd, ImportedLink, ImportedNode, Sourced
from .names import node_name, topology_name

#: light in optical fibre travels about 200 km in a millisecond (two thirds of c, a refractive index of ~1.5)
KM_PER_MS = 200.0
#: a Topology Zoo link of 10 Gbit/s becomes 10 Mbit/s: a whole backbone fits on one machine
BW_SCALE = 0.001
#: the mean Earth radius (IUGG), for the haversine formula
EARTH_RADIUS_KM = 6371.0088


@dataclass(frozen=True)
class ZooOptions:
    km_per_ms: float = KM_PER_MS
    bw_scale: float = BW_SCALE
    drop_unlocated: bool = False


def great_circle_km(a: Tuple[float, float], b: Tuple[float, float]) -> float:
    """The distance in km between two (latitude, longitude) points in degrees (haversine)."""
    lat1, lon1, lat2, lon2 = map(math.radians, (*a, *b))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


def _number(text: Optional[str]) -> Optional[float]:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _coordinates(node: GraphNode) -> Optional[Tuple[float, float]]:
    lat, lon = _number(node.attrs.get("Latitude")), _number(node.attrs.get("Longitude"))
    if lat is None or lon is None or not (-90 <= lat <= 90 and -180 <= lon <= 180):
        return None
    return lat, lon


def _label(node: GraphNode) -> str:
    return node.attrs.get("label") or node.id


def _describe(node: GraphNode) -> str:
    return f"node {node.id} {_label(node)!r} (line {node.line})"


def zoo_topology(graph: Graph, path: Path, fmt: str, options: ZooOptions, name: Optional[str] = None) -> Imported:
    """The topology of a Topology Zoo ``graph`` read from ``path`` (``fmt``: its format, for the comments)."""
    filename = str(path)
    by_id: Dict[str, GraphNode] = {}
    problems: List[SpecProblem] = []
    for node in graph.nodes:
        if node.id in by_id:
            problems.append(SpecProblem(filename, node.line, "", f"node id {node.id!r} is already used at line "
                                                                 f"{by_id[node.id].line}"))
        by_id[node.id] = node
    for edge in graph.edges:
        for end in (edge.source, edge.target):
            if end not in by_id:
                problems.append(SpecProblem(filename, edge.line, "", f"edge {edge.source}-{edge.target}: "
                                                                     f"no node has the id {end!r}"))
    unlocated = [n for n in graph.nodes if _coordinates(n) is None]
    if unlocated and not options.drop_unlocated:
        problems += [SpecProblem(filename, n.line, "", f"node {n.id} {_label(n)!r} has no Latitude/Longitude, so the delay "
                                                       "of its links cannot be derived; --drop-unlocated drops "
                                                       "such nodes and their links") for n in unlocated]
    if problems:
        raise SpecError(problems)

    imported = Imported(name=name or topology_name(path.name.split(".")[0]), file=path.name, fmt=fmt)
    network = graph.attrs.get("Network") or graph.attrs.get("label")
    if network:
        imported.description = f"{network} from the Internet Topology Zoo ({path.name})"
    imported.method += [
        f"delay: the great-circle distance between the two nodes' Latitude/Longitude (haversine, Earth radius "
        f"{EARTH_RADIUS_KM:g} km) at {options.km_per_ms:g} km per ms (--km-per-ms; {KM_PER_MS:g}: light in fibre)",
        f"bw: the edge's LinkSpeedRaw (bit/s) x {options.bw_scale:g} (--bw-scale); an edge without it is not "
        "shaped",
    ]
    dropped: Set[str] = set()
    for node in unlocated:
        dropped.add(node.id)
        imported.notes.append(f"dropped {_describe(node)}: no Latitude/Longitude (--drop-unlocated)")

    # edges between kept nodes, parallel ones merged, self-loops dropped
    pairs: Dict[Tuple[str, str], List[GraphEdge]] = {}
    for edge in graph.edges:
        if edge.source == edge.target:
            imported.notes.append(f"dropped edge {edge.source}-{edge.target} (line {edge.line}): a self-loop")
        elif edge.source in dropped or edge.target in dropped:
            imported.notes.append(f"dropped edge {edge.source}-{edge.target} (line {edge.line}): an end was dropped")
        else:
            pairs.setdefault(tuple(sorted((edge.source, edge.target))), []).append(edge)
    linked = {end for pair in pairs for end in pair}
    for node in graph.nodes:
        if node.id not in dropped and node.id not in linked:
            dropped.add(node.id)
            imported.notes.append(f"dropped {_describe(node)}: it has no links")

    taken: Set[str] = set()
    names: Dict[str, str] = {}
    for node in graph.nodes:
        if node.id in dropped:
            continue
        names[node.id] = node_name(_label(node), taken)
        imported.nodes.append(ImportedNode(names[node.id], f"{_describe(node)}, Latitude "
                                                           f"{node.attrs['Latitude']} Longitude {node.attrs['Longitude']}"))
    for (a, b), edges in pairs.items():
        imported.links.append(_link(by_id[a], by_id[b], edges, names, options))
    if not imported.nodes:
        raise SpecError([SpecProblem(filename, 1, "", "no node with links is left to make a topology of")])
    return imported


def _link(a: GraphNode, b: GraphNode, edges: List[GraphEdge], names: Dict[str, str],
          options: ZooOptions) -> ImportedLink:
    lines = ", ".join(str(e.line) for e in edges)
    source = f"edge {a.id}-{b.id} (line {lines})" if len(edges) == 1 else \
        f"{len(edges)} parallel edges {a.id}-{b.id} (lines {lines}), one link"
    km = great_circle_km(_coordinates(a), _coordinates(b))
    delay_ns = round(km / options.km_per_ms * 1000) * 1000  # to the microsecond
    delay = Sourced(format_duration(delay_ns), f"{km:.1f} km at {options.km_per_ms:g} km/ms") if delay_ns else None
    speeds = [s for s in (_number(e.attrs.get("LinkSpeedRaw")) for e in edges) if s and s > 0]
    bw = None
    if speeds:
        bps = max(1, round(sum(speeds) * options.bw_scale))
        raw = " + ".join(f"{s:.0f}" for s in speeds)
        bw = Sourced(format_bandwidth(bps), f"LinkSpeedRaw {raw} bit/s x {options.bw_scale:g}")
    return ImportedLink(ImportedEnd(names[a.id]), ImportedEnd(names[b.id]), source, bw=bw, delay=delay)
