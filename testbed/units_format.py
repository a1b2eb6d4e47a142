"""Human-readable shaping, for terminal output."""
from __future__ import annotations

from testbed.shaping import Shape


def bandwidth(bps: int) -> str:
    for unit, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= scale and bps % (scale // 1000 or 1) == 0:
            return f"{bps / scale:g}{unit}"
    return f"{bps}bit"


def duration(ns: int) -> str:
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns >= scale:
            return f"{ns / scale:g}{unit}"
    return f"{ns}ns"


def describe_shape(shape: Shape) -> str:
    parts = []
    if shape.bw_bps is not None:
        parts.append(bandwidth(shape.bw_bps))
    if shape.delay_ns:
        parts.append(f"delay {duration(shape.delay_ns)}")
    if shape.jitter_ns:
        parts.append(f"jitter {duration(shape.jitter_ns)}")
    if shape.loss_pct:
        parts.append(f"loss {shape.loss_pct:g}%")
    if shape.queue_packets is not None:
        parts.append(f"queue {shape.queue_packets}p")
    return " ".join(parts) or "unshaped"
