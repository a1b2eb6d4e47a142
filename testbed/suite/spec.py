"""A regression suite file: cases (a topology and its overrides), repetitions, the metrics that matter
with their minimum effect, the baseline and the night's self-checks (docs/suites.md).

Loaded like a topology: every problem at its file and line. Each case's topology is loaded with the
case's overrides merged in (``duration``, ``backend``, ``router``, ``congestion_aware``, ``traffic``,
``scenario``, ``expect``), so a case that asks for something the topology cannot do (a scenario event on
a link it does not have) is refused at the line of the override.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml
from pydantic import BeforeValidator, Field, StrictBool, model_validator
from typing_extensions import Annotated, Literal

from spark.regression import MinEffect
from testbed.spec import SpecError
from testbed.spec.errors import SpecProblem, format_path
from testbed.spec.fieldtypes import (Percent, PositiveDuration, PositiveInt, PriorityValue,
                                     user_error)
from testbed.spec.loader import load_spec_text, read_source, validate_yaml
from runfolder.expectations import METRICS
from testbed.spec.models import MetricName, RouterSettings, StrictModel
from testbed.spec.topology import Spec
from testbed.spec.shortened import Shortening, dropped_by, shorten, unmeasurable
from testbed.spec.yamltree import parse_yaml
from runfolder import units

__all__ = ["SuiteMetric", "CaseSpec", "SuiteSpec", "Suite", "SuiteCase", "load_suite", "parse_min_effect",
           "higher_is_worse"]

#: metrics where a lower figure is the worse one; every other metric is worse when higher
LOWER_IS_WORSE = frozenset({"delivery", "throughput"})
#: keys of a case that replace or change the topology's
OVERRIDES = ("duration", "backend", "router", "congestion_aware", "traffic", "scenario", "expect")

_POINTS = re.compile(r"\s*\+?\s*(?P<n>[0-9]*\.?[0-9]+)\s*(?:pt|pts|point|points|pp)\s*", re.I)
_RELATIVE = re.compile(r"\s*\+?\s*(?P<n>[0-9]*\.?[0-9]+)\s*%\s*")
_COMPACT = re.compile(r"\s*(?P<metric>[^\s:,]+)(?:\s+for\s+(?P<sel>flow|priority)\s+(?P<target>[^\s:,]+))?"
                      r"\s*(?:[:,]|\s)\s*(?P<effect>\+?\s*[^\s%]+(?:\s*%|\s+(?:points?|pts?|pp))?)\s*")


_CASE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")


def _name_rule(kind: str, named: str):
    """A validator of suite and case names: 1-40 lowercase letters, digits, '-' or '_', starting with a letter."""
    def validate(value: Any) -> Any:
        if not isinstance(value, str) or not _CASE_NAME.fullmatch(value):
            raise user_error(f"{kind}_name", f"{value!r} is not a {kind} name: 1-40 lowercase letters, digits, "
                                             f"'-' or '_', starting with a letter (it names {named})")
        return value

    return BeforeValidator(validate)


CaseName = Annotated[str, _name_rule("case", "the case in the history and in JUnit")]
SuiteName = Annotated[str, _name_rule("suite", "the suite's folder and its history")]


def higher_is_worse(metric: str) -> bool:
    return metric not in LOWER_IS_WORSE


def parse_min_effect(value: Any, metric: str) -> MinEffect:
    """``20%`` (relative to the baseline median), ``1pt`` / ``1 point`` (percentage points, for loss and
    delivery), or a value in the metric's own unit (``50ms``, ``2`` reroutes, ``1mbit``)."""
    kind = METRICS[metric]
    text = str(value).strip() if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None
    if text is None:
        raise ValueError(f"{value!r} is not a minimum effect (examples: 20%, 1pt, 50ms)")
    if m := _RELATIVE.fullmatch(text):
        amount = float(m["n"]) / 100
        kind_of = "relative"
    elif m := _POINTS.fullmatch(text):
        if kind != "percent":
            raise ValueError(f"{text!r}: percentage points are for loss and delivery; {metric} is a {kind} "
                             f"(write a share like 20% or a value like {_example(kind)})")
        amount, kind_of = float(m["n"]), "absolute"
    elif kind == "percent":
        raise ValueError(f"{text!r}: for {metric} write a relative effect (20%) or percentage points (1pt)")
    else:
        kind_of = "absolute"
        try:
            amount = float({"duration": units.parse_duration, "bandwidth": units.parse_bandwidth,
                            "count": float}[kind](text.lstrip("+ ")))
        except (units.UnitError, ValueError) as err:
            raise ValueError(f"{text!r} is not a minimum effect for {metric} (a {kind}): write a share like "
                             f"20% or a value like {_example(kind)} ({err})") from None
    if amount <= 0:
        raise ValueError(f"{text!r}: a minimum effect must be above zero")
    return MinEffect(kind_of, amount)


def _example(kind: str) -> str:
    return {"duration": "50ms", "bandwidth": "1mbit", "count": "2", "percent": "1pt"}[kind]


