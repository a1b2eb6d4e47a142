"""One-way latency: percentiles per flow and priority, RFC 3550 jitter, time series, per-hop delay.

Inputs are the received log (driver-side, one row per delivery) and the per-link first-seen table
that Spark reduces from the observations (``link_first_seen``).
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

__all__ = ["first_deliveries", "latency_table", "jitter_table", "latency_series", "link_first_seen",
           "link_transit", "hop_delays", "PERCENTILES", "rfc3550_jitter"]

#: name -> quantile; names are those of the expectation metrics (latency.p50 ...)
PERCENTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99, "p999": 0.999}
_STAT_COLS = ["messages", "min_ns", "mean_ns", "p50_ns", "p95_ns", "p99_ns", "p999_ns", "max_ns"]


def first_deliveries(received: pd.DataFrame) -> pd.DataFrame:
    """One row per (flow, node, seq): the first time it was received, with ``latency_ns``."""
    d = received.sort_values(["recv_ns", "seq"], kind="stable").drop_duplicates(["flow", "node", "seq"])
    d = d.assign(latency_ns=d["recv_ns"] - d["send_ns"])
    return d.reset_index(drop=True)


def _stats(values: np.ndarray) -> dict:
    v = np.asarray(values, dtype="float64")
    out = {"messages": int(len(v)), "min_ns": float(v.min()), "mean_ns": float(v.mean()), "max_ns": float(v.max())}
    qs = np.percentile(v, [q * 100 for q in PERCENTILES.values()])  # linear interpolation (Spark's percentile too)
    for name, q in zip(PERCENTILES, qs):
        out[f"{name}_ns"] = float(q)
    return out


def _grouped(d: pd.DataFrame, keys: List[str]) -> pd.DataFrame:
    rows = []
    for key, g in d.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(keys, key)), **_stats(g["latency_ns"].to_numpy())})
    return pd.DataFrame(rows, columns=keys + _STAT_COLS)


def latency_table(deliveries: pd.DataFrame) -> Dict[str, pd.DataFrame]:
    """Exact percentiles per flow, per priority and overall."""
    return {
        "flow": _grouped(deliveries, ["flow", "priority"]),
        "priority": _grouped(deliveries, ["priority"]),
        "all": _grouped(deliveries.assign(all="all"), ["all"]),
    }


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


def _jitter(transit: np.ndarray) -> float:
    """The recurrence unrolled: J_n = 1/16 * sum_k (15/16)^(n-k) * D_k (vectorised, same value)."""
    if len(transit) < 2:
        return 0.0
    d = np.abs(np.diff(transit.astype("float64")))
    weights = np.power(15.0 / 16.0, np.arange(len(d) - 1, -1, -1, dtype="float64"))
    return float((d * weights).sum() / 16.0)


def jitter_table(deliveries: pd.DataFrame) -> pd.DataFrame:
    """Jitter per (flow, subscriber node), packets in arrival order (duplicates excluded)."""
    rows = []
    for (flow, node), g in deliveries.groupby(["flow", "node"], sort=True):
        g = g.sort_values(["recv_ns", "seq"], kind="stable")
        rows.append({"flow": flow, "node": node, "priority": int(g["priority"].iloc[0]),
                     "jitter_ns": _jitter(g["latency_ns"].to_numpy()), "messages": len(g)})
    return pd.DataFrame(rows, columns=["flow", "node", "priority", "jitter_ns", "messages"])


def latency_series(deliveries: pd.DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    """Per priority, flow and window (by receive time): count, p50, p99, max."""
    cols = ["priority", "flow", "window", "messages", "p50_ns", "p99_ns", "max_ns"]
    if deliveries.empty:
        return pd.DataFrame(columns=cols)
    d = deliveries.assign(window=(deliveries["recv_ns"] - t0_ns) // window_ns)
    g = d.groupby(["priority", "flow", "window"], sort=True)["latency_ns"]
    out = pd.DataFrame({"messages": g.size(), "p50_ns": g.quantile(0.5), "p99_ns": g.quantile(0.99),
                        "max_ns": g.max()}).reset_index()
    return out[cols]


def link_first_seen(observations: DataFrame, flows: DataFrame) -> pd.DataFrame:
    """Spark: per message and link direction, first/last time seen and each capture side's time."""
    return (observations.where(F.col("src_node").isNotNull() & F.col("dst_node").isNotNull())
            .groupBy("flow_id", "seq", "link", "src_node", "dst_node")
            .agg(F.min("ts_ns").alias("ts_ns"), F.max("ts_ns").alias("last_ns"),
                 F.min(F.when(F.col("side") == "tx", F.col("ts_ns"))).alias("tx_ns"),
                 F.min(F.when(F.col("side") == "rx", F.col("ts_ns"))).alias("rx_ns"))
            .join(F.broadcast(flows.select("flow_id", "flow")), "flow_id", "left")
            .toPandas())


def _delay_stats(d: pd.DataFrame, keys: List[str]) -> pd.DataFrame:
    cols = keys + ["messages", "p50_ns", "p99_ns", "max_ns"]
    if d.empty:
        return pd.DataFrame(columns=cols)
    g = d.groupby(keys, sort=True)["delay_ns"]
    out = pd.DataFrame({"messages": g.size(), "p50_ns": g.quantile(0.5), "p99_ns": g.quantile(0.99),
                        "max_ns": g.max()}).reset_index()
    return out[cols]


def link_transit(seen: pd.DataFrame) -> pd.DataFrame:
    """Per link direction: time from the sender's capture to the receiver's capture."""
    s = seen.dropna(subset=["tx_ns", "rx_ns"])
    return _delay_stats(s.assign(delay_ns=s["rx_ns"] - s["tx_ns"]), ["link", "src_node", "dst_node"])


def hop_delays(seen: pd.DataFrame) -> pd.DataFrame:
    """Per flow and pair of consecutive links u->v, v->w: first seen on u->v to first seen on v->w.

    That is the time the message spent crossing v (plus where the captures sit); only messages
    seen on both links count.
    """
    a = seen[["flow", "flow_id", "seq", "src_node", "dst_node", "ts_ns"]]
    b = seen[["flow_id", "seq", "src_node", "dst_node", "ts_ns"]]
    m = a.merge(b, left_on=["flow_id", "seq", "dst_node"], right_on=["flow_id", "seq", "src_node"],
                suffixes=("_a", "_b"))
    m = m[m["src_node_a"] != m["dst_node_b"]]
    d = pd.DataFrame({"flow": m["flow"], "from_node": m["src_node_a"], "via_node": m["dst_node_a"],
                      "to_node": m["dst_node_b"], "delay_ns": m["ts_ns_b"] - m["ts_ns_a"]})
    return _delay_stats(d, ["flow", "from_node", "via_node", "to_node"])
