"""Paths of flows over time (the links their messages appear on), reroute events, congestion episodes."""
from __future__ import annotations

import json
from collections import deque
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T


from .onsets import ONSET_WINDOW_NS, Overload

__all__ = ["message_paths", "with_receivers", "PATH_COLUMNS", "PATH_SCHEMA",
           "path_runs", "flow_paths", "detect_reroutes", "attribute_cause", "episodes", "path_series", "Reroute", "Episode",
           "ROUTER_DECISIONS", "MIN_RUN"]

#: router events that decide where data goes (its own decisions; the flooded copies of a weight change are not)
ROUTER_DECISIONS = {"congestion_detected", "congestion_cleared", "weight_changed", "flow_pinned", "flow_unpinned",
                    "flow_expired", "link_up", "link_down"}
#: a path used by fewer consecutive messages than this, between two runs of one same path, is a blip, not two reroutes
MIN_RUN = 3
BLOCKED_WEIGHT = 65535


#: the columns of :func:`with_receivers` (and of parquet/message_paths, docs/reports.md)
PATH_COLUMNS = ["flow", "seq", "first_ns", "last_ns", "hops", "publisher", "receivers", "path", "complete"]
#: their types in parquet/message_paths
PATH_SCHEMA = T.StructType([T.StructField(n, t, True) for n, t in (
    ("flow", T.StringType()), ("seq", T.LongType()), ("first_ns", T.LongType()), ("last_ns", T.LongType()),
    ("hops", T.ArrayType(T.StringType())), ("publisher", T.StringType()), ("receivers", T.ArrayType(T.StringType())),
    ("path", T.StringType()), ("complete", T.BooleanType()))])


def message_paths(table: pa.Table, flows: List[dict], deliveries: pd.DataFrame) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """One row per (flow, seq) seen on any link (:data:`PATH_COLUMNS`): its hops in order, first/last time seen,
    and receivers; and the messages' arrivals at nodes (``flow``, ``seq``, ``src_node``, ``seen_in_ns``: the
    first time the message was seen arriving at the node, on a link into it, at its receiver's capture when
    there is one), what :func:`spark.onsets.place_offered` needs.

    ``table``: the messages' path rows (:class:`spark.messagerows.MessageRows` ``paths``, ``parquet/message_hops``
    read with pyarrow: a row per message, its hops ordered by first time seen, ties by name; the arrivals are
    taken from it as Arrow arrays, no Python object per arrival); ``deliveries``: first receipt per (flow, node,
    seq).
    """
    arrivals = _arrivals(table)
    per = table.drop(["arrivals", "hops"]).to_pandas()
    if per.empty:
        return pd.DataFrame(columns=PATH_COLUMNS), arrivals
    per["flow"] = _shared_strings(table.column("flow"))
    per["hops"] = _hop_lists(table.column("hops"))
    per = per.sort_values(["flow", "seq"], kind="stable").reset_index(drop=True)
    return with_receivers(per, flows, deliveries)[PATH_COLUMNS], arrivals


def _shared_strings(strings) -> np.ndarray:
    """A pyarrow string array (or chunked array) as an object array in which equal strings are one ``str``:
    a pointer a row rather than a string a row (a few flow, node and hop names over millions of rows; the
    values, and so every figure, as ``to_numpy`` gives them). Nulls are None."""
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks()
    encoded = pc.dictionary_encode(strings)
    names = np.asarray(encoded.dictionary.to_pylist() + [None], dtype=object)
    return names[encoded.indices.fill_null(len(names) - 1).to_numpy()]


def _hop_lists(hops) -> list:
    """The ``hops`` column (list<string>) as a Python list of lists whose hop names are shared (``_shared_strings``);
    a null row as []."""
    lists = hops.combine_chunks() if isinstance(hops, pa.ChunkedArray) else hops
    if not len(lists):
        return []
    names = _shared_strings(lists.values)  # the whole child array: the offsets index it (a null row's too)
    offsets = lists.offsets.to_numpy()
    nulls = lists.is_null().to_numpy(zero_copy_only=False) if lists.null_count else None
    return [[] if nulls is not None and nulls[i] else names[a:b].tolist()
            for i, (a, b) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist()))]


