"""Paths of flows over time (the links their messages appear on), reroute events, congestion episodes."""
from __future__ import annotations

import json
from collections import deque
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

import pandas as pd

__all__ = ["message_paths", "detect_reroutes", "episodes", "path_series", "Reroute", "Episode",
           "NOT_TRIGGERS", "MIN_RUN"]

#: events that never explain a reroute (they happen all the time, or are its consequence)
NOT_TRIGGERS = {"ready", "metrics_listening", "client_connected", "client_disconnected", "trees_recomputed",
                "messages_dropped", "run_started", "traffic_started", "traffic_stopped", "stopping",
                "capture_started", "capture_stopped", "phase_started", "phase_ended", "lab_up", "routers_up",
                "run_end", "launch_traffic", "stop_traffic", "subscribers_late", "skipped", "router_file_copied",
                "teardown_error"}
#: a path used by fewer consecutive messages than this, between two runs of one same path, is a blip, not two reroutes
MIN_RUN = 3
BLOCKED_WEIGHT = 65535


def message_paths(seen: pd.DataFrame, flows: List[dict], deliveries: pd.DataFrame) -> pd.DataFrame:
    """One row per (flow, seq) seen on any link: its hops in order, first/last time seen, and receivers.

    ``seen``: per message and link direction, first (``ts_ns``) and last (``last_ns``) time seen
    (``latency.link_first_seen``); ``deliveries``: first receipt per (flow, node, seq).
    """
    cols = ["flow", "seq", "first_ns", "last_ns", "hops", "publisher", "receivers", "path", "complete"]
    s = seen.dropna(subset=["flow"])
    if s.empty:
        return pd.DataFrame(columns=cols)
    s = s.sort_values(["flow", "seq", "ts_ns"], kind="stable")
    s = s.assign(hop=s["src_node"] + ">" + s["dst_node"])
    per = s.groupby(["flow", "seq"], sort=True).agg(hops=("hop", list), first_ns=("ts_ns", "min"),
                                                    last_ns=("last_ns", "max")).reset_index()
    rec = deliveries.groupby(["flow", "seq"])["node"].agg(lambda x: sorted(set(x))).rename("receivers").reset_index()
    per = per.merge(rec, on=["flow", "seq"], how="left")
    per["receivers"] = per["receivers"].apply(lambda r: r if isinstance(r, list) else [])
    pub = {f["name"]: f.get("publisher") for f in flows}
    per["publisher"] = per["flow"].map(pub)
    per["path"] = per["hops"].apply(path_name)
    per["complete"] = [_complete(h, p, r) for h, p, r in zip(per["hops"], per["publisher"], per["receivers"])]
    per["seq"] = per["seq"].astype("int64")
    per["first_ns"] = per["first_ns"].astype("int64")
    per["last_ns"] = per["last_ns"].astype("int64")
    return per[cols]


def path_name(hops: Sequence[str]) -> str:
    """``r1>r2>r4`` for a chain; hops sorted and comma-joined for a tree (several subscribers)."""
    if not hops:
        return ""
    chain = [hops[0].split(">")[0]]
    for h in hops:
        u, v = h.split(">")
        if u != chain[-1]:
            return ",".join(sorted(hops))
        chain.append(v)
    return ">".join(chain)


def _complete(hops: Sequence[str], publisher: Optional[str], receivers: Sequence[str]) -> bool:
    """The hops connect the publisher to every node that received the message."""
    if not receivers or not publisher:
        return False
    adj: Dict[str, Set[str]] = {}
    for h in hops:
        u, v = h.split(">")
        adj.setdefault(u, set()).add(v)
    seen = {publisher}
    todo = deque([publisher])
    while todo:
        u = todo.popleft()
        for v in adj.get(u, ()):
            if v not in seen:
                seen.add(v)
                todo.append(v)
    return all(r in seen or r == publisher for r in receivers)


@dataclass
class Reroute:
    flow: str
    time_ns: int              # first time a message was seen on the new path
    old_path: str
    new_path: str
    last_old_seq: int
    first_new_seq: int
    last_old_ns: int          # last time a message was seen on the old path
    old_path_idle_ns: int     # time_ns - last_old_ns
    lost: int                 # deliveries lost among the messages sent between the two
    trigger_ns: Optional[int] = None
    trigger_source: Optional[str] = None
    trigger_node: Optional[str] = None
    trigger_event: Optional[str] = None
    reroute_time_ns: Optional[int] = None   # time_ns - trigger_ns
    episode: Optional[int] = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Episode:
    index: int
    start_ns: int
    end_ns: Optional[int]     # None: never cleared before the end of the run
    onset: str                # "r2: congestion_detected (r4)"
    clear: Optional[str]


