"""Results folder -> Parquet tables (docs/reports.md lists every table and column).

Everything damaged is reported as a ``Problem`` and the rest is ingested: a
pcap cut short, an unreadable line, a missing or empty log, a failed scrape.
"""
from __future__ import annotations

import io
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from runfolder.layout import LAYOUT
from runfolder.records import RECV_HEADER, SEND_HEADER

from .capturetasks import CAPTURE_SCHEMAS, CaptureTask, capture_piece_bytes, decode_captures, piece_tasks, table_schema
from .queries import INT_COLUMNS, OUTCOMES, QUERY_LOG_COLUMNS, is_query_flow
from .routerdriver import TESTBED_DRIVER, RecordedDriver, read_router_driver
from .session import frame_to_spark
from .storage import ResultsStore
from .streamsearch import SentIndex

__all__ = ["Problem", "Ingested", "ingest", "SCHEMAS", "TABLES"]


@dataclass
class Problem:
    severity: str   # "error": data missing from the analysis; "warning": analysed, but look
    file: str
    problem: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.file}: {self.problem}"


L, I, S, D, B = T.LongType(), T.IntegerType(), T.StringType(), T.DoubleType(), T.BooleanType()

SCHEMAS: Dict[str, T.StructType] = {
    **CAPTURE_SCHEMAS,
    "sent": table_schema(("flow", S), ("flow_id", L), ("priority", I), ("seq", L), ("send_ns", L), ("size", L)),
    "received": table_schema(("flow", S), ("flow_id", L), ("priority", I), ("node", S), ("seq", L), ("send_ns", L),
                        ("recv_ns", L), ("size", L)),
    "metrics": table_schema(("ts_ns", L), ("node", S), ("ok", B), ("error", S), ("metric", S),
                       ("labels", T.MapType(S, S)), ("value", D)),
    "events": table_schema(("ts_ns", L), ("source", S), ("node", S), ("event", S), ("at_ns", L), ("link", I),
                      ("neighbour", S), ("fields", S)),
    "flows": table_schema(("flow", S), ("flow_id", L), ("priority", I), ("priority_name", S), ("publisher", S),
                     ("subscribers", T.ArrayType(S)), ("congestion_control", S), ("key", S), ("size", L),
                     ("rate_bps", L)),
    "links": table_schema(("link", I), ("a_node", S), ("a_ifname", S), ("a_address", S), ("b_node", S),
                     ("b_ifname", S), ("b_address", S), ("weight", I)),
    "problems": table_schema(("severity", S), ("file", S), ("problem", S)),
    "queries": table_schema(("qid", L), ("send_ns", L), ("first_reply_ns", L), ("done_ns", L), ("replies", L),
                       ("retries", L), ("outcome", S), ("served_by", S), ("attempts", S), ("flow", S),
                       ("timeout_ns", L)),
}
TABLES = tuple(SCHEMAS)
#: a table the driver holds with at most this many rows is used in Spark from those rows, not from its Parquet
LOCAL_TABLE_ROWS = 10_000


@dataclass
class Ingested:
    """The Parquet tables (read back from ``parquet/``), the small JSON files, and every problem found."""

    tables: Dict[str, DataFrame]
    problems: List[Problem]
    manifest: Optional[dict]
    lab: Optional[dict]
    flows: List[dict]  # the publish/subscribe flows
    captures: List[dict]
    t0_ns: Optional[int]
    expect_source: Optional[str] = None
    query_flows: List[dict] = field(default_factory=list)  # flows.json entries of kind "query"
    frames: Dict[str, pd.DataFrame] = field(default_factory=dict)  # driver-side copies: sent, received, metrics, events
    timings: Dict[str, float] = field(default_factory=dict)
    router_driver: RecordedDriver = TESTBED_DRIVER  # what the router driver provides (metrics, events, our wire)

    def __getitem__(self, name: str) -> DataFrame:
        return self.tables[name]


# ---------------------------------------------------------------- the driver


