"""`testbed inspect` reads a netem's every setting back from the kernel (testbed.lab.inspect.netem_shaping), here
the impairment appliance's own kernel (this machine's has no netem), on its loopback device."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from testbed.lab.inspect import current_shaping, installed_shaping, same_shaping
from testbed.links import appliance
from testbed.links.applianceshaper import appliance_tree
from testbed.links.impairments import TFIFO_MIN_LIMIT, tfifo_limit
from testbed.spec.resolve import GilbertElliott, Reorder, Shaping
from tests.conftest import needs_root
from tests.links.uml import portless_appliance

pytestmark = [needs_root, pytest.mark.skipif(not appliance.installed(),
                                             reason=f"user-mode Linux is not installed ({appliance.INSTALL_HINT})")]

#: every netem setting a topology can ask for, in several combinations (the distribution is not read back)
SHAPES = [
    Shaping(delay_ns=10_000_000, jitter_ns=2_000_000, delay_correlation_pct=25.0, jitter_distribution="normal",
            loss_pct=1.0, loss_correlation_pct=10.0, duplicate_pct=0.5, reorder=Reorder(25.0, 5, 50.0),
            corrupt_pct=0.1),
    Shaping(delay_ns=5_000_000, loss_gemodel=GilbertElliott(1.0, 25.0, 70.0, 0.5), reorder=Reorder(10.0)),
    Shaping(loss_pct=2.0),
    Shaping(delay_ns=1_000_000, jitter_ns=500_000, duplicate_pct=1.0),
]


def test_every_netem_setting_reads_back_as_installed():
    with portless_appliance("tbt-uml-insp") as running:
        for shape in SHAPES:
            _, build, _ = appliance_tree("lo", shape)
            out = running.run([["sh", "-c", "tc qdisc del dev lo root 2>/dev/null; true"], *build,
                               ["tc", "-j", "qdisc", "show", "dev", "lo"]])
            read = installed_shaping(json.loads(out[-1]), "")
            # netem's limit on the appliance is the room its delay needs (a link's queue is at the node's end)
            limit = tfifo_limit(shape)
            assert read.queue_packets == (limit if limit != TFIFO_MIN_LIMIT else None)
            assert same_shaping(shape, replace(read, queue_packets=None)), (shape.describe(), read.describe())
            assert read.jitter_distribution is None  # not shown by tc: as recorded
            assert current_shaping(shape, read).jitter_distribution == shape.jitter_distribution
            for changed in (replace(shape, reorder=Reorder(5.0)), replace(shape, corrupt_pct=0.2),
                            replace(shape, loss_gemodel=GilbertElliott(2.0, 25.0), loss_pct=None)):
                assert not same_shaping(changed, replace(read, queue_packets=None)), changed.describe()
