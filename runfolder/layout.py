"""Every relative path of a results folder, from one object (docs/results.md).

The run writes the folder (``testbed.run``, the deployer, the traffic processes on the nodes, the captures,
the scraper), the analysis reads it and writes ``parquet/`` and ``report/`` into it (``spark``), and the
synthetic writer of the tests (``spark.testing``) makes folders like it: all of them name its files
through :data:`LAYOUT`, a :class:`RunLayout`. Paths are relative, ``/``-separated strings (a Hadoop URI
takes them as well as a local folder); file names of flows, nodes and processes go through
:func:`safe_name`, as the traffic processes write them.

:data:`ENTRIES` declares every file: who writes it and whether the analysis reads it; ``RunLayout.entry``
finds the declaration of a path (tests/spark/test_spark_real_run.py checks a real run against it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

__all__ = ["RunLayout", "LAYOUT", "Entry", "ENTRIES", "safe_name"]

_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def safe_name(name: str) -> str:
    """A flow, node or process name usable in a file name (flow names are already safe)."""
    return _SAFE.sub("_", name)


@dataclass(frozen=True)
class Entry:
    """One kind of file of the folder: ``pattern`` is relative, ``*`` stands for a part of one name, ``**``
    for any path below a folder."""

    pattern: str
    what: str
    #: "run" (testbed run and what it starts on the nodes) or "analysis" (testbed analyze / check)
    writer: str = "run"
    #: whether the analysis reads it (False: for people, or for a later run of the orchestrator)
    analysed: bool = False

    def matches(self, rel: str) -> bool:
        regex = re.escape(self.pattern).replace(r"\*\*", ".+").replace(r"\*", "[^/]*")
        return re.fullmatch(regex, rel) is not None


class RunLayout:
    """The names of a results folder's files and folders, relative to the folder."""

    manifest = "manifest.json"
    topology = "topology.yaml"
    lab = "lab.json"
    events = "events.jsonl"
    nodes_dir = "nodes"
    traffic_dir = "traffic"
    flows = "traffic/flows.json"
    plans_dir = "traffic/plans"
    metrics_dir = "metrics"
    pcap_dir = "pcap"
    captures = "pcap/capture.json"
    ansible_dir = "ansible"
    parquet_dir = "parquet"
    report_dir = "report"
    summary = "report/summary.json"
    report = "report/report.html"
    check = "report/check.json"
    junit = "report/junit.xml"
    spark_log = "report/spark.log"
    #: the folders a run makes at its start
    run_dirs: Tuple[str, ...] = (nodes_dir, traffic_dir, metrics_dir, pcap_dir, ansible_dir)

    # -- a node's folder (nodes/<node>/): what the deployer writes and what is collected from the node --
    launch_name = "launch.json"
    router_log_name = "router.log"
    router_events_name = "events.jsonl"
    #: what is collected from every router's folder besides the config files its launch.json names
    router_file_names = (router_log_name, router_events_name, launch_name)

    def node_dir(self, node: str) -> str:
        return f"{self.nodes_dir}/{node}"

    def node_file(self, node: str, name: str) -> str:
        return f"{self.nodes_dir}/{node}/{name}"

    def router_events(self, node: str) -> str:
        return self.node_file(node, self.router_events_name)

    # -- traffic/: the names the traffic processes write in their folder, and the paths in the run's --

    #: how each kind of traffic log's name begins (``<prefix><flow>[-<node>].csv``)
    send_prefix = "send-"
    recv_prefix = "recv-"
    query_prefix = "query-"
    served_prefix = "served-"

    @classmethod
    def send_log_name(cls, flow: str) -> str:
        return f"{cls.send_prefix}{safe_name(flow)}.csv"

    @classmethod
    def recv_log_name(cls, flow: str, node: str) -> str:
        return f"{cls.recv_prefix}{safe_name(flow)}-{safe_name(node)}.csv"

    @classmethod
    def query_log_name(cls, flow: str) -> str:
        return f"{cls.query_prefix}{safe_name(flow)}.csv"

    @classmethod
    def served_log_name(cls, flow: str, node: str) -> str:
        return f"{cls.served_prefix}{safe_name(flow)}-{safe_name(node)}.csv"

    @staticmethod
    def process_log_name(process: str) -> str:
        return f"{safe_name(process)}.log"

    @staticmethod
    def process_stdout_name(process: str) -> str:
        return f"{safe_name(process)}.stdout"

    @staticmethod
    def plan_name(process: str) -> str:
        return f"{process}.json"

    def send_log(self, flow: str) -> str:
        return f"{self.traffic_dir}/{self.send_log_name(flow)}"

    def recv_log(self, flow: str, node: str) -> str:
        return f"{self.traffic_dir}/{self.recv_log_name(flow, node)}"

    def query_log(self, flow: str) -> str:
        return f"{self.traffic_dir}/{self.query_log_name(flow)}"

    def served_log(self, flow: str, node: str) -> str:
        return f"{self.traffic_dir}/{self.served_log_name(flow, node)}"

    def plan(self, process: str) -> str:
        return f"{self.plans_dir}/{self.plan_name(process)}"

    def traffic_file(self, name: str) -> str:
        return f"{self.traffic_dir}/{name}"

    def in_traffic_dir(self, rel: str) -> str:
        """``rel`` (below ``traffic/``) relative to the traffic folder: a node's traffic folder, and the one
        a plan's ``log_dir`` names, hold the same paths below them as the run's ``traffic/``."""
        prefix = f"{self.traffic_dir}/"
        if not rel.startswith(prefix):
            raise ValueError(f"{rel} is not below {prefix}")
        return rel[len(prefix):]

    # -- faults/: the logs of parts of the lab that died during the run (testbed.backends.base.LabFault) --

    faults_dir = "faults"

    def fault_log(self, part: str) -> str:
        return f"{self.faults_dir}/{safe_name(part)}.log"

    # -- metrics/, pcap/, parquet/ --

    @staticmethod
    def metrics_name(node: str) -> str:
        return f"{node}.jsonl"

    def metrics(self, node: str) -> str:
        return f"{self.metrics_dir}/{self.metrics_name(node)}"

    @staticmethod
    def pcap_stem(node: str, ifname: str) -> str:
        return f"{node}-{ifname}"

    def pcap_name(self, node: str, ifname: str) -> str:
        return f"{self.pcap_stem(node, ifname)}.pcap"

    def pcap(self, node: str, ifname: str) -> str:
        return f"{self.pcap_dir}/{self.pcap_name(node, ifname)}"

    def pcap_file(self, name: str) -> str:
        return f"{self.pcap_dir}/{name}"

    @staticmethod
    def tcpdump_log_name(node: str, ifname: str) -> str:
        return f".{node}-{ifname}.tcpdump.log"

    def parquet(self, table: str) -> str:
        return f"{self.parquet_dir}/{table}"

    # -- the declarations --

    def entry(self, rel: str) -> Optional[Entry]:
        """The declaration of ``rel`` (a file's path relative to the folder), None when it has none."""
        return next((e for e in ENTRIES if e.matches(rel)), None)