def ingest(spark: SparkSession, folder: ResultsStore, progress: Callable[[str], None] = lambda m: None) -> Ingested:
    problems: List[Problem] = []
    timings: Dict[str, float] = {}

    def small_json(rel: str, required: bool) -> Optional[dict]:
        try:
            data = folder.read_json(rel)
        except ValueError as err:
            problems.append(Problem("error", rel, str(err)))
            return None
        if data is None and required:
            problems.append(Problem("error", rel, "missing"))
        return data

    manifest = small_json(LAYOUT.manifest, True)
    lab = small_json(LAYOUT.lab, True)
    flows_doc = small_json(LAYOUT.flows, True)
    capture_doc = small_json(LAYOUT.captures, False)
    if manifest and manifest.get("status") not in (None, "completed"):
        problems.append(Problem("warning", LAYOUT.manifest,
                                f"the run ended {manifest.get('status')}: {manifest.get('error')}"))
    driver, driver_problems = read_router_driver(manifest)
    problems.extend(Problem("error", LAYOUT.manifest, p) for p in driver_problems)

    every_flow = list((flows_doc or {}).get("flows", []))
    query_flows = [f for f in every_flow if is_query_flow(f)]
    flows = [f for f in every_flow if not is_query_flow(f)]
    t0_ns = (manifest or {}).get("traffic_start_ns")

    tables: Dict[str, DataFrame] = {}
    frames: Dict[str, pd.DataFrame] = {}

    deferred: List[Tuple[str, DataFrame]] = []

    def save_frame(name: str, pdf: pd.DataFrame) -> None:
        """A table read on the driver: written from its pandas frame (a local folder's by pyarrow, at once; else
        through Spark with the others at the end). Spark uses a small one from the driver's rows (a join
        broadcasts it without a job to scan it), a large one from Parquet."""
        if folder.write_frame(LAYOUT.parquet(name), pdf, SCHEMAS[name]):
            tables[name] = (_to_spark(spark, pdf, name) if len(pdf) <= LOCAL_TABLE_ROWS else
                            spark.read.schema(SCHEMAS[name]).parquet(folder.uri(LAYOUT.parquet(name))))
        else:
            save(name, _to_spark(spark, pdf, name), reread=False)

    def save(name: str, df: DataFrame, reread: bool = True) -> None:
        """Write the table and use it from Parquet afterwards; a table built from small driver-side data
        (``reread=False``) is used as is and written at the end, concurrently with the others."""
        if not reread:
            tables[name] = df
            deferred.append((name, df))
            return
        t = time.perf_counter()
        df.write.mode("overwrite").parquet(folder.uri(LAYOUT.parquet(name)))
        tables[name] = spark.read.parquet(folder.uri(LAYOUT.parquet(name)))
        timings[f"write_{name}"] = time.perf_counter() - t

    # -- links and address map --
    addr: Dict[str, Tuple[str, int]] = {}
    link_rows = []
    for link in (lab or {}).get("links", []):
        try:
            a, b = link["a"], link["b"]
            for end in (a, b):
                addr[str(end["address"]).split("/")[0]] = (end["node"], int(link["index"]))
            link_rows.append((int(link["index"]), a["node"], a["ifname"], a["address"], b["node"], b["ifname"],
                              b["address"], int(link.get("weight") or 0)))
        except (KeyError, TypeError, ValueError) as err:
            problems.append(Problem("error", LAYOUT.lab, f"link entry {link!r} unreadable: {err}"))
    save_frame("links", _rows_frame(link_rows, "links"))

    # -- flows --
    flow_rows = []
    for f in flows:
        try:
            flow_rows.append((f["name"], int(f["flow_id"]), int(f.get("priority", 5)), f.get("priority_name"),
                              f.get("publisher"), list(f.get("subscribers") or []), f.get("congestion_control"),
                              f.get("key"), _int(f.get("size")), _int(f.get("rate_bps"))))
        except (KeyError, TypeError, ValueError) as err:
            problems.append(Problem("error", LAYOUT.flows, f"flow entry {f!r} unreadable: {err}"))
    save_frame("flows", _rows_frame(flow_rows, "flows"))

    # -- send and receive logs (first: a header search validates what it finds against the send logs) --
    t = time.perf_counter()
    progress("ingest: send and receive logs")
    for table, kind in (("sent", "send"), ("received", "recv")):
        frames[table] = _read_logs(folder, flows, kind, problems)
        save_frame(table, frames[table])
    # slow subscribers' receive logs (node = their label, <node>.slow<n>): apart from the flows' figures
    frames["slow_received"] = _read_logs(folder, flows, "slow", problems)
    frames["queries"] = read_query_logs(folder, query_flows, problems)
    if query_flows:
        save_frame("queries", frames["queries"])
    timings["logs"] = time.perf_counter() - t

    # -- pcaps: one task per file --
    t = time.perf_counter()
    pcap_files = folder.list(LAYOUT.pcap_dir, ".pcap")
    cap_entries = {c.get("file"): c for c in (capture_doc or {}).get("captures", []) if isinstance(c, dict)}
    for name in cap_entries:
        if name and name not in pcap_files:
            problems.append(Problem("error", LAYOUT.pcap_file(name), "listed in capture.json but missing"))
    nodes = sorted((lab or {}).get("nodes", {}), key=len, reverse=True)
    caps = {}
    for name in pcap_files:
        cap = dict(cap_entries.get(name) or {})
        if not cap:
            stem = name[: -len(".pcap")]
            for n in nodes:
                if stem.startswith(n + "-"):
                    cap = {"node": n, "ifname": stem[len(n) + 1:]}
                    break
            cap["link"] = _link_of(lab, cap.get("node"), cap.get("ifname"))
        if cap.get("packets_dropped_by_kernel"):
            problems.append(Problem("warning", LAYOUT.pcap_file(name),
                                    f"the kernel dropped {cap['packets_dropped_by_kernel']} packets during capture"))
        caps[name] = cap
    search = not driver.frames_decodable
    progress(f"ingest: {'searching' if search else 'decoding'} {len(pcap_files)} pcaps"
             + (f" for traffic headers (router driver {driver.name}, wire {driver.wire})" if search else ""))
    if pcap_files:
        # the send logs, to validate candidate headers against (shipped to every task with the decoder)
        sent = SentIndex.from_sent(frames["sent"], [int(f["flow_id"]) for f in every_flow
                                                    if _int(f.get("flow_id")) is not None]) if search else None
        tasks = [CaptureTask(n, folder.uri(LAYOUT.pcap_file(n)), caps[n]) for n in pcap_files]
        if folder.is_local:  # a large capture: a task per piece of it (a URI's file is read whole by Spark)
            total = sum(os.path.getsize(t.location) for t in tasks)
            tasks = piece_tasks(spark, tasks, capture_piece_bytes(spark, total))
        observations = LAYOUT.parquet("observations")
        staging = folder.stage_table(observations) if folder.is_local else None  # the tasks write it there
        try:
            decoded = decode_captures(spark, tasks, folder.is_local, addr, sent,
                                      None if staging is None else str(staging))
        except BaseException:
            if staging is not None:
                folder.discard_staged(observations)
            raise
        stats_rows = decoded.stats
        save("link_traffic", decoded.link_traffic)
        if decoded.observations is None:
            folder.publish_staged(observations)
            tables["observations"] = spark.read.schema(SCHEMAS["observations"]).parquet(folder.uri(observations))
        else:
            save("observations", decoded.observations)
        decoded.release()
    else:
        problems.append(Problem("error", f"{LAYOUT.pcap_dir}/",
                                "no pcap files: no per-link observations, paths or reroutes"))
        stats_rows = []
        save("observations", spark.createDataFrame([], SCHEMAS["observations"]))
        save("link_traffic", spark.createDataFrame([], SCHEMAS["link_traffic"]))
    captures = [dict(zip(SCHEMAS["captures"].names, r)) for r in stats_rows]
    for c in captures:
        where = LAYOUT.pcap_file(c['capture'])
        if c["error"]:
            problems.append(Problem("error", where, c["error"]))
        if c["truncated_file"]:
            problems.append(Problem("warning", where, f"file cut short (interrupted capture?): decoded the "
                                                      f"{c['packets']} complete packets before the cut"))
        if c["codec_errors"]:
            problems.append(Problem("warning", where, f"{c['codec_errors']} places where the stream did not decode "
                                                      "as router frames (resynchronised on the next frame)"))
        if c["method"] == "header-search":
            if c["rejected_not_sent"]:
                problems.append(Problem(
                    "warning", where, f"{c['rejected_not_sent']} traffic headers of known flows matched no line of "
                                      "their send log (a send log cut short, or bytes that only look like a header): "
                                      "not counted"))
            if c["headers_in_holes"] or c["gap_bytes"] or c["snap_truncated_bytes"]:
                problems.append(Problem(
                    "warning", where,
                    f"{c['gap_bytes']} stream bytes never captured and {c['snap_truncated_bytes']} cut by the snap "
                    f"length ({c['headers_in_holes']} traffic headers touching them not read): paths and per-hop "
                    "figures cover only the messages seen"))
        elif c["messages_hidden"] or c["frame_parts_skipped"]:
            problems.append(Problem(
                "warning", where,
                f"{c['messages_hidden']} messages and {c['frame_parts_skipped']} partial frames not visible "
                f"({c['snap_truncated_bytes']} bytes cut by the snap length, {c['gap_bytes']} bytes never captured): "
                "paths and per-hop figures cover only the messages seen; a larger capture.snaplen helps"))
    save_frame("captures", _rows_frame([tuple(c.values()) for c in captures], "captures"))
    timings["pcaps"] = time.perf_counter() - t

    # -- metrics and events --
    t = time.perf_counter()
    progress("ingest: metrics and events")
    if driver.metrics:
        frames["metrics"] = _read_metrics(folder, problems)
        have_metrics = set(folder.list(LAYOUT.metrics_dir, ".jsonl"))
        for node, meta in sorted(((lab or {}).get("nodes") or {}).items()):
            if (meta or {}).get("kind", "router") == "router" and LAYOUT.metrics_name(node) not in have_metrics \
                    and have_metrics:
                problems.append(Problem("error", LAYOUT.metrics(node), "missing: this router was never scraped"))
    else:  # nothing to read, and nothing missing: the report says "not available" where metrics would be
        frames["metrics"] = pd.DataFrame(columns=SCHEMAS["metrics"].names)
        if folder.list(LAYOUT.metrics_dir, ".jsonl"):
            problems.append(Problem("warning", f"{LAYOUT.metrics_dir}/",
                                    f"ignored: router driver {driver.name} declares no metrics"))
    save_frame("metrics", frames["metrics"])
    frames["events"] = _read_events(folder, problems, router_events=driver.events, driver_name=driver.name)
    save_frame("events", frames["events"])
    timings["metrics_events"] = time.perf_counter() - t

    if t0_ns is None and not frames["sent"].empty:
        t0_ns = int(frames["sent"]["send_ns"].min())
    save_frame("problems", _rows_frame([(p.severity, p.file, p.problem) for p in problems], "problems"))
    t = time.perf_counter()
    if deferred:
        progress(f"ingest: writing {len(deferred)} small tables")
    with ThreadPoolExecutor(max_workers=4) as pool:  # Spark runs jobs from several threads at once
        for future in [pool.submit(lambda nd: nd[1].write.mode("overwrite").parquet(folder.uri(LAYOUT.parquet(nd[0]))),
                                   item) for item in deferred]:
            future.result()
    timings["write_small_tables"] = time.perf_counter() - t
    return Ingested(tables, problems, manifest, lab, flows, captures, t0_ns, frames=frames, timings=timings,
                    query_flows=query_flows, router_driver=driver)


