"""Per message, from its observations on the links, in one Spark job whose per-message work runs on the
executors with numpy: the delays of the per-link transit and per-hop figures, and the message's path.

The observations are grouped by message into buckets (a hash of flow id and sequence number) and each bucket's
rows reach a grouped Arrow function (``applyInArrow``) at once: its messages are sorted and reduced with
numpy, not a Spark aggregation per figure (the first-seen table's aggregation, the hops' self-join and the
paths' ``collect_list``, four shuffles, took 95 of a 100× diamond's 190 s). The rows it gives
(:data:`MESSAGE_ROWS`), persisted for their two readers (``latency.link_delays``, ``reroutes.message_paths``):

* ``transit``: a link direction a message was seen on, of a known link: ``link``, ``n1`` (its sending node),
  ``n2`` (its receiving node), ``delay_ns`` from the sender's capture to the receiver's (null unless both
  capture sides saw it: the earliest time each side saw it);
* ``hop``: a message of a known flow first seen on u->v and then on v->w (u not w): ``flow``, ``n1``..``n3``
  (u, v, w), ``delay_ns`` between the two first times seen (the time it spent crossing v);
* ``path``: a message of a known flow: ``flow``, ``seq``, ``hops`` (its link directions ``src>dst`` by the
  first time each was seen, ties by name; a direction seen on two parallel links twice), ``first_ns`` and
  ``last_ns`` (first and last time seen anywhere) and ``arrivals`` (each node it reached -> the first time
  seen arriving there: the receiving capture's time, else the first time seen on a link into it).

A message's link direction is its observations with the same flow id, sequence number, link and both ends
(a null link, flow id or sequence number is a value of its own, as Spark's grouping has it; a direction with a
null flow id or sequence number, or of a flow not in flows.json, gives a transit row only; an observation
without both ends is left out).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Callable, Dict, List

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from runfolder.layout import LAYOUT

from .messageslots import NULL64 as _NULL64, SLOT_METADATA, SLOTS, ints as _ints, slots_of
from .storage import ResultsStore

__all__ = ["MESSAGE_ROWS", "ROWS_PER_BUCKET", "LOCAL_ROWS_PER_BUCKET", "PATH_ROW", "DELAY_ROW", "MessageRows",
           "message_rows", "message_rows_of", "bucket_count", "flow_names", "local_bucket_task"]

_S, _L = T.StringType(), T.LongType()
MESSAGE_ROWS = T.StructType([T.StructField(n, t, True) for n, t in (
    ("kind", _S), ("link", T.IntegerType()), ("flow", _S), ("n1", _S), ("n2", _S), ("n3", _S), ("delay_ns", _L),
    ("seq", _L), ("hops", T.ArrayType(_S)), ("first_ns", _L), ("last_ns", _L), ("arrivals", T.MapType(_S, _L)))])
#: observations per bucket grouped by Spark (one Arrow table in a Python worker: ~60 MB of numpy at this size)
ROWS_PER_BUCKET = 200_000
#: observations per bucket of a local run (every task reads all the observations' files: fewer, larger buckets)
LOCAL_ROWS_PER_BUCKET = 2_000_000
#: the columns of the path rows (``parquet/message_hops``) and of the delay rows
PATH_ROW = ["flow", "seq", "hops", "first_ns", "last_ns", "arrivals"]
DELAY_ROW = ["kind", "link", "flow", "n1", "n2", "n3", "delay_ns"]
_INPUT = ["flow_id", "seq", "link", "src_node", "dst_node", "side", "ts_ns"]
_NULL32 = np.iinfo(np.int32).min  # a null link
_NONE = np.iinfo(np.int64).max    # "not seen" in a minimum


@dataclass
class MessageRows:
    """The messages' rows: ``delays`` (Spark: the transit and hop rows, for ``latency.link_delays``), ``paths``
    (pyarrow: the path rows, for ``reroutes.message_paths``, also ``parquet/message_hops``); :meth:`release`
    when done."""

    delays: DataFrame
    paths: pa.Table
    _release: Callable[[], None]

    def release(self) -> None:
        self._release()


def flow_names(flows: List[dict]) -> Dict[int, str]:
    """flow id -> name of flows.json's entries whose id is an integer and which have a name (ingest reports the
    others: their observations belong to no known flow)."""
    out = {}
    for f in flows:
        try:
            fid = int(f["flow_id"])
        except (KeyError, TypeError, ValueError):
            continue
        if f.get("name"):
            out.setdefault(fid, str(f["name"]))
    return out


def bucket_count(observations: int, per_bucket: int) -> int:
    """Buckets of about ``per_bucket`` of the ``observations`` rows each, at least two (both cores)."""
    return max(2, math.ceil(observations / per_bucket))


def message_rows(spark: SparkSession, observations: DataFrame, flows: List[dict], store: ResultsStore,
                 observations_count: int) -> MessageRows:
    """The rows of every message (module docstring), computed now (one Spark job).

    A local run's folder: :func:`local_bucket_task` per bucket of :data:`LOCAL_ROWS_PER_BUCKET`, each reading
    the observations' Parquet files itself and writing its path rows into ``parquet/message_hops`` and its
    delay rows beside it (no shuffle, and no observation through the JVM: Spark's grouping sent them to Python
    at ~3 us a row). A URI's: Spark groups the observations by bucket (:data:`ROWS_PER_BUCKET`) for
    ``applyInArrow``; the rows are persisted and the path rows written to ``parquet/message_hops`` by Spark.
    ``flows``: flows.json's entries (flow id -> name)."""
    names = flow_names(flows)
    hops_rel = LAYOUT.parquet("message_hops")
    if not store.is_local:
        buckets = bucket_count(observations_count, ROWS_PER_BUCKET)
        rows = (observations.select(*_INPUT)
                .withColumn("_bucket", _bucket_column(buckets))
                .groupBy("_bucket").applyInArrow(lambda table: message_rows_of(table, names), MESSAGE_ROWS)
                .persist())
        paths = store.collect_through_parquet(rows.where(F.col("kind") == "path").select(*PATH_ROW), hops_rel,
                                              arrow=True)
        return MessageRows(rows.where(F.col("kind") != "path").select(*DELAY_ROW), paths, rows.unpersist)
    delays_rel = LAYOUT.parquet("message_delays")  # only ever staged (hidden), then removed
    folder = store.root / LAYOUT.parquet("observations")
    files = sorted(str(f) for f in folder.glob("*.parquet") if not f.name.startswith((".", "_"))) \
        if folder.is_dir() else []
    buckets = min(SLOTS, bucket_count(observations_count, LOCAL_ROWS_PER_BUCKET))
    paths_dir, delays_dir = store.stage_table(hops_rel), store.stage_table(delays_rel)
    try:
        spark.range(0, buckets, 1, buckets).mapInArrow(
            local_bucket_task(files, names, buckets, str(paths_dir), str(delays_dir)), "bucket long, rows long"
        ).collect()
    except BaseException:
        store.discard_staged(hops_rel)
        store.discard_staged(delays_rel)
        raise
    store.publish_staged(hops_rel)
    import pyarrow.parquet as pq

    paths = pq.read_table(store.root / hops_rel)
    return MessageRows(spark.read.schema(_spark_schema(DELAY_ROW)).parquet(str(delays_dir)), paths,
                       lambda: store.discard_staged(delays_rel))


