"""An impairment appliance of the tests' own, without ports (testbed.links.appliance)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from testbed.links import appliance


@contextmanager
def portless_appliance(lab: str) -> Iterator[appliance.Appliance]:
    """An appliance without ports booted under ``lab``'s name, stopped afterwards with nothing of it left."""
    record = appliance.ApplianceRecord(lab, appliance.umid_for(lab), str(appliance.appliance_root() / lab))
    running = appliance.Appliance(record)
    try:
        running.boot()
        yield running
    finally:
        appliance.stop(record)
    assert not appliance.processes_of(record.umid)
