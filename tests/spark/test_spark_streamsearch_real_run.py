"""Ground truth for the traffic-header search: on a real capture of our router (tests/spark/data/diamond-pcap-real,
a window of a real diamond run, the reroute at 10.25 s inside it), searching the reassembled streams for
validated traffic headers gives exactly the observations our router's frame decoder gives: the same
(link, direction, flow, seq), at the same time, nothing rejected. No Spark needed."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Dict, Tuple

import pandas as pd
import pytest

from spark.pcap import decode_pcap
from spark.streamsearch import SentIndex, search_pcap

DATA = Path(__file__).with_name("data") / "diamond-pcap-real"


def flows() -> list:
    return json.loads((DATA / "traffic/flows.json").read_text())["flows"]


def sent_log() -> pd.DataFrame:
    parts = []
    for f in flows():
        df = pd.read_csv(DATA / f"traffic/send-{f['name']}.csv", dtype="int64")
        parts.append(df.assign(flow_id=f["flow_id"], priority=f["priority"]))
    return pd.concat(parts, ignore_index=True)


def ends() -> Dict[str, Tuple[str, int]]:
    """address -> (node, link), as ingest maps a stream to its link direction."""
    out = {}
    for link in json.loads((DATA / "lab.json").read_text())["links"]:
        for end in (link["a"], link["b"]):
            out[end["address"].split("/")[0]] = (end["node"], link["index"])
    return out


def observations(result, capture: str) -> Dict[tuple, int]:
    """(capture, link, src node, dst node, flow, seq) -> time, for every observation of one file."""
    addr = ends()
    out = {}
    for stream, ts, flow, seq, *_ in result.observations:
        src_ip, _sport, dst_ip, _dport = result.streams[stream]
        key = (capture, addr[src_ip][1], addr[src_ip][0], addr[dst_ip][0], flow, seq)
        assert key not in out, f"{key} observed twice"
        out[key] = ts
    return out


@pytest.fixture(scope="module")
def captures():
    return {p.name[:-len(".gz")]: gzip.decompress(p.read_bytes()) for p in sorted((DATA / "pcap").glob("*.pcap.gz"))}


def test_header_search_gives_exactly_what_our_frame_decoder_gives(captures):
    index = SentIndex.from_sent(sent_log(), [f["flow_id"] for f in flows()])
    frames, search = {}, {}
    for name, raw in captures.items():
        decoded, found = decode_pcap(raw), search_pcap(raw, index)
        assert decoded.stats.error is None and found.stats.error is None
        assert decoded.stats.resyncs > 0  # the window starts inside the connections: no SYN
        frames.update(observations(decoded, name))
        search.update(observations(found, name))
        st = found.stats
        assert st.headers_rejected == st.headers_in_holes == st.headers_no_send_log == 0, name
        assert st.headers_found == st.headers_validated == len(found.observations), name
    assert len(captures) == 8 and len(frames) == 3112
    assert set(search) == set(frames)
    assert search == frames  # and at the same time: the packet carrying the message's last byte
    # the reroute is in it: zpub.pub1 (flow 1) on r1>r2 before r1 pinned it to r3, on r1>r3 after
    pub1 = sorted((ts, src, dst) for (_c, _l, src, dst, flow, _s), ts in search.items() if flow == 1 and src == "r1")
    assert (pub1[0][1:], pub1[-1][1:]) == (("r1", "r2"), ("r1", "r3"))


def test_on_real_captures_a_header_the_send_log_does_not_confirm_is_rejected(captures):
    sent = sent_log()
    # one zpub.pub1 message's send time off by 1 ns in the log; the realtime flow's log missing
    at = json.loads((DATA / "run.json").read_text())["traffic_start_ns"] + 10_000_000_000  # inside the window
    pub1 = sent[sent["flow_id"] == 1]
    k = (pub1["send_ns"] - at).abs().idxmin()
    sent.loc[k, "send_ns"] += 1
    changed = (1, int(sent.loc[k, "seq"]))
    realtime = next(f["flow_id"] for f in flows() if f["name"] == "zpub.realtime")
    index = SentIndex.from_sent(sent[sent["flow_id"] != realtime], [f["flow_id"] for f in flows()])
    truth = SentIndex.from_sent(sent_log(), [f["flow_id"] for f in flows()])
    rejected = no_log = 0
    for name, raw in captures.items():
        found, right = search_pcap(raw, index), search_pcap(raw, truth)
        got = {(f, s) for _st, _ts, f, s, *_ in found.observations}
        want = {(f, s) for _st, _ts, f, s, *_ in right.observations}
        assert got == {o for o in want if o != changed and o[0] != realtime}
        assert found.stats.rejected_not_sent == (1 if changed in want else 0)
        rejected += found.stats.headers_rejected
        no_log += found.stats.headers_no_send_log
        assert found.stats.headers_no_send_log == sum(1 for o in want if o[0] == realtime)
    assert rejected == 4 and no_log > 0  # pub1 crossed r1>r2 and r2>r4, each captured at both ends


@pytest.mark.parametrize("trim_at", [0, 4096])
def test_on_real_captures_cutting_the_stream_buffers_changes_nothing(captures, monkeypatch, trim_at):
    """Both readers drop the bytes they are done with once a stream's buffer passes 1 MiB; cut at every
    chance instead, a real window's observations (link-state frames in flight between packets included)
    must not move by a byte or a packet."""
    from spark import pcap

    index = SentIndex.from_sent(sent_log(), [f["flow_id"] for f in flows()])
    monkeypatch.setattr(pcap, "_TRIM_AT", 1 << 40)
    whole = {name: (decode_pcap(raw).observations, search_pcap(raw, index).observations)
             for name, raw in captures.items()}
    monkeypatch.setattr(pcap, "_TRIM_AT", trim_at)
    for name, raw in captures.items():
        decoded = decode_pcap(raw)
        assert decoded.stats.codec_errors == 0, name
        assert decoded.observations == whole[name][0], name
        assert search_pcap(raw, index).observations == whole[name][1], name
