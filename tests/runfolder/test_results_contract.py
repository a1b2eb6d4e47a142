"""The results-folder package's rules (docs/architecture.md, "The results folder package"):

* runfolder is what both sides import, shipped to the nodes and to Spark executors: Python 3.9, standard
  library and ``router`` only (never testbed, spark or pydantic);
* the layout declares every path its own methods give;
* the synthetic writer of the tests (spark.testing) writes only files the layout declares, as the run does,
  and every kind the analysis reads (the real run's side: tests/spark/test_spark_real_run.py,
  test_real_run_folder_keeps_the_layout).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from runfolder.layout import ENTRIES, LAYOUT
from spark.testing import ZENOH_DRIVER, diamond_run, write_run

ROOT = Path(__file__).resolve().parents[2]


def test_runfolder_is_python39_stdlib_and_router_only():
    from tests.conftest import not_deployable

    modules = sorted((ROOT / "runfolder").glob("*.py"))
    assert len(modules) >= 6
    assert [p for path in modules for p in not_deployable(path, {"router", "runfolder"})] == []


def test_every_path_of_the_layout_is_declared():
    paths = [LAYOUT.manifest, LAYOUT.topology, LAYOUT.lab, LAYOUT.events, LAYOUT.flows, LAYOUT.captures,
             LAYOUT.summary, LAYOUT.report, LAYOUT.check, LAYOUT.junit, LAYOUT.spark_log,
             LAYOUT.node_file("r1", LAYOUT.launch_name), LAYOUT.node_file("r1", LAYOUT.router_log_name),
             LAYOUT.router_events("r1"), LAYOUT.node_file("r1", "router.json"),
             LAYOUT.send_log("zpub.pub1"), LAYOUT.recv_log("zpub.pub1", "r4"), LAYOUT.recv_log("f", "r4.slow1"),
             LAYOUT.query_log("lookup"), LAYOUT.served_log("lookup", "r2"), LAYOUT.plan("sub-r4"),
             LAYOUT.traffic_file(LAYOUT.process_log_name("pub-r1")),
             LAYOUT.traffic_file(LAYOUT.process_stdout_name("pub-r1")),
             LAYOUT.metrics("r1"), LAYOUT.pcap("r1", "r1-eth1"), LAYOUT.pcap_file(LAYOUT.tcpdump_log_name("r1", "eth1")),
             LAYOUT.parquet("observations") + "/part-0.parquet", f"{LAYOUT.ansible_dir}/inventory.json"]
    undeclared = [p for p in paths if LAYOUT.entry(p) is None]
    assert undeclared == []
    assert LAYOUT.entry("notes.txt") is None and LAYOUT.entry("traffic/plans/x/y.json") is None
    # a name with characters a file name cannot carry is written and read under the same safe name
    assert LAYOUT.recv_log("a b", "r/4") == "traffic/recv-a_b-r_4.csv"


def _written(folder: Path) -> set:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_the_synthetic_writer_keeps_the_layout(tmp_path):
    ours = write_run(diamond_run(duration_s=4.0), tmp_path / "ours")
    # a router without metrics and event log: its nodes/ folders hold its log and its own config file
    theirs = write_run(replace(diamond_run("zenoh-synthetic", duration_s=4.0), router_driver=dict(ZENOH_DRIVER)),
                       tmp_path / "theirs")
    written = _written(ours)
    undeclared = sorted(rel for rel in written | _written(theirs) if LAYOUT.entry(rel) is None)
    assert undeclared == [], f"spark.testing writes files runfolder.layout does not declare: {undeclared}"
    assert all(LAYOUT.entry(rel).writer == "run" for rel in written)
    kinds = {LAYOUT.entry(rel).pattern for rel in written if LAYOUT.entry(rel).analysed}
    assert kinds == {e.pattern for e in ENTRIES if e.analysed} - {LAYOUT.traffic_file("query-*.csv")}
    assert "nodes/r1/router.json5" in _written(theirs)
