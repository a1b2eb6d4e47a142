"""tshark with the dissector on a real run of our own, short, whose link carries every kind a router link carries
(HELLO after a router restart, KEEPALIVE, DATA, LINKSTATE, FRAGMENT pieces of 100 kB messages, QUERY, REPLY):
every one decoded with no malformed mark, and the same messages as the analysis's decoder finds; cut to start
mid-connection (editcap), it resynchronises on the frame magic as that decoder does.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from router.codec import FRAME_HEADER_SIZE, CodecError, FrameKind, parse_frame_header
from tests import realruns
from tests.wireshark.tshark import analysis_flows, decode, needs_tshark

pytestmark = [pytest.mark.integration, needs_tshark,
              pytest.mark.skipif(bool(realruns.missing()), reason=realruns.missing() or "ok")]

#: two routers, one link: fragmented messages (100 kB > a 64 KiB batch, < the 256 KiB streaming threshold),
#: small real-time ones, queries answered on r2, and r2 killed and restarted (its link's HELLO)
WIRE_TOPOLOGY = """\
name: wire
description: every frame kind a router link carries - fragmented messages, queries, link state, a restart
duration: 8s
defaults:
  link:
    bw: 50mbit
nodes:
  r1: {}
  r2: {}
links:
  - endpoints: ["r1:eth1", "r2:eth1"]
traffic:
  - {profile: constant, name: big, from: r1, to: [r2], rate: 4mbit, size: 100kb, priority: data, start: 1s, stop: 7s}
  - {profile: constant, name: small, from: r1, to: [r2], rate: 500kbit, size: 500b, priority: real_time, start: 1s,
     stop: 7s}
  - profile: query
    name: lookup
    from: r1
    key: svc/lookup
    per_second: 10
    timeout: 1s
    size: 64
    queryables:
      - {node: r2, service_time: 10ms, reply_size: 2KiB}
    start: 1s
    stop: 7s
scenario:
  - {at: 3s, action: kill_router, node: r2}
  - {at: 4s, action: restart_router, node: r2}
capture:
  links: all
"""


@pytest.fixture(scope="module")
def wire_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wire")
    (folder / "wire.yaml").write_text(WIRE_TOPOLOGY)
    return realruns.run(folder / "wire.yaml", folder / "results", timeout=300)


def test_every_frame_kind_of_a_real_link_decodes_without_a_malformed_mark(wire_run):
    manifest = json.loads((wire_run / "manifest.json").read_text())
    assert manifest["extra"]["ports"] == {"router": 7447, "client": 7448, "metrics": 9464}
    flows = {f["name"]: f["flow_id"] for f in json.loads((wire_run / "traffic/flows.json").read_text())["flows"]}
    for pcap in sorted((wire_run / "pcap").glob("*.pcap")):
        got = decode(pcap, "-o", f"tb.manifest:{wire_run / 'manifest.json'}")
        assert got.malformed() == [], f"{pcap.name}: {got.malformed()[:5]}"
        kinds = {FrameKind(k).name for k in got.kinds}
        assert kinds >= {"HELLO", "KEEPALIVE", "DATA", "LINKSTATE", "FRAGMENT", "QUERY", "REPLY"}, pcap.name
        assert got.flows() == analysis_flows(pcap)
        # every 100 kB message was reassembled from its pieces, each with its traffic header
        assert got.flows()[flows["big"]] == len(got.values["tb.reassembled"]) > 0
        assert got.flows()[flows["small"]] > 0
        assert "r1" in got.values["tb.origin_name"]


def packets_starting_inside_a_frame(pcap: Path) -> list[int]:
    """The numbers of the packets toward the router port whose TCP payload starts inside a frame of its stream,
    found by following each stream's frames (the codec's headers) from its first byte in the capture, in
    sequence order (a retransmission is skipped; a stream stops being followed at a gap)."""
    listed = subprocess.run(["tshark", "-r", str(pcap), "-o", "tcp.desegment_tcp_streams:FALSE", "-Y",
                             "tcp.len > 0 && tcp.dstport == 7447", "-T", "fields", "-e", "frame.number",
                             "-e", "tcp.stream", "-e", "tcp.seq", "-e", "tcp.payload"],
                            capture_output=True, text=True, check=True).stdout
    streams: dict = {}  # stream -> [next seq, bytes left of the frame, partial header] (None: stopped)
    inside = []
    for line in listed.splitlines():
        number, stream, seq, payload = line.split("\t")
        data = bytes.fromhex(payload.replace(":", ""))
        state = streams.setdefault(stream, [int(seq), 0, b""])
        if state[0] is None or int(seq) < state[0]:
            continue  # not followed any more, or a retransmission
        if int(seq) > state[0]:
            state[0] = None  # a gap in the capture: where frames start is not known beyond it
            continue
        if state[1] or state[2]:
            inside.append(int(number))
        pos = 0
        while pos < len(data):
            if state[1]:
                taken = min(state[1], len(data) - pos)
                state[1] -= taken
                pos += taken
                continue
            missing = FRAME_HEADER_SIZE - len(state[2])
            state[2] += data[pos:pos + missing]
            pos += missing
            if len(state[2]) == FRAME_HEADER_SIZE:
                state[1] = parse_frame_header(state[2])[2]
                state[2] = b""
        state[0] = int(seq) + len(data)
    return inside


def test_a_capture_cut_mid_connection_resynchronises_on_the_magic(wire_run, tmp_path):
    """editcap drops the first packets of a real capture (written as pcap: the analysis reads no pcapng), up to
    one whose TCP payload starts inside a frame (found by following the stream's frames from its start): the dissector skips to the next frame header (a note, not a
    malformed frame) and then decodes the same messages as the analysis's decoder, which resynchronises on the
    magic too."""
    pcap = wire_run / "pcap/r1-eth1.pcap"
    inside = [n for n in packets_starting_inside_a_frame(pcap) if n >= 200]  # well into the run
    assert inside, "no packet toward the router port starts inside a frame (the 100 kB messages span many)"
    cut = tmp_path / f"from-{inside[0]}.pcap"
    subprocess.run(["editcap", "-F", "nsecpcap", "-r", str(pcap), str(cut), f"{inside[0]}-{10**9}"], check=True,
                   capture_output=True)
    got = decode(cut)
    assert got.malformed() == []
    assert any(e.get("message", "").startswith("Capture started mid-stream") for e in got.experts)
    assert got.flows() == analysis_flows(cut) and sum(got.flows().values()) > 0
