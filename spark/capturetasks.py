"""The captures decoded on the executors as DataFrame work (one task per capture file).

No RDD, SparkContext or broadcast: the same code runs on a local session, a cluster (``--master``) and through
Spark Connect (``--remote``). The tasks are a DataFrame with one row per capture, one per partition
(``spark.range(n, numPartitions=n)`` for a local folder, whose files every executor reads through ``mmap``;
one ``binaryFile`` read per file, unioned, for a URI's folder, whose bytes Spark reads through Hadoop, so a
file is held in memory whole and must be under 2 GB). ``mapInArrow`` decodes each: the task list, the address
map and the send logs a header search validates against (``SentIndex``) travel in the function's closure,
shipped with the plan to every task.

Each task yields one Arrow table of three kinds of rows (``row_kind``): observations, link traffic (their
shared columns, the traffic's own ones) and one statistics row (its ``captures`` row as JSON). It is
persisted and split into the ``observations`` and ``link_traffic`` tables; the statistics rows are collected.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .pcap import decode_pcap, decode_pcap_file
from .streamsearch import SentIndex, search_pcap, search_pcap_file

__all__ = ["table_schema", "CAPTURE_SCHEMAS", "CaptureTask", "DecodedCaptures", "decode_captures", "decode_task"]

L, I, S, D, B = T.LongType(), T.IntegerType(), T.StringType(), T.DoubleType(), T.BooleanType()


def table_schema(*cols: Tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(n, t, True) for n, t in cols])


CAPTURE_SCHEMAS: Dict[str, T.StructType] = {
    "observations": table_schema(
        ("capture", S), ("capture_node", S), ("capture_ifname", S), ("link", I), ("src_node", S), ("dst_node", S),
        ("side", S), ("ts_ns", L), ("flow_id", L), ("seq", L), ("send_ns", L), ("priority", I), ("payload_len", I),
        ("src_ip", S), ("src_port", I), ("dst_ip", S), ("dst_port", I)),
    "link_traffic": table_schema(
        ("capture", S), ("capture_node", S), ("link", I), ("src_node", S), ("dst_node", S), ("side", S),
        ("second_ns", L), ("bytes", L), ("packets", L)),
    "captures": table_schema(
        ("capture", S), ("node", S), ("ifname", S), ("link", I), ("packets", L), ("bytes_on_wire", L),
        ("tcp_segments", L), ("payload_bytes", L), ("captured_payload_bytes", L), ("retransmitted_segments", L),
        ("out_of_order_segments", L), ("gap_bytes", L), ("snap_truncated_bytes", L), ("streams", L),
        ("resyncs", L), ("frames_lost_in_holes", L), ("messages", L), ("messages_hidden", L),
        ("messages_other", L), ("frame_parts_skipped", L), ("codec_errors", L), ("non_tcp_packets", L),
        ("truncated_file", B), ("error", S), ("first_ts_ns", L), ("last_ts_ns", L),
        ("packets_dropped_by_kernel", L), ("decode_seconds", D), ("method", S), ("headers_found", L),
        ("headers_validated", L), ("headers_rejected", L), ("rejected_unknown_flow", L), ("rejected_not_sent", L),
        ("headers_no_send_log", L), ("headers_in_holes", L), ("headers_unfinished", L)),
}

_OBSERVATION, _TRAFFIC, _STATS = 0, 1, 2
#: a task's rows: the observations' columns (the traffic rows fill those they share), the traffic's own, the kind
_DECODED = table_schema(
    *((f.name, f.dataType) for f in CAPTURE_SCHEMAS["observations"]),
    *((f.name, f.dataType) for f in CAPTURE_SCHEMAS["link_traffic"]
      if f.name not in CAPTURE_SCHEMAS["observations"].names),
    ("row_kind", I), ("stats_json", S))
_ROWS_PER_BATCH = 1 << 17


@dataclass(frozen=True)
class CaptureTask:
    """One capture to decode: its file name, where an executor reads it (a local path; a URI's bytes come from
    Spark), and its capture.json entry (node, ifname, link, packets_dropped_by_kernel)."""

    name: str
    location: str
    cap: dict


def decode_task(name: str, data, cap: dict, addr: Dict[str, Tuple[str, int]], sent: Optional[SentIndex] = None):
    """One file (its bytes, or a local path decoded through mmap): (observation rows, traffic rows, stats row).
    ``sent``: search the streams for validated traffic headers (any wire format) instead of decoding our
    router's frames."""
    t0 = time.perf_counter()
    if sent is not None:
        decoded = search_pcap_file(data, sent) if isinstance(data, str) else search_pcap(data, sent)
    else:
        decoded = decode_pcap_file(data) if isinstance(data, str) else decode_pcap(data)
    seconds = time.perf_counter() - t0
    node, ifname, link = cap.get("node"), cap.get("ifname"), cap.get("link")
    ends = []
    for src_ip, sport, dst_ip, dport in decoded.streams:
        s, d = addr.get(src_ip), addr.get(dst_ip)
        src_node = s[0] if s else None
        dst_node = d[0] if d else None
        lk = s[1] if s else (d[1] if d else link)
        side = "tx" if src_node == node and node else ("rx" if dst_node == node and node else "unknown")
        ends.append((lk, src_node, dst_node, side, src_ip, sport, dst_ip, dport))
    obs = []
    append = obs.append
    for stream, ts, flow, seq, send_ns, prio, plen in decoded.observations:
        lk, src_node, dst_node, side, src_ip, sport, dst_ip, dport = ends[stream]
        append((name, node, ifname, lk, src_node, dst_node, side, ts, flow, seq, send_ns, prio, plen,
                src_ip, sport, dst_ip, dport))
    traffic = []
    for (stream, sec), (nbytes, npk) in decoded.traffic.items():
        lk, src_node, dst_node, side = ends[stream][:4]
        traffic.append((name, node, lk, src_node, dst_node, side, sec * 1_000_000_000, nbytes, npk))
    st = decoded.stats
    stats = (name, node, ifname, link, st.packets, st.bytes_on_wire, st.tcp_segments, st.payload_bytes,
             st.captured_payload_bytes, st.retransmitted_segments, st.out_of_order_segments, st.gap_bytes,
             st.snap_truncated_bytes, st.streams, st.resyncs, st.frames_lost_in_holes, st.messages,
             st.messages_hidden, st.messages_other, st.frame_parts_skipped, st.codec_errors, st.non_tcp_packets,
             st.truncated_file, st.error, st.first_ts_ns, st.last_ts_ns, cap.get("packets_dropped_by_kernel"),
             seconds, st.method, st.headers_found, st.headers_validated, st.headers_rejected, st.rejected_unknown_flow,
             st.rejected_not_sent, st.headers_no_send_log, st.headers_in_holes, st.headers_unfinished)
    return obs, traffic, stats


