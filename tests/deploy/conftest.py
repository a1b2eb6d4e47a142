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
    """A lab, its management network and sshd on every node; ``close()`` undoes all, in order."""

    def __init__(self, spec, caps):
        from testbed.lab import LabSession

        self.spec = spec
        self.session = LabSession(spec, caps)
        self.mgmt = None
        self.access = None
        self.lab = None
        self.ips: dict[str, str] = {}

    def open(self, with_ssh: bool = True) -> "ManagedLab":
        from testbed.mgmt import ManagementNetwork, SshAccess

        self.lab = self.session.open()
        self.mgmt = ManagementNetwork(self.lab)
        self.ips = self.mgmt.setup()
        if with_ssh:
            self.access = SshAccess.for_lab(self.lab, self.ips)
            self.access.start()
        return self

    def close(self) -> None:
        try:
            if self.access is not None:
                self.access.stop()
        finally:
            try:
                if self.mgmt is not None:
                    self.mgmt.teardown()
            finally:
                self.session.close()
                shutil.rmtree(f"{DEFAULT_INSTALL_ROOT}/{self.spec.name}", ignore_errors=True)
