"""Congestion onsets: when the load offered to a link direction first exceeded what it could carry.

**Offered load** of link direction u>v: every message a publisher sent while its flow's path crossed u>v
(the message's own path when the captures saw it reach every subscriber, else the path of the flow's nearest
such message before it, or after it), at the time it arrived at u (first seen on a link into u, at u's end
of it when that end was captured; the send time at the publisher's own router; for a message no capture saw,
its send time plus the flow's median delay to u), counted with its bytes on the wire as tc's htb counts them:
payload, the router's message header and key, a frame header, and 66 bytes of Ethernet/IPv4/TCP headers per
1448-byte segment (an upper estimate: a message batched with others shares its frame and segments). Messages
dropped on the way still count: they were offered.

**Capacity** of u>v: the link's configured bandwidth for that direction (``lab.json`` shaping, else the
manifest's resolved spec), changed by the scenario's ``set_link ... bw`` from the time it was applied (both
directions, or the one leaving ``node``). An unshaped direction has no capacity to exceed.

**Overload**: a virtual queue of unbounded size, fed by the offered load and drained at the capacity, is
*busy* from an arrival that finds it empty until it empties again. A busy period is an overload when, in at
least one window of at least ``window_ns`` (from an arrival, excluded, to a later one, included: periodic
bursts are counted once per period), more bytes were offered than the link could carry in that time. Its
**onset** is the later of the start of the busy period and the first arrival of its first overloaded window:
the overload cannot have begun before the queue began to grow, nor before the first window whose load
exceeded the capacity. When a ``set_link`` lowered the capacity before that window and the window's
load would have fitted the capacity before the change, and more was offered from the change on than the new
capacity carries, the change is the cause and its time the onset.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from router.codec import FRAME_HEADER_SIZE, MESSAGE_HEADER_SIZE
from router.congestion import SEGMENT_HEADERS, SEGMENT_PAYLOAD  # as the router's monitor counts a segment

__all__ = ["Overload", "LinkCapacity", "link_capacities", "place_offered", "find_overloads",
           "wire_bytes", "ONSET_WINDOW_NS", "SEGMENT_PAYLOAD", "SEGMENT_HEADERS"]

#: the window over which offered load is compared with capacity: two 50 ms publishing ticks, well inside one
#: congestion-monitor interval (the diamond's is 250 ms)
ONSET_WINDOW_NS = 100_000_000

Direction = Tuple[int, str, str]  # (link index, from node, to node)


@dataclass
class Overload:
    link: int
    src_node: str
    dst_node: str
    onset_ns: int
    end_ns: int                # end of the last overloaded window of the busy period
    cause: str                 # "load": the offered load grew past the capacity; "set_link": the capacity fell
    offered_bps: float         # offered load in the first overloaded window
    capacity_bps: float        # capacity then
    peak_offered_bps: float    # the most offered in one window of the overload
    busy_start_ns: int         # the virtual queue was empty before this arrival

    @property
    def direction(self) -> str:
        return f"{self.src_node}>{self.dst_node}"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class LinkCapacity:
    """Capacity of one link direction over time: ``steps`` [(from_ns, bit/s or None)], sorted; before the first
    step the first value holds. None: unshaped (no limit)."""

    steps: List[Tuple[int, Optional[float]]]

    def at(self, t_ns: int) -> Optional[float]:
        value = self.steps[0][1]
        for t, v in self.steps:
            if t <= t_ns:
                value = v
        return value

    def carried(self, a_ns: float, b_ns: float) -> float:
        """Bytes the direction can carry in (a, b]; inf if it is unshaped for part of it."""
        total = 0.0
        for k, (t, bps) in enumerate(self.steps):
            lo = -math.inf if k == 0 else t
            hi = self.steps[k + 1][0] if k + 1 < len(self.steps) else math.inf
            lo, hi = max(lo, a_ns), min(hi, b_ns)
            if hi <= lo:
                continue
            if bps is None:
                return math.inf
            total += (hi - lo) * bps / 8e9
        return total

    def carried_between(self, a_ns: np.ndarray, b_ns: np.ndarray) -> np.ndarray:
        """:meth:`carried` of every pair ``(a_ns[i], b_ns[i])`` (ns, integers) at once, with the same arithmetic in
        the same order (the interval's length in whole ns, times the rate, over 8e9, summed step by step), so
        each value is equal to :meth:`carried`'s to the bit."""
        a = np.asarray(a_ns, dtype=np.int64)
        b = np.asarray(b_ns, dtype=np.int64)
        total = np.zeros(len(a), dtype=np.float64)
        unshaped = np.zeros(len(a), dtype=bool)
        last = len(self.steps) - 1
        for k, (t, bps) in enumerate(self.steps):
            lo = a if k == 0 else np.maximum(a, int(t))
            hi = b if k == last else np.minimum(b, int(self.steps[k + 1][0]))
            overlaps = hi > lo
            if bps is None:
                unshaped |= overlaps
                continue
            total[overlaps] += (hi - lo)[overlaps].astype(np.float64) * bps / 8e9
        total[unshaped] = math.inf
        return total

    def drain_end(self, t_ns: float, backlog: float) -> float:
        """When a backlog of ``backlog`` bytes at ``t_ns`` has been carried."""
        left = backlog
        for k, (t, bps) in enumerate(self.steps):
            lo = -math.inf if k == 0 else t
            hi = self.steps[k + 1][0] if k + 1 < len(self.steps) else math.inf
            lo = max(lo, t_ns)
            if hi <= lo:
                continue
            if bps is None:
                return lo
            need = left * 8e9 / bps
            if lo + need <= hi:
                return lo + need
            left -= (hi - lo) * bps / 8e9
        return math.inf


def link_capacities(lab: Optional[dict], manifest: Optional[dict], events: pd.DataFrame) -> Dict[Direction, LinkCapacity]:
    """Per link direction: its configured bandwidth, then every scenario ``set_link`` bandwidth change."""
    spec_links = {int(l.get("index", i)): l for i, l in enumerate(((manifest or {}).get("spec") or {}).get("links") or [])
                  if isinstance(l, dict)}
    out: Dict[Direction, LinkCapacity] = {}
    ends: Dict[int, Tuple[str, str]] = {}
    for link in (lab or {}).get("links") or []:
        try:
            idx, a, b = int(link["index"]), link["a"]["node"], link["b"]["node"]
        except (KeyError, TypeError, ValueError):
            continue
        ends[idx] = (a, b)
        spec = spec_links.get(idx) or {}
        for src, dst, shape, egress in ((a, b, "shape_ab", "a"), (b, a, "shape_ba", "b")):
            bw = (link.get(shape) or {}).get("bw_bps")
            if bw is None:
                bw = ((spec.get(egress) or {}).get("egress") or {}).get("bw_bps")
            out[(idx, src, dst)] = LinkCapacity([(0, float(bw) if bw else None)])
    if events is None or events.empty:
        return out
    import json

    changes = events[(events["source"] == "scenario") & (events["event"] == "set_link")].sort_values("ts_ns")
    for ev in changes.itertuples(index=False):
        try:
            fields = json.loads(ev.fields or "{}")
        except ValueError:
            continue
        if fields.get("ok") is False or "bw_bps" not in fields or ev.link is None or pd.isna(ev.link):
            continue
        idx = int(ev.link)
        if idx not in ends:
            continue
        a, b = ends[idx]
        node = fields.get("node") if isinstance(fields.get("node"), str) else (ev.node if isinstance(ev.node, str)
                                                                                else None)
        directions = [(idx, a, b), (idx, b, a)] if node is None else [(idx, node, b if node == a else a)]
        bw = fields["bw_bps"]
        for d in directions:
            if d in out:
                out[d].steps.append((int(ev.ts_ns), float(bw) if bw else None))
    return out


def wire_bytes(payload_size: np.ndarray, key_len: np.ndarray) -> np.ndarray:
    """Bytes on the wire of a message in its own frame: headers of the message, frame and TCP segments."""
    body = np.asarray(payload_size, dtype="float64") + MESSAGE_HEADER_SIZE + np.asarray(key_len) + FRAME_HEADER_SIZE
    return body + SEGMENT_HEADERS * np.ceil(body / SEGMENT_PAYLOAD)


def place_offered(sent: pd.DataFrame, paths: pd.DataFrame, into: pd.DataFrame, links: Dict[Tuple[str, str], int],
                  flows: List[dict]) -> pd.DataFrame:
    """Every message offered to every link direction: ``link``, ``src_node``, ``dst_node``, ``flow``, ``seq``,
    ``arrival_ns`` (at ``src_node``), ``wire_bytes``. A message takes the hops of the nearest complete message of
    its flow (``paths``); it arrives at a node when first seen on a link into it (``into``: ``flow``, ``seq``,
    ``src_node``, ``seen_in_ns``), else at its send time plus the flow's median delay to that node; ``links``:
    (src_node, dst_node) -> link."""
    cols = ["link", "src_node", "dst_node", "flow", "seq", "arrival_ns", "wire_bytes"]
    if sent.empty or paths.empty or into.empty:
        return pd.DataFrame(columns=cols)
    complete = paths[paths["complete"].astype(bool)][["flow", "seq", "hops"]].sort_values("seq")
    meta = {f["name"]: f for f in flows}
    parts = []
    for flow, msgs in sent.sort_values("seq").groupby("flow", sort=True):
        ref = complete[complete["flow"] == flow]
        if ref.empty:
            continue
        ref = ref.rename(columns={"seq": "ref_seq"})[["ref_seq", "hops"]]
        m = msgs[["flow", "seq", "send_ns", "size"]].copy()
        m["ref_seq"] = m["seq"]
        back = pd.merge_asof(m, ref, on="ref_seq", direction="backward")
        fwd = pd.merge_asof(m, ref, on="ref_seq", direction="forward")
        back["hops"] = back["hops"].where(back["hops"].notna(), fwd["hops"])
        key = str((meta.get(flow) or {}).get("key") or "")
        back["wire_bytes"] = wire_bytes(back["size"].fillna(0).to_numpy(), np.full(len(back), len(key.encode())))
        parts.append(back.dropna(subset=["hops"]))
    if not parts:
        return pd.DataFrame(columns=cols)
    per_msg = pd.concat(parts, ignore_index=True).explode("hops")
    # each hop's two names split once, not once a message: the rows share them (millions of rows, a few hops)
    ends = {h: (h.split(">", 1) + [None])[:2] for h in per_msg["hops"].dropna().unique()}
    per_msg["src_node"] = per_msg["hops"].map({h: e[0] for h, e in ends.items()})
    per_msg["dst_node"] = per_msg["hops"].map({h: e[1] for h, e in ends.items()})
    into = into.astype({"seq": "int64", "seen_in_ns": "Int64"})
    per_msg["seq"] = per_msg["seq"].astype("int64")
    per_msg["send_ns"] = per_msg["send_ns"].astype("int64")
    per_msg = per_msg.merge(into, on=["flow", "seq", "src_node"], how="left")
    delay = (per_msg["seen_in_ns"] - per_msg["send_ns"]).astype("float64").groupby(
        [per_msg["flow"], per_msg["src_node"]]).median()
    typical = (per_msg.set_index(["flow", "src_node"]).index.map(delay.to_dict()).to_series(index=per_msg.index)
               .fillna(0).round().astype("int64"))
    publisher = per_msg["flow"].map({n: f.get("publisher") for n, f in meta.items()})
    estimate = per_msg["send_ns"] + typical.where(per_msg["src_node"] != publisher, 0)
    per_msg["arrival_ns"] = per_msg["seen_in_ns"].fillna(estimate).astype("int64")
    per_msg["link"] = per_msg.set_index(["src_node", "dst_node"]).index.map(links)
    per_msg = per_msg.dropna(subset=["link"])
    per_msg["link"] = per_msg["link"].astype("int64")
    return per_msg[cols].sort_values(["link", "src_node", "arrival_ns"], kind="stable").reset_index(drop=True)


def find_overloads(offered: pd.DataFrame, capacities: Dict[Direction, LinkCapacity],
                   window_ns: int = ONSET_WINDOW_NS) -> List[Overload]:
    """Every overload of every link direction with a capacity (see the module's docstring), by onset."""
    out: List[Overload] = []
    if offered.empty:
        return out
    for (link, src, dst), g in offered.groupby(["link", "src_node", "dst_node"], sort=True):
        cap = capacities.get((int(link), src, dst))
        if cap is None or all(bps is None for _, bps in cap.steps):
            continue
        out.extend(_overloads_of(int(link), src, dst, g["arrival_ns"].to_numpy(dtype="int64"),
                                 g["wire_bytes"].to_numpy(dtype="float64"), cap, window_ns))
    return sorted(out, key=lambda o: o.onset_ns)


def _overloads_of(link: int, src: str, dst: str, ts: np.ndarray, size: np.ndarray, cap: LinkCapacity,
                  window_ns: int) -> List[Overload]:
    order = np.argsort(ts, kind="stable")
    ts, size = ts[order], size[order]
    cum = np.concatenate([[0.0], np.cumsum(size)])
    # window of arrival j: from the last arrival at least window_ns before it (excluded) to j (included), so
    # that periodic bursts are counted once per period whatever the phase
    start = np.searchsorted(ts, ts - window_ns, side="right") - 1
    # what the link carries between consecutive arrivals, and in each arrival's window against what was offered
    # in it (numpy, the same values as :meth:`LinkCapacity.carried` one by one); the loop keeps only the queue
    windowed = np.flatnonzero(start >= 0)
    offered_in = cum[windowed + 1] - cum[start[windowed] + 1]
    overloaded = np.zeros(len(ts), dtype=bool)
    overloaded[windowed] = offered_in > cap.carried_between(ts[start[windowed]], ts[windowed])
    drained = cap.carried_between(ts[:-1], ts[1:]).tolist()
    sizes = size.tolist()
    out: List[Overload] = []
    backlog = 0.0
    busy_start = None
    current: Optional[Overload] = None
    for j, over in enumerate(overloaded.tolist()):
        if j:
            backlog = max(0.0, backlog - drained[j - 1])
        if j == 0 or backlog <= 0.0:
            busy_start = int(ts[j])
            current = None
        backlog += sizes[j]
        if not over:
            continue
        t, i = int(ts[j]), int(start[j])
        offered = cum[j + 1] - cum[i + 1]
        bps = float(offered * 8e9 / (t - ts[i]))
        if current is not None:
            current.end_ns = t
            current.peak_offered_bps = max(current.peak_offered_bps, bps)
            continue
        onset, cause = max(busy_start, int(ts[i + 1])), "load"
        change = _capacity_drop_before(cap, t)
        if change is not None and (not out or change[0] >= out[-1].end_ns):
            at, before = change
            since = cum[j + 1] - cum[int(np.searchsorted(ts, at, side="right"))]
            # the capacity fell and, ever since, more was offered than it carries; the window's load would have
            # fitted the capacity before: the change, not the load, made this overload
            if since > cap.carried(at, t) and (before is None or bps <= before):
                onset, cause = at, "set_link"
        current = Overload(link, src, dst, onset, t, cause, bps, float(cap.at(t) or 0.0), bps, busy_start)
        out.append(current)
    return out


def _capacity_drop_before(cap: LinkCapacity, t_ns: int) -> Optional[Tuple[int, Optional[float]]]:
    """(time, capacity before) of the last capacity change at or before ``t_ns`` if it lowered the capacity."""
    last = None
    for k in range(1, len(cap.steps)):
        at, bps = cap.steps[k]
        if at <= t_ns:
            last = (at, cap.steps[k - 1][1], bps)
    if last is None:
        return None
    at, before, after = last
    if after is not None and (before is None or after < before):
        return at, before
    return None


def overloads_on(overloads: Sequence[Overload], direction: str) -> List[Overload]:
    return [o for o in overloads if o.direction == direction]