def _rows_frame(rows: List[tuple], table: str) -> pd.DataFrame:
    """Rows of ``table`` as pandas, every value as it is (no float column made of integers and None)."""
    return pd.DataFrame(rows, columns=SCHEMAS[table].names, dtype=object)


def _to_spark(spark: SparkSession, pdf: pd.DataFrame, table: str) -> DataFrame:
    schema = SCHEMAS[table]
    if pdf.empty:
        return frame_to_spark(spark, pd.DataFrame(columns=schema.names), schema)
    try:  # Arrow: fast for the big logs
        return frame_to_spark(spark, pdf, schema)
    except Exception:  # noqa: BLE001 - any Arrow conversion limit: fall back to rows
        pass
    rows = [tuple(None if (v is None or v is pd.NA or (isinstance(v, float) and v != v)) else
                  (int(v) if isinstance(schema[c].dataType, (T.LongType, T.IntegerType)) else v)
                  for c, v in zip(schema.names, rec))
            for rec in pdf[schema.names].itertuples(index=False, name=None)]
    return spark.createDataFrame(rows, schema)


def _int(v) -> Optional[int]:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def _link_of(lab: Optional[dict], node: Optional[str], ifname: Optional[str]) -> Optional[int]:
    for link in (lab or {}).get("links", []):
        for end in (link.get("a", {}), link.get("b", {})):
            if end.get("node") == node and end.get("ifname") == ifname:
                return link.get("index")
    return None


