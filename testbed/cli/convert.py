"""`testbed import` and `testbed export` (docs/import-export.md), and the conversion `testbed run` makes of a
foreign file it is given (testbed/convert/).

Exit status: 0 written, 2 bad input (a file that is not what its format says, an unknown key, a link to a node
that does not exist; each at its file and line), an output that exists without --force.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional, Tuple

import typer

from testbed.cli import completion
from testbed.cli.common import BAD_INPUT, fail
from testbed.convert.zoo import BW_SCALE, KM_PER_MS, ZooOptions


def _converted(file: Path, out_name: str, fmt: Optional[str], options: ZooOptions, name: Optional[str]):
    from testbed.convert import convert
    from testbed.spec import SpecError

    try:
        return convert(file, out_name, fmt, options, name)
    except SpecError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(BAD_INPUT)


def _refuse_existing(*paths: Path, force: bool) -> None:
    for path in paths:
        if path.exists() and not force:
            fail(f"{path} exists; --force overwrites it", BAD_INPUT)


def _say_notes(conversion) -> None:
    for note in conversion.imported.notes:
        typer.echo(f"note: {note}", err=True)


def import_command(
    file: Path = typer.Argument(..., help="A Topology Zoo map (.graphml, .gml) or a containerlab topology "
                                          "(.clab.yml).", autocompletion=completion.foreign_files),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="The topology file to write (default: the "
                                                                 "file's name with .yaml, here); - for stdout."),
    fmt: Optional[str] = typer.Option(None, "--format", help="graphml, gml or clab (default: by the file's name)."),
    name: Optional[str] = typer.Option(None, "--name", help="The topology's name (default: from the file)."),
    km_per_ms: float = typer.Option(KM_PER_MS, "--km-per-ms", help="Topology Zoo: the distance a link's delay "
                                                                   "grows by a millisecond per (light in fibre)."),
    bw_scale: float = typer.Option(BW_SCALE, "--bw-scale", help="Topology Zoo: a link's bandwidth is its "
                                                                "LinkSpeedRaw (bit/s) times this."),
    drop_unlocated: bool = typer.Option(False, "--drop-unlocated", help="Topology Zoo: drop nodes without "
                                                                        "coordinates (and their links) instead of "
                                                                        "refusing the file."),
    force: bool = typer.Option(False, "--force", help="Overwrite the output file."),
) -> None:
    """Convert a Topology Zoo map or a containerlab topology into a topology file, every value with a comment
    saying where it came from; what has no equivalent is listed in the file's comments."""
    if km_per_ms <= 0 or bw_scale <= 0:
        fail("--km-per-ms and --bw-scale must be positive", BAD_INPUT)
    out = out or Path(file.name.split(".")[0] + ".yaml")
    conversion = _converted(file, str(out), fmt, ZooOptions(km_per_ms, bw_scale, drop_unlocated), name)
    if str(out) == "-":
        typer.echo(conversion.text, nl=False)
    else:
        _refuse_existing(out, force=force)
        out.write_text(conversion.text)
        spec = conversion.spec
        typer.echo(f"wrote {out}: {spec.name}, {len(spec.nodes)} nodes, {len(spec.links)} links from "
                   f"{conversion.imported.source}")
    _say_notes(conversion)


def export_command(
    file: Path = typer.Argument(..., help="Topology file (YAML).", autocompletion=completion.topology_files),
    to: str = typer.Option(..., "--to", help="The other tool: containerlab."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="The .clab.yml to write (default: the "
                                                                 "topology's name with .clab.yml, here); the "
                                                                 "netem script is written beside it."),
    image: Optional[str] = typer.Option(None, "--image", help="The nodes' container image (default: the "
                                                              "topology's `image:`, else a Debian image)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the output files."),
) -> None:
    """Write a topology as another tool's lab: for containerlab a .clab.yml (nodes, links) and beside it a shell
    script of `containerlab tools netem set` commands for the links' shaping."""
    from testbed.cli.common import load_spec
    from testbed.convert.clab_export import export_containerlab

    if to != "containerlab":
        fail(f"--to {to}: the only tool exported to is containerlab", BAD_INPUT)
    spec = load_spec(file)
    exported = export_containerlab(spec, str(file), image or "")
    out = out or Path(f"{spec.name}.clab.yml")
    script = out.with_name(f"{spec.name}.netem.sh")
    _refuse_existing(out, script, force=force)
    out.write_text(exported.clab_yaml)
    script.write_text(exported.netem_script)
    script.chmod(0o755)
    typer.echo(f"wrote {out} ({len(spec.nodes)} nodes, {len(spec.links)} links) and {script} (the shaping: run "
               "it after `containerlab deploy`)")


def topology_file(file: Path) -> Tuple[Path, Optional[tempfile.TemporaryDirectory]]:
    """The topology file `run` uses for ``file``: itself, or for a foreign file (.graphml, .gml, .clab.yml) its
    conversion, written into a folder that lasts as long as the returned object is held (the run copies it
    into its results folder as topology.yaml)."""
    from testbed.convert import foreign_format

    if foreign_format(file) is None:
        return file, None
    folder = tempfile.TemporaryDirectory(prefix="testbed-import-")
    converted = Path(folder.name) / (file.name.split(".")[0] + ".yaml")
    conversion = _converted(file, str(converted), None, ZooOptions(), None)
    converted.write_text(conversion.text)
    typer.echo(f"converted {file} ({conversion.imported.fmt}): "
               f"{len(conversion.spec.nodes)} nodes, {len(conversion.spec.links)} links; the conversion is the "
               "run's topology.yaml", err=True)
    _say_notes(conversion)
    return converted, folder
