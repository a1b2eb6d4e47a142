"""The host's side of the appliance's control channel (Appliance.run) against a stand-in for its init: a thread
that answers the requests of the control folder as appliance_init.sh does (``<tag>.out``, then ``<tag>.rc``),
or as an init whose child lost the answer's output would. No user-mode Linux needed."""
from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest

from testbed.links import appliance

#: how the stand-in answers a request: given its tag (the path without a suffix) and its script
Answer = Callable[[Path, str], None]


def run_like_the_init(tag: Path, script: str) -> None:
    """As appliance_init.sh: the script's output to ``<tag>.out``, then its status to ``<tag>.rc``."""
    with open(f"{tag}.out", "w") as out:
        status = subprocess.run(["bash", "-c", script], stdout=out, stderr=subprocess.STDOUT).returncode
    Path(f"{tag}.rc.tmp").write_text(f"{status}\n")
    Path(f"{tag}.req").unlink()
    Path(f"{tag}.rc.tmp").rename(f"{tag}.rc")


def status_without_output(tag: Path, script: str) -> None:
    """An init whose child never wrote ``<tag>.out`` (it died, or wrote it under another name)."""
    Path(f"{tag}.rc.tmp").write_text("139\n")
    Path(f"{tag}.req").unlink()
    Path(f"{tag}.rc.tmp").rename(f"{tag}.rc")


def output_cut_short(tag: Path, script: str) -> None:
    """An init whose answer ends after the first command, with neither the second's end nor a failure."""
    first = script.splitlines(keepends=True)[:2]  # the first command and its end marker
    Path(f"{tag}.out").write_text(subprocess.run(["bash", "-c", "".join(first)], capture_output=True,
                                                 text=True).stdout)
    status_without_output(tag, script)


@pytest.fixture
def stand_in(tmp_path, monkeypatch) -> Iterator[Callable[[Answer], appliance.Appliance]]:
    """An Appliance whose init is a thread answering with the given function; stopped afterwards."""
    monkeypatch.setattr(appliance.Appliance, "alive", lambda self: True)
    stop = threading.Event()
    threads = []

    def start(answer: Answer) -> appliance.Appliance:
        record = appliance.ApplianceRecord("ctl", "tbed-ctl-standin", str(tmp_path / "ctl"))
        app = appliance.Appliance(record)
        app.control_dir.mkdir(parents=True)

        def init() -> None:
            while not stop.is_set():
                for req in sorted(app.control_dir.glob("*.req")):
                    answer(req.with_suffix(""), req.read_text())
                stop.wait(0.01)

        threads.append(threading.Thread(target=init, daemon=True))
        threads[-1].start()
        return app

    yield start
    stop.set()
    for thread in threads:
        thread.join(5)


def test_a_request_answered_as_the_init_does_gives_each_commands_output(stand_in):
    app = stand_in(run_like_the_init)
    assert app.run([["echo", "one"], ["printf", "two"]], timeout_s=10) == ["one", "two"]
    with pytest.raises(appliance.ApplianceError, match=r"`false` failed \(exit 1\)"):
        app.run([["true"], ["false"], ["echo", "never"]], timeout_s=10)
    assert sorted(p.name for p in app.control_dir.iterdir()) == []


def test_an_answer_without_its_output_is_an_error_naming_the_request(stand_in):
    """A CI run found a request's .rc without its .out: a bare FileNotFoundError from deep inside the shaper.
    It is an ApplianceError saying which request and with which status, and leaves nothing behind."""
    app = stand_in(status_without_output)
    with pytest.raises(appliance.ApplianceError,
                       match=r"answered request \S+ \(`tc qdisc change dev vec1 root netem delay 30ms` and 1 more\) "
                             r"with exit status 139 but wrote no output \(\S+\.out is missing\)"):
        app.run([["tc", "qdisc", "change", "dev", "vec1", "root", "netem", "delay", "30ms"],
                 ["tc", "-j", "qdisc", "show", "dev", "vec1"]], timeout_s=10)
    assert sorted(p.name for p in app.control_dir.iterdir()) == []


def test_an_answer_that_ends_before_its_last_command_is_an_error(stand_in):
    """Not a list of outputs shorter than the commands, which a caller would index past."""
    app = stand_in(output_cut_short)
    with pytest.raises(appliance.ApplianceError, match=r"ends after 1 of its 2 commands \(exit status 139\): one"):
        app.run([["echo", "one"], ["echo", "two"]], timeout_s=10)
