"""Backends make nodes and links and know how to reach them; nothing of routers or traffic.

Chosen by name: ``mininet`` (default), ``docker`` or ``ssh`` (`--backend`, or `backend:` in the topology).
How a new backend plugs in: docs/backends.md.
"""
from testbed.backends.base import (Backend, BackendError, Lab, LabEnd, LabLink, LabNode, Management, NodeAccess,
                                   NodeProcess)

__all__ = ["Backend", "BackendError", "Lab", "LabEnd", "LabLink", "LabNode", "Management", "NodeAccess",
           "NodeProcess", "BACKENDS", "DEFAULT_BACKEND", "get_backend"]

BACKENDS = ("mininet", "docker", "ssh")
DEFAULT_BACKEND = "mininet"


def get_backend(name: str, image: "str | None" = None, *, inventory: "str | None" = None,
                keep_addresses: bool = False, check_host_keys: bool = True) -> Backend:
    """A new backend object by name; ``image`` is the Docker backend's node image (default: the one
    `testbed image build` makes); ``inventory``, ``keep_addresses`` and ``check_host_keys`` are the ssh
    backend's (an Ansible inventory of the lab machines; their own addresses; host keys checked)."""
    if name != "ssh" and (keep_addresses or not check_host_keys):
        raise BackendError(f"--keep-addresses and --no-host-key-check are for the ssh backend only (this lab uses "
                           f"{name})")
    if name == "ssh":
        if image:
            raise BackendError("an image is for the docker backend only (this lab uses ssh)")
        from testbed.backends.ssh.backend import SshBackend

        return SshBackend(inventory, keep_addresses=keep_addresses, check_host_keys=check_host_keys)
    if name == "mininet":
        if image:
            raise BackendError("an image is for the docker backend only (this lab uses mininet)")
        from testbed.backends.mininet import MininetBackend

        return MininetBackend()
    if name == "docker":
        from testbed.backends.docker.backend import DockerBackend

        return DockerBackend(image=image)
    raise BackendError(f"unknown backend {name!r} (available: {', '.join(BACKENDS)})")
