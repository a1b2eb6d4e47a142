"""What every `testbed` verb shares: the exit codes, the one way an error is said, the topology
loader, the duration option and the root check.

Exit status of every verb: 0 success, 1 a check or an operation failed, 2 bad input (`suite run`
adds 3, an invalid night: testbed/cli/suite.py).
"""
from __future__ import annotations

import os
from pathlib import Path

import typer

FAILED = 1
BAD_INPUT = 2


def fail(message: str, code: int = FAILED) -> None:
    """Say ``error: message`` on stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def load_spec(file: Path):
    """The topology of ``file`` with its paths resolved; its errors said and exit 2."""
    from testbed.spec import SpecError, load_spec as load

    from testbed.drivers import resolve_paths

    try:
        return resolve_paths(load(file), file.resolve().parent)
    except SpecError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(BAD_INPUT)
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}", BAD_INPUT)


def seconds(text: str) -> float:
    """A duration option: the topology's grammar (``20s``, ``500ms``, ``1m30s``) or a bare number of seconds."""
    from runfolder.units import UnitError, parse_seconds

    try:
        return parse_seconds(text)
    except UnitError as err:
        raise typer.BadParameter(str(err)) from None


def need_root() -> None:
    """Exit 2 unless this process is root."""
    if os.geteuid() != 0:
        fail("this command needs root (network namespaces, tc and iptables); run it with sudo", BAD_INPUT)
