"""containerlab topologies in and out: kinds and defaults merged into the nodes, endpoints with their interface
names, what has no equivalent listed, bad files refused at their line; `export --to containerlab` and its netem
script; the round trip clab -> testbed -> clab keeps the nodes and links."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from testbed.convert import convert
from testbed.convert.clab_export import export_containerlab
from testbed.spec import SpecError, load_spec_text

DATA = Path(__file__).parent / "data"


def _clab_links(document: dict) -> set:
    out = set()
    for link in document["topology"].get("links", []):
        ends = [e if isinstance(e, str) else f"{e['node']}:{e['interface']}" for e in link["endpoints"]]
        if not any(e.split(":")[0] == "host" for e in ends):
            out.add(frozenset(ends))
    return out


def test_a_clab_file_becomes_a_topology_with_its_interfaces():
    conversion = convert(DATA / "lab.clab.yml", "out.yaml")
    spec = conversion.spec
    assert spec.name == "srl-frr" and list(spec.nodes) == ["srl1", "srl2", "frr1", "client1"]
    assert {n.kind for n in spec.nodes.values()} == {"router"}
    assert {frozenset(map(str, link.ends())) for link in spec.resolved_links()} == {
        frozenset(p) for p in (("srl1:ethernet1", "srl2:ethernet1"), ("srl1:ethernet2", "frr1:eth1"),
                               ("srl2:ethernet2", "frr1:eth2"), ("frr1:eth3", "client1:eth1"))}
    text = conversion.text
    # kinds and defaults merged as containerlab does: the node's keys over its kind's over the defaults
    assert "srl1: {}  # containerlab node srl1 (line 18), kind nokia_srlinux; ignored: image, mgmt-ipv4, " \
           "startup-config, type" in text
    assert "frr1: {}  # containerlab node frr1 (line 24), kind linux (topology.defaults); ignored: binds, exec, " \
           "image" in text
    assert "client1: {}  # containerlab node client1 (line 28), kind linux (topology.defaults); ignored: binds, " \
           "image" in text
    notes = "\n".join(conversion.imported.notes)
    assert "ignored (no equivalent here): mgmt" in notes
    assert "ignored in links[3] (line 33): mtu" in notes
    assert "ignored links[4] (line 40): an endpoint is host, srl1, out of the lab" in notes


def test_interface_and_node_names_ours_would_refuse_are_renamed_with_a_note(tmp_path):
    path = tmp_path / "x.clab.yml"
    path.write_text('name: x\ntopology:\n  nodes:\n    leaf-1: {kind: srl}\n    leaf1: {kind: srl}\n  links:\n'
                    '    - endpoints: ["leaf-1:e1-1", "leaf1:e1-1"]\n'
                    '    - endpoints: ["leaf-1:e1-2", "leaf1:ethernet-1/2"]\n')
    conversion = convert(path, "out.yaml")
    assert list(conversion.spec.nodes) == ["leaf12", "leaf1"]  # leaf1 is kept: the renamed one moves aside
    assert [link.label for link in conversion.spec.resolved_links()] == ["leaf12:e11-leaf1:e11",
                                                                        "leaf12:e12-leaf1:ethernet12"]
    notes = conversion.imported.notes
    assert "node 'leaf-1' is 'leaf12' here (node names: 1-10 lowercase letters or digits)" in notes
    assert "interface leaf1:ethernet-1/2 is leaf1:ethernet12 here (interface names: 1-15 lowercase letters or " \
           "digits)" in notes


@pytest.mark.parametrize("text, line, path, message", [
    ("name: x\ntopology:\n  nodes:\n    a: {kind: linux, imagee: alpine}\n", 4, "topology.nodes.a.imagee",
     "unknown key 'imagee' (did you mean 'image'?"),
    ("name: x\ntopologies:\n  nodes: {}\n", 2, "topologies", "unknown key 'topologies'"),
    ("name: x\ntopology:\n  nodes:\n    a: {}\n  links:\n    - endpoints: [\"a:eth1\", \"b:eth1\"]\n", 6,
     "topology.links[0].endpoints[1]", "no node 'b' in topology.nodes (nodes: a)"),
    ("name: x\ntopology:\n  nodes:\n    a: {}\n    b: {}\n  links:\n    - endpoints:\n        - {node: a, "
     "interface: eth1}\n        - {node: c, interface: eth1}\n", 9, "topology.links[0].endpoints[1]",
     "no node 'c'"),
    ("name: x\ntopology:\n  nodes:\n    a: {}\n  links:\n    - endpoints: [\"a:eth1\"]\n", 6,
     "topology.links[0]", "a link has two endpoints, this one 1"),
    ("name: x\ntopology:\n  nodes: [a, b]\n", 3, "topology.nodes", "must be a mapping"),
    ("name: x\ntopology:\n  nodes:\n    a: {}\n    a: {}\n", 5, "topology.nodes.a", "duplicate key 'a'"),
    ("", 1, "", "the file is empty"),
])
def test_a_bad_clab_file_is_refused_at_its_line(tmp_path, text, line, path, message):
    file = tmp_path / "bad.clab.yml"
    file.write_text(text)
    with pytest.raises(SpecError) as err:
        convert(file, "out.yaml")
    assert any((p.file, p.line, p.path) == (str(file), line, path) and message in p.message
               for p in err.value.problems), str(err.value)


def test_round_trip_clab_testbed_clab_keeps_nodes_and_links():
    source = yaml.safe_load((DATA / "lab.clab.yml").read_text())
    spec = convert(DATA / "lab.clab.yml", "out.yaml").spec
    exported = yaml.safe_load(export_containerlab(spec, "out.yaml").clab_yaml)
    assert exported["name"] == source["name"]
    assert list(exported["topology"]["nodes"]) == list(source["topology"]["nodes"])
    assert _clab_links(exported) == _clab_links(source)


SHAPED = """
name: shaped
defaults:
  link: {bw: 20mbit, queue: 100}