def _arrivals(table) -> pd.DataFrame:
    """The ``arrivals`` map column of ``message_hops`` (a pyarrow Table) as rows: ``flow``, ``seq``, ``src_node``
    (the node arrived at), ``seen_in_ns``."""
    cols = ["flow", "seq", "src_node", "seen_in_ns"]
    maps = table.column("arrivals").combine_chunks() if table.num_rows else None
    if maps is None or len(maps) == 0:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(cols, ["object", "int64", "object", "Int64"])})
    offsets = maps.offsets.to_numpy()
    row = np.repeat(np.arange(len(maps)), np.diff(offsets))
    at = slice(int(offsets[0]), int(offsets[-1]))
    return pd.DataFrame({"flow": _shared_strings(table.column("flow"))[row],
                         "seq": table.column("seq").to_numpy()[row].astype("int64"),
                         "src_node": _shared_strings(maps.keys[at]),
                         # nullable ints straight from Arrow: a null would make numpy's copy float64 (ns rounded)
                         "seen_in_ns": maps.items[at].to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
                         .array})


def with_receivers(per: pd.DataFrame, flows: List[dict], deliveries: pd.DataFrame) -> pd.DataFrame:
    """``per``: one row per (flow, seq) with its ``hops`` in order, ``first_ns`` and ``last_ns``; with the
    nodes that received it (``deliveries``: first receipts), its publisher, its path's name and whether the
    hops connect the publisher to every receiver (``complete``); other columns kept."""
    per = per.merge(_receivers(deliveries), on=["flow", "seq"], how="left")
    per["receivers"] = per["receivers"].apply(lambda r: r if isinstance(r, list) else [])
    pub = {f["name"]: f.get("publisher") for f in flows}
    per["publisher"] = per["flow"].map(pub)
    names: Dict[tuple, str] = {}  # one name per distinct path, shared by its messages
    per["path"] = [names[t] if t in names else names.setdefault(t, path_name(h))
                   for h, t in zip(per["hops"], map(tuple, per["hops"]))]
    per["complete"] = [_complete(h, p, r) for h, p, r in zip(per["hops"], per["publisher"], per["receivers"])]
    per["seq"] = per["seq"].astype("int64")
    per["first_ns"] = per["first_ns"].astype("int64")
    per["last_ns"] = per["last_ns"].astype("int64")
    return per


def _receivers(deliveries: pd.DataFrame) -> pd.DataFrame:
    """Per (flow, seq) received: ``receivers``, the nodes that received it, sorted, without repeats. Sorted once
    and cut at each message's first row (a Python function per message cost ~10 s at 1.2 M messages)."""
    d = deliveries[["flow", "seq", "node"]].drop_duplicates().sort_values(["flow", "seq", "node"], kind="stable")
    flow, seq = d["flow"].to_numpy(), d["seq"].to_numpy()
    starts = np.flatnonzero(np.r_[True, (flow[1:] != flow[:-1]) | (seq[1:] != seq[:-1])]) if len(d) else \
        np.zeros(0, dtype="int64")
    names = d["node"].to_numpy(dtype=object)
    cuts = np.r_[starts, len(d)].tolist()
    return pd.DataFrame({"flow": flow[starts], "seq": seq[starts],
                         "receivers": [names[a:b].tolist() for a, b in zip(cuts[:-1], cuts[1:])]})


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
    """One change of a flow's path, with its cause and the three instants of docs/reports.md:
    onset (the cause) -> detection (the router's own event) -> first message on the new path (``time_ns``)."""

    flow: str
    time_ns: int              # first time a message was seen on the new path
    old_path: str
    new_path: str
    last_old_seq: int
    first_new_seq: int
    last_old_ns: int          # last time a message was seen on the old path
    old_path_idle_ns: int     # time_ns - last_old_ns
    lost: int                 # deliveries lost among the messages sent from the onset to the first on the new path
    cause: Optional[str] = None          # "overload", "failure", "event"; None: no cause found
    cause_link: Optional[str] = None     # the link direction (overload: r2>r4) or link/node (failure) it was on
    cause_detail: Optional[str] = None   # what happened, in words
    onset_ns: Optional[int] = None
    detection_ns: Optional[int] = None
    detection_node: Optional[str] = None
    detection_event: Optional[str] = None
    reroute_time_ns: Optional[int] = None    # time_ns - onset_ns
    detection_time_ns: Optional[int] = None  # detection_ns - onset_ns
    reaction_time_ns: Optional[int] = None   # time_ns - detection_ns
    episode: Optional[int] = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Episode:
    index: int
    start_ns: int
    end_ns: Optional[int]     # None: never cleared before the end of the run
    opened_by: str            # the router event that opened it: "r2: congestion_detected (r4)"
    closed_by: Optional[str]


