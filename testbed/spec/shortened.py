"""What a run shorter than its topology's ``duration`` drops, said before anything is built.

``run --duration``, a suite case's ``duration`` and ``validate --duration`` all call :func:`dropped_by`:
flows that never send (they would start at or after the new end), flows cut short (their own stop is
after the new end), slow subscribers that never slow down, scenario events after the end (not applied),
and expectations that then cannot be measured (every flow they are about sends nothing). Each item
carries its place in the topology, so that it can be shown at ``file:line`` (:func:`located`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from runfolder.wording import article, plural

from runfolder import units
from .errors import Loc, SpecProblem, format_path
from runfolder.expectations import QUERY_METRICS, ROUTER_METRICS

from .models import QueryFlow, StartFlowEvent, StopFlowEvent, ZpubFlow

if TYPE_CHECKING:  # pragma: no cover
    from testbed.trafficplanner import PlannedFlow

    from .topology import Spec

__all__ = ["Dropped", "Shortening", "dropped_by", "located", "shorten", "unmeasurable"]

Phases = Tuple[Tuple[int, int], ...]


@dataclass(frozen=True)
class Dropped:
    """One thing of the topology a shorter run does not do; ``expectation``: the compact form of an
    expectation that cannot be measured (the verdict says "not measurable" for it)."""

    loc: Loc
    message: str
    expectation: Optional[str] = None
    why: Optional[str] = None  # why the expectation cannot be measured


def _clip(phases: Phases, end: int) -> Phases:
    return tuple((a, min(b, end)) for a, b in phases if min(b, end) > a)


def _field(flow, planned: "PlannedFlow", start: bool) -> str:
    """The traffic key that sets when ``planned`` (a publisher of ``flow``) starts or stops."""
    if isinstance(flow, ZpubFlow):
        suffix = planned.name.rsplit(".", 1)[-1]
        if start:
            return "pub2_start" if suffix == "pub2" else "start_delay"
        return "pub1_stop" if suffix == "pub1" else "duration"
    return "start" if start else "stop"


def _where(spec: "Spec", index: int, planned: "PlannedFlow", at: int, start: bool) -> Loc:
    """Where the topology says ``planned`` starts (``start``) or stops at ``at``: a scenario event that
    switches it then, else the flow's own key."""
    action = StartFlowEvent if start else StopFlowEvent
    for i, event in enumerate(spec.scenario):
        if isinstance(event, action) and event.at == at and event.flow in (planned.name, planned.parent):
            return ("scenario", i, "at")
    return ("traffic", index, _field(spec.traffic[index], planned, start))


def dropped_by(spec: "Spec", duration_ns: int) -> List[Dropped]:
    """What a run of ``duration_ns`` drops of ``spec`` (empty when it is not shorter than the topology's)."""
    from testbed.trafficplanner import scheduled_flows

    end = int(duration_ns)
    if end >= spec.duration:
        return []
    fmt = units.format_duration
    index = {flow.name: i for i, flow in enumerate(spec.traffic)}
    out: List[Dropped] = []
    flows, sends = _sends(spec, end)
    for f in flows:
        i = index[f.parent or f.name]
        short = sends[f.name]
        first, last = f.phases[0][0], f.phases[-1][1]
        if not short:
            out.append(Dropped(_where(spec, i, f, first, True),
                               f"flow {f.name} never sends: it starts at {fmt(first)}, not before the end ({fmt(end)})"))
        elif end < last < spec.duration:
            out.append(Dropped(_where(spec, i, f, last, False),
                               f"flow {f.name} is cut short: it sends until {fmt(end)} instead of {fmt(last)}"))
    for i, flow in enumerate(spec.traffic):
        for j, slow in enumerate(getattr(flow, "slow_subscribers", [])):
            if end <= slow.from_ < spec.duration:
                out.append(Dropped(("traffic", i, "slow_subscribers", j, "from"),
                                   f"the slow subscriber on {slow.node} never slows down: it would from "
                                   f"{fmt(slow.from_)}, after the end ({fmt(end)})"))
    for i, event in enumerate(spec.scenario):
        if event.at > end:
            target = getattr(event, "link", None) or getattr(event, "flow", None) or getattr(event, "node", None)
            out.append(Dropped(("scenario", i, "at"), f"{event.action} {target} at {fmt(event.at)} is after the "
                                                      f"end ({fmt(end)}): not applied"))
    for i, exp in enumerate(spec.expect):
        why = _unmeasurable_why(spec, exp, flows, sends)
        if why:
            text = exp.describe()
            out.append(Dropped(("expect", i), f"{text} cannot be measured: {why}", expectation=text, why=why))
    return out


