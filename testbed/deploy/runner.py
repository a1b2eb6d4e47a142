"""Run one playbook with ansible-runner: quiet on the terminal, artifacts in the run folder,
and a failure turned into :class:`DeployError` naming every failed host and task."""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

PLAYBOOK_DIR = Path(__file__).resolve().parents[2] / "playbooks"
MAX_FORKS = 50


@dataclass(frozen=True)
class TaskFailure:
    host: str
    task: str
    message: str
    unreachable: bool = False
    #: the task's standard output (e.g. nodectl's JSON report), not shown
    output: str = field(default="", repr=False, compare=False)

    def describe(self) -> str:
        what = "unreachable in" if self.unreachable else "failed"
        return f"{self.host}: task '{self.task}' {what}: {self.message}"


class DeployError(RuntimeError):
    """A playbook failed. ``failures`` names each host and task; ``artifacts`` is ansible's output folder."""

    def __init__(self, playbook: str, failures: list[TaskFailure], detail: str = "",
                 artifacts: Optional[Path] = None):
        self.playbook = playbook
        self.failures = failures
        self.artifacts = artifacts
        lines = [f"playbook {playbook} failed"]
        lines += [f"  {f.describe()}" for f in failures]
        if detail:
            lines.append(f"  {detail}")
        if artifacts is not None:
            lines.append(f"  ansible output: {artifacts}")
        super().__init__("\n".join(lines))

    @property
    def hosts(self) -> list[str]:
        return [f.host for f in self.failures]

    @property
    def router_exited(self) -> bool:
        """Some router exited at its start, or its command could not be started at all (nodectl.py's
        words): the router refused its config, or the command is wrong — bad input, not a machine problem."""
        return any("router exited with status" in f.message or "router could not be started" in f.message
                   for f in self.failures)


@dataclass
class PlaybookResult:
    playbook: str
    status: str
    rc: int
    artifacts: Path
    duration_s: float
    stats: dict = field(default_factory=dict)


_SSH_NOISE = re.compile(r"^(Shared connection to \S+ closed\.|Connection to \S+ closed\.)$")


def _clean(text: Any) -> str:
    lines = str(text or "").replace("\r\n", "\n").replace("\r", "\n").strip().splitlines()
    return "\n".join(l for l in lines if not _SSH_NOISE.match(l.strip())).strip()


def _message(res: dict[str, Any]) -> str:
    """The most useful part of a failed task's result, one or a few lines."""
    stderr = _clean(res.get("stderr") or res.get("module_stderr"))
    if not stderr and res.get("rc") not in (None, 0):
        stderr = _clean(res.get("stdout"))  # `raw` tasks run on a tty: stderr arrives on stdout
    msg = _clean(res.get("msg"))
    parts = []
    if msg and not (stderr and msg == "non-zero return code"):
        parts.append(msg)
    if stderr:
        parts.append(stderr)
    if not parts:
        stdout = _clean(res.get("stdout") or res.get("module_stdout"))
        parts.append(stdout or "no message")
    text = "\n".join(parts)
    lines = text.splitlines()
    if len(lines) > 12:
        text = "\n".join(["..."] + lines[-12:])
    return text.replace("\n", "\n      ")


def failures_from_events(events) -> list[TaskFailure]:
    failures: list[TaskFailure] = []
    for ev in events:
        kind = ev.get("event")
        if kind not in ("runner_on_failed", "runner_on_unreachable"):
            continue
        data = ev.get("event_data", {})
        if kind == "runner_on_failed" and data.get("ignore_errors"):
            continue
        failures.append(TaskFailure(
            host=str(data.get("host", "?")),
            task=str(data.get("task", "?")),
            message=_message(data.get("res") or {}),
            unreachable=kind == "runner_on_unreachable",
            output=str((data.get("res") or {}).get("stdout") or ""),
        ))
    return failures


def ansible_env(control_dir: Optional[Path], forks: int) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_GATHERING": "explicit",
        "ANSIBLE_FORKS": str(forks),
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_TIMEOUT": "30",
        "ANSIBLE_SSH_RETRIES": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=300s -o ServerAliveInterval=10",
        # no tty for raw tasks: their stdout (a JSON report, a base64 tarball) is read as data, which a pipe
        # carries as written and a tty does not (it mixes in stderr and rewrites line ends); nothing of ours
        # needs one (no become prompts; pipelining already rules out sudo's requiretty)
        "ANSIBLE_SSH_USETTY": "False",
    }
    if control_dir is not None:
        env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = str(control_dir)
        env["ANSIBLE_SSH_CONTROL_PATH"] = "%(directory)s/%%C"
    return env


def run_playbook(playbook: str, *, inventory: Path, private_data_dir: Path, extravars: dict[str, Any],
                 forks: int, control_dir: Optional[Path] = None, limit: Optional[list[str]] = None,
                 timeout_s: float = 600.0, cancel: Optional[Callable[[], bool]] = None) -> PlaybookResult:
    """Run ``playbooks/<playbook>``; raise :class:`DeployError` unless every host succeeded.

    ``cancel`` is polled while the playbook runs; when it returns True the playbook is stopped.
    Passing it (even one that never cancels) also keeps ansible-runner from installing its own
    SIGINT/SIGTERM handlers, which it would leave in place after returning.
    """
    import time

    import ansible_runner

    path = PLAYBOOK_DIR / playbook if not os.path.isabs(playbook) else Path(playbook)
    if not path.is_file():
        raise DeployError(playbook, [], f"no such playbook: {path}")
    private_data_dir.mkdir(parents=True, exist_ok=True)
    # An empty config of our own: never pick up an ansible.cfg from the working directory or home.
    cfg = private_data_dir / "ansible.cfg"
    cfg.write_text("# settings come from the environment (testbed.deploy.runner.ansible_env)\n[defaults]\n")
    forks = max(1, min(forks, MAX_FORKS))
    envvars = {**ansible_env(control_dir, forks), "ANSIBLE_CONFIG": str(cfg)}
    t0 = time.monotonic()
    r = ansible_runner.run(
        private_data_dir=str(private_data_dir),
        playbook=str(path),
        inventory=str(inventory),
        extravars=extravars,
        envvars=envvars,
        forks=forks,
        limit=",".join(limit) if limit else None,
        quiet=True,
        timeout=int(timeout_s),
        rotate_artifacts=0,
        cancel_callback=cancel or (lambda: False),
    )
    duration = time.monotonic() - t0
    artifacts = Path(r.config.artifact_dir)
    if r.status == "successful" and r.rc == 0:
        return PlaybookResult(playbook, r.status, r.rc, artifacts, duration, dict(r.stats or {}))
    failures = failures_from_events(r.events)
    detail = ""
    if not failures:
        if r.status == "timeout":
            detail = f"timed out after {timeout_s:g} s"
        else:
            tail = _stdout_tail(artifacts)
            detail = f"ansible-playbook exited with status {r.rc} ({r.status}): {tail}"
    raise DeployError(playbook, failures, detail, artifacts)


def _stdout_tail(artifacts: Path, n: int = 8) -> str:
    try:
        lines = [l for l in (artifacts / "stdout").read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return "no output"
    return " | ".join(lines[-n:]) or "no output"