def _bucket_column(buckets: int):
    """A message's bucket in Spark (xxhash64 of flow id and seq), for a URI's run, which Spark groups itself."""
    return F.pmod(F.xxhash64("flow_id", "seq"), F.lit(int(buckets)))


def _read_bucket(path: str, buckets: int, k: int) -> pa.Table:
    """The observations of bucket ``k`` (slots s with s % buckets == k) in one Parquet file: only its row groups
    when the capture tasks wrote it (slots listed in the metadata), else all of it, filtered."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    listed = (f.schema_arrow.metadata or {}).get(SLOT_METADATA.encode())
    slots = json.loads(listed) if listed is not None else None
    if slots is not None and len(slots) == f.num_row_groups:  # else the file was rewritten: the list is not its
        groups = [g for g, slot in enumerate(slots) if slot % buckets == k]
        return f.read_row_groups(groups, columns=_INPUT) if groups else f.schema_arrow.empty_table().select(_INPUT)
    t = f.read(columns=_INPUT)
    return t.filter(pa.array(slots_of(t) % buckets == k))


def local_bucket_task(files: List[str], names: Dict[int, str], buckets: int, paths_dir: str, delays_dir: str):
    """The ``mapInArrow`` function of a local run: each input row is a bucket; its task reads the observations
    of that bucket's messages from every Parquet file of ``files`` (:func:`_read_bucket`) and writes its path
    rows and delay rows as part <bucket> of the two staged folders."""

    def run(batches):
        import pyarrow.compute as pc

        for batch in batches:
            for k in batch.column(0).to_pylist():
                schema = _input_schema()
                inputs = pa.concat_tables([_read_bucket(f, buckets, k).cast(schema) for f in files]
                                          or [schema.empty_table()])
                rows = message_rows_of(inputs, names)
                is_path = pc.equal(rows.column("kind"), "path")
                ResultsStore.write_part(rows.filter(is_path).select(PATH_ROW), paths_dir, k)
                ResultsStore.write_part(rows.filter(pc.invert(is_path)).select(DELAY_ROW), delays_dir, k)
                yield pa.RecordBatch.from_arrays([pa.array([k], pa.int64()), pa.array([rows.num_rows], pa.int64())],
                                                 names=["bucket", "rows"])

    return run


def _input_schema() -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    from .capturetasks import CAPTURE_SCHEMAS

    return to_arrow_schema(T.StructType([CAPTURE_SCHEMAS["observations"][c] for c in _INPUT]))


def _spark_schema(columns: List[str]) -> T.StructType:
    return T.StructType([MESSAGE_ROWS[c] for c in columns])


def _schema() -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(MESSAGE_ROWS)


def message_rows_of(obs: pa.Table, flow_names: Dict[int, str]) -> pa.Table:
    """One bucket's observations (whole messages; columns of :data:`_INPUT`) -> its rows of :data:`MESSAGE_ROWS`."""
    import pyarrow.compute as pc

    schema = _schema()
    obs = obs.combine_chunks()
    obs = obs.filter(pc.and_(pc.and_(pc.is_valid(obs.column("src_node")), pc.is_valid(obs.column("dst_node"))),
                             pc.is_valid(obs.column("ts_ns"))))  # a time is never null; were it, it says nothing
    n = obs.num_rows
    if n == 0:
        return schema.empty_table()
    # every value a number: node names coded once for both ends
    codes, nodes = _factorize(np.concatenate([obs.column("src_node").to_numpy(zero_copy_only=False),
                                              obs.column("dst_node").to_numpy(zero_copy_only=False)]))
    src, dst = codes[:n], codes[n:]
    fid = _ints(obs.column("flow_id"), _NULL64)
    seq = _ints(obs.column("seq"), _NULL64)
    link = _ints(obs.column("link"), _NULL32)
    ts = obs.column("ts_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    side = obs.column("side")
    tx = np.where(pc.fill_null(pc.equal(side, "tx"), False).to_numpy(zero_copy_only=False), ts, _NONE)
    rx = np.where(pc.fill_null(pc.equal(side, "rx"), False).to_numpy(zero_copy_only=False), ts, _NONE)

    # the message's link directions: (flow id, seq, link, src, dst) -> first, last, each side's first time
    order = np.lexsort((dst, src, link, seq, fid))
    keys = [k[order] for k in (fid, seq, link, src, dst)]
    starts = _run_starts(keys)
    g_fid, g_seq, g_link, g_src, g_dst = (k[starts] for k in keys)
    g_first = np.minimum.reduceat(ts[order], starts)
    g_last = np.maximum.reduceat(ts[order], starts)
    g_tx = np.minimum.reduceat(tx[order], starts)
    g_rx = np.minimum.reduceat(rx[order], starts)
    flow_of = {f: flow_names.get(int(f)) for f in np.unique(g_fid).tolist() if f != _NULL64}
    g_flow = np.array([flow_of.get(f) for f in g_fid.tolist()], dtype=object)
    known = (g_fid != _NULL64) & (g_seq != _NULL64) & np.array([f is not None for f in g_flow], dtype=bool)

    parts = [_transit(schema, g_link, nodes[g_src], nodes[g_dst], g_tx, g_rx),
             _hops(schema, *(a[known] for a in (g_fid, g_seq, g_src, g_dst, g_first, g_flow)), nodes),
             _paths(schema, *(a[known] for a in (g_fid, g_seq, g_src, g_dst, g_first, g_last, g_rx, g_flow)), nodes)]
    return pa.concat_tables(parts)


def _factorize(values: np.ndarray):
    import pandas as pd

    codes, uniques = pd.factorize(values)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def _run_starts(sorted_keys: List[np.ndarray]) -> np.ndarray:
    """Where each run of equal keys begins in arrays sorted by them."""
    n = len(sorted_keys[0])
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in sorted_keys:
        change[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(change)


def _table(schema: pa.Schema, n: int, columns: Dict[str, pa.Array]) -> pa.Table:
    return pa.Table.from_arrays([columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in schema],
                                schema=schema)


def _nullable(values: np.ndarray, valid: np.ndarray, type_) -> pa.Array:
    return pa.array(values, type_, mask=~valid)


def _transit(schema, link, n1, n2, tx, rx) -> pa.Table:
    on_link = link != _NULL32
    both = (tx != _NONE) & (rx != _NONE)
    n = int(on_link.sum())
    delay = np.where(both, rx - np.where(both, tx, 0), 0)[on_link]
    return _table(schema, n, {"kind": pa.array(["transit"] * n, pa.string()),
                              "link": pa.array(link[on_link], pa.int32()),
                              "n1": pa.array(n1[on_link], pa.string()), "n2": pa.array(n2[on_link], pa.string()),
                              "delay_ns": _nullable(delay, both[on_link], pa.int64())})


def _hops(schema, fid, seq, src, dst, first, flow, nodes) -> pa.Table:
    """Pairs of a message's link directions u->v, v->w, u not w (a join of its directions with themselves)."""
    import pandas as pd

    a = pd.DataFrame({"fid": fid, "seq": seq, "via": dst, "n1": src, "ts_a": first, "flow": flow})
    b = pd.DataFrame({"fid": fid, "seq": seq, "via": src, "n3": dst, "ts_b": first})
    m = a.merge(b, on=["fid", "seq", "via"])
    m = m[m["n1"].to_numpy() != m["n3"].to_numpy()]
    n = len(m)
    return _table(schema, n, {"kind": pa.array(["hop"] * n, pa.string()),
                              "flow": pa.array(m["flow"].to_numpy(dtype=object), pa.string()),
                              "n1": pa.array(nodes[m["n1"].to_numpy()], pa.string()),
                              "n2": pa.array(nodes[m["via"].to_numpy()], pa.string()),
                              "n3": pa.array(nodes[m["n3"].to_numpy()], pa.string()),
                              "delay_ns": pa.array(m["ts_b"].to_numpy() - m["ts_a"].to_numpy(), pa.int64())})


def _paths(schema, fid, seq, src, dst, first, last, rx, flow, nodes) -> pa.Table:
    """A row per message: its hops by first time seen (ties by name), first and last time, arrivals."""
    if not len(fid):
        return schema.empty_table()
    pair, hop_codes = _factorize(np.array([f"{nodes[s]}>{nodes[d]}" for s, d in zip(src.tolist(), dst.tolist())],
                                          dtype=object))
    rank = np.empty(len(hop_codes), dtype=np.int64)
    rank[np.argsort(hop_codes.astype(str), kind="stable")] = np.arange(len(hop_codes))
    order = np.lexsort((rank[pair], first, seq, fid))
    m_starts = _run_starts([fid[order], seq[order]])
    offsets = np.append(m_starts, len(order)).astype(np.int32)
    hops = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(hop_codes[pair[order]], pa.string())
                                    ).cast(schema.field("hops").type)
    m_fid, m_seq = fid[order][m_starts], seq[order][m_starts]
    m_first = first[order][m_starts]  # the sort's first is the earliest
    m_last = np.maximum.reduceat(last[order], m_starts)
    m_flow = flow[order][m_starts]
    # arrivals: per message and node arrived at, the earliest of (the receiving capture's time, else first seen)
    into = np.where(rx != _NONE, rx, first)
    a_order = np.lexsort((dst, seq, fid))
    a_starts = _run_starts([fid[a_order], seq[a_order], dst[a_order]])
    a_node = dst[a_order][a_starts]
    a_ns = np.minimum.reduceat(into[a_order], a_starts)
    per_message = _run_starts([fid[a_order][a_starts], seq[a_order][a_starts]])
    a_offsets = np.append(per_message, len(a_starts)).astype(np.int32)
    arrivals = pa.MapArray.from_arrays(pa.array(a_offsets, pa.int32()), pa.array(nodes[a_node], pa.string()),
                                       pa.array(a_ns, pa.int64())).cast(schema.field("arrivals").type)
    # both sorted by (flow id, seq): the same messages in the same order
    n = len(m_starts)
    return _table(schema, n, {"kind": pa.array(["path"] * n, pa.string()),
                              "flow": pa.array(m_flow, pa.string()), "seq": pa.array(m_seq, pa.int64()),
                              "hops": hops, "first_ns": pa.array(m_first, pa.int64()),
                              "last_ns": pa.array(m_last, pa.int64()), "arrivals": arrivals})