def _sends(spec: "Spec", end: int) -> Tuple[List["PlannedFlow"], Dict[str, Phases]]:
    """The flows that send in the full run, and what each sends before ``end``."""
    from testbed.trafficplanner import scheduled_flows

    flows = [f for f in scheduled_flows(spec) if f.phases]
    return flows, {f.name: _clip(f.phases, end) for f in flows}


def unmeasurable(spec: "Spec", duration_ns: int, about) -> Optional[str]:
    """Why a figure ``about`` something (anything with ``metric``, ``flow`` and ``priority``: an expectation, a
    suite's metric) has nothing to measure in a run of ``duration_ns`` of ``spec``; None when it has (or the run
    is not shorter)."""
    if duration_ns >= spec.duration:
        return None
    return _unmeasurable_why(spec, about, *_sends(spec, int(duration_ns)))


def _unmeasurable_why(spec: "Spec", exp, flows: Sequence["PlannedFlow"], sends: Dict[str, Phases]) -> Optional[str]:
    """Why ``exp`` has nothing to measure in the short run (the flows it is about all send nothing), or None."""
    if exp.metric in ROUTER_METRICS:
        return None
    if exp.flow is not None:
        about, what = [f for f in flows if exp.flow in (f.name, f.parent)], f"flow {exp.flow}"
    elif exp.priority is not None:
        about, what = [f for f in flows if f.priority == int(exp.priority)], f"every flow of priority " \
                                                                          f"{exp.priority.label}"
    elif exp.metric in QUERY_METRICS:
        about, what = [f for f in flows if f.query is not None], "every query flow"
    else:
        about, what = flows, "every flow"
    if not about or any(sends[f.name] for f in about):
        return None
    return f"{what} sends nothing before the end"


@dataclass(frozen=True)
class Shortening:
    """What a run of ``duration_ns`` leaves out of a topology whose own duration is ``topology_ns``: each item at
    its file and line, and the expectations it cannot measure (compact form -> why)."""

    duration_ns: int
    topology_ns: int
    items: Tuple[SpecProblem, ...] = ()
    unmeasurable: Dict[str, str] = field(default_factory=dict)

    def lines(self, why: str) -> List[str]:
        """What to print: a head line (``why``: what shortens the run, e.g. ``--duration 20s``) and each item."""
        fmt = units.format_duration
        head = f"{why}: {article(fmt(self.duration_ns))} run instead of the topology's {fmt(self.topology_ns)}"
        if not self.items:
            return [f"{head} leaves out nothing the topology schedules"]
        return [f"{head} leaves out or cuts short {plural(len(self.items), 'item')}:"] + [f"  {p}" for p in self.items]

    def to_json(self) -> Dict[str, Any]:
        return {"duration_ns": self.duration_ns, "topology_duration_ns": self.topology_ns,
                "items": [vars(p) for p in self.items], "unmeasurable": dict(self.unmeasurable)}


def shorten(spec: "Spec", duration_ns: int, filename: str, text: str) -> Optional[Shortening]:
    """What a run of ``duration_ns`` leaves out of ``spec``, read from ``filename`` whose text is ``text``
    (for the lines); None when the run is not shorter than the topology's ``duration``."""
    if duration_ns >= spec.duration:
        return None
    drops = dropped_by(spec, duration_ns)
    return Shortening(int(duration_ns), int(spec.duration), tuple(located(drops, filename, text)),
                      {d.expectation: d.why for d in drops if d.expectation})


def located(drops: Sequence[Dropped], filename: str, text: str) -> List[SpecProblem]:
    """``drops`` at their lines of the topology ``text`` (read from ``filename``), in the file's order."""
    from .yamltree import parse_yaml

    parsed = parse_yaml(text)
    return sorted((SpecProblem(filename, parsed.line_of(d.loc), format_path(d.loc), d.message) for d in drops),
                  key=lambda p: p.line or 0)
