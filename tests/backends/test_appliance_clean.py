"""`testbed clean` removes what an impairment appliance can leave without a process: a tap still in this machine's
namespace (a crash between the appliance creating its taps and moving them into the nodes) and its folder; those
of a live lab stay. (A run killed while its appliance runs: tests/run/test_appliance_run_e2e.py.)"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from testbed.backends import get_backend
from testbed.links import appliance
from tests.conftest import needs_root


@needs_root
def test_clean_removes_the_taps_and_folder_an_appliance_of_no_live_lab_left():
    lab = "tbt-uml-orphan"
    tap, folder = appliance.tap_name(lab, 0, 1), appliance.appliance_root() / lab
    subprocess.run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"], check=True)  # persistent: outlives us
    (folder / "control").mkdir(parents=True, exist_ok=True)
    (folder / "console.log").write_text("Linux version 6.1\n")
    try:
        assert tap not in appliance.leftover_taps({lab}) and folder not in appliance.leftover_folders({lab})
        found = get_backend("mininet").leftovers(set())  # a dry run
        assert f"tap {tap}" in found and f"appliance folder {folder}" in found, found
        clean = subprocess.run([sys.executable, "-m", "testbed.cli", "clean", "--json"], capture_output=True,
                               text=True, timeout=300)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        removed = json.loads(clean.stdout)["removed"]
        assert f"tap {tap}" in removed and f"appliance folder {folder}" in removed, removed
        assert not Path(f"/sys/class/net/{tap}").exists() and not folder.exists()
    finally:
        subprocess.run(["ip", "link", "del", "dev", tap], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
