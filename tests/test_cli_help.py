"""`--help` of every command reads at 80 columns (issue 27.4): plain help wrapped to the terminal, no line
wider than it, no box, the help text of an option beside it or on the lines below it, never squeezed into a
column of a few words."""
from __future__ import annotations

import re

import pytest
import typer.main
from typer.testing import CliRunner

from testbed.cli.app import app


def _commands(group, path=()):
    yield path
    for name, cmd in getattr(group, "commands", {}).items():
        yield from _commands(cmd, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "testbed")
def test_help_reads_at_80_columns(path):
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERM": "xterm-256color"},
                                prog_name="testbed")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"Usage: testbed {' '.join(path)}".rstrip())
    too_wide = [line for line in lines if len(line) > 80]
    assert too_wide == [], "\n".join(too_wide)
    assert not re.search(r"[╭╰│─]|\x1b\[", result.output)
    # an option's help starts at most a third of the way in: at least 45 columns of text per line
    starts = [len(m.group(1)) for m in re.finditer(r"^(  -\S.*?  +)(\S)", result.output, re.M)]
    assert all(s <= 35 for s in starts), result.output