nodes:
  r1: {}
  r2: {}
  h1: {kind: host}
links:
  - endpoints: [r1, r2]
    delay: 5ms
    jitter: 1ms
    distribution: normal
    loss: 0.5%
    corrupt: 0.1%
    egress:
      r2: {bw: 5mbit, delay: 10ms, loss: {model: gilbert-elliott, p: 1%, r: 25%}, corrupt: 0}
  - endpoints: ["r2:eth5", h1]
    weight: 20
"""


def test_export_writes_the_links_and_a_netem_command_per_shaped_direction():
    spec = load_spec_text(SHAPED, "shaped.yaml")
    exported = export_containerlab(spec, "shaped.yaml")
    clab = yaml.safe_load(exported.clab_yaml)
    assert clab["topology"]["defaults"] == {"kind": "linux", "image": "debian:bookworm-slim"}
    assert list(clab["topology"]["nodes"]) == ["r1", "r2", "h1"]
    assert _clab_links(clab) == {frozenset(("r1:eth1", "r2:eth1")), frozenset(("r2:eth5", "h1:eth1"))}
    assert "weight" in exported.clab_yaml.splitlines()[2]  # named as not exported
    commands = [shlex.split(line) for line in exported.netem_script.splitlines()
                if line.startswith("containerlab ")]
    assert commands == [
        ["containerlab", "tools", "netem", "set", "-n", "$NODE_PREFIX-r1", "-i", "eth1", "--delay", "5ms",
         "--jitter", "1ms", "--loss", "0.5", "--rate", "20000", "--corruption", "0.1"],
        ["containerlab", "tools", "netem", "set", "-n", "$NODE_PREFIX-r2", "-i", "eth1", "--delay", "10ms",
         "--jitter", "1ms", "--rate", "5000"],
        ["containerlab", "tools", "netem", "set", "-n", "$NODE_PREFIX-r2", "-i", "eth5", "--rate", "20000"],
        ["containerlab", "tools", "netem", "set", "-n", "$NODE_PREFIX-h1", "-i", "eth1", "--rate", "20000"],
    ]
    script = exported.netem_script
    assert "(netem set cannot: queue 100, distribution normal)" in script
    assert "(netem set cannot: queue 100, distribution normal, loss gemodel p 1% r 25%" in script
    assert 'NODE_PREFIX="${NODE_PREFIX:-clab-shaped}"' in script
