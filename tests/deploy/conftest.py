"""Fixtures for deploy tests: a Mininet lab with management access, torn down even on failure."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testbed.deploy.deployer import DEFAULT_INSTALL_ROOT

SSHD_PRESENT = Path("/usr/sbin/sshd").exists()
needs_sshd = pytest.mark.skipif(not SSHD_PRESENT, reason="needs sshd (apt-get install openssh-server)")

LINE = """
name: {name}
defaults:
  link: {{bw: 20mbit, queue: 100}}
nodes:
  r1: {{}}
  r2: {{}}
  r3: {{}}
links:
  - endpoints: [r1, r2]
    weight: 20
  - endpoints: [r2, r3]
    bw: 10mbit
"""


def line_spec(name: str):
    from testbed.spec import load_spec_text

    return load_spec_text(LINE.format(name=name), filename=f"{name}.yaml")


class ManagedLab:
    """A Mininet lab with its management access (the one LabSession sequence), or, without SSH, only
    its management network; ``close()`` undoes all, in order."""

    def __init__(self, spec, caps):
        self.spec = spec
        self.caps = caps
        self.session = None
        self.mgmt = None
        self.access = None  # the SshAccess (keys, known_hosts, run) when opened with SSH
        self.lab = None
        self.ips: dict[str, str] = {}

    def open(self, with_ssh: bool = True) -> "ManagedLab":
        from testbed.backends.localns.mgmt import ManagementNetwork
        from testbed.lab.session import LabSession

        self.session = LabSession(self.spec, self.caps, backend="mininet", management=with_ssh)
        self.lab = self.session.open()
        if with_ssh:
            self.mgmt, self.access = self.session.management.network, self.session.management.ssh
        else:
            self.mgmt = ManagementNetwork(self.lab)
            self.mgmt.setup()
        self.ips = self.mgmt.ips()
        return self

    def netns(self, node: str) -> str:
        return self.lab.node(node).handle["netns"]

    def close(self) -> None:
        try:
            if self.access is None and self.mgmt is not None:
                self.mgmt.teardown()
        finally:
            if self.session is not None:
                self.session.close()
            shutil.rmtree(f"{DEFAULT_INSTALL_ROOT}/{self.spec.name}", ignore_errors=True)