def _compact_metric(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    m = _COMPACT.fullmatch(value)
    if not m:
        raise user_error("suite_metric", f"{value!r} is not a suite metric; write '<metric> [for flow|priority "
                                         f"<name>] <minimum effect>', e.g. 'latency.p99 for priority realtime 20%'")
    out = {"metric": m["metric"], "min_effect": m["effect"]}
    if m["sel"]:
        out[m["sel"]] = m["target"]
    return out


class SuiteMetric(StrictModel):
    """A figure that matters for a case, and the smallest change of it worth calling a regression."""

    metric: MetricName
    flow: Optional[str] = None
    priority: Optional[PriorityValue] = None
    min_effect: Any

    @model_validator(mode="after")
    def _effect(self) -> "SuiteMetric":
        if self.flow is not None and self.priority is not None:
            raise ValueError("give flow or priority, not both")
        try:
            effect = parse_min_effect(self.min_effect, self.metric)
        except ValueError as err:
            raise ValueError(f"min_effect: {err}") from None
        object.__setattr__(self, "min_effect", effect)
        return self

    @property
    def target(self) -> str:
        if self.flow:
            return f"flow {self.flow}"
        if self.priority is not None:
            return f"priority {self.priority.label}"
        return "all flows"

    @property
    def key(self) -> str:
        return f"{self.metric} for {self.target}"


SuiteMetricValue = Annotated[SuiteMetric, BeforeValidator(_compact_metric)]


class CaseSpec(StrictModel):
    """One case: a topology (path relative to the suite file) and what the case changes in it."""

    topology: str
    repetitions: Optional[PositiveInt] = None
    duration: Optional[PositiveDuration] = None
    backend: Optional[Literal["mininet", "docker", "ssh"]] = None
    router: Optional[RouterSettings] = None
    congestion_aware: Optional[StrictBool] = None
    traffic: Optional[List[Any]] = None
    scenario: Optional[List[Any]] = None
    expect: Optional[List[Any]] = None
    metrics: List[SuiteMetricValue] = Field(default_factory=list)


class BaselineSpec(StrictModel):
    """Which nights tonight is compared with: the last N valid ones, or pinned nights or a git revision."""

    last_nights: PositiveInt = 5
    nights: Optional[List[str]] = None
    revision: Optional[str] = None

    @model_validator(mode="after")
    def _one(self) -> "BaselineSpec":
        if self.nights and self.revision:
            raise ValueError("pin the baseline with nights or with revision, not both")
        return self


class NightChecks(StrictModel):
    """What a night checks before measuring: the machine's load and CPU steal, and every link's shaping."""

    #: the 1-minute load average per CPU above which the machine is busy with something else
    load_per_cpu_max: Annotated[float, Field(gt=0)] = 0.7
    #: how long to wait for the load to fall below that before calling the night invalid
    settle: PositiveDuration = 180 * 10**9
    #: the share of CPU time stolen by the hypervisor, over the sample, above which the night is invalid
    steal_max: Percent = 5.0
    #: measure every link of every case's topology (goodput within ±10%, loss, delay)
    verify_links: StrictBool = True


class SuiteSpec(StrictModel):
    name: SuiteName
    description: Optional[str] = None
    repetitions: PositiveInt = 5
    #: significance level of the Mann-Whitney U test, after the Benjamini-Hochberg correction
    alpha: Annotated[float, Field(gt=0, lt=0.5)] = 0.05
    baseline: BaselineSpec = Field(default_factory=BaselineSpec)
    checks: NightChecks = Field(default_factory=NightChecks)
    #: metrics of every case (a case's own entry with the same key replaces one of these)
    metrics: List[SuiteMetricValue] = Field(default_factory=list)
    cases: Dict[CaseName, CaseSpec] = Field(min_length=1)


@dataclass(frozen=True)
class SuiteCase:
    """A case ready to run: its effective topology (overrides merged) and its metrics."""

    name: str
    topology_path: Path       # the topology file the case starts from
    topology_text: str        # the effective topology, YAML (written into each repetition's folder)
    spec: Spec
    repetitions: int
    metrics: Tuple[SuiteMetric, ...]
    overrides: Tuple[str, ...]
    #: what the case's shorter ``duration`` leaves out of its topology (None: not shorter)
    shortened: Optional[Shortening] = None


@dataclass(frozen=True)
class Suite:
    path: Path
    spec: SuiteSpec
    cases: Dict[str, SuiteCase]

    @property
    def name(self) -> str:
        return self.spec.name


def load_suite(path: Path, variant_router: Optional[Dict[str, Any]] = None, repetitions: Optional[int] = None) -> Suite:
    """Read and check a suite file and every case's topology with its overrides; ``SpecError`` lists every
    problem at its file and line. ``variant_router``: router settings forced on every case (a night run
    against deliberately changed routers, e.g. ``{"congestion_aware": False}``)."""
    path = Path(path)
    spec, parsed = validate_yaml(read_source(path, "a suite file"), str(path), SuiteSpec,
                                 "the file is empty; a suite needs at least 'name' and 'cases' (see docs/suites.md)",
                                 "name, repetitions, metrics, cases, ...")
    problems: List[SpecProblem] = []
    cases: Dict[str, SuiteCase] = {}
    for name, case in spec.cases.items():
        raw = parsed.data["cases"][name]
        loc = ("cases", name)
        topology = (path.parent / case.topology).resolve()
        try:
            base_text = read_source(topology, "a topology file")
            base = load_spec_text(base_text, str(topology))  # the topology's own problems, at its own lines
        except SpecError as err:
            problems.append(SpecProblem(str(path), parsed.line_of(loc + ("topology",)), f"cases.{name}.topology",
                                        f"{case.topology}: the topology has problems:"))
            problems.extend(err.problems)
            continue
        text = effective_topology(base_text, raw, variant_router)
        # a shorter duration is checked apart: what it leaves out of the topology is listed, not refused
        shorter = case.duration is not None and case.duration < base.duration
        try:
            effective = load_spec_text(effective_topology(base_text, {k: v for k, v in raw.items() if k != "duration"},
                                                          variant_router) if shorter else text,
                                       f"{topology} with case {name}'s overrides")
        except SpecError as err:
            for p in err.problems:
                top = p.path.split(".")[0].split("[")[0]
                if top not in raw and "duration" in raw:  # e.g. a scenario event after a shortened run's end
                    top = "duration"
                at = loc + (top,) if top in raw else loc
                problems.append(SpecProblem(str(path), parsed.line_of(at), f"cases.{name}" + (f".{top}" if top in raw
                                                                                               else ""),
                                            f"with {case.topology}: {p.path + ': ' if p.path else ''}{p.message}"))
            continue
        shortened = None
        if shorter:
            own = [d for d in dropped_by(effective, case.duration) if d.loc[0] in raw]
            if own:  # the case's own traffic, scenario or expectations, against its own duration
                problems.extend(SpecProblem(str(path), parsed.line_of(loc + d.loc), f"cases.{name}.{format_path(d.loc)}",
                                            f"{d.message} (the case's duration is {units.format_duration(case.duration)})")
                                for d in own)
                continue
            shortened = shorten(effective, case.duration, str(topology), base_text)
            full, effective = effective, effective.model_copy(update={"duration": case.duration})
        from testbed.drivers import resolve_paths

        effective = resolve_paths(effective, topology.parent)  # a router block's files: the topology's folder
        metrics = _case_metrics(spec.metrics, case.metrics)
        if not metrics:
            problems.append(SpecProblem(str(path), parsed.line_of(loc), f"cases.{name}",
                                        "no metrics: list the figures that matter under the suite's or the case's "
                                        "`metrics:` (e.g. 'latency.p99 for priority realtime 20%')"))
        for i, metric in enumerate(metrics):
            if metric.flow and metric.flow not in effective.flow_names():
                where = ("cases", name, "metrics") if metric in case.metrics else ("metrics",)
                problems.append(SpecProblem(str(path), parsed.line_of(where), ".".join(map(str, where)),
                                            f"{metric.key}: case {name}'s topology has no flow {metric.flow!r} "
                                            f"(flows: {', '.join(effective.flow_names())})"))
        if shortened is not None:  # the suite's figures the shorter case cannot have
            silent = []
            for metric in metrics:
                why = unmeasurable(full, case.duration, metric)
                if why:
                    at = ("cases", name, "metrics") if metric in case.metrics else ("metrics",)
                    silent.append(SpecProblem(str(path), parsed.line_of(at), ".".join(map(str, at)),
                                              f"{metric.key} cannot be measured: {why}, so the case's repetitions "
                                              "will not have it"))
            shortened = replace(shortened, items=shortened.items + tuple(silent))
        cases[name] = SuiteCase(name, topology, text, effective, repetitions or case.repetitions or spec.repetitions,
                                tuple(metrics), tuple(k for k in OVERRIDES if k in raw), shortened)
    if problems:
        raise SpecError(problems)
    return Suite(path, spec, cases)


def _case_metrics(suite_metrics: List[SuiteMetric], case_metrics: List[SuiteMetric]) -> List[SuiteMetric]:
    by_key = {m.key: m for m in suite_metrics}
    by_key.update({m.key: m for m in case_metrics})
    return list(by_key.values())


def effective_topology(base_text: str, case: Dict[str, Any], variant_router: Optional[Dict[str, Any]] = None) -> str:
    """The topology's YAML with a case's overrides merged in (and a night's forced router settings)."""
    data = copy.deepcopy(parse_yaml(base_text).data)  # the topology loader's YAML: `on:`/`off:` stay keys
    router = dict(case.get("router") or {})
    if "congestion_aware" in case:
        router["congestion_aware"] = case["congestion_aware"]
    router.update(variant_router or {})
    for key in ("duration", "backend", "traffic", "scenario", "expect"):
        if key in case:
            data[key] = case[key]
    if router:
        defaults = data.setdefault("defaults", {}) or {}
        data["defaults"] = defaults
        defaults["router"] = {**(defaults.get("router") or {}), **router}
        for node in (data.get("nodes") or {}).values():  # a node's own router settings would win otherwise
            if isinstance(node, dict) and isinstance(node.get("router"), dict):
                node["router"].update({k: v for k, v in router.items() if k in node["router"]})
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)
