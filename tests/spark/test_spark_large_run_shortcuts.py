"""What makes a large run's analysis cheaper gives what the plain way gave: the send and receive logs read as
integers at once (else as strings, exactly), the receivers of each message, the captures' piece size and the
order their tasks start in. (The observations written by the capture tasks themselves:
test_spark_pcap_pieces.py; whole analyses equal figure by figure: bench/analyze_growth.py and the real-run
tests.)"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from spark.capturetasks import PIECE_BYTES, PIECE_BYTES_MAX, CaptureTask, auto_piece_bytes, largest_first, local_cores
from spark.ingest import _integer_csv, exact_ints
from spark.pcap import CapturePiece
from spark.reroutes import _receivers

COLS = ["seq", "send_ns", "size"]


def _exact(text: bytes) -> pd.DataFrame:
    """The plain reading: strings, then :func:`exact_ints`; a line with a value it does not take is dropped."""
    import io

    df = pd.read_csv(io.BytesIO(text), dtype=str, on_bad_lines="skip", engine="c")
    num = pd.DataFrame({c: exact_ints(df[c]) for c in COLS})
    return num[num[["seq", "send_ns"]].notna().all(axis=1)].reset_index(drop=True)


@pytest.mark.parametrize("body", [
    b"1,1000,64\n2,2000,64\n",
    b"1,1000,64\r\n2,2000,\r\n",          # CRLF, a blank size
    b"1,-1000,64\n\n2,2000,64\n",          # a negative time, an empty line
    b"1,1000,64\n2,2000,64",               # no newline at the end
])
def test_a_clean_log_read_as_integers_at_once_equals_the_exact_reading(body):
    text = b"seq,send_ns,size\n" + body
    fast = _integer_csv(text, COLS)
    assert fast is not None
    pd.testing.assert_frame_equal(fast.reset_index(drop=True), _exact(text), check_dtype=True)


@pytest.mark.parametrize("text", [
    b"seq,send_ns,size\n1,1000,64\n2,20",             # a line cut short by an interrupted write
    b"seq,send_ns,size\n1,0x10,64\n",                 # Arrow's reader takes hexadecimal; a log has none
    b"seq,send_ns,size\n1,1e3,64\n",
    b"seq,send_ns,size\n1,1000,64.0\n",
    b"seq,send_ns,size\n1,+1000,64\n",
    b"seq,send_ns,size\n1, 1000,64\n",
    b"seq,send_ns,size\n1,1000,64,7\n",               # a field too many
    b"seq,size,send_ns\n1,64,1000\n",                 # another order of columns
    b"seq,send_ns,size\n1,99999999999999999999,64\n",  # beyond int64
])
def test_any_other_log_is_left_to_the_exact_reading(text):
    assert _integer_csv(text, COLS) is None


def test_receivers_of_each_message_sorted_once():
    rng = np.random.default_rng(7)
    n = 20_000
    d = pd.DataFrame({"flow": rng.choice(["a", "b", "bulk"], n), "seq": rng.integers(0, 5_000, n),
                      "node": rng.choice(["r1", "r4", "h2", "h10"], n)})
    want = d.groupby(["flow", "seq"])["node"].agg(lambda x: sorted(set(x))).rename("receivers").reset_index()
    got = _receivers(d)
    assert got["flow"].tolist() == want["flow"].tolist() and got["seq"].tolist() == want["seq"].tolist()
    assert got["receivers"].tolist() == want["receivers"].tolist()
    assert _receivers(d.iloc[:0]).empty


def test_captures_are_split_only_where_the_files_would_not_keep_every_core_busy():
    mb = 1_000_000
    # a 60 s diamond (8 x 30 MB) and a 100x one (8 x 0.6-1 GB) on 2 cores: whole files
    assert auto_piece_bytes(240 * mb, 2) == PIECE_BYTES
    assert auto_piece_bytes(6_150 * mb, 2) == PIECE_BYTES_MAX > 993 * mb
    # one 2 GB capture on 2 cores: 4 pieces of 500 MB; on 16 cores: pieces of the least size
    assert auto_piece_bytes(2_000 * mb, 2) == 500 * mb
    assert auto_piece_bytes(2_000 * mb, 16) == PIECE_BYTES
    assert auto_piece_bytes(10 ** 12, 2) == PIECE_BYTES_MAX  # a task's memory stays bounded
    assert auto_piece_bytes(6_150 * mb, None) == PIECE_BYTES  # a cluster's cores are not known here


@pytest.mark.parametrize("master,cores", [("local", 1), ("local[2]", 2), ("local[4,3]", 4),
                                          ("local[*]", os.cpu_count()), ("spark://h:7077", None), (None, None),
                                          ("yarn", None), ("local-cluster[2,1,1024]", None)])
def test_local_cores(master, cores):
    assert local_cores(master) == cores


def test_the_largest_task_starts_first(tmp_path):
    sizes = {"a.pcap": 300, "b.pcap": 900, "c.pcap": 300, "d.pcap": 600}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"\0" * size)
    tasks = [CaptureTask(n, str(tmp_path / n), {}) for n in sizes]
    tasks.append(CaptureTask("e.pcap", str(tmp_path / "e.pcap"), {}, CapturePiece(1, 24, 724, (24,))))
    assert [tasks[k].name for k in largest_first(tasks)] == ["b.pcap", "e.pcap", "d.pcap", "a.pcap", "c.pcap"]
