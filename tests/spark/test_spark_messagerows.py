"""A bucket of observations -> its messages' transit, hop and path rows (spark.messagerows.message_rows_of), against
the definitions written out with pandas one message at a time: parallel links, a null link, a null sequence
number, an unknown flow, an observation without its far end, a direction seen by one capture side only, ties in
time. (Whole analyses through both of message_rows' ways, a local folder's tasks and a URI's grouping, equal the
reference path figure by figure: test_spark_figures_in_spark.py, test_spark_analysis.py's URI test.)"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from spark.messagerows import bucket_count, message_rows_of
from spark.messageslots import bucket_of

NAMES = {7: "bulk", 9: "pub1"}
COLUMNS = ["flow_id", "seq", "link", "src_node", "dst_node", "side", "ts_ns"]
T0 = 1_800_000_000_000_000_000  # ns since the epoch: beyond a float's exact integers


def _observations(rows):
    cols = list(zip(*rows))
    types = [pa.int64(), pa.int64(), pa.int32(), pa.string(), pa.string(), pa.string(), pa.int64()]
    return pa.table([pa.array(c, t) for c, t in zip(cols, types)], names=COLUMNS)


def _sample():
    rows = []
    rng = np.random.default_rng(3)
    for seq in range(40):
        t = T0 + seq * 1_000_000
        d1, d2 = (int(x) for x in rng.integers(50_000, 90_000, 2))
        # pub1 (flow 9) r1 -> r2 on link 1, r2 -> r4 on link 2 (both capture sides), and on a parallel link 3
        rows += [(9, seq, 1, "r1", "r2", "tx", t), (9, seq, 1, "r1", "r2", "rx", t + 20_000),
                 (9, seq, 2, "r2", "r4", "tx", t + d1), (9, seq, 2, "r2", "r4", "rx", t + d1 + 15_000)]
        if seq % 5 == 0:
            rows += [(9, seq, 3, "r2", "r4", "tx", t + d1 + 3)]
        if seq % 7 == 0:  # a retransmission seen later on the first link
            rows += [(9, seq, 1, "r1", "r2", "tx", t + d2 * 10)]
        # bulk (flow 7): a tie in time between two directions, one capture side only on the second
        rows += [(7, seq, 1, "r1", "r2", "rx", t + 5), (7, seq, 4, "r1", "r3", "tx", t + 5),
                 (7, seq, 5, "r3", "r4", "unknown", t + d2)]
    rows += [(9, 3, None, "r2", "r4", "tx", T0 + 77),       # a null link: no transit row, still a hop and a path
             (9, None, 1, "r1", "r2", "tx", T0 + 1),         # a null sequence number: transit only
             (11, 5, 1, "r1", "r2", "tx", T0 + 2),           # an unknown flow: transit only
             (9, 6, 1, "r1", None, "tx", T0 + 3),            # no far end: left out
             (9, 8, 2, "r2", "r4", None, T0 + 8_000_000)]    # a null side
    return rows


def _seen(rows):
    """Per (flow id, seq, link, src, dst): first, last, each side's first time (a null a value of its own)."""
    out = {}
    for fid, seq, link, src, dst, side, ts in rows:
        if src is None or dst is None:
            continue
        k = (fid, seq, link, src, dst)
        first, last, tx, rx = out.get(k, (ts, ts, None, None))
        out[k] = (min(first, ts), max(last, ts), min(tx, ts) if side == "tx" and tx is not None else
                  (ts if side == "tx" else tx), min(rx, ts) if side == "rx" and rx is not None else
                  (ts if side == "rx" else rx))
    return out


def _by_kind(table):
    rows = table.to_pylist()
    return {k: [r for r in rows if r["kind"] == k] for k in ("transit", "hop", "path")}


def test_the_rows_are_those_of_each_message_one_by_one():
    rows = _sample()
    got = _by_kind(message_rows_of(_observations(rows), NAMES))
    seen = _seen(rows)

    want_transit = Counter((link, src, dst, rx - tx if tx is not None and rx is not None else None)
                           for (fid, seq, link, src, dst), (_, _, tx, rx) in seen.items() if link is not None)
    assert Counter((r["link"], r["n1"], r["n2"], r["delay_ns"]) for r in got["transit"]) == want_transit
    assert all(r["flow"] is None for r in got["transit"])

    known = {k: v for k, v in seen.items() if k[0] in NAMES and k[1] is not None}
    want_hops = Counter((NAMES[a[0]], a[3], a[4], b[4], vb[0] - va[0])
                        for a, va in known.items() for b, vb in known.items()
                        if a[:2] == b[:2] and a[4] == b[3] and a[3] != b[4])
    assert Counter((r["flow"], r["n1"], r["n2"], r["n3"], r["delay_ns"]) for r in got["hop"]) == want_hops
    assert want_hops[("pub1", "r1", "r2", "r4", 77 - 3_000_000)] == 1  # the null link's direction is a hop

    messages = {}
    for (fid, seq, link, src, dst), v in known.items():
        messages.setdefault((NAMES[fid], seq), []).append((v[0], f"{src}>{dst}", dst, v))
    assert len(got["path"]) == len(messages)
    for r in got["path"]:
        dirs = messages[(r["flow"], r["seq"])]
        assert r["hops"] == [h for _, h, _, _ in sorted(dirs)]
        assert r["first_ns"] == min(v[0] for *_, v in dirs) and r["last_ns"] == max(v[1] for *_, v in dirs)
        arrivals = {}
        for _, _, node, (first, _, _, rx) in dirs:
            at = rx if rx is not None else first
            arrivals[node] = min(arrivals.get(node, at), at)
        assert dict(r["arrivals"]) == arrivals
    # parallel links: a direction seen on two links is two hops of the path, and two pairs
    assert messages[("pub1", 5)] and [r for r in got["path"] if r["seq"] == 5 and r["flow"] == "pub1"][0]["hops"] \
        == ["r1>r2", "r2>r4", "r2>r4"]
    # a tie in time: by name
    assert [r for r in got["path"] if r["seq"] == 1 and r["flow"] == "bulk"][0]["hops"][:2] == ["r1>r2", "r1>r3"]