def _read_logs(folder: ResultsStore, flows: List[dict], kind: str, problems: List[Problem]) -> pd.DataFrame:
    """send-<flow>.csv or recv-<flow>-<node>.csv for every flow (``kind`` send / recv), or the slow
    subscribers' recv-<flow>-<label>.csv (``kind`` slow), as one table (small: read on the driver)."""
    cols = (SEND_HEADER if kind == "send" else RECV_HEADER).split(",")
    target = SCHEMAS["sent" if kind == "send" else "received"].names
    expected: Dict[str, Tuple[dict, Optional[str]]] = {}
    slow_names = {LAYOUT.recv_log_name(f["name"], s["label"]) for f in flows for s in f.get("slow_subscribers") or []}
    for f in flows:
        if kind == "send":
            expected[LAYOUT.send_log_name(f["name"])] = (f, None)
        elif kind == "slow":
            for s in f.get("slow_subscribers") or []:
                expected[LAYOUT.recv_log_name(f["name"], s["label"])] = (f, s["label"])
        else:
            for sub in f.get("subscribers") or []:
                expected[LAYOUT.recv_log_name(f["name"], sub)] = (f, sub)
    prefix = LAYOUT.send_prefix if kind == "send" else LAYOUT.recv_prefix
    present = set(folder.list(LAYOUT.traffic_dir, ".csv", prefix=prefix))
    parts = []
    for name, (f, sub) in sorted(expected.items()):
        rel = LAYOUT.traffic_file(name)
        if name not in present:
            problems.append(Problem("error", rel, "missing: " + (
                "nothing known about what this flow sent" if kind == "send"
                else f"what {sub} received from {f['name']} is unknown (left out of loss and latency)")))
            continue
        read = _read_csv_log(folder, rel, cols, problems, ints=True)
        if read is None:
            continue
        df, lines = read
        num = pd.DataFrame({c: exact_ints(df[c]) for c in cols})
        ok = num[[c for c in cols if c != "size"]].notna().all(axis=1)
        bad = lines - int(ok.sum())
        if bad > 0:
            problems.append(Problem("warning", rel,
                                    f"{bad} unreadable lines skipped (a line cut by an interrupted write?)"))
        num = num[ok].astype("Int64").astype("int64", errors="ignore")
        num["flow"], num["flow_id"], num["priority"] = f["name"], int(f["flow_id"]), int(f.get("priority", 5))
        if kind != "send":
            num["node"] = sub
        parts.append(num)
    others = slow_names if kind == "recv" else ({n for n in present if n not in slow_names} if kind == "slow" else set())
    for name in sorted(present - set(expected) - others):
        problems.append(Problem("warning", LAYOUT.traffic_file(name), "not a flow in flows.json: ignored"))
    if not parts:
        return _empty(target, kind)
    out = pd.concat(parts, ignore_index=True)
    for c in ("seq", "send_ns", "recv_ns", "flow_id"):
        if c in out:
            out[c] = out[c].astype("int64")
    out["size"] = out["size"].astype("Int64")
    out["priority"] = out["priority"].astype("int32")
    return out[target]


