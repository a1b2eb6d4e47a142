"""A Topology Zoo map of 24 European research-network sites (written in the Zoo's GraphML: Latitude, Longitude,
label, LinkSpeedRaw): its conversion is tested (tests/convert/test_zoo.py) and bench/zoo_run.sh runs it end to end."""
from __future__ import annotations

from pathlib import Path

#: label, latitude, longitude (the cities' published coordinates)
SITES = [
    ("London", 51.5074, -0.1278), ("Paris", 48.8566, 2.3522), ("Brussels", 50.8503, 4.3517),
    ("Amsterdam", 52.3676, 4.9041), ("Frankfurt", 50.1109, 8.6821), ("Berlin", 52.52, 13.405),
    ("Hamburg", 53.5511, 9.9937), ("Copenhagen", 55.6761, 12.5683), ("Stockholm", 59.3293, 18.0686),
    ("Oslo", 59.9139, 10.7522), ("Warsaw", 52.2297, 21.0122), ("Prague", 50.0755, 14.4378),
    ("Vienna", 48.2082, 16.3738), ("Budapest", 47.4979, 19.0402), ("Zurich", 47.3769, 8.5417),
    ("Milan", 45.4642, 9.19), ("Rome", 41.9028, 12.4964), ("Madrid", 40.4168, -3.7038),
    ("Barcelona", 41.3851, 2.1734), ("Lisbon", 38.7223, -9.1393), ("Lyon", 45.764, 4.8357),
    ("Dublin", 53.3498, -6.2603), ("Athens", 37.9838, 23.7275), ("Bucharest", 44.4268, 26.1025),
]
#: the links, by label, each 10 Gbit/s
EDGES = [
    ("London", "Paris"), ("London", "Amsterdam"), ("London", "Dublin"), ("Paris", "Brussels"), ("Paris", "Lyon"),
    ("Paris", "Madrid"), ("Brussels", "Amsterdam"), ("Brussels", "Frankfurt"), ("Amsterdam", "Hamburg"),
    ("Frankfurt", "Hamburg"), ("Frankfurt", "Zurich"), ("Frankfurt", "Prague"), ("Frankfurt", "Berlin"),
    ("Hamburg", "Copenhagen"), ("Copenhagen", "Stockholm"), ("Copenhagen", "Oslo"), ("Stockholm", "Oslo"),
    ("Berlin", "Warsaw"), ("Berlin", "Prague"), ("Prague", "Vienna"), ("Vienna", "Budapest"),
    ("Budapest", "Bucharest"), ("Bucharest", "Athens"), ("Vienna", "Zurich"), ("Zurich", "Milan"),
    ("Milan", "Rome"), ("Rome", "Athens"), ("Lyon", "Milan"), ("Lyon", "Barcelona"), ("Barcelona", "Madrid"),
    ("Madrid", "Lisbon"), ("Budapest", "Warsaw"),
]


def write_europe(path: Path) -> Path:
    ids = {label: i for i, (label, _, _) in enumerate(SITES)}
    lines = ['<?xml version="1.0" encoding="utf-8"?><graphml xmlns="http://graphml.graphdrawing.org/xmlns">',
             '  <key attr.name="Network" attr.type="string" for="graph" id="d0" />',
             '  <key attr.name="Latitude" attr.type="double" for="node" id="d1" />',
             '  <key attr.name="Longitude" attr.type="double" for="node" id="d2" />',
             '  <key attr.name="label" attr.type="string" for="node" id="d3" />',
             '  <key attr.name="LinkSpeedRaw" attr.type="double" for="edge" id="d4" />',
             '  <graph edgedefault="undirected">', '    <data key="d0">Euronet</data>']
    for label, lat, lon in SITES:
        lines.append(f'    <node id="{ids[label]}"><data key="d1">{lat}</data><data key="d2">{lon}</data>'
                     f'<data key="d3">{label}</data></node>')
    for a, b in EDGES:
        lines.append(f'    <edge source="{ids[a]}" target="{ids[b]}"><data key="d4">10000000000.0</data></edge>')
    lines += ["  </graph>", "</graphml>"]
    path.write_text("\n".join(lines) + "\n")
    return path
