"""Backends make nodes and links and know how to reach them; nothing of routers or traffic.

Chosen by name: ``mininet`` (default) or ``docker`` (`--backend`, or `backend:` in the topology).
How a new backend plugs in: docs/backends.md.
"""
from testbed.backends.base import (Backend, BackendError, Lab, LabEnd, LabLink, LabNode, Management, NodeAccess,
                                   NodeProcess)

__all__ = ["Backend", "BackendError", "Lab", "LabEnd", "LabLink", "LabNode", "Management", "NodeAccess",
           "NodeProcess", "BACKENDS", "DEFAULT_BACKEND", "get_backend"]

BACKENDS = ("mininet", "docker")
DEFAULT_BACKEND = "mininet"


def get_backend(name: str, image: "str | None" = None) -> Backend:
    """A new backend object by name; ``image`` is the Docker backend's node image (default: the one
    `testbed image build` makes)."""
    if name == "mininet":
        if image:
            raise BackendError("an image is for the docker backend only (this lab uses mininet)")
        from testbed.backends.mininet import MininetBackend

        return MininetBackend()
    if name == "docker":
        from testbed.backends.docker.backend import DockerBackend

        return DockerBackend(image=image)
    raise BackendError(f"unknown backend {name!r} (available: {', '.join(BACKENDS)})")
