"""The Mininet backend: one Mininet host per node, point-to-point veth links (no switch, no controller)."""
from testbed.backends.mininet.backend import MininetBackend

__all__ = ["MininetBackend"]
