"""`testbed import`, `testbed export --to containerlab` and `testbed run FOREIGN_FILE` as a user runs them: what
is written validates, bad input exits 2 at its file and line, an existing output is kept without --force, and a
run of a foreign file keeps its conversion in the results folder."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import yaml

from tests.conftest import needs_mininet, run_cli

DATA = Path(__file__).parent / "convert" / "data"


def test_import_writes_a_topology_that_validates(tmp_path):
    out = tmp_path / "zoo.yaml"
    result = run_cli("import", str(DATA / "zoo.graphml"), "-o", str(out), "--drop-unlocated")
    assert result.stdout.startswith(f"wrote {out}: zoo, 5 nodes, 4 links from zoo.graphml (Topology Zoo GraphML)")
    assert "note: dropped node 5 'Peer AS 1234'" in result.stderr
    assert "this machine" in run_cli("validate", str(out)).stdout
    refused = run_cli("import", str(DATA / "zoo.graphml"), "-o", str(out), "--drop-unlocated", check=False)
    assert refused.returncode == 2 and f"{out} exists; --force overwrites it" in refused.stderr
    run_cli("import", str(DATA / "lab.clab.yml"), "-o", str(out), "--force")
    assert "name: srl-frr" in out.read_text()
    assert run_cli("import", str(DATA / "lab.clab.yml"), "-o", "-").stdout.startswith("# Converted by")


def test_import_of_bad_input_exits_2_at_the_files_line(tmp_path):
    refused = run_cli("import", str(DATA / "zoo.graphml"), "-o", str(tmp_path / "x.yaml"), check=False)
    assert refused.returncode == 2
    assert f"{DATA / 'zoo.graphml'}:56: node 5 'Peer AS 1234' has no Latitude/Longitude" in refused.stderr
    bad = tmp_path / "bad.clab.yml"
    bad.write_text("name: x\ntopology:\n  nodes:\n    a: {}\n  links:\n    - endpoints: [\"a:eth1\", \"b:eth1\"]\n")
    refused = run_cli("import", str(bad), check=False)
    assert refused.returncode == 2
    assert f"{bad}:6 topology.links[0].endpoints[1]: no node 'b' in topology.nodes" in refused.stderr
    unknown = tmp_path / "map.txt"
    unknown.write_text("")
    refused = run_cli("import", str(unknown), check=False)
    assert refused.returncode == 2 and "name it *.graphml, *.gml or *.clab.yml, or give --format" in refused.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_export_writes_a_clab_file_and_an_executable_netem_script(tmp_path):
    out = tmp_path / "lab" / "diamond.clab.yml"
    out.parent.mkdir()
    repo = Path(__file__).resolve().parents[1]
    run_cli("export", "--to", "containerlab", str(repo / "topologies" / "diamond.yaml"), "-o", str(out))
    clab = yaml.safe_load(out.read_text())
    assert clab["name"] == "diamond" and list(clab["topology"]["nodes"]) == ["r1", "r2", "r3", "r4"]
    script = out.parent / "diamond.netem.sh"
    assert script.stat().st_mode & stat.S_IXUSR
    assert 'containerlab tools netem set -n "$NODE_PREFIX-r2" -i eth2 --rate 10000' in script.read_text()
    refused = run_cli("export", "--to", "netlab", str(repo / "topologies" / "diamond.yaml"), check=False)
    assert refused.returncode == 2 and "the only tool exported to is containerlab" in refused.stderr


@needs_mininet
def test_run_of_a_clab_file_converts_it_and_keeps_the_conversion(tmp_path):
    lab = tmp_path / f"r{os.getpid() % 1000}.clab.yml"  # the lab's name: unique to this test session
    lab.write_text(f"name: tbt-cv{os.getpid() % 1000}\ntopology:\n  nodes:\n    r1: {{kind: linux}}\n"
                   "    r2: {kind: linux}\n  links:\n    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n")
    result = run_cli("run", str(lab), "--results", str(tmp_path / "results"), "--duration", "2s", "--no-analyze",
                     "--json", timeout=400)
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "completed", outcome
    assert f"converted {lab} (containerlab topology): 2 nodes, 1 links" in result.stderr
    saved = (Path(outcome["run_dir"]) / "topology.yaml").read_text()
    assert saved.startswith(f"# Converted by `testbed import` from {lab.name} (containerlab topology)")
    assert '  - endpoints: ["r1:eth1", "r2:eth1"]' in saved
