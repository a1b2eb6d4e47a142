"""`testbed wireshark [RESULTS_DIR] [--install]`: where the router protocol's dissector is and how to load it."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from testbed.cli import completion
from testbed.cli.common import BAD_INPUT, fail


def wireshark(
    results_dir: Optional[Path] = typer.Argument(
        None, help="A run's results folder: the commands get its ports, its manifest (routers by name) and a capture.",
        autocompletion=completion.results_folders),
    install: bool = typer.Option(False, "--install",
                                 help="Copy the dissector into Wireshark's personal plugin folder "
                                      "(~/.local/lib/wireshark/plugins/)."),
) -> None:
    """Print the path of the Wireshark/tshark dissector of the router protocol and the commands that load it."""
    from testbed.wireshark.dissector import WiresharkError, how_to_load, install as install_plugin, run_captures

    if install:
        typer.echo(f"installed {install_plugin()}: Wireshark and tshark load it at start")
    captures = None
    if results_dir is not None:
        try:
            captures = run_captures(results_dir)
        except WiresharkError as err:
            fail(str(err), BAD_INPUT)
    typer.echo("\n".join(how_to_load(captures)))
