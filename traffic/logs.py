"""The traffic processes' files: buffered CSV send/receive logs and the process log.

Formats (docs/results.md, docs/traffic.md); the file names are ``runfolder.layout.LAYOUT``'s:

* ``send-<flow>.csv``: header ``seq,send_ns,size``
* ``recv-<flow>-<node>.csv``: header ``seq,send_ns,recv_ns,size``
* ``query-<flow>.csv``: header ``qid,send_ns,first_reply_ns,done_ns,outcome,replies,retries,served_by,attempts``
* ``served-<flow>-<node>.csv``: header ``qid,recv_ns,reply_ns``
* ``<process>.log``: text lines ``<ts_ns> <LEVEL> <process>: <message>``; the last
  line of a process that ended normally is ``... INFO <process>: summary {json}``.

CSV lines go into an in-memory buffer; :meth:`CsvLog.flush` writes the buffer
out (the processes call it at least every second and on exit), so an
interrupted run keeps everything up to the last flush.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, List, Optional

from runfolder.layout import LAYOUT

#: Written in a subscriber's process log once its subscriptions are declared (each (re)connection).
READY = "ready: subscribed to"
#: The same for a queryable process, once its queryables are declared.
READY_QUERYABLE = "ready: queryable on"

#: Printed on stdout by a process started with ``--wait-for-plan`` before its plan is there (it is running:
#: interpreter started, code imported), followed by the plan's path.
WAITING_FOR_PLAN = "started, waiting for its plan"


def ready_text(role: str) -> Optional[str]:
    """What a process of ``role`` writes in its log once it is ready to receive (None: it writes nothing)."""
    return {"sub": READY, "queryable": READY_QUERYABLE}.get(role)


class CsvLog:
    """One CSV file written through a list buffer (no I/O per line)."""

    def __init__(self, path: str, header: str, max_buffered: int = 4096) -> None:
        self.path = path
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._file = open(path, "w", encoding="ascii", newline="")
        self._file.write(header + "\n")
        self._file.flush()
        self._buf: List[str] = []
        self._max = max_buffered
        self.lines = 0
        self.closed = False

    def _append(self, line: str) -> None:
        self._buf.append(line)
        self.lines += 1
        if len(self._buf) >= self._max:
            self.flush()

    def write_send(self, seq: int, send_ns: int, size: int) -> None:
        self._append(f"{seq},{send_ns},{size}\n")

    def write_recv(self, seq: int, send_ns: int, recv_ns: int, size: int) -> None:
        self._append(f"{seq},{send_ns},{recv_ns},{size}\n")

    def write_row(self, *values: Any) -> None:
        """One line of any log: the values in order, None as an empty field."""
        self._append(",".join("" if v is None else str(v) for v in values) + "\n")

    def flush(self) -> None:
        if self.closed:
            return
        if self._buf:
            self._file.write("".join(self._buf))
            self._buf.clear()
        self._file.flush()

    def close(self) -> None:
        if self.closed:
            return
        self.flush()
        self._file.close()
        self.closed = True


class _NsFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        record.ts_ns = getattr(record, "created_ns", int(record.created * 1e9))
        return super().format(record)


def open_process_log(log_dir: Optional[str], process: str, echo_stderr: bool = False) -> logging.Logger:
    """A logger for one traffic process: ``<log_dir>/<process>.log`` (appended).

    Lines also go to stderr when ``echo_stderr`` is set or there is no ``log_dir``
    (an orchestrator that sends the process's stderr to the same file would
    otherwise get every line twice); errors always go to stderr as well.

    The logger is private to the process name (no handlers on the root logger),
    so several plans can run in one interpreter (tests) without mixing lines.
    """
    logger = logging.getLogger(f"traffic.proc.{process}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()
    fmt = _NsFormatter("%(ts_ns)d %(levelname)s %(procname)s: %(message)s")
    handlers: List[logging.Handler] = []
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
        handlers.append(logging.FileHandler(os.path.join(log_dir, LAYOUT.process_log_name(process)), mode="a",
                                            encoding="utf-8"))
    stderr = logging.StreamHandler()
    if log_dir and not echo_stderr:
        stderr.setLevel(logging.ERROR)
    handlers.append(stderr)
    for h in handlers:
        h.setFormatter(fmt)
        h.addFilter(_ProcName(process))
        logger.addHandler(h)
    return logger


class _ProcName(logging.Filter):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.procname = name

    def filter(self, record: logging.LogRecord) -> bool:
        record.procname = self.procname
        return True


def close_process_log(logger: logging.Logger) -> None:
    for h in list(logger.handlers):
        h.flush()
        logger.removeHandler(h)
        h.close()


def log_summary(logger: logging.Logger, summary: Dict[str, Any]) -> None:
    logger.info("summary %s", json.dumps(summary, sort_keys=True))


def read_summary(path: str) -> Optional[Dict[str, Any]]:
    """The last ``summary {json}`` line of a process log, or None."""
    found: Optional[Dict[str, Any]] = None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                head, sep, tail = line.partition(": summary ")
                if sep:
                    try:
                        found = json.loads(tail)
                    except ValueError:
                        pass
    except OSError:
        return None
    return found
