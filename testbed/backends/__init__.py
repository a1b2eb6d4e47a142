"""Backends make nodes and links and know how to reach them; nothing of routers or traffic.

Chosen by name: ``mininet`` (default), ``docker`` or ``ssh`` (`--backend`, or `backend:` in the topology), with
their options as one value (testbed.backends.options.BackendOptions). How a new backend plugs in: docs/backends.md
and docs/architecture.md.
"""
from testbed.backends.base import (Backend, BackendError, Lab, LabEnd, LabLink, LabNode, Management, NodeAccess,
                                   NodeProcess)
from testbed.backends.options import BACKENDS, DEFAULT_BACKEND, BackendOptions

__all__ = ["Backend", "BackendError", "BackendOptions", "Lab", "LabEnd", "LabLink", "LabNode", "Management",
           "NodeAccess", "NodeProcess", "BACKENDS", "DEFAULT_BACKEND", "get_backend"]


def get_backend(options: "BackendOptions | str") -> Backend:
    """A new backend object from its options, or by name with the default options (e.g. the backend a lab state
    records, to reach or remove that lab)."""
    if isinstance(options, str):
        options = BackendOptions(options)
    if options.name == "ssh":
        from testbed.backends.ssh.backend import SshBackend

        return SshBackend(options)
    if options.name == "mininet":
        from testbed.backends.mininet import MininetBackend

        return MininetBackend()
    from testbed.backends.docker.backend import DockerBackend

    return DockerBackend(image=options.image)