LAYOUT = RunLayout()

_L = LAYOUT

#: every file of a results folder; the first that matches a path declares it
ENTRIES: Tuple[Entry, ...] = (
    Entry(_L.manifest, "what ran, how, and how it ended", analysed=True),
    Entry(_L.topology, "the topology file as given (its expectations are checked)", analysed=True),
    Entry(_L.lab, "the lab as built: nodes, links, addresses, shaping", analysed=True),
    Entry(_L.events, "orchestrator and scenario events", analysed=True),
    Entry(_L.node_file("*", _L.launch_name), "how the router was started"),
    Entry(_L.node_file("*", _L.router_log_name), "the router's log"),
    Entry(_L.node_file("*", _L.router_events_name), "the router's own event log", analysed=True),
    Entry(_L.node_file("*", "*"), "the router's config files as deployed (its launch.json names them)"),
    Entry(_L.flows, "every flow of the run", analysed=True),
    Entry(_L.traffic_file(f"{_L.send_prefix}*.csv"), "one line per message sent", analysed=True),
    Entry(_L.traffic_file(f"{_L.recv_prefix}*.csv"), "one line per message received", analysed=True),
    Entry(_L.traffic_file(f"{_L.query_prefix}*.csv"), "one line per query of a query flow", analysed=True),
    Entry(_L.traffic_file(f"{_L.served_prefix}*.csv"), "one line per query a queryable answered"),
    Entry(_L.traffic_file("*.log"), "a traffic process's own log"),
    Entry(_L.traffic_file("*.stdout"), "what a traffic process printed"),
    Entry(_L.plan("*"), "the plan a traffic process ran"),
    Entry(_L.fault_log("*"), "the log of a part of the lab that died during the run (the impairment appliance's "
                             "console)"),
    Entry(_L.metrics("*"), "router metrics scraped over time", analysed=True),
    Entry(_L.pcap_file("*.pcap"), "one capture per captured interface", analysed=True),
    Entry(_L.pcap_file(".*.tcpdump.log"), "tcpdump's own output of a capture"),
    Entry(_L.captures, "what each capture covered and what the kernel dropped", analysed=True),
    Entry(f"{_L.ansible_dir}/*", "ansible-runner's files of the deploy (inventory, plans, endpoints)"),
    Entry(f"{_L.ansible_dir}/**", "ansible-runner artifacts of every playbook run"),
    Entry(f"{_L.parquet_dir}/**", "the analysis's tables", writer="analysis"),
    Entry(_L.summary, "every figure of the analysis", writer="analysis"),
    Entry(_L.report, "the report", writer="analysis"),
    Entry(_L.check, "the verdicts of testbed check", writer="analysis"),
    Entry(_L.junit, "the verdicts as JUnit XML", writer="analysis"),
    Entry(_L.spark_log, "Spark's own log of the analysis", writer="analysis"),
)