def _read_csv_log(folder: ResultsStore, rel: str, cols: List[str], problems: List[Problem], ints: bool = False
                  ) -> Optional[Tuple[pd.DataFrame, int]]:
    """A traffic CSV log as strings, and how many data lines it has; None (and a problem said) when it is
    empty, not CSV, or lacks a column of ``cols``. ``ints``: every column is an integer column (a send or
    receive log): a log whose header is ``cols`` and whose every line is whole and integers (blanks apart) is
    read as Int64 columns at once (Arrow's reader: ~20× pandas' strings and :func:`exact_ints` at a million
    lines); any other is read as strings, as :func:`exact_ints` expects."""
    data = folder.read_bytes(rel) or b""
    if not data.strip():
        problems.append(Problem("error", rel, "empty (not even the header line): left out"))
        return None
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1) - 1
    if ints:
        typed = _integer_csv(data, cols)
        if typed is not None:
            return typed, lines
    try:
        df = pd.read_csv(io.BytesIO(data), dtype=str, on_bad_lines="skip", engine="c")
    except (ValueError, pd.errors.ParserError) as err:
        problems.append(Problem("error", rel, f"not a CSV log: {err}"))
        return None
    missing = [c for c in cols if c not in df.columns]
    if missing:
        problems.append(Problem("error", rel, f"no column {', '.join(missing)} (header {list(df.columns)})"))
        return None
    return df, lines


