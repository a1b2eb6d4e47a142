"""tcpdump captures on both ends of a link: nanosecond pcaps, clean files, kernel statistics."""
from __future__ import annotations

import json
import struct

import pytest

from testbed.lab.session import LabSession
from testbed.links.measure import EndAccess, tcp_goodput
from testbed.run.capture import Captures, capture_targets
from testbed.spec import load_spec_text
from tests.conftest import BACKEND_PARAMS, needs_iperf3, skip_unless_backend

SPEC = """
name: tbt-capture
nodes: {a: {}, b: {}}
links:
  - endpoints: [a, b]
    bw: 20mbit
"""


def read_pcap(path):
    data = path.read_bytes()
    magic, = struct.unpack_from("<I", data, 0)
    offset, packets = 24, 0
    while offset + 16 <= len(data):
        incl = struct.unpack_from("<IIII", data, offset)[2]
        if offset + 16 + incl > len(data):
            break
        offset += 16 + incl
        packets += 1
    return magic, packets, offset == len(data)


@needs_iperf3
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_captures_both_ends_with_nanosecond_timestamps(caps, tmp_path, backend):
    """tcpdump runs on the nodes, through their access; what it wrote is fetched here at stop."""
    skip_unless_backend(backend)
    session = LabSession(load_spec_text(SPEC), caps, backend=backend)
    with session as lab:
        targets = capture_targets(lab, [0], tmp_path, session.access)
        captures = Captures(targets, snaplen=262144, index_file=tmp_path / "capture.json")
        captures.start()
        try:
            link = lab.links[0]
            tcp_goodput(EndAccess(session.access("a"), link.a), EndAccess(session.access("b"), link.b), seconds=1)
        finally:
            captures.stop()
        captures.stop()  # idempotent
    index = json.loads((tmp_path / "capture.json").read_text())["captures"]
    assert {(c["node"], c["ifname"], c["peer"]) for c in index} == {("a", "eth1", "b:eth1"), ("b", "eth1", "a:eth1")}
    for c in index:
        magic, packets, clean = read_pcap(tmp_path / c["file"])
        assert magic == 0xA1B23C4D, "nanosecond pcap"
        assert clean, "the file ends on a packet boundary"
        assert packets > 100 and packets == c["packets_captured"]
        assert c["packets_dropped_by_kernel"] == 0
