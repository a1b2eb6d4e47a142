"""One-way latency: percentiles per flow and priority, RFC 3550 jitter over the run, time series, per-hop delay.

Inputs are the received log (driver-side, one row per delivery) and the messages' rows that Spark makes from the
observations (``spark.messagerows``), which stay in Spark: the per-link transit and the per-hop delays are a
Spark aggregation of their delays.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

__all__ = ["first_deliveries", "latency_table", "jitter_table", "jitter_samples", "jitter_stats", "jitter_series",
           "jitter_estimates", "latency_series", "link_delays", "PERCENTILES",
           "rfc3550_jitter"]

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


def jitter_estimates(transit: np.ndarray) -> np.ndarray:
    """The RFC 3550 estimator after each packet from the second on (the recurrence above, packets in
    arrival order): ``J_i = J_{i-1} + (|D(i-1, i)| - J_{i-1}) / 16`` with ``J_0 = 0``."""
    d = np.abs(np.diff(np.asarray(transit, dtype="float64")))
    out = np.empty(len(d), dtype="float64")
    j = 0.0
    for i, x in enumerate(d):  # ~1 us a packet; a 60 s diamond run has ~25 000
        j += (x - j) / 16.0
        out[i] = j
    return out


JITTER_STATS = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


def jitter_samples(deliveries: pd.DataFrame) -> pd.DataFrame:
    """The estimator after every packet but the first, per (flow, subscriber node): ``flow``, ``node``,
    ``priority``, ``recv_ns`` (of the packet), ``jitter_ns``. Duplicates are excluded (first receipts only)."""
    cols = ["flow", "node", "priority", "recv_ns", "jitter_ns"]
    parts = []
    for (flow, node), g in deliveries.groupby(["flow", "node"], sort=True):
        g = g.sort_values(["recv_ns", "seq"], kind="stable")
        est = jitter_estimates(g["latency_ns"].to_numpy())
        if len(est):
            parts.append(pd.DataFrame({"flow": flow, "node": node, "priority": int(g["priority"].iloc[0]),
                                       "recv_ns": g["recv_ns"].to_numpy()[1:], "jitter_ns": est}))
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def jitter_stats(samples: pd.DataFrame) -> dict:
    """Percentiles (linear interpolation) and maximum of the estimator over the run, and its last value (the
    largest over subscribers): what RFC 3550's running figure said at the end, which describes only the
    last ~50 packets."""
    v = samples["jitter_ns"].to_numpy(dtype="float64")
    out = {"samples": int(len(v))}
    for name, q in zip(JITTER_STATS, np.percentile(v, [q * 100 for q in JITTER_STATS.values()])):
        out[f"{name}_ns"] = float(q)
    out["max_ns"] = float(v.max())
    out["last_ns"] = float(samples.sort_values("recv_ns", kind="stable").groupby(["flow", "node"])["jitter_ns"]
                           .last().max())
    return out


def jitter_table(deliveries: pd.DataFrame, samples: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """Jitter per (flow, subscriber node), packets in arrival order (duplicates excluded): the estimator's
    percentiles over the run (``jitter_stats``); ``samples``: ``jitter_samples(deliveries)`` if known."""
    cols = ["flow", "node", "priority", "messages", "samples", "p50_ns", "p95_ns", "p99_ns", "max_ns", "last_ns"]
    rows = []
    samples = jitter_samples(deliveries) if samples is None else samples
    counts = deliveries.groupby(["flow", "node"]).size()
    for (flow, node), g in samples.groupby(["flow", "node"], sort=True):
        rows.append({"flow": flow, "node": node, "priority": int(g["priority"].iloc[0]),
                     "messages": int(counts[(flow, node)]), **jitter_stats(g)})
    return pd.DataFrame(rows, columns=cols)


def jitter_series(samples: pd.DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    """Per flow and window of receive time: the estimator at the window's last packet (``jitter_ns``, largest
    over subscribers) and its maximum within the window (``max_ns``)."""
    cols = ["flow", "window", "jitter_ns", "max_ns"]
    if samples.empty:
        return pd.DataFrame(columns=cols)
    s = samples.assign(window=(samples["recv_ns"] - t0_ns) // window_ns).sort_values("recv_ns", kind="stable")
    last = s.groupby(["flow", "window", "node"])["jitter_ns"].last().groupby(["flow", "window"]).max()
    top = s.groupby(["flow", "window"])["jitter_ns"].max()
    out = pd.DataFrame({"jitter_ns": last, "max_ns": top}).reset_index()
    return out[cols]


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


_TRANSIT_KEYS = ["link", "src_node", "dst_node"]
_HOP_KEYS = ["flow", "from_node", "via_node", "to_node"]
_DELAY_COLS = ["messages", "p50_ns", "p99_ns", "max_ns"]


def link_delays(rows: DataFrame) -> Tuple[pd.DataFrame, pd.DataFrame, Dict[Tuple[str, str], int]]:
    """Spark, one job for all three: the per-link transit, the per-hop delays (``rows``: the messages' rows,
    :func:`spark.messagerows.message_rows`) and the link each direction seen was on, ``(src_node, dst_node) ->
    link`` (the lowest index of parallel links). Per group, the count, exact p50 and p99 (``percentile``: linear
    interpolation between the closest ranks, as pandas' ``quantile``) and maximum of the delay; collected (one
    row a group: a link direction or a hop, not a message; sorted on the driver, which spares Spark a sort's two
    jobs). Every direction seen on a known link is a group; its delay is null unless both capture sides saw the
    message (percentile, count and max of a column leave nulls out): a group with no delay only names its link.

    * transit, per link direction: from the sender's capture to the receiver's capture;
    * hop, per flow and pair of consecutive links u->v, v->w: first seen on u->v to first seen on v->w, the time
      the message spent crossing v (plus where the captures sit); only messages seen on both links count."""
    delay = F.col("delay_ns").cast("double")
    out = (rows.where(F.col("kind") != "path").groupBy("kind", "link", "flow", "n1", "n2", "n3")
           .agg(F.count("delay_ns").alias("messages"), F.percentile(delay, F.lit(0.5)).alias("p50_ns"),
                F.percentile(delay, F.lit(0.99)).alias("p99_ns"), F.max("delay_ns").alias("max_ns"))
           .toPandas())
    transit_out = out[out["kind"] == "transit"].rename(columns={"n1": "src_node", "n2": "dst_node"})
    transit_out = transit_out.astype({"link": "int32"})  # the column's type (IntegerType), nulls in hop rows apart
    links = {(str(s), str(d)): int(lk) for (s, d), lk in
             transit_out.groupby(["src_node", "dst_node"])["link"].min().items()}
    # a group with no delay made max_ns a float column (toPandas of a long column with a null): ints again
    transit_out = transit_out[transit_out["messages"] > 0].astype({"max_ns": "int64"})
    hops_out = out[out["kind"] == "hop"].rename(columns={"n1": "from_node", "n2": "via_node", "n3": "to_node"})
    return _delay_table(transit_out, _TRANSIT_KEYS), _delay_table(hops_out.astype({"max_ns": "int64"}), _HOP_KEYS), links


def _delay_table(rows: pd.DataFrame, keys: List[str]) -> pd.DataFrame:
    cols = keys + _DELAY_COLS
    if rows.empty:
        return pd.DataFrame(columns=cols)
    return rows.sort_values(keys).reset_index(drop=True)[cols]
