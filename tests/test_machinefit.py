"""The estimate of what a topology needs of this machine, against what it has (before anything is built)."""
from __future__ import annotations

import os
import sys

import pytest

from testbed import machinefit
from testbed.spec import load_spec_text

sys.path.insert(0, "bench")
from scale_bench import grid_topology  # noqa: E402  (the benchmark's own grids)

GIB = 1 << 30


def grid(n: int, capture: str = "all"):
    text = grid_topology(n, 20)
    if capture != "all":
        text = text.replace("  links: all", f"  links: {capture}")
    return load_spec_text(text, "grid.yaml")


def test_the_need_counts_every_router_capture_and_traffic_process():
    need = machinefit.need_of(grid(100))
    assert (need.routers, need.nodes, need.captures) == (100, 100, 360)  # 180 links, both ends captured
    assert need.traffic_processes == 3 + 1 + 1 + 1  # z_pub (3 publishers, 1 subscriber) + bulk (1 + 1)
    assert need.memory_bytes == (machinefit.FIXED_BYTES + 100 * machinefit.ROUTER_BYTES + 100 * machinefit.SSHD_BYTES
                                 + 360 * machinefit.CAPTURE_BYTES + 6 * machinefit.TRAFFIC_BYTES)
    assert need.processes == 100 + 100 * 2 + 360 + 6
    assert need.start_cpu_s == pytest.approx(30.0) and need.run_cores == pytest.approx(0.8)


def test_a_lab_that_fits_passes_and_says_how_long_its_routers_take_to_start():
    verdict = machinefit.check(grid(100), machinefit.Machine(cores=2, available_bytes=24 * GIB, free_pids=30000))
    assert verdict.fits and verdict.problems == []
    assert verdict.start_wall_s() == pytest.approx(15.0)


def test_a_lab_too_large_is_refused_with_the_numbers_of_each_resource():
    verdict = machinefit.check(grid(200), machinefit.Machine(cores=2, available_bytes=4 * GIB, free_pids=500))
    assert not verdict.fits and len(verdict.problems) == 3
    memory, cpu, pids = verdict.problems
    assert cpu.startswith("CPU: 200 routers keep about 1.6 cores busy") and "at most about 125 routers" in cpu
    assert memory.startswith("memory: the run needs about") and "200 routers x 40 MiB" in memory
    assert "80% of the 4,096 MiB available is 3,277 MiB" in memory
    assert pids.startswith("processes: the run starts about") and "of the 500 free process IDs is 400" in pids


def test_cores_bound_the_routers_whatever_the_memory():
    machine = machinefit.Machine(cores=2, available_bytes=64 * GIB, free_pids=30000)
    assert machinefit.check(grid(100, capture="[0]"), machine).fits
    verdict = machinefit.check(grid(200, capture="[0]"), machine)
    assert [p.split(":")[0] for p in verdict.problems] == ["CPU"]
    assert machinefit.check(grid(200, capture="[0]"), machinefit.Machine(4, 64 * GIB, 30000)).fits


def test_capturing_fewer_links_is_what_makes_a_large_lab_fit():
    machine = machinefit.Machine(cores=2, available_bytes=10 * GIB, free_pids=30000)
    assert not machinefit.check(grid(100), machine).fits
    assert machinefit.check(grid(100, capture="[0, 1]"), machine).fits


def test_this_machine_is_read_from_the_kernel():
    machine = machinefit.Machine.this()
    assert machine.cores >= 1 and machine.available_bytes > 0 and machine.free_pids > 0


@pytest.mark.skipif(os.geteuid() != 0, reason="testbed run needs root")
def test_testbed_run_refuses_a_lab_that_does_not_fit_before_building_anything(tmp_path):
    from tests.conftest import run_cli

    need = machinefit.need_of(grid(1000))
    machine = machinefit.Machine.this()
    assert need.memory_bytes > machine.available_bytes, "this machine would hold a 1000-router grid: use a larger one"
    path = tmp_path / "grid1000.yaml"
    path.write_text(grid_topology(1000, 20).replace("name: grid1000", "name: tbtcap"))
    result = run_cli("run", str(path), "--results", str(tmp_path / "results"), check=False)
    assert result.returncode == 2
    assert "tbtcap does not fit this machine (1000 routers" in result.stderr
    assert "memory: the run needs about" in result.stderr and "--over-capacity" in result.stderr
    assert not (tmp_path / "results").exists()  # nothing was made
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    assert not any(name.startswith("tbed-tbtcap") for name in netns)
