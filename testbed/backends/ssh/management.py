"""Management access to lab machines: the inventory's own SSH connections.

Ansible reaches each machine with the variables the inventory gives it (plus ``become`` when
the login is not root, and no host key checking only when that was asked for explicitly);
the metrics endpoint and admin API of each router listen on the address the controller
connects to. The data links are never used for it.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from testbed.backends.base import BackendError, Management
from testbed.backends.localns.mgmt import SSH_ROOT
from testbed.backends.ssh.connection import host_connection
from testbed.backends.ssh.inventory import InventoryHost
from testbed.proc import CommandError


#: inventory variables that hold secrets
SECRET_VARS = frozenset({"ansible_password", "ansible_ssh_pass", "ansible_ssh_password", "ansible_become_password",
                         "ansible_become_pass", "ansible_sudo_pass"})


class SshManagement(Management):
    def __init__(self, lab, hosts: dict[str, InventoryHost], *, check_host_keys: bool = True):
        self.lab = lab
        self.inventory_hosts = hosts
        self.check_host_keys = check_host_keys
        self.hosts = {n: h.ip() for n, h in hosts.items()}
        #: Ansible's SSH connection masters for this lab (closed by close(); `clean` finds them there)
        self.control_dir = SSH_ROOT / lab.name / "cp"

    def start(self) -> None:
        self.control_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    def inventory_vars(self, node: str) -> dict:
        host = self.inventory_hosts[node]
        # never a password: this inventory is written into the run's folder (the pre-flight wants keys and NOPASSWD)
        v = {k: val for k, val in host.vars.items() if k.startswith("ansible_") and k not in SECRET_VARS}
        v.update({"ansible_host": host.address, "ansible_port": host.port, "ansible_user": host.login,
                  "ansible_python_interpreter": host.python})
        if host.key_file:
            v["ansible_ssh_private_key_file"] = host.key_file
        if host.needs_sudo:
            v.update({"ansible_become": True, "ansible_become_method": "sudo", "ansible_become_user": "root"})
        args = list(host.ssh_args)
        if not self.check_host_keys:
            args += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
        if args:
            v["ansible_ssh_common_args"] = shlex.join(args)
            v.pop("ansible_ssh_extra_args", None)
        return v

    def run(self, node: str, command: str, timeout_s: float = 30.0) -> "subprocess.CompletedProcess[str]":
        """Run a shell command as root on ``node`` (returns CompletedProcess; 255 when unreachable)."""
        conn = host_connection(self.inventory_hosts[node], check_host_keys=self.check_host_keys)
        try:
            r = conn.run(command, check=False, timeout=timeout_s)
        except (BackendError, OSError) as exc:
            return subprocess.CompletedProcess([command], 255, "", str(exc))
        except CommandError as exc:
            if exc.returncode == -1:
                raise subprocess.TimeoutExpired(command, timeout_s) from None
            return subprocess.CompletedProcess([command], 255, "", str(exc))
        return subprocess.CompletedProcess([command], r.returncode, r.stdout, r.stderr)

    def close(self) -> None:
        """Ask Ansible's connection masters to exit and remove their folder."""
        if self.control_dir.is_dir():
            for node, host in self.inventory_hosts.items():
                try:
                    subprocess.run(["ssh", "-o", f"ControlPath={self.control_dir}/%C", "-p", str(host.port), "-O",
                                    "exit", f"{host.login}@{host.address}"], capture_output=True, timeout=5,
                                   stdin=subprocess.DEVNULL)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            shutil.rmtree(self.control_dir.parent, ignore_errors=True)

    def to_json(self) -> dict:
        return {"kind": "inventory", "inventory": self.lab.info.get("inventory"), "hosts": self.hosts,
                "host_key_checking": self.check_host_keys}
