"""A capture decoded in pieces (spark.pcap capture_pieces / decode_pcap_piece, one Spark task each) gives
exactly what decoding it whole gives: the same observations at the same times, the same traffic and counts.
On real captures cut into pieces at several sizes (boundaries inside frames), and on hand-made captures
whose TCP streams are reordered, retransmitted, cut by the snap length, fragmented or missing a segment,
cut at every record with a lead-in of one record, so that most pieces must lengthen their lead-in."""
from __future__ import annotations

import gzip
import json
import pandas as pd
import pytest

from router.codec import encode_fragment, encode_message, make_payload
from spark.testing import PcapWriter
from spark.pcap import (
    _Stream, capture_pieces, decode_pcap_file, decode_pcap_piece, merge_pieces,
)
from spark.capturetasks import CAPTURE_SCHEMAS, CaptureTask, decode_captures, piece_tasks
from spark.streamsearch import SentIndex, search_pcap_file, search_pcap_piece

from tests.spark.test_spark_pcap_decode import A, B, MS, T, capture, data_frame, segments, stream

C = "10.10.0.3"
from tests.spark.test_spark_streamsearch_real_run import DATA, flows, sent_log


class _Recording(_Stream):
    """The frame walker, noting whether a piece began inside one of its DATA frames."""

    __slots__ = ()
    inside_frames = [0]

    def lead_in_complete(self) -> bool:
        if self.frame_end >= 0 and self.frame_start < self.next:
            _Recording.inside_frames[0] += 1
        return super().lead_in_complete()


def assert_same(whole, parts) -> None:
    merged = merge_pieces(parts)
    assert merged.stats.error is None and whole.stats.error is None
    assert merged.observations == whole.observations
    assert merged.streams == whole.streams
    assert merged.traffic == whole.traffic and list(merged.traffic) == list(whole.traffic)
    assert merged.stats == whole.stats


def fragmented(seq: int, size: int, piece: int = 700) -> list:
    msg = encode_message("demo/x", make_payload(3, seq, T + seq, size), priority=6)
    return [encode_fragment(6, len(msg), off, msg[off:off + piece]) for off in range(0, len(msg), piece)]


def _cases():
    frames = [data_frame(1, s, size=90 + 41 * (s % 7)) for s in range(60)]
    frames[20:20] = fragmented(100, 3000)
    data = stream(frames)
    segs = segments(data, 200)
    n = len(segs)
    reordered = list(range(n))
    for i in range(3, n - 3, 9):  # a segment arrives after the next one (the gap it leaves is filled by it)
        reordered[i], reordered[i + 1] = reordered[i + 1], reordered[i]
    retrans = list(range(n))
    for i in range(25, 4, -6):  # segments sent again a few packets later
        retrans.insert(i + 3, i)
    lost = [k for k in range(n) if k not in (11, 30)]  # two segments never captured: gaps never filled
    mid = [(off - 300, d) for off, d in segs if off >= 300]  # the capture began mid-stream (no SYN)
    return {
        "in order": dict(segs=segs),
        "reordered": dict(segs=segs, order=reordered),
        "retransmitted": dict(segs=segs, order=retrans),
        "lost segments": dict(segs=[segs[k] for k in lost]),
        "lost and reordered": dict(segs=[segs[k] for k in lost], order=[min(i ^ 1, len(lost) - 1)
                                                                        for i in range(len(lost))]),
        "snap length": dict(segs=segs, snaplen=14 + 20 + 20 + 120),
        "no syn": dict(segs=mid, syn=False),
    }


def quiet_stream() -> bytes:
    """Two connections: the second sends half a frame, stays quiet for longer than a lead-in, then the rest."""
    w = PcapWriter()
    busy = [stream([])] + [data_frame(1, s) for s in range(40)]  # a frame per segment: in step at each
    quiet = stream([data_frame(2, s, size=400) for s in range(3)])
    w.tcp(T - 2 * MS, C, 40001, B, 7447, 4999, flags=0x02)
    w.tcp(T - MS, A, 40000, B, 7447, 999, flags=0x02)
    half = len(quiet) - 200
    w.tcp(T, C, 40001, B, 7447, 5000, quiet[:half])
    off = 0
    for i, frame in enumerate(busy):
        w.tcp(T + (i + 1) * MS, A, 40000, B, 7447, 1000 + off, frame)
        off += len(frame)
    w.tcp(T + 90 * MS, C, 40001, B, 7447, 5000 + half, quiet[half:])
    return w.to_bytes()


