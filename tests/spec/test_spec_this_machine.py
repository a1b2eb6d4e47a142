"""`validate` says whether this machine can run the file, and why not (issue 27.3): its kernel probed (here a
stand-in for the probe: a kernel without netem), never assumed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import testbed.cli.app as cli
import testbed.runhere as runhere
from testbed.kernel import KernelCapabilities
from testbed.links import appliance
from testbed.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
NETEM = ROOT / "topologies" / "netem-example.yaml"
DIAMOND = ROOT / "topologies" / "diamond.yaml"
NO_NETEM = KernelCapabilities({"htb": True, "tbf": True, "netem": False, "pfifo": True, "bfifo": True}, True,
                              {"netem": "Error: Specified qdisc kind is unknown."})


@pytest.fixture
def no_user_mode_linux(monkeypatch):
    monkeypatch.setattr(appliance, "UML_KERNEL", "/nonexistent/linux.uml")


def test_delay_on_a_kernel_without_netem_nor_the_appliance(no_user_mode_linux):
    here = runhere.can_run_here(load_spec(NETEM), probe=lambda: NO_NETEM)
    assert here.checked and here.lines()[0] == "this machine cannot run it as written:"
    assert here.problems == ("the impairment appliance (delay, jitter, loss models, AQM queues this kernel lacks) "
                             f"needs user-mode Linux: `{appliance.INSTALL_HINT}`",)
    assert here.to_json()["can_run"] is False


def test_delay_on_a_kernel_without_netem_goes_through_the_appliance(monkeypatch):
    monkeypatch.setattr(appliance, "installed", lambda: True)
    here = runhere.can_run_here(load_spec(NETEM), probe=lambda: NO_NETEM)
    assert here.checked and here.problems == ()


def test_a_topology_this_kernel_shapes():
    here = runhere.can_run_here(load_spec(DIAMOND), probe=lambda: NO_NETEM)
    assert here.checked and here.problems == () and here.lines()[0].startswith("this machine: can run it")


def test_not_checked_says_why(monkeypatch):
    monkeypatch.setattr(runhere, "_is_root", lambda: False)
    here = runhere.can_run_here(load_spec(NETEM))
    assert not here.checked and here.to_json()["can_run"] is None
    assert here.lines() == ["this machine: not checked: probing this kernel needs root (sudo testbed validate FILE)"]
    ssh = load_spec(DIAMOND).model_copy(update={"backend": "ssh"})
    assert "probed when the lab is built" in runhere.can_run_here(ssh, probe=lambda: NO_NETEM).note


@pytest.fixture
def no_netem_here(monkeypatch, no_user_mode_linux):
    monkeypatch.setattr(runhere, "_is_root", lambda: True)
    monkeypatch.setattr(runhere, "_this_kernel", lambda: NO_NETEM)


def test_validate_prints_it_and_still_exits_0(no_netem_here):
    """The file is valid (another machine may run it): exit 0, with why this one cannot."""
    result = CliRunner().invoke(cli.app, ["validate", str(NETEM)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    at = lines.index("this machine cannot run it as written:")
    assert lines[at - 1].startswith("kernel features needed:") and \
        lines[at + 1].startswith("  the impairment appliance")
    report = json.loads(CliRunner().invoke(cli.app, ["validate", str(NETEM), "--json"]).output)
    assert report["this_machine"]["can_run"] is False and len(report["this_machine"]["problems"]) == 1
