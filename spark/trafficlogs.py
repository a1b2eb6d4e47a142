"""The flows' send and receive logs (``traffic/send-<flow>.csv``, ``recv-<flow>-<node>.csv``) read by Spark.

The driver reads each log's first line only (its header: where each column is) and, per file, four counts;
the executors split and parse the lines, so no log is ever whole on the driver (a 100x synthetic diamond has
1.2 M sends and 2.4 M receipts). What is reported of a damaged, missing or empty log is what the driver's
pandas reader reported: a missing or empty file, a header without a needed column or that is not CSV (an
error: the file is left out), and "N unreadable lines skipped" (a warning) where N counts every data line
that is not a line of integers ``seq``, ``send_ns`` (and ``recv_ns``), ``size`` optional, with at most as
many fields as the header: blank lines, lines cut by an interrupted write, lines with a field too many. A
file with bytes that are not UTF-8 is not a CSV log (pandas could not decode it either).
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from runfolder.layout import LAYOUT
from runfolder.records import RECV_HEADER, SEND_HEADER

from .capturetasks import table_schema
from .problems import Problem

__all__ = ["Logs", "read_logs", "HEAD_BYTES", "SENT_SCHEMA", "RECEIVED_SCHEMA"]

#: how much of a log the driver reads to find its header line
HEAD_BYTES = 65536
L, I, S = T.LongType(), T.IntegerType(), T.StringType()
SENT_SCHEMA = table_schema(("flow", S), ("flow_id", L), ("priority", I), ("seq", L), ("send_ns", L), ("size", L))
RECEIVED_SCHEMA = table_schema(("flow", S), ("flow_id", L), ("priority", I), ("node", S), ("seq", L),
                               ("send_ns", L), ("recv_ns", L), ("size", L))
#: the kinds of log: the flows' send logs, their subscribers' receive logs, the slow subscribers' receive logs
KINDS = ("send", "recv", "slow")
#: an integer as the logs write it (the pandas reader's ``exact_ints``: no sign but minus, no decimal point)
_INTEGER = r"^\s*(-?[0-9]+)\s*$"


@dataclass(frozen=True)
class LogFile:
    """One log to read: what it is of, and where its header puts each column (positions from 0)."""

    name: str
    kind: str
    flow: str
    flow_id: int
    priority: int
    node: Optional[str]
    positions: Dict[str, int]
    width: int


@dataclass
class Logs:
    """The logs as Spark tables (read from the CSV files when used) and the earliest send time."""

    sent: DataFrame           # flow, flow_id, priority, seq, send_ns, size
    received: DataFrame       # flow, flow_id, priority, node, seq, send_ns, recv_ns, size: the ordinary subscribers
    slow_received: DataFrame  # the same, of the slow subscribers (node = their label)
    first_send_ns: Optional[int]


def _columns(kind: str) -> List[str]:
    return (SEND_HEADER if kind == "send" else RECV_HEADER).split(",")


def _expected(flows: List[dict], kind: str) -> Dict[str, Tuple[dict, Optional[str]]]:
    """Log file name -> (its flow, its subscriber or slow subscriber's label; None for a send log)."""
    out: Dict[str, Tuple[dict, Optional[str]]] = {}
    for f in flows:
        if kind == "send":
            out[LAYOUT.send_log_name(f["name"])] = (f, None)
        elif kind == "slow":
            for s in f.get("slow_subscribers") or []:
                out[LAYOUT.recv_log_name(f["name"], s["label"])] = (f, s["label"])
        else:
            for sub in f.get("subscribers") or []:
                out[LAYOUT.recv_log_name(f["name"], sub)] = (f, sub)
    return out


def _header(folder, rel: str, cols: List[str]) -> Tuple[Optional[List[str]], Optional[str]]:
    """The header's column names, or why the file is left out (empty, not CSV, a column missing)."""
    head = folder.read_head(rel, HEAD_BYTES) or b""
    if not head.strip() and (folder.size(rel) or 0) > len(head):
        head = folder.read_bytes(rel) or b""  # only blanks in its first 64 KiB: look at the whole file
    if not head.strip():
        return None, "empty (not even the header line): left out"
    first = next(line for line in head.split(b"\n") if line.strip())
    try:
        names = list(pd.read_csv(io.BytesIO(first + b"\n"), dtype=str, nrows=0, engine="c").columns)
    except (ValueError, pd.errors.ParserError) as err:
        return None, f"not a CSV log: {err}"
    missing = [c for c in cols if c not in names]
    if missing:
        return None, f"no column {', '.join(missing)} (header {names})"
    return names, None


def _integer(field: Column) -> Column:
    """A field read as the integer it is written as; null when blank, absent or anything else."""
    return F.when(field.rlike(_INTEGER), F.regexp_extract(field, _INTEGER, 1).try_cast("long"))


def read_logs(spark: SparkSession, folder, flows: List[dict], problems: List[Problem]) -> Logs:
    """Every flow's send log, its subscribers' and its slow subscribers' receive logs, with the problems found
    (appended to ``problems`` in the order the files are named, send logs first)."""
    found: Dict[str, List[Tuple[str, Problem]]] = {k: [] for k in KINDS}  # per kind: (file, problem) by name
    files: List[LogFile] = []
    slow_names = {LAYOUT.recv_log_name(f["name"], s["label"]) for f in flows for s in f.get("slow_subscribers") or []}
    for kind in KINDS:
        expected = _expected(flows, kind)
        present = set(folder.list(LAYOUT.traffic_dir, ".csv",
                                  prefix=LAYOUT.send_prefix if kind == "send" else LAYOUT.recv_prefix))
        for name, (f, sub) in sorted(expected.items()):
            rel = LAYOUT.traffic_file(name)
            if name not in present:
                found[kind].append((name, Problem("error", rel, "missing: " + (
                    "nothing known about what this flow sent" if kind == "send"
                    else f"what {sub} received from {f['name']} is unknown (left out of loss and latency)"))))
                continue
            names, why = _header(folder, rel, _columns(kind))
            if why:
                found[kind].append((name, Problem("error", rel, why)))
                continue
            files.append(LogFile(name, kind, f["name"], int(f["flow_id"]), int(f.get("priority", 5)), sub,
                                 {c: names.index(c) for c in _columns(kind)}, len(names)))
        others = slow_names if kind == "recv" else (
            {n for n in present if n not in slow_names} if kind == "slow" else set())
        for name in sorted(present - set(expected) - others):
            found[kind].append(("\uffff" + name, Problem("warning", LAYOUT.traffic_file(name),
                                                         "not a flow in flows.json: ignored")))
    lines = _parsed(spark, folder, files)
    counted = {} if lines is None else {r["file"]: r for r in lines.groupBy("file").agg(
        F.count(F.lit(1)).alias("lines"), F.sum(F.col("_ok").cast("long")).alias("ok"),
        F.sum((~F.is_valid_utf8("value")).cast("long")).alias("undecodable"),
        F.min(F.when(F.col("_ok") & (F.col("kind") == "send"), F.col("send_ns"))).alias("first_send_ns")).collect()}
    readable, first_send = [], []
    for lf in files:
        c = counted.get(lf.name)
        rel = LAYOUT.traffic_file(lf.name)
        if c is not None and c["undecodable"]:
            found[lf.kind].append((lf.name, Problem("error", rel, f"not a CSV log: {c['undecodable']} lines are "
                                                                  "not UTF-8 text")))
            continue
        readable.append(lf.name)
        bad = (c["lines"] - 1 - c["ok"]) if c is not None else 0  # the header is a line, never an ok one
        if bad > 0:
            found[lf.kind].append((lf.name, Problem(
                "warning", rel, f"{bad} unreadable lines skipped (a line cut by an interrupted write?)")))
        if c is not None and c["first_send_ns"] is not None:
            first_send.append(int(c["first_send_ns"]))
    for kind in KINDS:
        problems.extend(p for _name, p in sorted(found[kind], key=lambda np_: np_[0]))

    def table(kind: str) -> DataFrame:
        schema = SENT_SCHEMA if kind == "send" else RECEIVED_SCHEMA
        if lines is None or not readable:
            return spark.createDataFrame([], schema)
        rows = lines.where(F.col("_ok") & (F.col("kind") == kind) & F.col("file").isin(readable))
        return rows.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])

    return Logs(table("send"), table("recv"), table("slow"), min(first_send) if first_send else None)


