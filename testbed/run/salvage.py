"""After a run's process died (kill -9, a crash), bring into its results folder what its nodes still
hold, before `testbed clean` removes the nodes: the routers' logs, events and configs, the
traffic logs and the captures. The manifest then says the run crashed, when that was found,
and what was salvaged.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from runfolder.layout import LAYOUT
from testbed.run.rundir import node_results_dir, write_json


def router_file_names(node_dir: Path) -> list[str]:
    """What every router leaves in its install folder (nodectl.py: ``LAYOUT.router_file_names``) and the
    driver's config files (named in the launch.json the orchestrator wrote there)."""
    try:
        files = sorted(json.loads((node_dir / LAYOUT.launch_name).read_text()).get("files", {}))
    except (OSError, ValueError, AttributeError):
        files = []
    return list(LAYOUT.router_file_names) + [f for f in files if f not in LAYOUT.router_file_names]


def fetch_router_files(access, install_dir: str, node_dir: Path) -> list[str]:
    """Bring the router's files that are not in ``node_dir`` yet (collect failed or never ran) from the
    node's ``install_dir``; returns their paths on the node. A file the node does not have is passed over."""
    fetched = []
    for name in router_file_names(node_dir):
        if (node_dir / name).is_file():
            continue
        try:
            access.fetch(f"{install_dir}/{name}", node_dir / name)
        except Exception:  # noqa: BLE001 - missing, or the node cannot be reached: take what can be had
            continue
        fetched.append(f"{install_dir}/{name}")
    return fetched


def salvage_run(run_dir: Path, lab, backend) -> list[str]:
    """Fetch what every node of ``lab`` holds into ``run_dir``; returns the files and folders brought back.

    Never raises for a node that is gone or a file that is missing: it takes what it can.
    """
    salvaged: list[str] = []
    for node in lab.nodes:
        try:
            access = backend.access(lab, node)
        except Exception:  # noqa: BLE001 - a node we cannot reach any more has nothing to give
            continue
        salvaged += [f"{node}:{f}" for f in fetch_router_files(access, access.work_dir, run_dir / LAYOUT.node_dir(node))]
        for folder in (LAYOUT.traffic_dir, LAYOUT.pcap_dir):
            remote = node_results_dir(access, folder)
            try:
                access.fetch(remote, run_dir / folder)
            except Exception:  # noqa: BLE001 - as above
                continue
            salvaged.append(f"{node}:{remote}")
    return salvaged


def mark_crashed(run_dir: Path, salvaged: list[str]) -> None:
    """Say in the manifest that the run's process died, if it still says the run is going on."""
    path = run_dir / LAYOUT.manifest
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if manifest.get("status") not in ("running", None):
        return
    now = time.time_ns()
    manifest.update(status="crashed", ended_ns=now,
                    error="the run's process died before it finished; `testbed clean` salvaged what the nodes held")
    manifest.setdefault("extra", {})["crash"] = {"found_ns": now, "found_by": "testbed clean", "salvaged": salvaged}
    write_json(path, manifest)
