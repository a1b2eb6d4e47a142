"""Backends make nodes and links and know how to reach them; nothing of routers or traffic."""
from testbed.backends.base import Backend, Lab, LabEnd, LabLink, LabNode

__all__ = ["Backend", "Lab", "LabEnd", "LabLink", "LabNode", "get_backend"]


def get_backend(name: str) -> Backend:
    if name == "mininet":
        from testbed.backends.mininet import MininetBackend

        return MininetBackend()
    raise ValueError(f"unknown backend {name!r} (available: mininet)")
