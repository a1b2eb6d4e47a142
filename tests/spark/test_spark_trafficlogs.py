"""The send and receive logs read by Spark (spark/trafficlogs.py) give the rows and the problems the driver's pandas
reader gave (kept in pandas_reference.py), on logs damaged in every way the reader reports."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from pandas_reference import reference_read_logs
from spark.storage import ResultsStore
from spark.trafficlogs import read_logs

T = 1_800_000_000_000_000_000
FLOWS = [{"name": "f", "flow_id": 1, "priority": 1, "subscribers": ["r2", "r3", "r4", "r5"],
          "slow_subscribers": [{"label": "r2.slow1", "node": "r2"}]},
         {"name": "g", "flow_id": 2, "subscribers": ["r2"]},
         {"name": "h", "flow_id": 3, "subscribers": []}]
LOGS = {
    # blank lines, a cut line, a field too many, a decimal, a size left out, a negative number, spaces
    "send-f.csv": f"seq,send_ns,size\n0,{T},64\n\n1,{T + 1},64\n2,{T + 2}\n3,{T + 3},64,9\n4.5,{T + 4},64\n"
                  f"-5,{T + 5},64\n 6 ,{T + 6} ,64\n7",
    # its own order of columns and one more
    "recv-f-r2.csv": f"recv_ns,extra,seq,send_ns,size\n{T + 10},x,0,{T},64\n{T + 11},y,1,{T + 1},64\n"
                     f"{T + 12},z,1,{T + 1},64\nnot,a,line\n",
    "recv-f-r3.csv": "",                                               # empty
    "recv-f-r5.csv": "\n\n  \n",                                       # only blanks
    "recv-f-r2.slow1.csv": f"seq,send_ns,recv_ns,size\n0,{T},{T + 1000},64\n",
    "send-g.csv": "seq,size\n0,64\n",                                  # no send_ns
    "recv-g-r2.csv": f"seq,send_ns,recv_ns,size\n0,{T},{T + 5},64\n",
    "recv-x-r9.csv": "seq,send_ns,recv_ns,size\n",                     # no such flow
}


def _folder(tmp_path: Path) -> ResultsStore:
    (tmp_path / "traffic").mkdir()
    for name, text in LOGS.items():
        (tmp_path / "traffic" / name).write_text(text)
    (tmp_path / "traffic" / "send-h.csv").write_bytes(b"seq,send_ns,size\n0,1\xff\xfe,64\n")  # not UTF-8
    return ResultsStore(str(tmp_path))


def _rows(df: pd.DataFrame) -> list:
    return sorted(tuple(None if pd.isna(v) else v for v in r) for r in df.astype(object).itertuples(index=False))


def test_the_logs_read_by_spark_are_the_pandas_readers(spark, tmp_path):
    folder = _folder(tmp_path)
    ours: list = []
    logs = read_logs(spark, folder, FLOWS, ours)
    theirs: list = []
    frames = {kind: reference_read_logs(folder, FLOWS, kind, theirs) for kind in ("send", "recv", "slow")}
    # the same problems in the same order; pandas words an undecodable file its own way (with the byte's position)
    said = [(p.severity, p.file, p.problem) for p in ours]
    expected = [(p.severity, p.file, p.problem) for p in theirs]
    assert [s[:2] for s in said] == [e[:2] for e in expected]
    assert [s for s in said if s[1] != "traffic/send-h.csv"] == [e for e in expected if e[1] != "traffic/send-h.csv"]
    assert ("error", "traffic/send-h.csv") in [s[:2] for s in said]
    assert ("warning", "traffic/send-f.csv", "4 unreadable lines skipped (a line cut by an interrupted write?)") \
        in said
    for table, kind in ((logs.sent, "send"), (logs.received, "recv"), (logs.slow_received, "slow")):
        assert _rows(table.toPandas()) == _rows(frames[kind]), kind
    # exact integers: the send times are the nanoseconds written, not a float64's neighbour of them
    assert sorted(logs.sent.toPandas()["send_ns"]) == [T, T + 1, T + 2, T + 5, T + 6]
    assert logs.first_send_ns == T
