"""Shaping a topology asks for that the nodes' kernel cannot do: found before anything is built.

A topology that asks for shaping the kernel cannot do is refused with the link and the missing piece named,
unless ``allow_missing`` is set, in which case the lab records what it left out.
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.kernel import FEATURE_HINTS, KernelCapabilities
from testbed.lab.errors import LabError
from testbed.links.appliance import APPLIANCE_FEATURES


@dataclass(frozen=True)
class MissingCapability:
    link: str
    direction: str
    feature: str

    def message(self) -> str:
        return f"link {self.link} ({self.direction}) asks for {self.feature}, which this kernel cannot do: " \
               f"{FEATURE_HINTS[self.feature]}"


def link_label(link) -> str:
    return f"links[{link.index}] {link.a.node}:{link.a.ifname}<->{link.b.node}:{link.b.ifname}"


def missing_capabilities(spec, caps: KernelCapabilities, appliance: bool = False) -> list[MissingCapability]:
    """Every shaping feature the links, or the scenario's `set_link` events, ask for and the kernel lacks (with
    ``appliance``, the backend carries links through the impairment appliance: what it provides is not
    missing)."""
    def lacks(feature: str) -> bool:
        return not caps.supports(feature) and not (appliance and feature in APPLIANCE_FEATURES)

    from testbed.spec.models import SetLinkEvent
    from testbed.spec.resolve import event_shaping

    missing = []
    links = spec.resolved_links()
    for link in links:
        for src, dst in ((link.a, link.b), (link.b, link.a)):
            for feature in sorted(src.egress.features()):
                if lacks(feature):
                    missing.append(MissingCapability(link_label(link), f"{src.node}->{dst.node}", feature))
    for i, event in enumerate(spec.scenario):
        if not isinstance(event, SetLinkEvent):
            continue
        link = links[spec.link_index(event.link)]
        asked = event_shaping(event).features()
        direction = f"{event.node}->" if event.node else "both directions"
        for feature in sorted(asked):
            if lacks(feature):
                missing.append(MissingCapability(f"{link_label(link)} (scenario[{i}] at {event.at / 1e9:g}s)",
                                                 direction, feature))
    return missing


def check_capabilities(spec, caps: KernelCapabilities, allow_missing: bool,
                       appliance: bool = False) -> list[MissingCapability]:
    missing = missing_capabilities(spec, caps, appliance)
    if missing and not allow_missing:
        lines = "\n".join(f"  {m.message()}" for m in missing)
        raise LabError(
            f"topology {spec.name!r} asks for shaping this kernel cannot do:\n{lines}\n"
            "Install what is named above, or pass --allow-missing to build the lab without it "
            "(what was left out is recorded in the lab state and the run manifest)."
        )
    return missing
