"""The impairment appliance's process (testbed.links.appliance), booted for real without ports."""
from __future__ import annotations

import json
from dataclasses import replace
import os
import signal
import sys
from pathlib import Path

import pytest

from testbed.links import appliance
from tests.conftest import needs_root
from tests.links.uml import portless_appliance

pytestmark = [needs_root, pytest.mark.skipif(not appliance.installed(),
                                             reason=f"user-mode Linux is not installed ({appliance.INSTALL_HINT})")]


def test_the_appliance_holds_its_doorbell_on_the_serial_line_its_command_line_names():
    """The doorbell wakes the init at once; without it every command waits for the init's 1 s poll. It must
    reach the appliance's process under the descriptor its ``ssl1=fd:N`` names even when the doorbell is not
    this process's descriptor 3 (in a test run, or a lab's process, 3 is long taken)."""
    lab = "tbt-uml-bell"
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(3)]  # the doorbell cannot be a low descriptor
    record = appliance.ApplianceRecord(lab, appliance.umid_for(lab), str(appliance.appliance_root() / lab))
    running = appliance.Appliance(record)
    try:
        running.boot()
        args = Path(f"/proc/{record.pid}/cmdline").read_bytes().decode().split("\0")
        fd = next(a for a in args if a.startswith("ssl1=fd:")).split(":")[1].split(",")[0]
        assert os.readlink(f"/proc/{record.pid}/fd/{fd}") == str(running.dir / "doorbell")
        assert running.run([["echo", "hello"]]) == ["hello"]
    finally:
        appliance.stop(record)
        for fd in held:
            os.close(fd)
    assert not appliance.processes_of(record.umid) and not running.dir.exists()


def test_a_request_to_a_dead_appliance_says_it_is_not_running():
    lab = "tbt-uml-dead"
    record = appliance.ApplianceRecord(lab, appliance.umid_for(lab), str(appliance.appliance_root() / lab))
    running = appliance.Appliance(record)
    try:
        running.boot()
        for pid in appliance.processes_of(record.umid):
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(appliance.ApplianceError, match="is not running"):
            running.run([["true"]])
    finally:
        appliance.stop(record)
    assert not appliance.processes_of(record.umid)


def test_a_netem_changed_in_place_keeps_nothing_of_its_former_settings():
    """``tc qdisc change`` of a netem keeps the correlations, reorder and corrupt it is not given: the change
    commands give each, 0 where the new shaping has none, so a netem changed in place reads back (from the
    appliance's own kernel, on its loopback device) as one built afresh; a jitter without a table cannot be
    reached in place (the former table would stay)."""
    from testbed.links.applianceshaper import appliance_tree
    from testbed.spec.resolve import GilbertElliott, Reorder, Shaping

    full = Shaping(delay_ns=10_000_000, jitter_ns=2_000_000, delay_correlation_pct=25.0, jitter_distribution="normal",
                   loss_pct=1.0, loss_correlation_pct=10.0, duplicate_pct=0.5, reorder=Reorder(25.0, 5, 50.0),
                   corrupt_pct=0.1)
    plain = Shaping(delay_ns=3_000_000)
    other = Shaping(delay_ns=5_000_000, loss_gemodel=GilbertElliott(1.0, 25.0), reorder=Reorder(10.0))
    uniform = Shaping(delay_ns=10_000_000, jitter_ns=2_000_000)
    fresh = ["sh", "-c", "tc qdisc del dev lo root 2>/dev/null; true"]
    show = ["tc", "-j", "qdisc", "show", "dev", "lo"]

    def options(out: list[str]) -> dict:
        return json.loads(out[-1])[0]["options"]

    with portless_appliance("tbt-uml-chg") as running:
        for before, after in ((full, plain), (full, other), (plain, full), (other, full),
                              (uniform, replace(uniform, delay_ns=20_000_000))):
            tree, build, change = appliance_tree("lo", after, before)
            assert change is not None and tree == appliance_tree("lo", before)[0]
            built = options(running.run([fresh, *build, show]))
            changed = options(running.run([fresh, *appliance_tree("lo", before)[1], *change, show]))
            assert changed == built, (before.describe(), after.describe())
        assert "reorder" not in options(running.run([fresh, *appliance_tree("lo", plain)[1], show]))
    # a jitter without a table: in place only from one without a table (else the normal table would stay)
    assert appliance_tree("lo", uniform, full)[2] is None and appliance_tree("lo", uniform)[2] is None
    assert appliance_tree("lo", uniform, replace(full, jitter_distribution=None))[2] is not None


def test_a_batch_that_fails_names_the_command_of_its_that_failed():
    with portless_appliance("tbt-uml-berr") as running:
        with pytest.raises(appliance.ApplianceError, match=r"`tc qdisc add dev nosuch root netem delay 1ms` failed "
                                                           r"\(one of a batch of 2\).*Cannot find device"):
            running.run_batch([["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                               ["tc", "qdisc", "add", "dev", "nosuch", "root", "netem", "delay", "1ms"]])


def test_a_command_on_a_port_is_told_with_the_link_end_it_leads_to():
    record = appliance.plan_appliance("tbt-uml-name", [(3, 0, "r1", "eth2", "ns-r1"), (3, 1, "r2", "eth1", "ns-r2")])
    running = appliance.Appliance(record)
    assert running._port_named(["tc", "qdisc", "add", "dev", "vec1", "root", "netem"]) == \
        " (the port toward r2:eth1, link 3)"
    assert running._port_named(["tc", "qdisc", "show", "dev", "lo"]) == ""


#: inside the appliance: copies of 64 bytes onto pages the process has not written yet (fresh ones, and, in a
#: forked child, pages it shares copy-on-write with its parent, as the init's child that writes a request's answer
#: does): how many came out different
COPIES = """
import mmap, os
src = bytes(range(65, 129))
changed = 0
for _ in range(100):
    page = mmap.mmap(-1, mmap.PAGESIZE)
    page[0:64] = src
    changed += page[0:64] != src
    page.close()
for _ in range(10):
    page = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE)
    page.write(bytes(64))
    pid = os.fork()
    if pid == 0:
        page[0:64] = src
        os._exit(int(page[0:64] != src))
    changed += os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(f"{changed} of 110 copies changed")
"""


def test_a_copy_onto_a_page_not_yet_written_keeps_every_byte_inside_the_appliance():
    """The appliance's kernel gives a process its ymm registers' upper halves back as zeros after a page fault
    (the module's docstring): glibc's AVX memcpy, which -AVX,-AVX2 left in use, wrote zeros over 16 of each 32
    bytes it copied onto a page it had not written yet. The init's strings came out cut short (its ready line
    read '6.1.176 mo' with one link) and python could not start inside ('Fatal Python error: error evaluating
    path'); this python, from the host's file system as everything inside is, copies onto such pages."""
    python = os.path.realpath(sys.executable)
    with portless_appliance("tbt-uml-copy") as running:
        # a python start and ten forks inside user-mode Linux: seconds on a busy machine, not the default 30 s bound
        assert running.run([[python, "-I", "-S", "-c", COPIES]], timeout_s=120) == ["0 of 110 copies changed"]