@pytest.mark.parametrize("case", list(_cases()) + ["quiet stream"])
def test_pieces_of_a_hand_made_capture_cut_at_every_record(tmp_path, case):
    pcap = tmp_path / "c.pcap"
    pcap.write_bytes(quiet_stream() if case == "quiet stream" else capture(**_cases()[case]))
    whole = decode_pcap_file(str(pcap))
    assert whole.observations
    pieces = capture_pieces(str(pcap), 1, lead_in_bytes=(1,))
    if case.startswith("lost"):  # a segment never captured: the file is one piece, decoded whole
        assert len(pieces) == 1
    else:
        assert len(pieces) > 40
    assert_same(whole, [decode_pcap_piece(str(pcap), p) for p in pieces])


def test_pieces_of_real_captures_at_several_sizes(short_diamond_run):
    files = sorted((short_diamond_run.run_dir / "pcap").glob("*.pcap"))
    assert files
    _Recording.inside_frames[0] = 0
    cut = 0
    for f in files:
        whole = decode_pcap_file(str(f))
        assert whole.observations
        size = f.stat().st_size
        for target in (size // 2 + 1, size // 3 + 1, size // 7 + 1, 256 << 10):
            pieces = capture_pieces(str(f), target, lead_in_bytes=(64 << 10, 1 << 20))
            cut += len(pieces) - 1
            assert_same(whole, [decode_pcap_piece(str(f), p, _Recording) for p in pieces])
    assert cut > 8 * 10
    assert _Recording.inside_frames[0] > 0  # pieces began inside DATA frames


@pytest.fixture(scope="module")
def window(tmp_path_factory):
    """The real window's captures (no SYN: every stream begins mid-connection) as files."""
    folder = tmp_path_factory.mktemp("window")
    for p in sorted((DATA / "pcap").glob("*.pcap.gz")):
        (folder / p.name[:-len(".gz")]).write_bytes(gzip.decompress(p.read_bytes()))
    return sorted(folder.glob("*.pcap"))


def test_pieces_of_a_real_window_without_syn_frames_and_header_search(window):
    index = SentIndex.from_sent(sent_log(), [f["flow_id"] for f in flows()])
    for f in window:
        for target in (f.stat().st_size // 3 + 1, 64 << 10):
            pieces = capture_pieces(str(f), target, lead_in_bytes=(32 << 10,))
            assert_same(decode_pcap_file(str(f)), [decode_pcap_piece(str(f), p) for p in pieces])
            assert_same(search_pcap_file(str(f), index), [search_pcap_piece(str(f), index, p) for p in pieces])


@pytest.mark.parametrize("tasks_write", [True, False], ids=["observations-written-by-the-tasks", "held-by-spark"])
def test_capture_tasks_in_pieces_give_the_tables_the_whole_files_gave(spark, short_diamond_run, tmp_path, tasks_write):
    """The shared run's tables (its analysis decoded each capture whole) against its captures decoded by
    Spark in pieces of 4 MB (two or three tasks per file; three of its files): observations, link traffic and
    captures rows; the observations written by the tasks into a folder (a local run's), or held by Spark (a
    URI's run, which Spark writes)."""
    rd = short_diamond_run.run_dir
    addr = {}
    for link in json.loads((rd / "lab.json").read_text())["links"]:
        for end in (link["a"], link["b"]):
            addr[end["address"].split("/")[0]] = (end["node"], int(link["index"]))
    caps = {c["file"]: c for c in json.loads((rd / "pcap" / "capture.json").read_text())["captures"]}
    names = sorted(caps)[:3]  # a link's two ends and one of another link: enough for what pieces change
    tasks = [CaptureTask(name, str(rd / "pcap" / name), caps[name]) for name in names]
    pieces = piece_tasks(spark, tasks, 4_000_000)
    assert len(pieces) >= 2 * len(tasks)
    decoded = decode_captures(spark, pieces, True, addr, observations_dir=str(tmp_path) if tasks_write else None)
    try:
        if tasks_write:
            assert decoded.observations is None
            assert sorted(p.name for p in tmp_path.iterdir()) == [f"part-{k:05d}.parquet" for k in range(len(pieces))]
            observations = pd.read_parquet(tmp_path)
        else:
            observations = decoded.observations.toPandas()
        got = {"observations": observations, "link_traffic": decoded.link_traffic.toPandas(),
               "captures": pd.DataFrame(decoded.stats, columns=CAPTURE_SCHEMAS["captures"].names)}
    finally:
        decoded.release()
    assert [c[0] for c in decoded.stats] == names  # in the files' order, though the largest piece ran first
    for name, table in got.items():
        whole = pd.read_parquet(rd / "parquet" / name)
        whole = whole[whole["capture"].isin(names)]
        assert len(table) == len(whole) > 0, name
        if name == "captures":
            table, whole = table.drop(columns="decode_seconds"), whole.drop(columns="decode_seconds")
        columns = list(whole.columns)
        pd.testing.assert_frame_equal(table[columns].sort_values(columns).reset_index(drop=True),
                                      whole.sort_values(columns).reset_index(drop=True), check_dtype=False, obj=name)
