"""The topology spec: YAML topology files loaded into typed, validated models.

    from testbed.spec import load_spec, SpecError
    spec = load_spec("topologies/diamond.yaml")
    for link in spec.resolved_links():
        print(link.describe())

See docs/spec.md for the file format; units, priorities and the expectation grammar are runfolder's.
"""
from .errors import SpecError, SpecProblem
from .fieldtypes import Endpoint, LinkRef
from .loader import load_spec, load_spec_text
from .models import (
    BurstFlow, CaptureSpec, ConstantFlow, Defaults, Event, Flow, KillRouterEvent,
    LinkDownEvent, LinkParams, LinkSpec, LinkUpEvent, NodeSpec, QueryableSpec, QueryFlow, RestartRouterEvent,
    RouterSettings, SetLinkEvent, ShapingParams, StartFlowEvent, StopFlowEvent, ZpubFlow,
)
from .resolve import ResolvedEnd, ResolvedLink, Shaping
from .topology import Spec

__all__ = [
    "load_spec", "load_spec_text", "SpecError", "SpecProblem",
    "Spec", "Defaults", "NodeSpec", "RouterSettings", "LinkSpec", "LinkParams", "ShapingParams",
    "Flow", "ZpubFlow", "ConstantFlow", "BurstFlow", "QueryFlow", "QueryableSpec",
    "Event", "SetLinkEvent", "LinkDownEvent", "LinkUpEvent", "StartFlowEvent", "StopFlowEvent",
    "KillRouterEvent", "RestartRouterEvent", "CaptureSpec",
    "ResolvedLink", "ResolvedEnd", "Shaping", "Endpoint", "LinkRef",
]
