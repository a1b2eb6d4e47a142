"""Runtime link changes (the API the scenario timeline calls): any shaping field, down, up.

Works from any process that has the :class:`Lab` (from the holder's state file too) and a
backend of its kind: the backend gives the shaper of each link end.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional

from testbed.backends import Backend, Lab, LabLink
from testbed.kernel import KernelCapabilities
from testbed.links.shaping import TcPlan
from testbed.spec.models import SHAPING_FIELDS
from testbed.spec.resolve import Shaping, shaping_changes

#: Marks "leave this field as it is" (None is a real value: "not shaped").
KEEP = object()


class ShapingConflict(ValueError):
    """A change that would leave a shaping key without the key it needs (a jitter without a delay, ...)."""


class LinkControl:
    def __init__(self, lab: Lab, backend: Backend, caps: KernelCapabilities, *, allow_missing: bool = False):
        self.lab = lab
        self.backend = backend
        self.caps = caps
        self.allow_missing = allow_missing
        self._shapes: dict[tuple[int, str], Shaping] = {}
        for link in lab.links:
            self._shapes[(link.index, link.a.node)] = link.shape_ab
            self._shapes[(link.index, link.b.node)] = link.shape_ba

    def shape(self, link_ref, from_node: str) -> Shaping:
        link = self.lab.find_link(link_ref)
        return self._shapes[(link.index, link.end(from_node).node)]

    def set_shape(self, link_ref, *, direction: Optional[str] = None, **fields) -> list[TcPlan]:
        """Change shaping of one direction (``direction`` = the sending node) or of both: ``fields`` are
        :class:`Shaping`'s (``bw_bps=...``; None: not shaped in that respect; KEEP or absent: as it is).

        Returns the installed plans. Raises UnsupportedShaping when the kernel cannot do it, ShapingConflict
        (before changing anything) when a direction would be left with a key but not the key it needs.
        """
        unknown = set(fields) - set(Shaping.__dataclass_fields__)
        if unknown:
            raise TypeError(f"not a field of Shaping: {', '.join(sorted(unknown))}")
        link = self.lab.find_link(link_ref)
        changes = {k: v for k, v in fields.items() if v is not KEEP}
        plans = []
        news = {src: replace(self._shapes[(link.index, src)], **changes) for src in self._senders(link, direction)}
        for src_node, new in news.items():  # refused before anything is changed
            for key, needed, why in new.unmet_needs():
                raise ShapingConflict(f"this change leaves the direction from {src_node} with a {key} but no "
                                      f"{needed}: {why}")
        for src_node, new in news.items():
            plans.append(self._shaper(link, src_node).apply(new, previous=self._shapes[(link.index, src_node)]))
            self._shapes[(link.index, src_node)] = new
        return plans

    def set_bandwidth(self, link_ref, bw_bps: Optional[int], direction: Optional[str] = None) -> list[TcPlan]:
        return self.set_shape(link_ref, direction=direction, bw_bps=bw_bps)

    def set_delay(self, link_ref, delay_ns: Optional[int], jitter_ns: Optional[int] = None,
                  direction: Optional[str] = None) -> list[TcPlan]:
        return self.set_shape(link_ref, direction=direction, delay_ns=delay_ns, jitter_ns=jitter_ns)

    def set_loss(self, link_ref, loss_pct: Optional[float], direction: Optional[str] = None) -> list[TcPlan]:
        return self.set_shape(link_ref, direction=direction, loss_pct=loss_pct)

    def link_down(self, link_ref) -> int:
        """Take both ends down; returns the time (ns since the epoch) when the second end went down."""
        return self._set_state(link_ref, up=False)

    def link_up(self, link_ref) -> int:
        return self._set_state(link_ref, up=True)

    def _set_state(self, link_ref, up: bool) -> int:
        link = self.lab.find_link(link_ref)
        for end in (link.a, link.b):
            self._shaper(link, end.node).set_link_state(up)
        return time.time_ns()

    def _shaper(self, link: LabLink, sender: str):
        return self.backend.shaper(self.lab, link, sender, self.caps, allow_missing=self.allow_missing)

    @staticmethod
    def _senders(link: LabLink, direction: Optional[str]) -> list[str]:
        if direction is None:
            return [link.a.node, link.b.node]
        return [link.end(direction).node]


def apply_set_link(links: LinkControl, index: int, event) -> tuple[int, dict, list[TcPlan]]:
    """Carry out a `set_link` event (testbed.spec.models.SetLinkEvent) on link ``index``: the fields it sets,
    on its ``node``'s egress or both. Returns when it took effect (ns since the epoch), the changes as
    :meth:`LinkControl.set_shape` keywords, and the installed plans. The scenario and `testbed link` both
    change a link through here."""
    changes = shaping_changes({key: getattr(event, key) for key in SHAPING_FIELDS})
    plans = links.set_shape(index, direction=event.node, **changes)
    return time.time_ns(), changes, plans