def episodes(events: pd.DataFrame, end_ns: Optional[int]) -> List[Episode]:
    """Congestion episodes from router (and scenario) events: onset ... clear, overlapping onsets merged.

    Onset: ``congestion_detected``, or ``weight_changed`` to 65535 (blocked).
    Clear: ``congestion_cleared``, or ``weight_changed`` below 65535 (``weight_after``, or ``weight``).
    """
    active: Set[Tuple[Optional[str], Optional[str]]] = set()
    out: List[Episode] = []
    for ev in events.sort_values("ts_ns").itertuples(index=False):
        kind = None
        if ev.event == "congestion_detected" or ev.event == "congestion_onset":
            kind = "on"
        elif ev.event == "congestion_cleared" or ev.event == "congestion_clear":
            kind = "off"
        elif ev.event == "weight_changed":
            try:
                fields = json.loads(ev.fields or "{}")
            except ValueError:
                fields = {}
            if fields.get("source") == "linkstate":
                continue  # another router's copy of a change: counted once, where it was made
            # the router writes weight_before/weight_after; "weight" is accepted too
            weight = fields.get("weight_after", fields.get("weight"))
            if isinstance(weight, (int, float)):
                kind = "on" if weight >= BLOCKED_WEIGHT else "off"
        if kind is None:
            continue
        key = (ev.node, ev.neighbour)
        label = f"{ev.node or ev.source}: {ev.event}" + (f" ({ev.neighbour})" if ev.neighbour else "")
        if kind == "on":
            if not active:
                out.append(Episode(len(out), int(ev.ts_ns), None, label, None))
            active.add(key)
        elif key in active:
            active.discard(key)
            if not active and out:
                out[-1].end_ns = int(ev.ts_ns)
                out[-1].clear = label
    return out


def _runs(paths: List[Tuple[int, str, int, int]]) -> List[List[Tuple[int, str, int, int]]]:
    runs: List[List[Tuple[int, str, int, int]]] = []
    for item in paths:
        if runs and runs[-1][-1][1] == item[1]:
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def detect_reroutes(paths: pd.DataFrame, events: pd.DataFrame, lost: pd.DataFrame,
                    eps: Sequence[Episode] = (), min_run: int = MIN_RUN) -> List[Reroute]:
    """Every change of path of every flow, over messages whose path is complete (reached every receiver).

    ``lost``: lost deliveries with columns flow, seq (one row per lost (node, seq)).
    """
    triggers = events[~events["event"].isin(NOT_TRIGGERS)].sort_values("ts_ns") if not events.empty else events
    fallback = events[events["event"] == "trees_recomputed"].sort_values("ts_ns") if not events.empty else events
    out: List[Reroute] = []
    if paths.empty:
        return out
    for flow, group in paths[paths["complete"].astype(bool)].groupby("flow", sort=True):
        items = list(zip(group["seq"].astype(int), group["path"], group["first_ns"].astype(int),
                         group["last_ns"].astype(int)))
        runs = _runs(items)
        # blips: a short run between two runs of the same path is noise, not two reroutes
        changed = True
        while changed and len(runs) >= 3:
            changed = False
            for i in range(1, len(runs) - 1):
                if len(runs[i]) < min_run and runs[i - 1][0][1] == runs[i + 1][0][1]:
                    runs[i - 1:i + 2] = [runs[i - 1] + runs[i + 1]]
                    changed = True
                    break
        flow_lost = lost[lost["flow"] == flow]["seq"] if not lost.empty else pd.Series([], dtype="int64")
        for prev, nxt in zip(runs, runs[1:]):
            last_old = max(prev, key=lambda x: x[0])
            first_new = min(nxt, key=lambda x: x[0])
            time_ns = first_new[2]
            last_old_ns = max(x[3] for x in prev)
            n_lost = int(((flow_lost > last_old[0]) & (flow_lost < first_new[0])).sum())
            r = Reroute(flow=flow, time_ns=time_ns, old_path=prev[0][1], new_path=nxt[0][1],
                        last_old_seq=last_old[0], first_new_seq=first_new[0], last_old_ns=last_old_ns,
                        old_path_idle_ns=time_ns - last_old_ns, lost=n_lost)
            for table in (triggers, fallback):
                if table.empty:
                    continue
                before = table[table["ts_ns"] <= time_ns]
                if not before.empty:
                    ev = before.iloc[-1]
                    r.trigger_ns = int(ev["ts_ns"])
                    r.trigger_source = ev["source"]
                    r.trigger_node = ev["node"] if isinstance(ev["node"], str) else None
                    r.trigger_event = ev["event"]
                    r.reroute_time_ns = time_ns - r.trigger_ns
                    break
            for ep in eps:
                if ep.start_ns <= time_ns and (ep.end_ns is None or time_ns < ep.end_ns):
                    r.episode = ep.index
                    break
            out.append(r)
    return out


def path_series(paths: pd.DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    """Per flow and window (by first time seen): messages per path."""
    if paths.empty:
        return pd.DataFrame(columns=["flow", "window", "path", "messages"])
    p = paths[paths["complete"].astype(bool)].copy()
    p["window"] = (p["first_ns"] - t0_ns) // window_ns
    return p.groupby(["flow", "window", "path"]).size().reset_index(name="messages")
