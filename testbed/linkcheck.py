"""Measure one shaped link of a lab against its configured bandwidth (a quick end-to-end check)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from testbed.backends import Lab, LabLink
from testbed.measure import tcp_goodput

TOLERANCE = 0.10


@dataclass(frozen=True)
class LinkCheck:
    link: LabLink
    configured_bps: int
    measured_bps: float

    @property
    def ratio(self) -> float:
        return self.measured_bps / self.configured_bps

    @property
    def passed(self) -> bool:
        return abs(self.ratio - 1.0) <= TOLERANCE


def first_shaped_link(lab: Lab) -> Optional[LabLink]:
    return next((link for link in lab.links if link.shape_ab.bw_bps), None)


def check_link(link: LabLink, seconds: float = 5.0) -> LinkCheck:
    measured = tcp_goodput(link.a, link.b, seconds=seconds)
    return LinkCheck(link, link.shape_ab.bw_bps, measured.bits_per_second)
