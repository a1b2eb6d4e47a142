"""The routers' resources over a run (router/limits.py): the bytes held in their
queues and their resident memory, from the scraped metrics, and every
resource-limit decision (noisy sender, slow reader, and the disconnects they
caused), from the routers' own events.

``router_queued_bytes_peak`` is the router's own running maximum, so a peak
between two scrapes is still seen; the resident memory is only known at the
scrapes.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

import pandas as pd

from .routerdriver import Availability, unavailable

DECISION_EVENTS = ("noisy_sender", "noisy_sender_cleared", "slow_reader", "slow_reader_cleared",
                   "declarations_refused")
LIMIT_DISCONNECT = "router's resource limits"  # in the reason of a deliberate disconnect

#: the metrics read, by name (docs/metrics.md) -> column of the node series
NODE_METRICS = {
    "router_queued_bytes": "queued_bytes",
    "router_queued_bytes_peak": "queued_bytes_peak",
    "router_queued_bytes_limit": "queued_bytes_limit",
    "router_control_queued_bytes": "control_bytes",
    "router_resident_memory_bytes": "rss_bytes",
}


def node_series(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per node and scrape: queued bytes (now, peak, limit), control bytes and resident memory."""
    cols = ["node", "ts_ns"] + list(NODE_METRICS.values())
    m = metrics[metrics["ok"].astype(bool) & metrics["metric"].isin(list(NODE_METRICS))]
    if m.empty:
        return pd.DataFrame(columns=cols)
    wide = (m.assign(name=m["metric"].map(NODE_METRICS))
            .pivot_table(index=["node", "ts_ns"], columns="name", values="value", aggfunc="max")
            .reset_index())
    for c in cols:
        if c not in wide.columns:
            wide[c] = float("nan")
    return wide[cols].sort_values(["node", "ts_ns"]).reset_index(drop=True)


def _max(s: pd.Series) -> Optional[float]:
    s = s.dropna()
    return float(s.max()) if len(s) else None


def node_table(series: pd.DataFrame) -> List[Dict[str, Any]]:
    """Per node: the highest queued bytes (the router's running peak where it has one), the limit,
    the highest control bytes, resident memory at the first scrape and at its highest, and the scrapes."""
    out = []
    for node, g in series.groupby("node", sort=True):
        peak = _max(g["queued_bytes_peak"])
        seen = _max(g["queued_bytes"])
        out.append({
            "node": node,
            "scrapes": int(len(g)),
            "queued_bytes_max": max((v for v in (peak, seen) if v is not None), default=None),
            "queued_bytes_limit": _max(g["queued_bytes_limit"]),
            "control_bytes_max": _max(g["control_bytes"]),
            "rss_bytes_first": float(g["rss_bytes"].dropna().iloc[0]) if g["rss_bytes"].notna().any() else None,
            "rss_bytes_max": _max(g["rss_bytes"]),
        })
    return out


def decisions(events: pd.DataFrame, t0_ns: int) -> List[Dict[str, Any]]:
    """Every resource-limit decision a router logged, and every disconnect those limits caused, in time order."""
    if events.empty:
        return []
    ev = events[(events["source"] == "router") & (
        events["event"].isin(list(DECISION_EVENTS)) | events["event"].isin(["client_disconnected", "link_down"]))]
    out = []
    for r in ev.itertuples(index=False):
        fields = json.loads(r.fields) if isinstance(r.fields, str) and r.fields else {}
        if r.event in ("client_disconnected", "link_down"):
            reason = str(fields.get("reason", ""))
            if LIMIT_DISCONNECT not in reason:
                continue
            endpoint = fields.get("client") or r.neighbour
            entry = {"event": "disconnected", "endpoint": endpoint, "reason": reason}
        else:
            entry = {"event": r.event, **{k: v for k, v in fields.items()}}
        out.append({"node": r.node, "t_s": (int(r.ts_ns) - t0_ns) / 1e9, "ts_ns": int(r.ts_ns), **entry})
    return out


def summary(series: pd.DataFrame, events: pd.DataFrame, t0_ns: int,
            available: Availability = Availability()) -> Dict[str, Any]:
    """The ``resources`` section of summary.json (``series`` from :func:`node_series`).

    ``available``: what of the router's own figures the run gives. The figures from its metrics (queued
    bytes, memory) or from its event log (the limits' decisions) it cannot give are
    ``{"available": false, "reason": ...}`` (the whole section when neither is available), never 0."""
    no_metrics, no_events = available.reason("metrics"), available.reason("events")
    if no_metrics and no_events:
        return unavailable(available.reason("metrics", "events"))
    out: Dict[str, Any] = {}
    if no_metrics:
        gone = unavailable(no_metrics)
        out.update(nodes=gone, queued_bytes_max=gone, rss_bytes_max=gone)
    else:
        nodes = node_table(series)
        out.update(
            nodes=nodes,
            queued_bytes_max=max((n["queued_bytes_max"] for n in nodes if n["queued_bytes_max"] is not None),
                                 default=None),
            rss_bytes_max=max((n["rss_bytes_max"] for n in nodes if n["rss_bytes_max"] is not None), default=None))
    if no_events:
        gone = unavailable(no_events)
        out.update(decisions=gone, noisy_senders=gone, slow_readers=gone, disconnects=gone)
    else:
        decided = decisions(events, t0_ns)
        out.update(decisions=decided,
                   noisy_senders=sum(1 for d in decided if d["event"] == "noisy_sender"),
                   slow_readers=sum(1 for d in decided if d["event"] == "slow_reader"),
                   disconnects=sum(1 for d in decided if d["event"] == "disconnected"))
    return out
