"""The Ansible inventory of a lab: one host per node, reached over its management address.

Groups: ``routers`` (nodes of kind router) and ``endpoints`` (kind host). Every host
has ``ansible_host`` (management IP), ``ansible_user``, the run's private key,
``ansible_ssh_common_args`` pointing at the run's ``known_hosts`` with
``StrictHostKeyChecking=yes``, ``ansible_python_interpreter`` and
``testbed_install_dir``. A hand-written inventory for real lab machines uses the
same groups and variables (docs/deploy.md).
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any


def ssh_common_args(known_hosts: Path) -> str:
    return " ".join(shlex.quote(a) for a in (
        "-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
    ))


def lab_inventory(lab, access, install_dirs: dict[str, str]) -> dict[str, Any]:
    """Inventory dict (Ansible's YAML/JSON inventory format) for every node ``access`` reaches."""
    common = {
        "ansible_user": access.user,
        "ansible_ssh_private_key_file": str(access.private_key),
        "ansible_ssh_common_args": ssh_common_args(access.known_hosts),
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    groups: dict[str, dict[str, Any]] = {"routers": {"hosts": {}}, "endpoints": {"hosts": {}}}
    for node, ip in access.hosts.items():
        group = "routers" if lab.node(node).kind == "router" else "endpoints"
        groups[group]["hosts"][node] = {"ansible_host": ip, "testbed_install_dir": install_dirs[node]}
    return {"all": {"vars": common, "children": groups}}


def write_inventory(path: Path, inventory: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(inventory, indent=2) + "\n")
    return path
