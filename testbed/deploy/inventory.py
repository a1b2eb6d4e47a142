"""The Ansible inventory of a lab: one host per node, reached through the backend's management access.

Groups: ``routers`` (nodes of kind router) and ``endpoints`` (kind host). Every host has
what the management access says reaches it (``ansible_host``, ``ansible_user``, the key,
``ansible_ssh_common_args`` with the run's ``known_hosts`` and ``StrictHostKeyChecking=yes``,
``ansible_python_interpreter``) and ``testbed_install_dir``. A hand-written inventory for
real lab machines uses the same groups and variables (docs/deploy.md).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional


def lab_inventory(lab, management, install_dirs: dict[str, str],
                  code_dirs: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """Inventory dict (Ansible's YAML/JSON inventory format) for every node ``management`` reaches;
    ``code_dirs``: where a node's code is when it is not its install folder (shared by a machine's nodes)."""
    groups: dict[str, dict[str, Any]] = {"routers": {"hosts": {}}, "endpoints": {"hosts": {}}}
    for node in management.hosts:
        group = "routers" if lab.node(node).kind == "router" else "endpoints"
        host = {**management.inventory_vars(node), "testbed_install_dir": install_dirs[node]}
        if code_dirs and code_dirs.get(node, install_dirs[node]) != install_dirs[node]:
            host["testbed_code_dir"] = code_dirs[node]
        groups[group]["hosts"][node] = host
    return {"all": {"children": groups}}


def write_inventory(path: Path, inventory: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(inventory, indent=2) + "\n")
    return path
