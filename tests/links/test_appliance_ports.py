"""The impairment appliance carries as many ports as a lab has link ends: those that do not fit on user-mode
Linux's command line (4096 bytes, about 100 ports) are plugged in through its management console."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.links import appliance

#: ring50 with every link through the appliance: 100 ports, more than its command line holds
LINKS = 55


def record(lab: str = "portsxx", links: int = LINKS) -> appliance.ApplianceRecord:
    return appliance.plan_appliance(lab, [(link, end, f"n{link}{end}", "eth1", "ns")
                                          for link in range(links) for end in (0, 1)])


def test_ports_beyond_the_kernels_command_line_are_plugged_in_later():
    app = appliance.Appliance(record())
    line = app.command_line(3)
    assert len(" ".join(line[1:])) < 4096
    on_line = [arg.split(":", 1)[0] for arg in line if arg.startswith("vec")]
    later = [p.device for p in app.plugged_later()]
    assert later, "110 ports fit on the command line: this test no longer exercises plugging in"
    assert on_line + later == [p.device for p in app.record.ports]


@pytest.mark.skipif(os.geteuid() != 0 or not appliance.installed(),
                    reason="needs root and user-mode Linux")
def test_an_appliance_with_more_ports_than_its_command_line_holds_creates_every_tap(tmp_path, monkeypatch):
    monkeypatch.setenv(appliance.APPLIANCE_ROOT_ENV, str(tmp_path / "appliance"))
    rec = record()
    app = appliance.Appliance(rec)
    try:
        app.boot()
        missing = [p.tap for p in rec.ports if not Path(f"/sys/class/net/{p.tap}").exists()]
        assert not missing, f"{len(missing)} of {len(rec.ports)} taps missing, e.g. {missing[:3]}"
        app.run_batch(appliance.join_commands(rec))  # 220 tc commands, one process
        last = rec.ports[-1].device
        assert "mirred" in app.run([["tc", "filter", "show", "dev", last, "parent", "ffff:"]])[0]
        with pytest.raises(appliance.ApplianceError, match="tc -batch"):
            app.run_batch([["tc", "qdisc", "add", "dev", "vec9999", "root", "netem"]])
    finally:
        appliance.stop(rec)
    assert not appliance.processes_of(rec.umid)