def _parsed(spark: SparkSession, folder, files: List[LogFile]) -> Optional[DataFrame]:
    """Every line of ``files`` (Spark, read when used): the file's name, its kind, flow and node, the line
    (``value``), its integers (``seq``, ``send_ns``, ``recv_ns``, ``size``) and whether it is a readable line
    (``_ok``). None when there is no file to read."""
    if not files:
        return None
    meta = spark.createDataFrame(
        [(lf.name, lf.kind, lf.flow, lf.flow_id, lf.priority, lf.node, lf.positions.get("seq"),
          lf.positions.get("send_ns"), lf.positions.get("recv_ns"), lf.positions.get("size"), lf.width)
         for lf in files],
        "file string, kind string, flow string, flow_id long, priority int, node string, p_seq int, p_send int, "
        "p_recv int, p_size int, width int")
    text = spark.read.text([folder.uri(LAYOUT.traffic_file(lf.name)) for lf in files]).select(
        F.col("_metadata.file_name").alias("file"), "value")
    fields = F.split(F.col("value"), ",", -1)
    count = F.size(fields)

    def at(position: str) -> Column:
        p = F.col(position)
        return _integer(F.when(p.isNotNull() & (p < count), F.get(fields, p)))

    parsed = text.join(F.broadcast(meta), "file").select(
        "file", "kind", "flow", "flow_id", "priority", "node", "value", at("p_seq").alias("seq"),
        at("p_send").alias("send_ns"), at("p_recv").alias("recv_ns"), at("p_size").alias("size"),
        (count <= F.col("width")).alias("_fits"))
    ok = (F.col("_fits") & F.col("seq").isNotNull() & F.col("send_ns").isNotNull()
          & ((F.col("kind") == "send") | F.col("recv_ns").isNotNull()))
    return parsed.withColumn("_ok", ok)
