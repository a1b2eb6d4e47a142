"""`testbed image build`: the Docker node image, built offline (see docs/docker-image.md).

Exit status: 0 built or already there, 1 the build failed, 2 it cannot be done here as things
are (no Docker engine, no debootstrap, not root, a bad --mirror/--suite).
"""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import Optional

import typer

from testbed.cli.common import BAD_INPUT, FAILED, fail

image_app = typer.Typer(help="The Docker backend's node image, built offline (no registry needed).",
                        no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                        rich_markup_mode=None)


@image_app.callback()
def image() -> None:
    """The Docker backend's node image, built offline (no registry needed)."""


@image_app.command()
def build(
    force: bool = typer.Option(False, "--force", help="Build again even if the image of this recipe exists."),
    mirror: Optional[str] = typer.Option(None, "--mirror", envvar="TESTBED_IMAGE_MIRROR",
                                         help="Debian mirror URL (default: this machine's apt sources)."),
    suite: Optional[str] = typer.Option(None, "--suite", envvar="TESTBED_IMAGE_SUITE",
                                        help="Debian suite, e.g. bookworm (default: this machine's)."),
    json_output: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Make the node image `testbed-node:<recipe hash>` with debootstrap, unless it exists already."""
    from testbed.backends.docker.image import ImageError, ImageInputError, build_image
    from testbed.run.signals import Interrupted

    try:
        built = build_image(force=force, mirror=mirror, suite=suite)
    except Interrupted as exc:
        fail(f"{exc}: the build stopped, nothing of it was kept", FAILED)
    except ImageInputError as exc:
        fail(str(exc), BAD_INPUT)
    except ImageError as exc:
        fail(str(exc), FAILED)
    if json_output:
        typer.echo(json.dumps(asdict(built), indent=2))
    else:
        how = "already built (cached)" if built.cached else f"built in {built.seconds:.0f} s"
        typer.echo(f"{built.ref} {how}: {built.id[:19]}, {built.size_bytes / 1e6:.0f} MB")
    default = _default_ref()
    if default and default != built.ref:
        typer.echo(f"note: this is not the default node image ({default}): pass --image {built.ref}, or set "
                   "TESTBED_IMAGE_MIRROR/TESTBED_IMAGE_SUITE so that it is", err=True)


def _default_ref() -> Optional[str]:
    from testbed.backends.docker.image import ImageError, default_image_ref

    try:
        return default_image_ref()
    except ImageError:
        return None
