"""One-way latency: percentiles per flow and priority, RFC 3550 jitter over the run, time series, per-hop delay.

All in Spark; the driver collects aggregates only. The first receipts of the receive logs (``first_deliveries``:
one grouped pandas UDF per (flow, subscriber), which also corrects the latencies by the clocks and runs the
RFC 3550 estimator over them in arrival order) feed the percentiles per flow, priority, flow group and overall
(``delivery_stats``: Spark's ``percentile``, exact, on a grid of quantiles that also draws the CDF) and the
time series per window. The per-link first-seen table that Spark reduces from the observations
(``link_first_seen``) feeds the per-link transit and the per-hop delays.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .clockcorrection import RunClocks, correct_latencies

__all__ = ["first_deliveries", "delivery_stats", "latency_table", "throughput", "jitter_table", "pooled_jitter", "latency_cdf",
           "jitter_series", "jitter_estimates", "latency_series", "link_first_seen", "link_transit", "hop_delays",
           "window_of", "PERCENTILES", "JITTER_STATS", "CDF_QUANTILES", "DELIVERY_SCHEMA", "rfc3550_jitter"]

#: name -> quantile; names are those of the expectation metrics (latency.p50 ...)
PERCENTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99, "p999": 0.999}
JITTER_STATS = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
#: the quantiles every latency distribution is collected at (0, 0.001, ..., 1): its CDF, and the percentiles
#: above (each one of them exactly: i / 1000 is the double nearest to the decimal, as the literal is)
CDF_QUANTILES = [i / 1000 for i in range(1001)]
_STAT_COLS = ["messages", "min_ns", "mean_ns", "p50_ns", "p95_ns", "p99_ns", "p999_ns", "max_ns"]
_JITTER_COLS = ["samples", "p50_ns", "p95_ns", "p99_ns", "max_ns", "last_ns"]
#: first receipts (``first_deliveries``): latency_ns corrected by the clocks, raw_latency_ns as logged, jitter_ns the
#: RFC 3550 estimator after this packet (null for a subscriber's first), jitter_last on the subscriber's last packet
DELIVERY_SCHEMA = ("flow string, flow_id long, priority int, node string, seq long, send_ns long, recv_ns long, "
                   "size long, latency_ns long, raw_latency_ns long, jitter_ns double, jitter_last boolean")
_DELIVERY_COLUMNS = [c.split()[0] for c in DELIVERY_SCHEMA.split(", ")]


def _stats(values: np.ndarray) -> dict:
    """Count, min, mean, percentiles (linear interpolation, as Spark's ``percentile``) and max of a few values
    on the driver (the queries' completion times: one per query)."""
    v = np.asarray(values, dtype="float64")
    out = {"messages": int(len(v)), "min_ns": float(v.min()), "mean_ns": float(v.mean()), "max_ns": float(v.max())}
    qs = np.percentile(v, [q * 100 for q in PERCENTILES.values()])
    for name, q in zip(PERCENTILES, qs):
        out[f"{name}_ns"] = float(q)
    return out


def _subscriber_deliveries(received: pd.DataFrame, publishers: Dict[str, Optional[str]],
                           clocks: Optional[RunClocks]) -> pd.DataFrame:
    """One subscriber's receipts of one flow -> its first receipt of each message, in arrival order (ties by
    sequence number, then send time and size), with the latency corrected and the estimator after each."""
    d = received.sort_values(["recv_ns", "seq", "send_ns", "size"], kind="stable").drop_duplicates(["seq"])
    d = d.reset_index(drop=True)
    d = correct_latencies(d.assign(latency_ns=d["recv_ns"] - d["send_ns"]), publishers, clocks)
    jitter = np.full(len(d), np.nan)
    jitter[1:] = jitter_estimates(d["latency_ns"].to_numpy())
    last = np.zeros(len(d), dtype=bool)
    last[1:] = np.arange(1, len(d)) == len(d) - 1
    return d.assign(jitter_ns=jitter, jitter_last=last)[_DELIVERY_COLUMNS]


def first_deliveries(received: DataFrame, publishers: Dict[str, Optional[str]],
                     clocks: Optional[RunClocks]) -> DataFrame:
    """Spark: one row per (flow, node, seq), its first receipt (``DELIVERY_SCHEMA``): a grouped pandas UDF per
    (flow, subscriber) on the executors, the ordered scan RFC 3550's estimator needs."""
    return received.groupBy("flow", "node").applyInPandas(
        lambda g: _subscriber_deliveries(g, publishers, clocks), DELIVERY_SCHEMA)


def window_of(t_ns: Column, t0_ns: int, window_ns: int) -> Column:
    """The window (from 0 at ``t0_ns``) a time falls in: floor division in integers, as pandas' ``//``."""
    d = t_ns - F.lit(int(t0_ns))
    return F.call_function("div", d - F.pmod(d, F.lit(int(window_ns))), F.lit(int(window_ns)))


def delivery_stats(deliveries: DataFrame, groups: Dict[str, List[str]]) -> pd.DataFrame:
    """Spark, one job: per ``kind`` and ``key`` (flow: a flow's name; priority: its number; all: ``all``;
    group: a flow group of ``groups``; subscriber: ``flow>node``) the latency's count, minimum, mean
    (an exact integer sum over the count), quantiles at ``CDF_QUANTILES`` (Spark's ``percentile``: exact,
    linear interpolation between the closest ranks as numpy's), maximum; the estimator's count, percentiles,
    maximum and ``jitter_last`` (the largest last value over the subscribers); the bytes delivered and the
    first and last send time; the priority (a flow's). One row a key: collected."""
    group_of = {f: g for g, members in groups.items() for f in members}
    keys = [F.struct(F.lit("flow").alias("kind"), F.col("flow").alias("key")),
            F.struct(F.lit("priority").alias("kind"), F.col("priority").cast("string").alias("key")),
            F.struct(F.lit("all").alias("kind"), F.lit("all").alias("key")),
            F.struct(F.lit("subscriber").alias("kind"), F.concat_ws(">", "flow", "node").alias("key"))]
    if group_of:
        named = F.create_map(*[F.lit(x) for kv in sorted(group_of.items()) for x in kv])
        keys.append(F.when(named[F.col("flow")].isNotNull(),
                           F.struct(F.lit("group").alias("kind"), named[F.col("flow")].alias("key"))))
    latency = F.col("latency_ns").cast("double")
    out = (deliveries.select("*", F.explode(F.array(*keys)).alias("_k")).where(F.col("_k").isNotNull())
           .groupBy(F.col("_k.kind").alias("kind"), F.col("_k.key").alias("key"))
           .agg(F.min("priority").alias("priority"), F.count(F.lit(1)).alias("messages"),
                F.min(latency).alias("min_ns"), (F.sum("latency_ns") / F.count(F.lit(1))).alias("mean_ns"),
                F.percentile(latency, CDF_QUANTILES).alias("quantiles"), F.max(latency).alias("max_ns"),
                F.count("jitter_ns").alias("samples"),
                F.percentile("jitter_ns", list(JITTER_STATS.values())).alias("jitter_quantiles"),
                F.max("jitter_ns").alias("jitter_max_ns"),
                F.max(F.when(F.col("jitter_last"), F.col("jitter_ns"))).alias("jitter_last_ns"),
                F.coalesce(F.sum("size"), F.lit(0)).alias("bytes"), F.min("send_ns").alias("first_ns"),
                F.max("send_ns").alias("last_ns"))
           .orderBy("kind", "key").toPandas())
    return out


def throughput(stats: pd.DataFrame) -> pd.DataFrame:
    """Per flow: the bytes delivered, the first and last send time of what was delivered (``delivery_stats``)."""
    return _of(stats, "flow").rename(columns={"key": "flow"})[["flow", "bytes", "first_ns", "last_ns"]]


def _of(stats: pd.DataFrame, kind: str) -> pd.DataFrame:
    return stats[stats["kind"] == kind].reset_index(drop=True)


def _latency_rows(s: pd.DataFrame) -> pd.DataFrame:
    out = s[["messages", "min_ns", "mean_ns", "max_ns"]].copy()
    for name, q in PERCENTILES.items():
        i = CDF_QUANTILES.index(q)
        out[f"{name}_ns"] = [float(v[i]) for v in s["quantiles"]]
    out["messages"] = out["messages"].astype("int64")
    return out


def latency_table(stats: pd.DataFrame) -> Dict[str, pd.DataFrame]:
    """Exact percentiles per flow, per priority, overall and per flow group (``delivery_stats``)."""
    out = {}
    for kind, keys in (("flow", ["flow", "priority"]), ("priority", ["priority"]), ("all", ["all"]),
                       ("group", ["group"])):
        s = _of(stats, kind)
        named = pd.DataFrame({"all": s["key"]}) if kind == "all" else pd.DataFrame(
            {k: (s["priority"].astype("int64") if k == "priority" else s["key"]) for k in keys})
        out[kind] = pd.concat([named, _latency_rows(s)], axis=1)[keys + _STAT_COLS].sort_values(keys).reset_index(
            drop=True)
    return out


def latency_cdf(stats: pd.DataFrame) -> Dict[int, np.ndarray]:
    """Per priority: the latency (ns) at each of ``CDF_QUANTILES``, for the CDF the report draws."""
    s = _of(stats, "priority")
    return {int(p): np.asarray(q, dtype="float64") for p, q in zip(s["priority"], s["quantiles"])}


def _jitter_rows(s: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame({"samples": s["samples"].astype("int64")})
    for i, name in enumerate(JITTER_STATS):
        out[f"{name}_ns"] = [float(v[i]) if v is not None and len(v) else None for v in s["jitter_quantiles"]]
    out["max_ns"], out["last_ns"] = s["jitter_max_ns"], s["jitter_last_ns"]
    return out


def pooled_jitter(stats: pd.DataFrame) -> Dict[tuple, dict]:
    """(kind, key) -> the estimator over the run pooled over the subscribers of those flows: its percentiles
    (linear interpolation) and maximum over every packet but each subscriber's first, and its last value
    (the largest over subscribers: what RFC 3550's running figure said at the end, which describes only the
    last ~50 packets). Keys without a packet to pool are left out."""
    s = stats[stats["samples"] > 0].reset_index(drop=True)
    rows = _jitter_rows(s)
    return {(k, key): {c: rows.at[i, c] for c in _JITTER_COLS} for i, (k, key) in enumerate(zip(s["kind"], s["key"]))}


def jitter_table(stats: pd.DataFrame) -> pd.DataFrame:
    """Jitter per (flow, subscriber node), packets in arrival order (duplicates excluded): the estimator's
    percentiles over the run."""
    cols = ["flow", "node", "priority", "messages", *_JITTER_COLS]
    s = _of(stats, "subscriber")
    s = s[s["samples"] > 0].reset_index(drop=True)
    if s.empty:
        return pd.DataFrame(columns=cols)
    pair = s["key"].str.split(">", n=1, expand=True)
    out = pd.concat([pd.DataFrame({"flow": pair[0], "node": pair[1], "priority": s["priority"].astype("int64"),
                                   "messages": s["messages"].astype("int64")}), _jitter_rows(s)], axis=1)
    return out[cols].sort_values(["flow", "node"]).reset_index(drop=True)


def rfc3550_jitter(send_ns, recv_ns) -> float:
    """RFC 3550 6.4.1 interarrival jitter J after the last packet, packets in arrival order (ns).

    J += (|D(i-1,i)| - J) / 16, D being the difference of the transit times of consecutive packets.
    """
    j = 0.0
    prev = None
    for s, r in zip(send_ns, recv_ns):
        transit = r - s
        if prev is not None:
            j += (abs(transit - prev) - j) / 16.0
        prev = transit
    return j


def jitter_estimates(transit: np.ndarray) -> np.ndarray:
    """The RFC 3550 estimator after each packet from the second on (the recurrence above, packets in
    arrival order): ``J_i = J_{i-1} + (|D(i-1, i)| - J_{i-1}) / 16`` with ``J_0 = 0``."""
    d = np.abs(np.diff(np.asarray(transit, dtype="float64")))
    out = np.empty(len(d), dtype="float64")
    j = 0.0
    for i, x in enumerate(d):  # ~1 us a packet, on an executor
        j += (x - j) / 16.0
        out[i] = j
    return out


def jitter_series(deliveries: DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    """Per flow and window of receive time: the estimator at the window's last packet (``jitter_ns``, largest
    over subscribers) and its maximum within the window (``max_ns``). Spark; one row a window collected."""
    cols = ["flow", "window", "jitter_ns", "max_ns"]
    out = (deliveries.where(F.col("jitter_ns").isNotNull())
           .withColumn("window", window_of(F.col("recv_ns"), t0_ns, window_ns))
           .groupBy("flow", "window", "node")
           .agg(F.max_by("jitter_ns", F.struct("recv_ns", "seq")).alias("last"), F.max("jitter_ns").alias("top"))
           .groupBy("flow", "window").agg(F.max("last").alias("jitter_ns"), F.max("top").alias("max_ns"))
           .orderBy("flow", "window").toPandas())
    return out[cols] if not out.empty else pd.DataFrame(columns=cols)


def latency_series(deliveries: DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    """Per priority, flow and window (by receive time): count, p50, p99 (exact), max. Spark; one row a window
    collected."""
    cols = ["priority", "flow", "window", "messages", "p50_ns", "p99_ns", "max_ns"]
    latency = F.col("latency_ns").cast("double")
    out = (deliveries.withColumn("window", window_of(F.col("recv_ns"), t0_ns, window_ns))
           .groupBy("priority", "flow", "window")
           .agg(F.count(F.lit(1)).alias("messages"), F.percentile(latency, F.lit(0.5)).alias("p50_ns"),
                F.percentile(latency, F.lit(0.99)).alias("p99_ns"), F.max("latency_ns").alias("max_ns"))
           .orderBy("priority", "flow", "window").toPandas())
    return out[cols] if not out.empty else pd.DataFrame(columns=cols)


def link_first_seen(observations: DataFrame, flows: DataFrame) -> DataFrame:
    """Spark: per message and link direction, first/last time seen and each capture side's time (``flow_id``,
    ``seq``, ``link``, ``src_node``, ``dst_node``, ``ts_ns``, ``last_ns``, ``tx_ns``, ``rx_ns``, ``flow``).

    It grows with links x messages, so it stays in Spark (persisted: it feeds the per-link transit, the per-hop
    delays and the messages' paths); the driver collects only what those reduce it to."""
    return (observations.where(F.col("src_node").isNotNull() & F.col("dst_node").isNotNull())
            .groupBy("flow_id", "seq", "link", "src_node", "dst_node")
            .agg(F.min("ts_ns").alias("ts_ns"), F.max("ts_ns").alias("last_ns"),
                 F.min(F.when(F.col("side") == "tx", F.col("ts_ns"))).alias("tx_ns"),
                 F.min(F.when(F.col("side") == "rx", F.col("ts_ns"))).alias("rx_ns"))
            .join(F.broadcast(flows.select("flow_id", "flow")), "flow_id", "left")
            .persist())


def _delay_stats(d: DataFrame, keys: List[str]) -> pd.DataFrame:
    """Spark: per group of ``keys``, the count, exact p50 and p99 (``percentile``: linear interpolation
    between the closest ranks, as pandas' ``quantile``) and maximum of ``delay_ns``; collected (one row a
    group: a group is a link direction or a hop, not a message). A row without one of its keys (a link or
    flow not known) is in no group."""
    cols = keys + ["messages", "p50_ns", "p99_ns", "max_ns"]
    delay = F.col("delay_ns").cast("double")
    known = F.lit(True)
    for k in keys:
        known = known & F.col(k).isNotNull()
    out = (d.where(known).groupBy(*keys)
           .agg(F.count(F.lit(1)).alias("messages"), F.percentile(delay, F.lit(0.5)).alias("p50_ns"),
                F.percentile(delay, F.lit(0.99)).alias("p99_ns"), F.max("delay_ns").alias("max_ns"))
           .orderBy(*keys).toPandas())
    return out[cols] if not out.empty else pd.DataFrame(columns=cols)


def link_transit(seen: DataFrame) -> pd.DataFrame:
    """Per link direction: time from the sender's capture to the receiver's capture (``seen``:
    :func:`link_first_seen`)."""
    s = seen.where(F.col("tx_ns").isNotNull() & F.col("rx_ns").isNotNull())
    return _delay_stats(s.withColumn("delay_ns", F.col("rx_ns") - F.col("tx_ns")),
                        ["link", "src_node", "dst_node"])


def hop_delays(seen: DataFrame) -> pd.DataFrame:
    """Per flow and pair of consecutive links u->v, v->w: first seen on u->v to first seen on v->w.

    That is the time the message spent crossing v (plus where the captures sit); only messages
    seen on both links count. A join of ``seen`` (:func:`link_first_seen`) with itself, in Spark.
    """
    a = seen.select("flow", "flow_id", "seq", F.col("src_node").alias("from_node"),
                    F.col("dst_node").alias("via_node"), F.col("ts_ns").alias("ts_a"))
    b = seen.select("flow_id", "seq", F.col("src_node").alias("via_node"), F.col("dst_node").alias("to_node"),
                    F.col("ts_ns").alias("ts_b"))
    m = a.join(b, ["flow_id", "seq", "via_node"]).where(F.col("from_node") != F.col("to_node"))
    return _delay_stats(m.withColumn("delay_ns", F.col("ts_b") - F.col("ts_a")),
                        ["flow", "from_node", "via_node", "to_node"])
