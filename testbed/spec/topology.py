"""The whole topology file as one model, :class:`Spec`: its sections are the models of ``models.py``;
its after-validator runs the checks that relate several parts (``checks.py``) and resolves flow rates
given as link multiples (``resolve.py``), so a ``Spec`` that exists is always consistent. Its queries
(links resolved, capabilities needed, captured links) are what the backends and the runner use.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Union

from pydantic import Field, ValidationInfo, model_validator
from typing_extensions import Literal

from .checks import check_spec
from .errors import format_path
from .fieldtypes import LinkMultiple, LinkRef, NodeName, Percent, PositiveDuration, SpecName, _link_ref
from .models import (
    CaptureSpec, Defaults, Event, ExpectationValue, Flow, LinkSpec, NodeValue, RouterSettings,
    SetLinkEvent, StrictModel, ZpubFlow,
)
from .resolve import ResolvedLink, event_shaping, find_link, resolve_flow_rates, resolve_links
from .routerchoice import NamedRouter, RouterChoice

__all__ = ["Spec"]

_S = 10**9


class Spec(StrictModel):
    """A whole topology file, validated and consistent."""

    name: SpecName
    description: Optional[str] = None
    #: where the nodes live (`--backend` overrides it): mininet, docker or ssh
    backend: Literal["mininet", "docker", "ssh"] = "mininet"
    #: the Docker backend's node image (`--image` overrides it; default: `testbed image build`'s)
    image: Optional[str] = None
    #: the ssh backend's Ansible inventory of lab machines (`--inventory` overrides it), relative to this file
    inventory: Optional[str] = None
    #: who provides the impairments (delay, jitter, loss models, AQM queues): `auto` = this machine's kernel
    #: where it has the qdisc, else the impairment appliance; `appliance` = always the appliance, for results
    #: that compare across machines (`--impairments` overrides it; docs/impairments.md)
    impairments: Literal["auto", "appliance"] = "auto"
    #: the clock check fails a flow whose clock error bound exceeds this share of its latency p50 (default 10%)
    clock_error_max_share: Optional[Percent] = None
    duration: PositiveDuration = 60 * _S
    defaults: Defaults = Field(default_factory=Defaults)
    nodes: Dict[NodeName, NodeValue]
    links: List[LinkSpec] = Field(default_factory=list)
    traffic: List[Flow] = Field(default_factory=list)
    scenario: List[Event] = Field(default_factory=list)
    capture: CaptureSpec = Field(default_factory=CaptureSpec)
    #: the router under test: a driver name (testbed, zenoh) or a command block (docs/drivers.md)
    router: RouterChoice = Field(default_factory=NamedRouter)
    expect: List[ExpectationValue] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> "Spec":
        problems = check_spec(self)
        if problems:
            collector = (info.context or {}).get("problems") if info.context else None
            if collector is not None:
                collector.extend(problems)
            else:
                raise ValueError("; ".join(f"{format_path(loc)}: {msg}" for loc, msg in problems))
            return self
        if any(isinstance(getattr(flow, "rate", None), LinkMultiple) for flow in self.traffic):
            # what a flow's rate means once the links are known: every user of the spec sees bits per second
            return self.model_copy(update={"traffic": resolve_flow_rates(self)})
        return self

    # -- queries the backends and the runner use --

    def routers(self) -> List[str]:
        return [n for n, spec in self.nodes.items() if spec.kind == "router"]

    def hosts(self) -> List[str]:
        return [n for n, spec in self.nodes.items() if spec.kind == "host"]

    def with_router_settings(self, **updates: Any) -> "Spec":
        """This spec with router settings forced on every node (e.g. ``congestion_aware=False``
        for a comparison run), overriding the defaults and any per-node value."""
        unknown = set(updates) - set(RouterSettings.model_fields)
        if unknown:
            raise KeyError(f"unknown router settings {sorted(unknown)}")
        defaults = self.defaults.model_copy(update={"router": self.defaults.router.model_copy(update=updates)})
        nodes = {name: (node.model_copy(update={"router": node.router.model_copy(update=updates)})
                        if node.router is not None else node) for name, node in self.nodes.items()}
        return self.model_copy(update={"defaults": defaults, "nodes": nodes})

    def router_settings(self, node: str) -> RouterSettings:
        """Defaults merged with the node's own ``router`` overrides."""
        if node not in self.nodes:
            raise KeyError(f"no node {node!r} in topology {self.name!r}")
        return self.defaults.router.merged(self.nodes[node].router)

    def resolved_links(self) -> List[ResolvedLink]:
        return resolve_links(self)

    def features(self) -> Set[str]:
        """Shaping features used anywhere, links and ``set_link`` events (testbed.spec.resolve.FEATURES)."""
        found: Set[str] = set()
        for link in self.resolved_links():
            found |= link.features()
        for event in self.scenario:
            if isinstance(event, SetLinkEvent):
                found |= event_shaping(event).features()
        return found

    def link_index(self, ref: Union[LinkRef, int, str]) -> int:
        """Index in ``links`` of a link reference (``2``, ``"r1-r2"``, ``"r1:eth2-r2:eth2"``)."""
        index, error = find_link(self, ref if isinstance(ref, LinkRef) else _link_ref(ref))
        if index is None:
            raise KeyError(error)
        return index

    def captured_links(self) -> List[int]:
        """Indexes of the links whose interfaces are captured."""
        if self.capture.links == "all":
            return list(range(len(self.links)))
        if self.capture.links == "none":
            return []
        return sorted({self.link_index(ref) for ref in self.capture.links})

    def flow_names(self) -> List[str]:
        """Every name a scenario or expectation may refer to (zpub adds ``<name>.pub1`` etc.)."""
        names: List[str] = []
        for flow in self.traffic:
            names.append(flow.name)
            if isinstance(flow, ZpubFlow):
                names.extend(flow.sub_flows)
        return names

