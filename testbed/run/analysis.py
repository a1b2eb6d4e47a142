"""The end of a run: analyse its results folder with PySpark and check it against its expectations."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional, TextIO

__all__ = ["analyze_and_check"]


def analyze_and_check(run_dir: Path, master: Optional[str], progress, out: Optional[TextIO] = None):
    """Analyse and check a finished run; (verdict or None, error or None). Never raises.

    What the analysis and the check print goes to ``out`` (default: standard output)."""
    from spark.cli import analyze_command, check_command

    progress.phase("analyze", "PySpark")
    if out is None:
        redirect = contextlib.nullcontext()
    else:
        redirect = contextlib.ExitStack()
        redirect.enter_context(contextlib.redirect_stdout(out))
        redirect.enter_context(contextlib.redirect_stderr(out))
    try:
        with redirect:
            status = analyze_command(str(run_dir), master=master, started=getattr(progress, "started", None))
            if status != 0:
                return None, f"`testbed analyze` exited {status}"
            return check_command(str(run_dir), show_input_problems=False) == 0, None  # analyze printed them
    except Exception as exc:  # noqa: BLE001 - the run's folder is complete; say what failed
        return None, f"{type(exc).__name__}: {exc} (the results folder is complete: `testbed analyze {run_dir}`)"
