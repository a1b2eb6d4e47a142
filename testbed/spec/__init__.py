"""The topology spec: YAML topology files loaded into typed, validated models.

    from testbed.spec import load_spec, SpecError
    spec = load_spec("topologies/diamond.yaml")
    for link in spec.resolved_links():
        print(link.describe())

See docs/spec.md for the file format.
"""
from .errors import SpecError, SpecProblem
from .fieldtypes import Endpoint, LinkRef, Priority
from .loader import load_spec, load_spec_text
from .models import (
    METRICS, BurstFlow, CaptureSpec, ConstantFlow, Defaults, Event, Expectation, Flow, KillRouterEvent,
    LinkDownEvent, LinkParams, LinkSpec, LinkUpEvent, NodeSpec, QueryableSpec, QueryFlow, RestartRouterEvent,
    RouterSettings, SetLinkEvent, ShapingParams, StartFlowEvent, StopFlowEvent, ZpubFlow,
)
from .resolve import ResolvedEnd, ResolvedLink, Shaping
from .topology import Spec
from runfolder.units import (
    UnitError, format_bandwidth, format_duration, format_percent, format_size,
    parse_bandwidth, parse_duration, parse_percent, parse_size,
)

__all__ = [
    "load_spec", "load_spec_text", "SpecError", "SpecProblem",
    "Spec", "Defaults", "NodeSpec", "RouterSettings", "LinkSpec", "LinkParams", "ShapingParams",
    "Flow", "ZpubFlow", "ConstantFlow", "BurstFlow", "QueryFlow", "QueryableSpec",
    "Event", "SetLinkEvent", "LinkDownEvent", "LinkUpEvent", "StartFlowEvent", "StopFlowEvent",
    "KillRouterEvent", "RestartRouterEvent", "CaptureSpec", "Expectation", "METRICS",
    "ResolvedLink", "ResolvedEnd", "Shaping", "Endpoint", "LinkRef", "Priority",
    "UnitError", "parse_bandwidth", "parse_duration", "parse_percent", "parse_size",
    "format_bandwidth", "format_duration", "format_percent", "format_size",
]
