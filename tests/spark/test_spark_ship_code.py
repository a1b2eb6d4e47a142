"""The analysis' code shipped to a cluster's executors or a Spark Connect server (spark/session.py _ship_code) is a
temporary zip that is not left behind: removed once uploaded to a Connect server, and when the process ends
otherwise (the driver serves it to executors as they start, for as long as the session lives)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKES = textwrap.dedent("""
    import os, sys, tempfile, zipfile
    from spark import session

    class Context:
        def addPyFile(self, path):
            print("added", path, os.path.exists(path) and zipfile.is_zipfile(path), flush=True)

    class Classic:
        sparkContext = Context()

    class Connect:
        def addArtifacts(self, path, pyfile):
            print("uploaded", path, os.path.exists(path) and zipfile.is_zipfile(path) and pyfile, flush=True)

    Connect.__module__ = "pyspark.sql.connect.session"
    session._ship_code(Connect() if sys.argv[1] == "connect" else Classic())
    print("still there at the end:", [p for p in os.listdir(sys.argv[2])], flush=True)
""")


def _ship(kind: str, tmp_path: Path) -> list:
    done = subprocess.run([sys.executable, "-c", FAKES, kind, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path),
                                                       "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_connect_upload_leaves_no_zip_behind(tmp_path):
    lines = _ship("connect", tmp_path)
    assert lines[0].startswith("uploaded ") and lines[0].endswith(" True"), lines
    assert lines[1] == "still there at the end: []", lines
    assert list(tmp_path.iterdir()) == []


def test_a_cluster_s_zip_lives_as_long_as_the_process(tmp_path):
    lines = _ship("cluster", tmp_path)
    assert lines[0].startswith("added ") and lines[0].endswith(" True"), lines
    shipped = Path(lines[0].split()[1]).name
    assert lines[1] == f"still there at the end: [{shipped!r}]", lines  # the executors may still fetch it
    assert list(tmp_path.iterdir()) == []  # gone once the process ended
