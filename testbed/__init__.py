"""testbed: network emulation testbed orchestrator."""

__version__ = "0.1.0"
