"""Real runs made once and read by many tests (the fixtures are in tests/conftest.py and tests/run/conftest.py).

A run is `testbed run --no-analyze` in a process of its own, as a user runs it, then what `testbed run` does
after its traffic (testbed/run/analysis.py: `testbed analyze`, then `testbed check`) in this process, with the
test session's Spark: a run shared this way costs one run and one analysis, and no JVM start of its own. Its
results folder is handed out to be read: a test that writes into one (`testbed check` rewrites
report/check.json) works on a copy (:func:`copy_of`).
"""
from __future__ import annotations

import contextlib
import fnmatch
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Set

import pytest

ROOT = Path(__file__).resolve().parents[1]


def missing() -> str:
    """Why `testbed run` cannot run here ('' when it can): root, Mininet, openssh-server, tcpdump."""
    if os.geteuid() != 0:
        return "needs root for `testbed run` (network namespaces, tc)"
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "needs Mininet for `testbed run` (apt-get install mininet; run through ./test.sh)"
    if shutil.which("mnexec") is None:
        return "needs mnexec (Mininet) for `testbed run`"
    if not Path("/usr/sbin/sshd").exists():
        return "needs openssh-server for `testbed run` (deploy over SSH)"
    if shutil.which("tcpdump") is None:
        return "needs tcpdump for `testbed run` captures"
    return ""


@dataclass
class RunContract:
    """What a real run and its analysis did with the results folder (runfolder.layout)."""

    run_files: Set[str] = field(default_factory=set)
    analysis_reads: Set[str] = field(default_factory=set)
    analysis_files: Set[str] = field(default_factory=set)

    def read(self, rel: str) -> bool:
        """Whether the analysis read ``rel``: by its path, or through a pattern (``pcap/*.pcap``)."""
        return any(fnmatch.fnmatchcase(rel, pattern) for pattern in self.analysis_reads)


@dataclass(frozen=True)
class AnalysedRun:
    """A completed run's results folder, analysed; ``passed``: `testbed check`'s verdict on its expectations
    (what `testbed run` reports as PASS or FAIL); ``check_output``: what the check printed; ``contract``: what
    the run and the analysis did with the folder, when it was recorded."""

    run_dir: Path
    passed: bool
    check_output: str
    contract: Optional[RunContract] = field(default=None, repr=False)


def files_of(folder: Path) -> Set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def _recorded(method, reads: Set[str]):
    def recording(self, rel: str = "", *args, **kwargs):
        if rel:
            reads.add(rel)
        return method(self, rel, *args, **kwargs)
    return recording


def run(topology: Path, results: Path, *options: str, timeout: float = 900) -> Path:
    """`testbed run TOPOLOGY --no-analyze OPTIONS` into ``results`` in a process of its own; the results folder
    of the completed run (the test fails, showing the run's last words, otherwise)."""
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(topology), "--no-analyze", "--quiet",
                           "--json", "--results", str(results), *options], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    try:
        outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pytest.fail(f"testbed run printed no outcome (exit {proc.returncode}): {proc.stderr[-3000:]}")
    assert outcome["status"] == "completed", f"testbed run did not complete: {outcome}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"testbed run exited {proc.returncode}: {outcome}\n{proc.stderr[-3000:]}"
    return Path(outcome["run_dir"])


def analyze(run_dir: Path, contract: Optional[RunContract] = None) -> AnalysedRun:
    """`testbed analyze` then `testbed check` of ``run_dir``, as `testbed run` does after its traffic, in this
    process (the session's Spark: the caller asks for the ``spark`` fixture). ``contract``: filled with the files the run wrote, the paths the analysis
    read and the files it wrote (the check's own files are not the analysis's)."""
    from spark.cli import analyze_command, check_command
    from spark.storage import ResultsStore

    if contract is None:
        assert analyze_command(str(run_dir)) == 0
    else:
        contract.run_files = files_of(run_dir)
        with pytest.MonkeyPatch.context() as mp:
            for method in ("read_bytes", "uri"):  # every path the analysis reads goes through one of these
                mp.setattr(ResultsStore, method, _recorded(getattr(ResultsStore, method), contract.analysis_reads))
            assert analyze_command(str(run_dir)) == 0
        contract.analysis_files = files_of(run_dir) - contract.run_files
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        passed = check_command(str(run_dir), show_input_problems=False) == 0  # analyze printed them
    return AnalysedRun(run_dir, passed, out.getvalue(), contract)


def run_and_analyze(topology: Path, results: Path, *options: str,
                    contract: Optional[RunContract] = None) -> AnalysedRun:
    """:func:`run`, then :func:`analyze`."""
    return analyze(run(topology, results, *options), contract)


def copy_of(run_dir: Path, folder: Path) -> Path:
    """A copy of a shared results folder in ``folder`` (the test's own), for a test that writes into it."""
    return Path(shutil.copytree(run_dir, folder / run_dir.name))
