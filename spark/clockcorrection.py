"""The nodes' clocks (manifest ``clocks``, written by ``runfolder.records.clocks_json``) applied to one-way latency.

A message's latency is its receive time (the subscriber's clock) minus its send time (the publisher's clock).
When the manifest has measured offsets (``chrony`` or ``exchange``: node clock minus controller clock), each
latency is corrected by the two nodes' offsets, interpolated linearly in time between the readings before
and after the run (only before: that one):

    latency = (recv_ns - offset_sub(recv)) - (send_ns - offset_pub(send))

and every latency figure of a flow carries an error bound ``clock_error_ns`` = bound(publisher) +
bound(subscriber) (the largest over its subscribers; 0 for a subscriber on the publisher's own node), a
node's bound being the larger of its before/after bounds plus half the change of its offset between them
(docs/reports.md, "Clocks"). Same-host nodes (Mininet, Docker) read the controller's clock: no correction,
bound 0. A manifest without ``clocks`` (older runs): no correction, ``clock_error_ns`` null.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np
import pandas as pd

from runfolder.records import ClockReading, clocks_from_json

__all__ = ["NodeClock", "RunClocks", "read_clocks", "correct_latencies", "flow_clock_errors"]


@dataclass(frozen=True)
class NodeClock:
    """One node's readings: before the traffic and (if the run lived to read them) after."""

    node: str
    before: Optional[ClockReading]
    after: Optional[ClockReading]

    @property
    def readings(self) -> List[ClockReading]:
        return [r for r in (self.before, self.after) if r is not None]

    @property
    def method(self) -> str:
        methods = []
        for r in self.readings:
            if r.method not in methods:
                methods.append(r.method)
        return "/".join(methods)

    @property
    def measured(self) -> bool:
        """The node has a clock of its own, read by chrony or the exchange (else it is the controller's)."""
        return any(r.measured for r in self.readings)

    @property
    def change_ns(self) -> Optional[int]:
        """after - before offset."""
        if self.before is None or self.after is None:
            return None
        return self.after.offset_ns - self.before.offset_ns

    @property
    def bound_ns(self) -> int:
        """The bound on the interpolated offset anywhere in the run: the larger reading bound plus the offset's
        whole change (a clock that stepped once, at an unknown moment, is interpolated wrongly by up to that)."""
        if not self.measured:
            return 0
        change = self.change_ns or 0
        return max(r.bound_ns for r in self.readings) + abs(change)

    @property
    def drift_ppm(self) -> Optional[float]:
        """(after - before offset) / elapsed controller time, in parts per million (us per s)."""
        if self.change_ns is None or self.after.at_ns <= self.before.at_ns:
            return None
        return self.change_ns / (self.after.at_ns - self.before.at_ns) * 1e6

    def offset_at(self, t_ns) -> np.ndarray:
        """The offset (ns, float) at controller times ``t_ns`` (integers): linear between the readings, held
        constant before the first and after the last; 0 for a same-host node. Times are taken relative to the
        first reading in integers (a float64 of an epoch time in ns is only good to 256 ns)."""
        t = np.asarray(t_ns, dtype="int64")
        if not self.measured:
            return np.zeros(t.shape, dtype="float64")
        b, a = self.before, self.after
        if b is None or a is None or a.at_ns <= b.at_ns:
            r = b or a
            return np.full(t.shape, float(r.offset_ns))
        w = np.clip((t - b.at_ns).astype("float64") / float(a.at_ns - b.at_ns), 0.0, 1.0)
        return b.offset_ns + w * float(a.offset_ns - b.offset_ns)

    def offset_at_node_time(self, node_ns) -> np.ndarray:
        """The offset at the controller time of timestamps read on this node's clock: taken once at the
        node's timestamp, then again at the timestamp less that offset (exact to far below 1 ns for any real
        drift: the second step's error is drift times the first's)."""
        t = np.asarray(node_ns, dtype="int64")
        first = self.offset_at(t)
        return self.offset_at(t - np.rint(first).astype("int64"))

    def summary(self) -> dict:
        b, a = self.before, self.after
        return {"node": self.node, "method": self.method,
                "offset_before_ns": None if b is None else b.offset_ns,
                "offset_after_ns": None if a is None else a.offset_ns,
                "bound_before_ns": None if b is None else b.bound_ns,
                "bound_after_ns": None if a is None else a.bound_ns,
                "bound_ns": self.bound_ns, "drift_ppm": self.drift_ppm,
                "at_before_ns": None if b is None else b.at_ns, "at_after_ns": None if a is None else a.at_ns,
                "detail": (b or a).detail}


