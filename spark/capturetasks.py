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
import os
import re
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .pcap import CapturePiece, CaptureStats, capture_pieces, decode_pcap, decode_pcap_file, decode_pcap_piece, \
    merge_piece_stats
from .messageslots import SLOT_METADATA, slots_of
from .storage import ResultsStore
from .streamsearch import SentIndex, search_pcap, search_pcap_file, search_pcap_piece

__all__ = ["table_schema", "CAPTURE_SCHEMAS", "CaptureTask", "DecodedCaptures", "decode_captures", "decode_task",
           "PIECE_BYTES", "PIECE_BYTES_MAX", "PIECE_SETTING", "auto_piece_bytes", "capture_piece_bytes",
           "largest_first", "local_cores", "piece_tasks"]

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


#: a local capture larger than the piece size is decoded in pieces of about that size, one task each
#: (``spark.testbed.capturePieceMB`` in the Spark configuration sets it; 0: never split). Unset, it is
#: the captures' total over twice the local master's cores, kept between these two (a cluster's: the least):
#: pieces only where the files would not keep every core busy, since planning them reads every record header
PIECE_BYTES = 256_000_000
PIECE_BYTES_MAX = 1_000_000_000
PIECE_SETTING = "spark.testbed.capturePieceMB"
_STREAM_KEY = ("src_ip", "src_port", "dst_ip", "dst_port")  # a traffic row's stream (to add up its pieces' rows)


@dataclass(frozen=True)
class CaptureTask:
    """One capture to decode: its file name, where an executor reads it (a local path; a URI's bytes come from
    Spark), its capture.json entry (node, ifname, link, packets_dropped_by_kernel), and the piece of it this
    task decodes (None: the whole file)."""

    name: str
    location: str
    cap: dict
    piece: Optional[CapturePiece] = None


def decode_task(name: str, data, cap: dict, addr: Dict[str, Tuple[str, int]], sent: Optional[SentIndex] = None,
                piece: Optional[CapturePiece] = None):
    """One file (its bytes, or a local path decoded through mmap), or one ``piece`` of a local file, as an
    Arrow table of :data:`_DECODED` (:func:`_decoded_table`): its observations, its traffic rows with their
    stream, and its statistics row (the ``captures`` row and the streams it counted, as JSON). ``sent``: search
    the streams for validated traffic headers (any wire format) instead of decoding our router's frames."""
    t0 = time.perf_counter()
    if piece is not None:
        decoded = search_pcap_piece(data, sent, piece) if sent is not None else decode_pcap_piece(data, piece)
    elif sent is not None:
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
    st = decoded.stats
    stats = (name, node, ifname, link, st.packets, st.bytes_on_wire, st.tcp_segments, st.payload_bytes,
             st.captured_payload_bytes, st.retransmitted_segments, st.out_of_order_segments, st.gap_bytes,
             st.snap_truncated_bytes, st.streams, st.resyncs, st.frames_lost_in_holes, st.messages,
             st.messages_hidden, st.messages_other, st.frame_parts_skipped, st.codec_errors, st.non_tcp_packets,
             st.truncated_file, st.error, st.first_ts_ns, st.last_ts_ns, cap.get("packets_dropped_by_kernel"),
             seconds, st.method, st.headers_found, st.headers_validated, st.headers_rejected, st.rejected_unknown_flow,
             st.rejected_not_sent, st.headers_no_send_log, st.headers_in_holes, st.headers_unfinished)
    traffic_keys = list(decoded.traffic)
    traffic_counts = list(decoded.traffic.values())
    obs = list(zip(*decoded.observations)) or [()] * 7  # the observations' columns, transposed once
    return _decoded_table(
        {"capture": name, "capture_node": node, "capture_ifname": ifname},
        obs[0],
        dict(zip(("ts_ns", "flow_id", "seq", "send_ns", "priority", "payload_len"), obs[1:])),
        [k[0] for k in traffic_keys],
        {"second_ns": [k[1] * 1_000_000_000 for k in traffic_keys], "bytes": [c[0] for c in traffic_counts],
         "packets": [c[1] for c in traffic_counts]},
        ends,
        json.dumps({"row": stats, "piece": piece.index if piece else 0, "streams": decoded.streams[:st.streams]}))


