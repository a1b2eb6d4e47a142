"""Topology Zoo maps (GraphML and GML, written from the published format: Latitude, Longitude, LinkSpeedRaw,
label) as topologies: delays from the great-circle distance, bandwidths from the link speeds, names made valid
and unique, what cannot be used refused or dropped with a note, every value's origin in a comment."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from testbed.convert import convert
from testbed.convert.zoo import ZooOptions, great_circle_km
from testbed.spec import SpecError, load_spec

DATA = Path(__file__).parent / "data"
DROP = ZooOptions(drop_unlocated=True)


def _links(spec) -> dict:
    return {frozenset((link.a.node, link.b.node)): link.a.egress for link in spec.resolved_links()}


def test_great_circle_distance_is_the_published_one():
    london, paris, new_york = (51.50853, -0.12574), (48.85341, 2.3488), (40.71427, -74.00597)
    assert great_circle_km(london, paris) == pytest.approx(343.5, abs=1.0)  # the usual 343.5 km
    assert great_circle_km(london, new_york) == pytest.approx(5570.2, abs=5.0)
    assert great_circle_km(london, london) == 0


@pytest.mark.parametrize("name", ["zoo.graphml", "zoo.gml"])
def test_a_zoo_map_becomes_a_topology_with_delays_and_bandwidths(name, tmp_path):
    conversion = convert(DATA / name, "out.yaml", options=DROP)
    spec = conversion.spec
    assert spec.name == "zoo" and "Testnet" in spec.description
    # Peer AS 1234 has no coordinates (dropped, and its link); Berlin has no links left (dropped)
    assert sorted(spec.nodes) == ["london", "newyork", "newyork2", "paris", "saopaulo"]
    links = _links(spec)
    assert set(links) == {frozenset(p) for p in (("london", "paris"), ("london", "newyork"),
                                                 ("newyork", "saopaulo"), ("newyork", "newyork2"))}
    london_paris = links[frozenset(("london", "paris"))]
    assert london_paris.bw_bps == 10_000_000  # 10 Gbit/s x 0.001
    km = great_circle_km((51.50853, -0.12574), (48.85341, 2.3488))
    assert london_paris.delay_ns == round(km / 200 * 1000) * 1000  # at 200 km per ms, to the microsecond
    assert links[frozenset(("london", "newyork"))].bw_bps == 5_000_000  # two parallel 2.5G edges: one link
    assert links[frozenset(("newyork", "saopaulo"))].bw_bps == 155_520  # OC-3
    metro = links[frozenset(("newyork", "newyork2"))]
    assert metro.bw_bps is None and metro.delay_ns is None  # no LinkSpeedRaw, the same place
    notes = "\n".join(conversion.imported.notes)
    assert "dropped node 5 'Peer AS 1234'" in notes and "no Latitude/Longitude" in notes
    assert "dropped node 6 'Berlin'" in notes and "no links" in notes
    assert "self-loop" in notes
    # what is written loads as the same topology, and says where each value came from
    out = tmp_path / "zoo.yaml"
    out.write_text(conversion.text)
    assert _links(load_spec(out)) == links
    assert "# LinkSpeedRaw 10000000000 bit/s x 0.001" in conversion.text
    assert f"# {km:.1f} km at 200 km/ms" in conversion.text


def test_every_comment_points_at_the_line_of_the_source(tmp_path):
    source = (DATA / "zoo.graphml").read_text().splitlines()
    text = convert(DATA / "zoo.graphml", "out.yaml", options=DROP).text
    for node_id, line in re.findall(r"# node (\d+) .*\(line (\d+)\)", text):
        assert source[int(line) - 1].strip() == f'<node id="{node_id}">'
    for a, b, line in re.findall(r"# edge (\d+)-(\d+) \(line (\d+)\)", text):
        assert source[int(line) - 1].strip() == f'<edge source="{a}" target="{b}">'


def test_km_per_ms_and_bw_scale_are_the_users():
    spec = convert(DATA / "zoo.graphml", "out.yaml", options=ZooOptions(100, 0.01, True)).spec
    link = _links(spec)[frozenset(("london", "paris"))]
    default = _links(convert(DATA / "zoo.graphml", "out.yaml", options=DROP).spec)[frozenset(("london", "paris"))]
    assert link.bw_bps == 100_000_000
    assert abs(link.delay_ns - 2 * default.delay_ns) <= 1000


def test_a_node_without_coordinates_is_refused_at_its_line():
    with pytest.raises(SpecError) as err:
        convert(DATA / "zoo.graphml", "out.yaml")
    [problem] = err.value.problems
    line = (DATA / "zoo.graphml").read_text().splitlines().index('    <node id="5">') + 1
    assert problem.line == line and "node 5 'Peer AS 1234' has no Latitude/Longitude" in problem.message
    assert "--drop-unlocated" in problem.message


def test_names_are_made_valid_and_unique(tmp_path):
    nodes = "".join(f'<node id="{i}"><data key="la">{i}</data><data key="lo">{i}</data>'
                    f'<data key="n">{label}</data></node>' for i, label in
                    enumerate(["Saint-Étienne-du-Rouvray", "Saint-Étienne-du-Rouvray", "1st Street", "", "R1"]))
    edges = "".join(f'<edge source="{i}" target="{i + 1}"/>' for i in range(4))
    path = tmp_path / "names.graphml"
    path.write_text('<graphml><key id="la" attr.name="Latitude" for="node"/><key id="lo" attr.name="Longitude" '
                    f'for="node"/><key id="n" attr.name="label" for="node"/><graph>{nodes}{edges}</graph></graphml>')
    spec = convert(path, "out.yaml").spec
    assert list(spec.nodes) == ["saintetien", "saintetie2", "n1ststreet", "n3", "r1"]


@pytest.mark.parametrize("suffix, text, line, message", [
    (".graphml", "this is not XML", 1, "not GraphML: syntax error"),
    (".graphml", '<?xml version="1.0"?>\n<svg>\n</svg>', 2, "not GraphML: the document is <svg>"),
    (".graphml", "<graphml>\n<graph>\n<node id='a'/>\n<edge source='a' target='b'/>\n</graph>\n</graphml>", 4,
     "no node has the id 'b'"),
    (".graphml", "<graphml>\n<graph>\n<node id='a'>\n</graph>\n</graphml>", 4, "not GraphML: mismatched tag"),
    (".gml", "graph [\n  node [\n    id 0\n", 2, "node [ is not closed"),
    (".gml", 'graph [\n  node [ id 0 label "London ]\n]', 2, "a string is not closed"),
    (".gml", "Creator 1\n]", 2, "a ] without its ["),
    (".gml", "nodes 1 2", 1, "expected a key, found '2'"),
    (".gml", "Creator 1", 1, "no `graph [ ... ]`"),
    (".gml", "graph [\n  node [ id 0 ]\n  edge [ source 0 target 7 ]\n]", 3, "no node has the id '7'"),
])
def test_a_bad_zoo_file_is_refused_at_its_line(tmp_path, suffix, text, line, message):
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        convert(path, "out.yaml")
    problem = err.value.problems[0]
    assert (problem.file, problem.line) == (str(path), line) and message in problem.message, str(err.value)


def test_a_map_of_24_sites_converts_whole(tmp_path):
    """The map of the end-to-end run (docs/import-export.md: 24 routers, 32 links; its run takes about 4 minutes
    on 2 cores, so it is not part of the suite): every site and link kept, each link shaped."""
    from tests.convert.europe import EDGES, SITES, write_europe

    spec = convert(write_europe(tmp_path / "euronet.graphml"), "euronet.yaml").spec
    assert len(spec.nodes) == len(SITES) == 24 and len(spec.links) == len(EDGES) == 32
    for link in spec.resolved_links():
        assert link.a.egress.bw_bps == 10_000_000 and link.a.egress.delay_ns > 0
    lisbon_madrid = _links(spec)[frozenset(("lisbon", "madrid"))]
    assert lisbon_madrid.delay_ns == pytest.approx(503 / 200 * 1e6, rel=0.01)  # 503 km, Lisbon to Madrid