def episodes(events: pd.DataFrame, end_ns: Optional[int]) -> List[Episode]:
    """Congestion episodes as the routers saw them: from a router's report of congestion to its clearing,
    overlapping ones merged.

    Opened by ``congestion_detected``, or a router's own ``weight_changed`` to 65535 (blocked); closed by
    ``congestion_cleared``, or ``weight_changed`` below 65535 (``weight_after``, or ``weight``) of the same node
    and neighbour. Other routers' link-state copies of a weight change (field ``source: linkstate``) count
    neither way.
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
                out[-1].closed_by = label
    return out


def _runs(paths: List[Tuple[int, str, int, int]]) -> List[List[Tuple[int, str, int, int]]]:
    runs: List[List[Tuple[int, str, int, int]]] = []
    for item in paths:
        if runs and runs[-1][-1][1] == item[1]:
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def path_runs(paths: pd.DataFrame, min_run: int = MIN_RUN) -> Dict[str, List[List[Tuple[int, str, int, int]]]]:
    """Per flow, its messages with a complete path grouped into runs of one same path, in order of seq:
    ``[(seq, path, first_ns, last_ns), ...]`` per run. A run shorter than ``min_run`` between two runs of
    one same path is a blip (noise), merged into them."""
    out: Dict[str, List[List[Tuple[int, str, int, int]]]] = {}
    if paths.empty:
        return out
    for flow, group in paths[paths["complete"].astype(bool)].groupby("flow", sort=True):
        items = list(zip(group["seq"].astype(int), group["path"], group["first_ns"].astype(int),
                         group["last_ns"].astype(int)))
        runs = _runs(items)
        changed = True
        while changed and len(runs) >= 3:
            changed = False
            for i in range(1, len(runs) - 1):
                if len(runs[i]) < min_run and runs[i - 1][0][1] == runs[i + 1][0][1]:
                    runs[i - 1:i + 2] = [runs[i - 1] + runs[i + 1]]
                    changed = True
                    break
        out[str(flow)] = runs
    return out


def flow_paths(paths: pd.DataFrame, min_run: int = MIN_RUN) -> Dict[str, List[dict]]:
    """Per flow, the paths it took in order (``{"path", "messages"}`` per run): what `compare` puts side by side."""
    return {flow: [{"path": run[0][1], "messages": len(run)} for run in runs]
            for flow, runs in path_runs(paths, min_run).items()}


def detect_reroutes(paths: pd.DataFrame, events: pd.DataFrame, lost: pd.DataFrame,
                    eps: Sequence[Episode] = (), overloads: Sequence[Overload] = (),
                    link_ends: Optional[Dict[int, Tuple[str, str]]] = None, sent: Optional[pd.DataFrame] = None,
                    min_run: int = MIN_RUN, window_ns: int = ONSET_WINDOW_NS) -> List[Reroute]:
    """Every change of path of every flow, over messages whose path is complete (reached every receiver), each
    with its cause (``attribute_cause``) and the deliveries lost from the onset on.

    ``lost``: lost deliveries with columns flow, seq (one row per lost (node, seq)); ``sent``: flow, seq,
    send_ns (to count the loss from the onset; without it, from the last message on the old path).
    """
    out: List[Reroute] = []
    if paths.empty:
        return out
    link_ends = link_ends or {}
    for flow, runs in path_runs(paths, min_run).items():
        flow_lost = lost[lost["flow"] == flow]["seq"] if not lost.empty else pd.Series([], dtype="int64")
        flow_sent = (sent[sent["flow"] == flow].set_index("seq")["send_ns"] if sent is not None and not sent.empty
                     else pd.Series([], dtype="int64"))
        previous_ns: Optional[int] = None
        for prev, nxt in zip(runs, runs[1:]):
            last_old = max(prev, key=lambda x: x[0])
            first_new = min(nxt, key=lambda x: x[0])
            time_ns = first_new[2]
            last_old_ns = max(x[3] for x in prev)
            r = Reroute(flow=flow, time_ns=time_ns, old_path=prev[0][1], new_path=nxt[0][1],
                        last_old_seq=last_old[0], first_new_seq=first_new[0], last_old_ns=last_old_ns,
                        old_path_idle_ns=time_ns - last_old_ns, lost=0)
            attribute_cause(r, events, overloads, link_ends, previous_ns, window_ns)
            if r.onset_ns is not None and len(flow_sent):
                from_onset = flow_sent[(flow_sent.index < first_new[0]) & (flow_sent >= r.onset_ns)].index
                r.lost = int(flow_lost.isin(from_onset).sum())
            else:
                r.lost = int(((flow_lost > last_old[0]) & (flow_lost < first_new[0])).sum())
            for ep in eps:
                if ep.start_ns <= time_ns and (ep.end_ns is None or time_ns < ep.end_ns):
                    r.episode = ep.index
                    break
            out.append(r)
            previous_ns = time_ns
    return out


def _hops(path: str) -> List[Tuple[str, str]]:
    """``r1>r2>r4`` or a tree's ``r1>r2,r2>r4,...`` as (u, v) link directions."""
    if "," in path:
        return [tuple(h.split(">", 1)) for h in path.split(",")]  # type: ignore[misc]
    nodes = path.split(">")
    return list(zip(nodes, nodes[1:]))


