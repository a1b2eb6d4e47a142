"""Queries: completion times, outcomes, failovers and serving routers per query flow, from the
queriers' logs (``traffic/query-<flow>.csv``, docs/traffic.md), split into the phases the
scenario's events make (before, during and after a router is killed, say).

A query's **completion time** is ``done_ns - send_ns`` at the querier, over the queries that ended
``ok``; a **failover** is a query that ended ``ok`` answered by a router other than the one it was
first sent to (``retries`` also counts attempts at the same router again); a query is **past its timeout** when it ended more than ``PAST_TIMEOUT_GRACE_NS`` after its
timeout (the router ends every query by its timeout: none should be).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pandas as pd

from runfolder.records import QUERY_HEADER

from .latency import _stats

__all__ = ["QUERY_LOG_COLUMNS", "OUTCOMES", "INT_COLUMNS", "phases", "failed_over", "query_summary", "query_series",
           "is_query_flow", "PAST_TIMEOUT_GRACE_NS"]

QUERY_LOG_COLUMNS = QUERY_HEADER.split(",")
OUTCOMES = ("ok", "timeout", "no_match", "error", "shutdown", "stopped")
#: the router's final word reaches the querier a few ms after the timeout; beyond this it did not end by it
PAST_TIMEOUT_GRACE_NS = 100_000_000
#: scenario actions that change the network (they start a new phase); flow starts and stops do not
NETWORK_ACTIONS = ("kill_router", "restart_router", "link_down", "link_up", "set_link")
INT_COLUMNS = ("qid", "send_ns", "first_reply_ns", "done_ns", "replies", "retries")


def is_query_flow(flow: dict) -> bool:
    return flow.get("kind") == "query"


def phases(events: Optional[pd.DataFrame], t0_ns: int, end_ns: Optional[int]) -> List[Dict[str, Any]]:
    """Spans of the run between the scenario's network changes: the first is "start", each next one is
    named after the event that opened it (``kill_router r2``)."""
    cuts: List[Tuple[int, str]] = []
    if events is not None and len(events):
        ev = events[(events["source"] == "scenario") & events["event"].isin(NETWORK_ACTIONS)]
        for _, e in ev.sort_values("ts_ns").iterrows():
            where = e["node"] if isinstance(e.get("node"), str) else (
                f"link {int(e['link'])}" if pd.notna(e.get("link")) else "")
            cuts.append((int(e["ts_ns"]), f"{e['event']} {where}".strip()))
    out, start, label = [], t0_ns, "start"
    for ts, name in cuts:
        out.append({"label": label, "start_ns": start, "end_ns": ts})
        start, label = ts, name
    out.append({"label": label, "start_ns": start, "end_ns": end_ns})
    return out


def failed_over(q: pd.DataFrame) -> pd.Series:
    """Ended ok, answered by a router other than the first one tried (``attempts`` starts ``r2:...``)."""
    first = q["attempts"].fillna("").str.split(";").str[0].str.split(":").str[0]
    served = q["served_by"].fillna("").str.split(";")
    other = pd.Series([bool(f) and bool(s[0]) and f not in s for f, s in zip(first, served)], index=q.index,
                      dtype=bool)
    return (q["outcome"] == "ok") & other


def _figures(q: pd.DataFrame) -> Dict[str, Any]:
    done = q[q["outcome"] == "ok"]
    completion = (done["done_ns"] - done["send_ns"]).to_numpy(dtype="float64")
    ended = q[q["done_ns"].notna()]
    took = (ended["done_ns"] - ended["send_ns"]).astype("int64")
    past = int((took > ended["timeout_ns"] + PAST_TIMEOUT_GRACE_NS).sum())
    served: Dict[str, int] = {}
    for s in done["served_by"]:
        for name in (s or "").split(";"):
            if name:
                served[name] = served.get(name, 0) + 1
    stats = _stats(completion) if len(completion) else {"messages": 0}
    return {
        "queries": int(len(q)),
        "outcomes": {o: int((q["outcome"] == o).sum()) for o in OUTCOMES},
        "completion": {k: (int(v) if k == "messages" else float(v)) for k, v in stats.items()},
        "timeouts": int((q["outcome"] == "timeout").sum()),
        "failovers": int(failed_over(q).sum()),
        "retries": int(q["retries"].fillna(0).sum()),
        "past_timeout": past,
        "longest_ns": int(took.max()) if len(took) else None,
        "served_by": dict(sorted(served.items())),
    }


def query_summary(queries: pd.DataFrame, query_flows: List[dict], spans: List[Dict[str, Any]]) -> Dict[str, Any]:
    """summary.json ``queries``: per query flow its figures over the run and per phase, and all flows together."""
    flows = []
    for f in sorted(query_flows, key=lambda f: f["name"]):
        q = queries[queries["flow"] == f["name"]]
        per_phase = []
        for span in spans:
            in_span = q[(q["send_ns"] >= span["start_ns"]) &
                        ((q["send_ns"] < span["end_ns"]) if span["end_ns"] is not None else True)]
            per_phase.append({**span, **_figures(in_span)})
        flows.append({"flow": f["name"], "flow_id": int(f["flow_id"]), "key": f.get("key"),
                      "querier": f.get("publisher") or f.get("from"), "queryables": list(f.get("queryables") or []),
                      "consolidation": f.get("consolidation"), "timeout_ns": f.get("timeout_ns"),
                      "per_second": f.get("per_second"), "priority": f.get("priority"),
                      "priority_name": f.get("priority_name"), **_figures(q), "phases": per_phase})
    return {"flows": flows, "overall": _figures(queries) if len(flows) else None}


def query_series(queries: pd.DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    """Per flow and window (by send time): queries, completion p50/p99 of those that ended ok, timeouts,
    failovers."""
    cols = ["flow", "window", "queries", "p50_ns", "p99_ns", "timeouts", "failovers"]
    if queries.empty:
        return pd.DataFrame(columns=cols)
    q = queries.assign(window=((queries["send_ns"] - t0_ns) // window_ns).astype("int64"),
                       completion=(queries["done_ns"] - queries["send_ns"]).astype("float64"),
                       failed_over=failed_over(queries))
    rows = []
    for (flow, w), g in q.groupby(["flow", "window"]):
        ok = g[g["outcome"] == "ok"]["completion"].dropna().to_numpy()
        rows.append((flow, int(w), len(g), float(np.percentile(ok, 50)) if len(ok) else np.nan,
                     float(np.percentile(ok, 99)) if len(ok) else np.nan, int((g["outcome"] == "timeout").sum()),
                     int(g["failed_over"].sum())))
    return pd.DataFrame(rows, columns=cols)
