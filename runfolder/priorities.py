"""Zenoh's eight priorities by name, for the topology, the plan, the results and the analysis alike.

Made from the router codec's table (``router.codec.PRIORITY_NAMES``), whose names are the one spelling
used in everything a user reads: ``Priority.REAL_TIME.label == "real_time"``. ``Priority.REALTIME`` is
another name of ``REAL_TIME``, and ``realtime`` is accepted on input (:func:`parse_priority`).
"""
from __future__ import annotations

from enum import IntEnum
from typing import Any

from router.codec import PRIORITY_NAMES as CODEC_PRIORITY_NAMES

from .wording import did_you_mean

__all__ = ["Priority", "PRIORITY_NAMES", "PRIORITY_LABELS", "parse_priority"]


class _PriorityNames(IntEnum):
    @property
    def label(self) -> str:
        """The codec's name: ``real_time``, ``data_low``..."""
        return CODEC_PRIORITY_NAMES[int(self)]


#: Zenoh's eight priorities (lower number is more urgent)
Priority = _PriorityNames("Priority", [(name.upper(), p) for p, name in sorted(CODEC_PRIORITY_NAMES.items())]
                          + [("REALTIME", 1)], module=__name__)

#: the codec's names by number (0..7): what flows.json, metrics and summary.json call each priority
PRIORITY_LABELS = [CODEC_PRIORITY_NAMES[p] for p in range(len(CODEC_PRIORITY_NAMES))]
#: the names, for a message that lists what is allowed
PRIORITY_NAMES = ", ".join(p.label for p in Priority)
#: every name a topology may use for a priority: the codec's, and the other spellings people write
_PRIORITY_BY_NAME = {name.lower(): p for name, p in Priority.__members__.items()}


def parse_priority(value: Any) -> Priority:
    """A priority given by name (``real_time`` or ``realtime``, ``data``...) or number 0..7; ValueError saying
    what is allowed."""
    if isinstance(value, Priority):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 7:
        return Priority(value)
    if isinstance(value, str):
        text = value.strip().lower().replace("-", "_")
        if text.isdigit() and 0 <= int(text) <= 7:
            return Priority(int(text))
        if text in _PRIORITY_BY_NAME:
            return _PRIORITY_BY_NAME[text]
    hint = did_you_mean(value.strip().lower(), _PRIORITY_BY_NAME) if isinstance(value, str) else ""
    raise ValueError(f"{value!r} is not a priority ({hint}allowed: {PRIORITY_NAMES}, or 0..7; "
                     "realtime is accepted for real_time)")