#: the columns a row takes from its stream's two ends (the ``ends`` of :func:`_decoded_table`, in this order)
_END_COLUMNS = ("link", "src_node", "dst_node", "side", "src_ip", "src_port", "dst_ip", "dst_port")


def _decoded_table(constant: Dict[str, object], obs_streams: Sequence[int], obs_columns: Dict[str, tuple],
                   traffic_streams: Sequence[int], traffic_columns: Dict[str, list], ends: List[tuple], stats_json: str):
    """A task's rows as one Arrow table of :data:`_DECODED`, built column by column (no Python object per row):
    the observations, the traffic rows and the statistics row (``stats_json``). ``constant``: columns with one
    value for the task's observation and traffic rows; ``*_streams``: each row's stream, an index into ``ends``,
    whose :data:`_END_COLUMNS` the row takes; ``*_columns``: the rows' own columns."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(_DECODED)
    by_end = {c: [e[k] for e in ends] for k, c in enumerate(_END_COLUMNS)}
    kinds = []
    for kind, streams, own in ((_OBSERVATION, obs_streams, obs_columns), (_TRAFFIC, traffic_streams, traffic_columns)):
        n = len(streams)
        index = pa.array(streams, pa.int32())
        arrays = []
        for field in schema:
            name = field.name
            if name == "row_kind":
                arrays.append(pa.repeat(pa.scalar(kind, field.type), n))
            elif name in own:
                arrays.append(pa.array(own[name], field.type))
            elif name in by_end:
                arrays.append(pa.array(by_end[name], field.type).take(index) if n else pa.nulls(0, field.type))
            elif name in constant and name in CAPTURE_SCHEMAS["observations" if kind == _OBSERVATION
                                                              else "link_traffic"].names:
                arrays.append(pa.repeat(pa.scalar(constant[name], field.type), n))
            else:
                arrays.append(pa.nulls(n, field.type))
        kinds.append(pa.Table.from_arrays(arrays, schema=schema))
    stats = pa.Table.from_arrays([pa.array([_STATS] if f.name == "row_kind" else [stats_json] if f.name == "stats_json"
                                           else [None], f.type) for f in schema], schema=schema)
    return pa.concat_tables(kinds + [stats])


def _decoder(tasks: List[CaptureTask], addr: Dict[str, Tuple[str, int]], sent: Optional[SentIndex],
             observations_dir: Optional[str] = None, parts: Sequence[int] = ()):
    """The ``mapInArrow`` function: each input row names a task by its index (``id``); a URI's task brings its
    file's bytes (``content``). ``observations_dir``: each task writes its observations there itself
    (``part-<parts[id]>.parquet``) and yields only its other rows."""

    def decode(batches):
        for batch in batches:
            ids = batch.column(batch.schema.get_field_index("id")).to_pylist()
            at = batch.schema.get_field_index("content")
            contents = batch.column(at) if at >= 0 else None
            for row, i in enumerate(ids):
                task = tasks[i]
                data = task.location if contents is None else contents[row].as_py()
                table = decode_task(task.name, data, task.cap, addr, sent, task.piece)
                if observations_dir is not None:
                    table = _write_observations(table, observations_dir, parts[i])
                yield from table.to_batches(max_chunksize=_ROWS_PER_BATCH)

    return decode


def _write_observations(table, folder: str, index: int):
    """Write the observation rows of a task's ``table`` (:data:`_DECODED`) as part ``index`` of the staged
    ``folder``, in the ``observations`` table's columns and Spark's types, and return the other rows. The rows
    are grouped by their message's slot (``spark.messageslots.slots_of``), a row group per slot, listed in the
    file's metadata, so that a task of ``messagerows`` reads only its messages' rows."""
    import numpy as np

    is_observation = pc.equal(table.column("row_kind"), _OBSERVATION)
    observations = table.filter(is_observation).select(CAPTURE_SCHEMAS["observations"].names)
    slots = slots_of(observations)
    order = np.argsort(slots, kind="stable")
    counts = np.bincount(slots, minlength=1)
    ends = np.cumsum(counts).tolist()
    present = [s for s in range(len(counts)) if counts[s]]
    ResultsStore.write_part(observations.take(order), folder, index,
                            row_groups=[(ends[s] - int(counts[s]), ends[s]) for s in present],
                            metadata={SLOT_METADATA: json.dumps(present)})
    return table.filter(pc.invert(is_observation))


@dataclass
class DecodedCaptures:
    """The decoded captures: ``stats`` (one ``captures`` row per file, in the tasks' order), ``link_traffic``
    (Spark: a row per stream and second), ``observations`` (Spark; None when the tasks wrote them to the
    folder they were given), both read from the persisted decode, and :meth:`release` when they are written."""

    stats: List[tuple]
    link_traffic: DataFrame
    observations: Optional[DataFrame]
    _decoded: DataFrame

    def release(self) -> None:
        self._decoded.unpersist()


def decode_captures(spark: SparkSession, tasks: List[CaptureTask], files_are_local: bool,
                    addr: Dict[str, Tuple[str, int]], sent: Optional[SentIndex] = None,
                    observations_dir: Optional[str] = None) -> DecodedCaptures:
    """Decode every capture, one Spark task each (``sent``: by the header search instead of our frames), the
    largest first; the statistics in the order of ``tasks``. ``observations_dir`` (a local folder every
    executor can write, empty): the tasks write the observations there as Parquet files themselves, so they
    never pass through the JVM (Spark persists only the other rows, a few per stream and second); otherwise
    Spark persists them too, for the caller to write."""
    order = [t.name for t in tasks]
    parts = largest_first(tasks)  # a task's observations: part-<its place in the list given>
    tasks = [tasks[k] for k in parts]
    if files_are_local:
        source = spark.range(0, len(tasks), 1, len(tasks))
    else:
        reads = [spark.read.format("binaryFile").load(t.location).select(F.lit(i).cast("long").alias("id"),
                                                                          "content")
                 for i, t in enumerate(tasks)]
        source = reads[0]
        for more in reads[1:]:
            source = source.union(more)
    decoded = source.mapInArrow(_decoder(tasks, addr, sent, observations_dir, parts), _DECODED).persist()
    stats = _stats_per_capture([json.loads(r[0]) for r in
                                decoded.filter(F.col("row_kind") == _STATS).select("stats_json").collect()], order)
    kind = F.col("row_kind")
    traffic = decoded.filter(kind == _TRAFFIC)
    names = CAPTURE_SCHEMAS["link_traffic"].names
    if any(t.piece is not None for t in tasks):  # a stream's second can have rows from two pieces: add them up
        traffic = traffic.groupBy(*(n for n in names if n not in ("bytes", "packets")), *_STREAM_KEY).agg(
            F.sum("bytes").alias("bytes"), F.sum("packets").alias("packets"))
    observations = None if observations_dir is not None else \
        decoded.filter(kind == _OBSERVATION).select(*CAPTURE_SCHEMAS["observations"].names)
    return DecodedCaptures(stats, traffic.select(*names), observations, decoded)


def _stats_per_capture(entries: List[dict], order: Sequence[str]) -> List[tuple]:
    """One ``captures`` row per file from its tasks' (a file in pieces: their counts merged, their decode
    seconds added up), the files in the order of their first task in ``order`` (task names)."""
    names = CAPTURE_SCHEMAS["captures"].names
    by_file: Dict[str, List[dict]] = {name: [] for name in order}
    for entry in entries:
        by_file.setdefault(entry["row"][0], []).append(entry)
    by_file = {name: parts for name, parts in by_file.items() if parts}
    rows = []
    for parts in by_file.values():
        if len(parts) == 1:
            rows.append(tuple(parts[0]["row"]))
            continue
        parts.sort(key=lambda e: e["piece"])
        dicts = [dict(zip(names, e["row"])) for e in parts]
        fields = CaptureStats.__dataclass_fields__
        merged = merge_piece_stats([(CaptureStats(**{k: v for k, v in d.items() if k in fields}),
                                     [tuple(s) for s in e["streams"]]) for d, e in zip(dicts, parts)]).as_dict()
        row = {**dicts[0], **merged, "decode_seconds": sum(d["decode_seconds"] for d in dicts)}
        rows.append(tuple(row[n] for n in names))
    return rows


def piece_tasks(spark: SparkSession, tasks: List[CaptureTask], piece_bytes: int) -> List[CaptureTask]:
    """The tasks with every local capture larger than ``piece_bytes`` replaced by one task per piece of it
    (``capture_pieces``: planned on the executors, one task per such file, which reads its record headers)."""
    large = [i for i, t in enumerate(tasks) if piece_bytes > 0 and os.path.getsize(t.location) > piece_bytes]
    if not large:
        return tasks
    plans = {r["id"]: r["pieces"] for r in spark.range(0, len(large), 1, len(large)).mapInArrow(
        _planner([tasks[i].location for i in large], piece_bytes), "id long, pieces string").collect()}
    out: List[CaptureTask] = []
    for i, task in enumerate(tasks):
        if i not in large:
            out.append(task)
            continue
        pieces = [CapturePiece(p[0], p[1], p[2], tuple(p[3]), frozenset(tuple(s) for s in p[4]))
                  for p in json.loads(plans[large.index(i)])]
        out.extend(CaptureTask(task.name, task.location, task.cap, p if len(pieces) > 1 else None) for p in pieces)
    return out


def capture_piece_bytes(spark: SparkSession, total_bytes: int = 0) -> int:
    """The piece size: ``spark.testbed.capturePieceMB`` of the Spark configuration (MB; 0: never split), else
    :func:`auto_piece_bytes` for the captures' ``total_bytes`` and the session's master."""
    value = spark.conf.get(PIECE_SETTING, None)
    if value is None:
        return auto_piece_bytes(total_bytes, local_cores(spark.conf.get("spark.master", None)))
    try:
        return int(float(value) * 1_000_000)
    except ValueError:
        raise ValueError(f"{PIECE_SETTING}={value!r}: a number of MB (0: decode every capture whole)") from None


def auto_piece_bytes(total_bytes: int, cores: Optional[int]) -> int:
    """Pieces of a ``cores``-core local master: two tasks' worth per core of the captures' ``total_bytes``,
    within :data:`PIECE_BYTES` .. :data:`PIECE_BYTES_MAX` (the upper bound keeps a task's memory bounded);
    ``cores`` unknown (a cluster, Spark Connect): :data:`PIECE_BYTES`, so every executor gets tasks."""
    if not cores:
        return PIECE_BYTES
    return int(min(PIECE_BYTES_MAX, max(PIECE_BYTES, total_bytes / (2 * cores))))


def local_cores(master: Optional[str]) -> Optional[int]:
    """The cores of a local master (``local``, ``local[4]``, ``local[*]``, ``local[4,2]``); None for any other."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", (master or "").strip())
    if not m:
        return None
    return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1) or 1)


def largest_first(tasks: List[CaptureTask]) -> List[int]:
    """The order to start the tasks in, as indices into ``tasks``: the largest first (a piece's size, else the
    file's), so that on a few cores the last to finish is a small one. Stable: equal sizes keep their order."""
    def size(t: CaptureTask) -> int:
        if t.piece is not None:
            return t.piece.stop - t.piece.start
        try:
            return os.path.getsize(t.location)
        except OSError:  # a URI's file: its size is Spark's to know
            return 0
    return sorted(range(len(tasks)), key=lambda k: size(tasks[k]), reverse=True)


def _planner(paths: List[str], piece_bytes: int):
    def plan(batches):
        import pyarrow as pa

        for batch in batches:
            ids = batch.column(0).to_pylist()
            pieces = [json.dumps([[p.index, p.start, p.stop, list(p.lead_ins), sorted(p.opens)]
                                  for p in capture_pieces(paths[i], piece_bytes)]) for i in ids]
            yield pa.RecordBatch.from_arrays([pa.array(ids, pa.int64()), pa.array(pieces, pa.string())],
                                             names=["id", "pieces"])
    return plan