def _fields(ev) -> dict:
    return _loads(ev["fields"])


def attribute_cause(r: Reroute, events: pd.DataFrame, overloads: Sequence[Overload],
                    link_ends: Dict[int, Tuple[str, str]], previous_ns: Optional[int] = None,
                    window_ns: int = ONSET_WINDOW_NS) -> None:
    """Fill ``r``'s cause, onset, detection and the spans between them (docs/reports.md, "Reroutes").

    The cause is the latest of these, after the flow's previous reroute (``previous_ns``) and at or before the
    first message on the new path:

    * **overload** of a link direction the old path used and the new one does not (``spark.onsets``); the
      detection is the router's first ``congestion_detected`` for that direction (node = its sender,
      neighbour = its receiver; else its ``weight_changed`` to the blocked weight) from the onset on;
    * **failure**: a scenario ``link_down`` of a link the old path used, or ``kill_router`` of a node on it;
      the onset is the scenario event, the detection the first router ``link_down`` of that link (or toward
      that node) from the onset on;
    * **event**, when neither is found: the latest scenario event (onset), and as detection the router's first
      decision (``ROUTER_DECISIONS``, not another router's link-state copy of one) from it on; without a
      scenario event, there is no onset, and the detection is the first decision after the previous reroute.
    """
    t = r.time_ns
    old, new = _hops(r.old_path), set(_hops(r.new_path))
    left = [h for h in old if h not in new]
    lower = previous_ns if previous_ns is not None else -1
    ev = events if events is not None and not events.empty else pd.DataFrame(
        columns=["ts_ns", "source", "node", "event", "at_ns", "link", "neighbour", "fields"])
    ev = ev.sort_values("ts_ns", kind="stable")
    candidates = []  # (onset_ns, kind, where, detail, detection row or None)
    for u, v in left:
        for o in overloads:
            if o.direction == f"{u}>{v}" and lower < o.onset_ns <= t:
                det = _detection_of_overload(ev, u, v, o.onset_ns - window_ns, t)
                how = ("the capacity fell to" if o.cause == "set_link" else "offered load passed the capacity")
                detail = (f"{u}>{v} overloaded: {how} {o.capacity_bps / 1e6:.3f} Mbit/s (offered "
                          f"{o.offered_bps / 1e6:.3f} Mbit/s in the first {window_ns / 1e6:.0f} ms window over it)")
                candidates.append((o.onset_ns, "overload", f"{u}>{v}", detail, det))
    old_nodes = {n for h in old for n in h}
    old_links = {i for i, (a, b) in link_ends.items() if (a, b) in old or (b, a) in old}
    scen = ev[(ev["source"] == "scenario") & (ev["ts_ns"] > lower) & (ev["ts_ns"] <= t)]
    for _, e in scen.iterrows():
        f = _fields(e)
        if e["event"] == "link_down" and pd.notna(e["link"]) and int(e["link"]) in old_links:
            a, b = link_ends[int(e["link"])]
            det = _first(ev, (ev["event"] == "link_down") & (ev["source"] == "router") & (ev["ts_ns"] >= e["ts_ns"])
                         & (ev["ts_ns"] <= t) & (((ev["node"] == a) & (ev["neighbour"] == b))
                                                  | ((ev["node"] == b) & (ev["neighbour"] == a))))
            candidates.append((int(e["ts_ns"]), "failure", f"{a}-{b}", f"scenario link_down of link {int(e['link'])} "
                               f"({a}-{b})", det))
        elif e["event"] == "kill_router":
            node = f.get("node") if isinstance(f.get("node"), str) else e["node"]
            if node in old_nodes:
                det = _first(ev, (ev["event"] == "link_down") & (ev["source"] == "router")
                             & (ev["ts_ns"] >= e["ts_ns"]) & (ev["ts_ns"] <= t) & (ev["neighbour"] == node))
                candidates.append((int(e["ts_ns"]), "failure", str(node), f"scenario kill_router {node}", det))
    if candidates:
        onset, kind, where, detail, det = max(candidates, key=lambda c: c[0])
    else:
        kind, where = "event", None
        usable = scen[scen["event"] != "skipped"]
        cause = usable.iloc[-1] if not usable.empty else None
        start = int(cause["ts_ns"]) if cause is not None else lower
        det = _first(ev, (ev["source"] == "router") & ev["event"].isin(ROUTER_DECISIONS) & (ev["ts_ns"] >= start)
                     & (ev["ts_ns"] <= t) & ~_linkstate_copy(ev))
        if cause is None:
            if det is None:
                return
            kind, onset = None, None
            detail = "no overload, failure or scenario event found before it (the router's decision is shown)"
        else:
            onset = int(cause["ts_ns"])
            link = f" link {int(cause['link'])}" if pd.notna(cause["link"]) else ""
            detail = f"scenario {cause['event']}{link}"
    r.cause, r.cause_link, r.cause_detail, r.onset_ns = kind, where, detail, onset
    if det is not None:
        r.detection_ns = int(det["ts_ns"])
        r.detection_node = det["node"] if isinstance(det["node"], str) else None
        r.detection_event = det["event"]
        r.reaction_time_ns = t - r.detection_ns
    if onset is not None:
        r.reroute_time_ns = t - onset
        if r.detection_ns is not None:
            r.detection_time_ns = r.detection_ns - onset