def test_nothing_in_gives_nothing_out():
    empty = _observations([(1, 1, 1, "a", "b", "tx", 1)]).slice(0, 0)
    assert message_rows_of(empty, NAMES).num_rows == 0
    assert message_rows_of(_observations([(9, 1, 1, "r1", None, "tx", 5)]), NAMES).num_rows == 0


def test_a_message_is_in_one_bucket_and_the_buckets_are_even():
    fid = np.repeat(np.array([7, 9, 11], dtype=np.int64), 100_000)
    seq = np.tile(np.arange(100_000, dtype=np.int64), 3)
    b = bucket_of(fid, seq, 8)
    assert np.array_equal(b, bucket_of(fid.copy(), seq.copy(), 8))
    counts = np.bincount(b, minlength=8)
    assert counts.min() > 0.95 * counts.mean() and counts.max() < 1.05 * counts.mean()
    assert bucket_of(np.array([np.iinfo(np.int64).min]), np.array([3]), 8)[0] in range(8)


@pytest.mark.parametrize("observations,per,buckets", [(0, 100, 2), (150, 100, 2), (1_000, 100, 10), (1_001, 100, 11)])
def test_bucket_count(observations, per, buckets):
    assert bucket_count(observations, per) == buckets


def test_a_bucket_reads_only_its_slots_row_groups_and_gets_what_filtering_the_whole_file_gets(tmp_path):
    """The capture tasks write the observations grouped by slot (a row group each, listed in the metadata); a
    bucket's task reads its slots' row groups. The same rows as reading a file without the list (one Spark
    wrote) whole and keeping the bucket's messages; every observation in exactly one bucket."""
    import pyarrow.parquet as pq

    from spark.capturetasks import CAPTURE_SCHEMAS, _DECODED, _OBSERVATION, _TRAFFIC, _write_observations
    from spark.messagerows import _read_bucket
    from spark.messageslots import SLOT_METADATA, SLOTS
    from pyspark.sql.pandas.types import to_arrow_schema

    rows = [r for r in _sample() if r[3] is not None]
    n = len(rows)
    schema = to_arrow_schema(_DECODED)
    columns = dict(zip(COLUMNS, zip(*rows)))
    decoded = pa.table({f.name: pa.array(columns[f.name], f.type) if f.name in columns else
                        pa.array([_OBSERVATION] * (n - 1) + [_TRAFFIC], f.type) if f.name == "row_kind" else
                        pa.nulls(n, f.type) for f in schema}, schema=schema)
    others = _write_observations(decoded, str(tmp_path), 3)
    assert others.num_rows == 1  # the traffic row comes back; the observations are in the file
    written = pq.ParquetFile(tmp_path / "part-00003.parquet")
    slots = __import__("json").loads(written.schema_arrow.metadata[SLOT_METADATA.encode()])
    assert written.num_row_groups == len(slots) > 1 and slots == sorted(slots) and max(slots) < SLOTS
    assert written.schema_arrow.names == CAPTURE_SCHEMAS["observations"].names
    plain, rewritten = tmp_path / "plain.parquet", tmp_path / "rewritten.parquet"
    pq.write_table(written.read().replace_schema_metadata(None), plain)  # the same rows, no slots listed
    pq.write_table(written.read(), rewritten)  # the list kept, the row groups not: the list is not believed
    key = ["flow_id", "seq", "link", "src_node", "dst_node", "side", "ts_ns"]
    for buckets in (2, 3, 64):
        got = [_read_bucket(str(tmp_path / "part-00003.parquet"), buckets, k) for k in range(buckets)]
        assert sum(t.num_rows for t in got) == n - 1
        for k, t in enumerate(got):
            for other in (plain, rewritten):
                assert sorted(t.select(key).to_pylist(), key=str) == \
                    sorted(_read_bucket(str(other), buckets, k).select(key).to_pylist(), key=str)
            both = {(r["flow_id"], r["seq"]) for r in t.to_pylist()}
            assert all((r["flow_id"], r["seq"]) not in both for j, u in enumerate(got) if j != k
                       for r in u.to_pylist())
