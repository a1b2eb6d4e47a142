"""Every lost delivery accounted for: the parts add up to the run's lost total (docs/reports.md, "Where the lost
messages went").

Each lost delivery (a message one subscriber never received) falls in exactly one part, the first that fits,
from where it was last seen on its way to that subscriber (``spark.drops.lost_messages``) and the run's events:

1. **killed router** N: last seen arriving at N at most a lease before the scenario killed (or restarted) N, or
   sent toward N while it was down;
2. **link down** L: last seen leaving over link L, never arriving, while L was down (scenario ``link_down`` to
   ``link_up``) or within a lease before it went down;
3. **router drop** at N: last seen arriving at N (or never seen, N the publisher's router), which counted drops
   (its drop counters, any reason): as many messages as N counted, oldest first (with every subscriber they
   were lost for). An estimate: the counters count per target, one message dropped toward two targets
   counts two (docs/reports.md says how this leans);
4. **never seen** on a captured link (lost before the first one: the publisher's client or router);
5. **on the wire** of L: left over L and never seen arriving, L not down (the link's own loss, its queue, or a
   packet the capture missed);
6. **unexplained**: last seen arriving at N, which counted no drop for it (or fewer than arrived there).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Tuple

import pandas as pd

__all__ = ["LossPart", "account_losses", "PART_ORDER"]

PART_ORDER = ("killed_router", "link_down", "router_drop", "never_seen", "on_the_wire", "unexplained")


@dataclass
class LossPart:
    part: str            # one of PART_ORDER
    where: Optional[str]  # node, link ("r2-r4") or None
    lost: int            # lost deliveries
    messages: int        # distinct messages among them
    detail: str

    def as_dict(self) -> dict:
        return asdict(self)


def _intervals(events: pd.DataFrame, down: str, up: str, key, end_ns: int) -> Dict[object, List[Tuple[int, int]]]:
    """Scenario ``down`` .. ``up`` spans per key (a link index or a node), the last open to ``end_ns``."""
    from .reroutes import _fields

    spans: Dict[object, List[Tuple[int, int]]] = {}
    if events is None or events.empty:
        return spans
    scen = events[(events["source"] == "scenario") & events["event"].isin([down, up])].sort_values("ts_ns")
    opened: Dict[object, int] = {}
    for _, e in scen.iterrows():
        k = key(e)
        if k is None:
            continue
        if e["event"] == down:
            opened.setdefault(k, int(e["ts_ns"]))
        elif k in opened:
            # a restarted router is down until it is ready (``ready_ns``), not only until its restart began
            up_ns = _fields(e).get("ready_ns")
            spans.setdefault(k, []).append((opened.pop(k), int(up_ns if up_ns is not None else e["ts_ns"])))
    for k, start in opened.items():
        spans.setdefault(k, []).append((start, end_ns))
    return spans


def _link_key(e) -> Optional[int]:
    return int(e["link"]) if pd.notna(e["link"]) else None


def _node_key(e) -> Optional[str]:
    from .reroutes import _fields

    node = _fields(e).get("node")
    return node if isinstance(node, str) else (e["node"] if isinstance(e["node"], str) else None)


def _within(t: float, spans: List[Tuple[int, int]], before_ns: int) -> bool:
    return any(start - before_ns <= t <= stop for start, stop in spans)


def account_losses(lost: pd.DataFrame, events: pd.DataFrame, router_drops: Optional[pd.DataFrame],
                   link_ends: Dict[int, Tuple[str, str]], lease_ns: int, end_ns: int,
                   publishers: Optional[Dict[str, str]] = None) -> List[LossPart]:
    """The parts of the lost deliveries ``lost`` (columns flow, node, seq, send_ns, last_link, last_src,
    last_dst, last_side, last_seen_ns). ``router_drops`` None: the routers' drop counters are not available
    (part 3 is then empty and what arrived at a router is unexplained). ``publishers`` (flow -> node): a
    message never seen on a captured link is matched to the drops of its publisher's router too."""
    if lost is None or lost.empty:
        return []
    d = lost.copy()
    d["part"], d["where"] = None, None
    links_down = _intervals(events, "link_down", "link_up", _link_key, end_ns)
    killed = _intervals(events, "kill_router", "restart_router", _node_key, end_ns)
    seen = d["last_link"].notna()
    arrived = seen & (d["last_side"] == "rx")
    left = seen & ~arrived

    def name(link) -> str:
        a, b = link_ends.get(int(link), ("?", "?"))
        return f"{a}-{b}"

    for i, r in d[seen].iterrows():
        t = r["last_seen_ns"]
        if arrived[i] and _within(t, [(s, s) for s, _ in killed.get(r["last_dst"], [])], lease_ns):
            d.at[i, "part"], d.at[i, "where"] = "killed_router", r["last_dst"]
        elif left[i] and _within(t, killed.get(r["last_dst"], []), 0):
            d.at[i, "part"], d.at[i, "where"] = "killed_router", r["last_dst"]
        elif left[i] and _within(t, links_down.get(int(r["last_link"]), []), lease_ns):
            d.at[i, "part"], d.at[i, "where"] = "link_down", name(r["last_link"])
    drops = {} if router_drops is None or router_drops.empty else \
        router_drops.groupby("node")["dropped"].sum().to_dict()
    # at a router: what arrived there, and what its own publisher gave it and was never seen leaving
    d["_at"] = d["last_dst"].where(arrived, d["flow"].map(publishers or {}).where(~seen))
    rest = d[d["part"].isna() & d["_at"].notna()]
    for node, g in rest.groupby("_at"):
        budget = int(round(drops.get(node, 0)))
        messages = g[["flow", "seq", "send_ns"]].drop_duplicates().sort_values("send_ns").head(budget)
        picked = g.index[g.set_index(["flow", "seq"]).index.isin(messages.set_index(["flow", "seq"]).index)]
        d.loc[picked, "part"], d.loc[picked, "where"] = "router_drop", node
    d.loc[d["part"].isna() & ~seen, "part"] = "never_seen"
    wire = d["part"].isna() & left
    d.loc[wire, "where"] = [name(x) for x in d.loc[wire, "last_link"]]
    d.loc[wire, "part"] = "on_the_wire"
    unexplained = d["part"].isna()
    d.loc[unexplained, "where"] = d.loc[unexplained, "last_dst"]
    d.loc[unexplained, "part"] = "unexplained"
    out = []
    for part in PART_ORDER:
        g = d[d["part"] == part]
        for where, h in sorted(g.groupby(g["where"].map(lambda w: w if isinstance(w, str) else "")),
                               key=lambda x: x[0]):
            where = where or None
            out.append(LossPart(part, where, int(len(h)), int(len(h[["flow", "seq"]].drop_duplicates())),
                                _detail(part, where, drops, router_drops)))
    return out


def _detail(part: str, where: Optional[str], drops: dict, router_drops: Optional[pd.DataFrame]) -> str:
    if part == "killed_router":
        return f"in router {where} when it was killed, or sent toward it while it was down"
    if part == "link_down":
        return f"on link {where} while it was down (or within a lease before it went down)"
    if part == "router_drop":
        reasons = router_drops[(router_drops["node"] == where) & (router_drops["dropped"] > 0)] \
            .groupby("reason")["dropped"].sum()
        return f"dropped by {where}, which counted " + ", ".join(f"{int(v)} {k}" for k, v in reasons.items())
    if part == "never_seen":
        return "never seen on a captured link: lost before the first one (the publisher's client or router)"
    if part == "on_the_wire":
        return f"left over {where}, never seen arriving: the link's own loss or queue, or a packet not captured"
    if router_drops is None:
        return f"arrived at {where}; its drop counters are not available"
    counted = int(round(drops.get(where, 0)))
    return (f"arrived at {where}, which counted no drop" if not counted else
            f"arrived at {where}, which counted {counted} drops in all, fewer than the messages lost there")