def _linkstate_copy(ev: pd.DataFrame) -> pd.Series:
    """Another router's copy of a weight change (flooded in link-state), not a decision of its own."""
    return ev["fields"].apply(lambda f: _loads(f).get("source") == "linkstate").astype(bool)


def _loads(text) -> dict:
    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _first(ev: pd.DataFrame, mask) -> Optional[pd.Series]:
    rows = ev[mask]
    return None if rows.empty else rows.iloc[0]


def _detection_of_overload(ev: pd.DataFrame, u: str, v: str, from_ns: int, to_ns: int) -> Optional[pd.Series]:
    """The router's first report of congestion on u>v in [from, to]: ``congestion_detected`` at u toward v, else
    u's own ``weight_changed`` of that link to the blocked weight."""
    mine = ev[(ev["source"] == "router") & (ev["node"] == u) & (ev["neighbour"] == v) & (ev["ts_ns"] >= from_ns)
              & (ev["ts_ns"] <= to_ns)]
    det = _first(mine, mine["event"] == "congestion_detected")
    if det is not None:
        return det
    for _, e in mine[(mine["event"] == "weight_changed") & ~_linkstate_copy(mine)].iterrows():
        w = _fields(e).get("weight_after", _fields(e).get("weight"))
        if isinstance(w, (int, float)) and w >= BLOCKED_WEIGHT:
            return e
    return None


def path_series(paths: pd.DataFrame, t0_ns: int, window_ns: int) -> pd.DataFrame:
    """Per flow and window (by first time seen): messages per path."""
    if paths.empty:
        return pd.DataFrame(columns=["flow", "window", "path", "messages"])
    p = paths[paths["complete"].astype(bool)].copy()
    p["window"] = (p["first_ns"] - t0_ns) // window_ns
    return p.groupby(["flow", "window", "path"]).size().reset_index(name="messages")