def _arrow_batches(obs: list, traffic: list, stats: tuple) -> Iterator:
    """A task's rows as Arrow record batches of :data:`_DECODED` (at most ``_ROWS_PER_BATCH`` rows each)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(_DECODED)
    obs_names = CAPTURE_SCHEMAS["observations"].names
    traffic_names = CAPTURE_SCHEMAS["link_traffic"].names
    obs_columns = dict(zip(obs_names, zip(*obs))) if obs else {}
    traffic_columns = dict(zip(traffic_names, zip(*traffic))) if traffic else {}
    n_obs, n_traffic = len(obs), len(traffic)
    arrays = []
    for field in schema:
        name = field.name
        if name == "row_kind":
            values = [_OBSERVATION] * n_obs + [_TRAFFIC] * n_traffic + [_STATS]
        elif name == "stats_json":
            values = [None] * (n_obs + n_traffic) + [json.dumps(stats)]
        else:
            values = [*(obs_columns.get(name) or (None,) * n_obs),
                      *(traffic_columns.get(name) or (None,) * n_traffic), None]
        arrays.append(pa.array(values, type=field.type))
    table = pa.Table.from_arrays(arrays, schema=schema)
    yield from table.to_batches(max_chunksize=_ROWS_PER_BATCH)


def _decoder(tasks: List[CaptureTask], addr: Dict[str, Tuple[str, int]], sent: Optional[SentIndex]):
    """The ``mapInArrow`` function: each input row names a task by its index (``id``); a URI's task brings its
    file's bytes (``content``)."""

    def decode(batches):
        for batch in batches:
            ids = batch.column(batch.schema.get_field_index("id")).to_pylist()
            at = batch.schema.get_field_index("content")
            contents = batch.column(at) if at >= 0 else None
            for row, i in enumerate(ids):
                task = tasks[i]
                data = task.location if contents is None else contents[row].as_py()
                yield from _arrow_batches(*decode_task(task.name, data, task.cap, addr, sent))

    return decode


@dataclass
class DecodedCaptures:
    """The decoded captures: ``stats`` (one ``captures`` row per file, in the tasks' order), the two tables
    (Spark, read from the persisted decode), and :meth:`release` when they are written."""

    stats: List[tuple]
    observations: DataFrame
    link_traffic: DataFrame
    _decoded: DataFrame

    def release(self) -> None:
        self._decoded.unpersist()


def decode_captures(spark: SparkSession, tasks: List[CaptureTask], files_are_local: bool,
                    addr: Dict[str, Tuple[str, int]], sent: Optional[SentIndex] = None) -> DecodedCaptures:
    """Decode every capture, one Spark task each (``sent``: by the header search instead of our frames)."""
    if files_are_local:
        source = spark.range(0, len(tasks), 1, len(tasks))
    else:
        reads = [spark.read.format("binaryFile").load(t.location).select(F.lit(i).cast("long").alias("id"),
                                                                          "content")
                 for i, t in enumerate(tasks)]
        source = reads[0]
        for more in reads[1:]:
            source = source.union(more)
    decoded = source.mapInArrow(_decoder(tasks, addr, sent), _DECODED).persist()
    stats = [tuple(json.loads(r[0])) for r in
             decoded.filter(F.col("row_kind") == _STATS).select("stats_json").collect()]
    kind = F.col("row_kind")
    return DecodedCaptures(
        stats,
        decoded.filter(kind == _OBSERVATION).select(*CAPTURE_SCHEMAS["observations"].names),
        decoded.filter(kind == _TRAFFIC).select(*CAPTURE_SCHEMAS["link_traffic"].names),
        decoded)
