"""The synthetic writer (spark.testing) streams each capture through a spill file instead of holding its
records: its pcaps are byte for byte those of the writer that held every record in memory and sorted them
(main 5bd07ad), whose SHA-256 digests are below (every pcap's name and bytes, in name order)."""
from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from spark.testing import PcapWriter, diamond_run, write_run

#: digests of the in-memory writer's output (5bd07ad) for the runs below
DIAMOND_1X = "4bc29e47ddf8422df86f0eb1e8bc161f1a942712b63cb5d3cee524d704709331"
RETRANSMITTED_SWAPPED_TRUNCATED = "86a15a7a672874efbf80d5da18518a183af4e8b161e0edc8972cab950423ce0b"


def pcaps_digest(rd: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((rd / "pcap").iterdir()):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def test_the_1x_diamond_pcaps_are_unchanged(tmp_path):
    assert pcaps_digest(write_run(diamond_run(acks=True), tmp_path)) == DIAMOND_1X


def test_retransmitted_swapped_and_truncated_pcaps_are_unchanged(tmp_path):
    run = replace(diamond_run("odd", duration_s=8.0, acks=True), retransmit={(0, "ab", 3), (1, "ba", 2), (3, "ab", 5)},
                  swap={(0, "ab", 7), (2, "ab", 4)})
    rd = write_run(run, tmp_path, truncate_pcap={"r2-eth2.pcap": 5000})
    assert pcaps_digest(rd) == RETRANSMITTED_SWAPPED_TRUNCATED


def test_records_are_written_by_time_ties_in_the_order_added():
    w = PcapWriter(snaplen=20)
    for ts, frame in ((30, b"c" * 25), (10, b"a"), (30, b"d"), (20, b"b")):
        w.add(ts, frame)
    data = w.to_bytes()
    records, at = [], 24
    while at < len(data):
        sec, ns, cap, orig = (int.from_bytes(data[at + k:at + k + 4], "little") for k in (0, 4, 8, 12))
        records.append((sec * 10**9 + ns, data[at + 16:at + 16 + cap], orig))
        at += 16 + cap
    assert records == [(10, b"a", 1), (20, b"b", 1), (30, b"c" * 20, 25), (30, b"d", 1)]
    assert w.to_bytes(truncate_at=30) == data[:30]
    w.close()