def _integer_csv(data: bytes, cols: List[str]) -> Optional[pd.DataFrame]:
    """``data`` as Int64 columns ``cols`` if its header is exactly ``cols`` and every line has that many
    fields, each blank or an integer of digits with an optional minus sign (what the exact reading accepts
    too, to the same value); None otherwise (a line cut short, a stray character, another header)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    header, _, body = data.partition(b"\n")
    if header.rstrip(b"\r").decode("utf-8", "replace") != ",".join(cols) or body.translate(None, b"0123456789,-\r\n"):
        return None  # Arrow's reader would also take e.g. 0x10 or 1e3, which are not a log's integers
    try:
        table = pacsv.read_csv(io.BytesIO(data), convert_options=pacsv.ConvertOptions(
            column_types={c: pa.int64() for c in cols}, null_values=[""], strings_can_be_null=False,
            quoted_strings_can_be_null=False, include_columns=cols))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


def exact_ints(col: pd.Series) -> pd.Series:
    """A column of integers as written (Int64; blank or unreadable -> NA). Not through float64: one bad
    line would make pandas read the whole column as float64, and an epoch in ns would lose ~100 ns."""
    num = pd.to_numeric(col, errors="coerce")
    if num.dtype.kind in "iu":
        return num.astype("Int64")

    def one(v: str):
        v = str(v).strip()
        return int(v) if v and v.lstrip("-").isdigit() else None
    return pd.Series(pd.array([one(v) for v in col], dtype="Int64"), index=col.index)


def read_query_logs(folder: ResultsStore, query_flows: List[dict], problems: List[Problem]) -> pd.DataFrame:
    """Every query flow's ``traffic/query-<flow>.csv`` (docs/traffic.md) as one table (small: read on the driver)."""
    parts = []
    for f in query_flows:
        rel = LAYOUT.query_log(f["name"])
        if not folder.exists(rel):
            problems.append(Problem("error", rel, "missing: nothing known about this query flow"))
            continue
        read = _read_csv_log(folder, rel, QUERY_LOG_COLUMNS, problems)
        if read is None:
            continue
        df = read[0].fillna("")
        num = {c: exact_ints(df[c]) for c in INT_COLUMNS}
        ok = num["qid"].notna() & num["send_ns"].notna() & df["outcome"].isin(OUTCOMES)
        bad = int((~ok).sum())
        if bad:
            problems.append(Problem("warning", rel, f"{bad} unreadable lines skipped"))
        out = pd.DataFrame({c: num[c][ok].astype("Int64") for c in INT_COLUMNS})
        out["outcome"] = df["outcome"][ok]
        out["served_by"] = df["served_by"][ok]
        out["attempts"] = df["attempts"][ok]
        out["flow"] = f["name"]
        out["timeout_ns"] = int(f.get("timeout_ns") or 0)
        parts.append(out)
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="Int64") for c in INT_COLUMNS}).assign(
            outcome=pd.Series(dtype=str), served_by=pd.Series(dtype=str), attempts=pd.Series(dtype=str),
            flow=pd.Series(dtype=str), timeout_ns=pd.Series(dtype="int64"))
    return pd.concat(parts, ignore_index=True)



