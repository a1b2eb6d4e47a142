"""Who provides each shaping feature of a link direction: this machine's kernel, or the impairment appliance.

Per feature: the host kernel where its probe found the qdisc, otherwise the appliance (testbed.links.appliance);
with the appliance forced (the topology's ``impairments: appliance``, or ``--impairments appliance``), every
impairment feature comes from the appliance even where the host has it, so results compare across machines.

The rate (htb) and a pfifo queue stay at the node's end of the link, so a packet waits for the rate in the
node's queue, then crosses the appliance, where it is delayed, lost, reordered... Where the queue discipline
itself comes from the appliance (fq_codel, cake, red, pie), the rate goes with it: the queue must be where
packets wait for the rate, so both are the appliance's (and the node's end is left unshaped).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from testbed.kernel import KernelCapabilities
from testbed.spec.resolve import Shaping, event_shaping

HOST = "host"
APPLIANCE = "appliance"
#: features that stay at the node's end unless the queue discipline is the appliance's
NODE_FEATURES = frozenset({"bw", "queue", "pfifo"})
#: queue disciplines other than pfifo: where one is, the rate is too
AQM_FEATURES = frozenset({"fq_codel", "cake", "red", "pie"})


@dataclass(frozen=True)
class Split:
    """One direction's shaping divided between its providers."""

    host: Shaping
    appliance: Shaping
    providers: dict  # feature -> HOST | APPLIANCE

    @property
    def needs_appliance(self) -> bool:
        return APPLIANCE in self.providers.values()


def only(shape: Shaping, keep: set) -> Shaping:
    """``shape`` with only the features ``keep`` (the others unset)."""
    return shape.without(shape.features() - set(keep))


def provider_of(feature: str, caps: KernelCapabilities, force_appliance: bool) -> str:
    if feature in NODE_FEATURES:
        return HOST
    if force_appliance or not caps.supports(feature):
        return APPLIANCE
    return HOST


def split(shape: Shaping, caps: KernelCapabilities, force_appliance: bool = False) -> Split:
    """Which provider installs each feature of ``shape``, and the two shapings that result."""
    features = shape.features()
    providers = {f: provider_of(f, caps, force_appliance) for f in features}
    if any(providers[f] == APPLIANCE for f in features & AQM_FEATURES):
        providers.update({f: APPLIANCE for f in features & NODE_FEATURES})
    host = only(shape, {f for f, p in providers.items() if p == HOST})
    appliance = only(shape, {f for f, p in providers.items() if p == APPLIANCE})
    return Split(host, appliance, providers)


def needs_appliance(shapes: Iterable[Shaping], caps: KernelCapabilities, force_appliance: bool) -> bool:
    return any(split(s, caps, force_appliance).needs_appliance for s in shapes)


def appliance_links(spec, caps: KernelCapabilities, force_appliance: bool) -> list[int]:
    """The links (their indices) that must cross the appliance: a direction, or a scenario event that changes
    the link at run time, asks for a feature the appliance provides."""
    from testbed.spec.models import SetLinkEvent

    links = spec.resolved_links()
    wanted = {link.index for link in links
              if needs_appliance((link.a.egress, link.b.egress), caps, force_appliance)}
    for event in spec.scenario:
        if isinstance(event, SetLinkEvent):
            if needs_appliance([event_shaping(event)], caps, force_appliance):
                wanted.add(links[spec.link_index(event.link)].index)
    return sorted(wanted)
