"""The impairment appliance's process (testbed.links.appliance), booted for real without ports."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from testbed.links import appliance
from tests.conftest import needs_root

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