def _empty(cols, kind: str) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object" if c in ("flow", "node") else
                                      ("int32" if c == "priority" else "int64")) for c in cols})


def _read_metrics(folder: ResultsStore, problems: List[Problem]) -> pd.DataFrame:
    files = folder.list(LAYOUT.metrics_dir, ".jsonl")
    if not files:
        problems.append(Problem("error", f"{LAYOUT.metrics_dir}/", "no metrics files: router-reported drops unknown"))
    rows = []
    for name in files:
        rel = f"{LAYOUT.metrics_dir}/{name}"
        text = folder.read_text(rel) or ""
        if not text.strip():
            problems.append(Problem("error", rel, "empty: the router was never scraped"))
            continue
        bad, failed = 0, {}
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                ts, node, ok = int(rec["ts_ns"]), rec.get("node") or name[: -len(".jsonl")], bool(rec.get("ok", True))
            except (ValueError, KeyError, TypeError):
                bad += 1
                continue
            if not ok:
                err = str(rec.get("error"))
                failed[err] = failed.get(err, 0) + 1
                rows.append((ts, node, False, err, None, None, None))
                continue
            for sample in rec.get("samples") or []:
                try:
                    metric, labels, value = sample
                    rows.append((ts, node, True, None, str(metric),
                                 {str(k): str(v) for k, v in (labels or {}).items()}, float(value)))
                except (ValueError, TypeError, AttributeError):
                    bad += 1
        if bad:
            problems.append(Problem("warning", rel, f"{bad} unreadable lines or samples skipped"))
        for err, n in sorted(failed.items()):
            problems.append(Problem("warning", rel, f"{n} scrapes failed ({err})"))
    return pd.DataFrame(rows, columns=SCHEMAS["metrics"].names)


def _read_events(folder: ResultsStore, problems: List[Problem], router_events: bool = True,
                 driver_name: str = "testbed") -> pd.DataFrame:
    """The scenario's and orchestrator's events, and the routers' own (``nodes/<node>/events.jsonl``) when
    the router driver provides an event log (``router_events``)."""
    files = []
    if folder.exists(LAYOUT.events):
        files.append((LAYOUT.events, None))
    else:
        problems.append(Problem("error", LAYOUT.events, "missing: no scenario events to correlate with"))
    for node in folder.list_dirs(LAYOUT.nodes_dir):
        rel = LAYOUT.router_events(node)
        if not router_events:
            if folder.exists(rel):
                problems.append(Problem("warning", rel, f"ignored: router driver {driver_name} declares no event log"))
        elif folder.exists(rel):
            files.append((rel, node))
        else:
            problems.append(Problem("warning", rel, "missing: this router's own events are unknown"))
    rows = []
    for rel, node_from_path in files:
        bad = 0
        for line in (folder.read_text(rel) or "").splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                ts = int(rec["ts_ns"])
                event = str(rec["event"])
            except (ValueError, KeyError, TypeError):
                bad += 1
                continue
            # a router's own event is a router event whatever its fields say: weight_changed has a field
            # "source" of its own (monitor, admin, linkstate), kept in fields
            source = "router" if node_from_path else (rec.get("source") or "unknown")
            node = rec.get("node") or node_from_path
            link = rec.get("link")
            link = link if isinstance(link, int) and not isinstance(link, bool) else None
            at = rec.get("at_ns")
            at = int(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None
            neighbour = rec.get("neighbour") or rec.get("peer")
            extra = {k: v for k, v in rec.items()
                     if k not in ("ts_ns", "node", "event", "at_ns") and (k != "source" or node_from_path)}
            rows.append((ts, source, node, event, at, link, None if neighbour is None else str(neighbour),
                         json.dumps(extra, sort_keys=True, default=str)))
        if bad:
            problems.append(Problem("warning", rel, f"{bad} unreadable lines skipped"))
    df = pd.DataFrame(rows, columns=SCHEMAS["events"].names)
    for c in ("at_ns", "link"):
        df[c] = df[c].astype("Int64")
    return df.sort_values("ts_ns", kind="stable").reset_index(drop=True)
