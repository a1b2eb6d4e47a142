"""A lost segment retransmitted inside a router frame that spans several TCP segments, as a real run captures it.

The two captures in tests/wireshark/data are cut (editcap) from one link of a short diamond run whose tc queue
(4 packets) dropped two segments of one DATA batch at 8.46 s. Both ends of the link:

- the sender's end (r1-eth2) captured the originals, then the two fast retransmissions;
- the receiver's end (r3-eth1) never saw the originals ("previous segment not captured"), only the
  retransmissions, which fill the gap.

Wireshark's default TCP reassembly (tshark 4.0, Debian 12's) marks the retransmissions malformed ("New fragment
overlaps old data (retransmission?)": both at the sender's end, one at the receiver's) and, at the receiver's
end, never decodes the frames behind the gap. With the TCP
preference every printed command passes (testbed/wireshark/dissector.py ``TCP_PREFS``) tshark decodes the
same messages at both ends as the analysis's decoder (spark/pcap.py) does, with no malformed mark.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.wireshark.tshark import analysis_flows, decode, needs_tshark, tshark_version

pytestmark = needs_tshark

DATA = Path(__file__).with_name("data")
ENDS = ["fast-retransmission-sender.pcap", "fast-retransmission-receiver.pcap"]
#: the tshark whose default reassembly the second test describes (scripts/setup.sh installs Debian 12's)
DESCRIBED = "4.0."
THIS_TSHARK = tshark_version()


@pytest.mark.parametrize("name", ENDS)
def test_a_retransmission_inside_a_frame_decodes_as_the_analysis_does(name):
    pcap = DATA / name
    got = decode(pcap)
    assert got.malformed() == []
    assert got.flows() == analysis_flows(pcap) == Counter({4: 11})  # the bulk flow's 11 messages in the cut


@pytest.mark.skipif(not THIS_TSHARK.startswith(DESCRIBED),
                    reason=f"describes tshark {DESCRIBED}x's default TCP reassembly; this is {THIS_TSHARK!r}")
def test_without_the_tcp_preference_wireshark_marks_the_retransmissions_malformed():
    """What the preference is for (and that the captures hold the case): Wireshark's default reassembly."""
    sender, receiver = (decode(DATA / name, tcp_prefs=()) for name in ENDS)
    for got in (sender, receiver):
        assert got.malformed() and all("New fragment overlaps old data" in e.get("showname", "")
                                       for e in got.malformed())
    assert sender.flows() == Counter({4: 11})
    assert receiver.flows() == Counter({4: 7})  # the four messages behind the gap are lost