@dataclass(frozen=True)
class RunClocks:
    """Every node's clock of one run."""

    nodes: Dict[str, NodeClock]

    @property
    def measured(self) -> bool:
        """Some node has a clock of its own (latencies are corrected)."""
        return any(n.measured for n in self.nodes.values())

    def pair_error_ns(self, publisher: Optional[str], subscriber: str) -> Optional[int]:
        """The bound on one (publisher, subscriber) latency's clock error; None when a node has no reading."""
        if publisher == subscriber and publisher is not None:
            return 0  # one clock reads both ends
        p, s = self.nodes.get(publisher or ""), self.nodes.get(subscriber)
        if p is None or s is None:
            return None
        return p.bound_ns + s.bound_ns

    def summary(self) -> dict:
        nodes = [self.nodes[n].summary() for n in sorted(self.nodes)]
        return {"measured": self.measured, "max_bound_ns": max((n["bound_ns"] for n in nodes), default=0),
                "nodes": nodes}


def read_clocks(manifest: Optional[dict]) -> Tuple[Optional[RunClocks], List[str]]:
    """The manifest's ``clocks`` (None when it has none: a run from before clocks were recorded) and the
    problems found in them (unreadable clocks are left out, as if not recorded)."""
    data = (manifest or {}).get("clocks")
    if data is None:
        return None, []
    try:
        before, after = clocks_from_json(data)
    except ValueError as err:
        return None, [f"clocks unreadable, latencies not corrected: {err}"]
    after = after or {}
    nodes = {n: NodeClock(n, before.get(n), after.get(n)) for n in sorted(set(before) | set(after))}
    problems = []
    only_after = [n for n, c in nodes.items() if c.before is None]
    if only_after:
        problems.append(f"clocks: no reading before the run for {', '.join(only_after)}: the one after is used")
    if not after:
        problems.append("clocks: no readings after the run (it ended early?): offsets before the run are used, "
                        "drift unknown")
    return RunClocks(nodes), problems


def correct_latencies(deliveries: pd.DataFrame, publishers: Dict[str, Optional[str]],
                      clocks: Optional[RunClocks]) -> pd.DataFrame:
    """``deliveries`` (first_deliveries: flow, node, send_ns, recv_ns, latency_ns) with ``latency_ns``
    corrected by the clock offsets and ``raw_latency_ns`` (recv_ns - send_ns as logged). Rows whose
    publisher or subscriber has no reading are left as logged. send_ns/recv_ns stay as logged (each node's
    own clock)."""
    d = deliveries.assign(raw_latency_ns=deliveries["recv_ns"] - deliveries["send_ns"]) if len(deliveries) \
        else deliveries.assign(raw_latency_ns=pd.Series(dtype="int64"))
    if clocks is None or not clocks.measured or d.empty:
        return d
    lat = d["latency_ns"].to_numpy(dtype="int64").copy()
    pub = d["flow"].map(publishers)
    for (p, s), idx in d.groupby([pub, d["node"]], sort=False).groups.items():
        pc, sc = clocks.nodes.get(p), clocks.nodes.get(s)
        if pc is None or sc is None or not (pc.measured or sc.measured):
            continue
        pos = d.index.get_indexer(idx)
        corr = sc.offset_at_node_time(d["recv_ns"].to_numpy()[pos]) - pc.offset_at_node_time(
            d["send_ns"].to_numpy()[pos])
        lat[pos] = lat[pos] - np.rint(corr).astype("int64")
    return d.assign(latency_ns=lat)


def flow_clock_errors(flows: Iterable[dict], clocks: Optional[RunClocks]) -> Dict[str, Optional[int]]:
    """flow name -> its latency figures' clock error bound (the largest over its subscribers); None for every
    flow when the run has no clocks, and for a flow one of whose nodes has no reading."""
    out: Dict[str, Optional[int]] = {}
    for f in flows:
        if clocks is None:
            out[f["name"]] = None
            continue
        errors = [clocks.pair_error_ns(f.get("publisher"), s) for s in f.get("subscribers") or []]
        out[f["name"]] = None if not errors or any(e is None for e in errors) else max(errors)
    return out


def missing_nodes(flows: Iterable[dict], clocks: Optional[RunClocks]) -> Dict[str, List[str]]:
    """node without a clock reading -> the flows it publishes or subscribes to."""
    out: Dict[str, List[str]] = {}
    if clocks is None:
        return out
    for f in flows:
        for n in [f.get("publisher")] + list(f.get("subscribers") or []):
            if n and n not in clocks.nodes:
                out.setdefault(n, []).append(f["name"])
    return out
