"""Router drivers: the router under test is pluggable (docs/drivers.md).

    driver = driver_for(spec)            # from the topology's `router:` (after --router)
    driver.check_installed(); driver.problems(spec)
    launch = driver.launch(spec, lab, ctx)   # what nodectl.py runs on the node
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from .base import DriverError, DriverFeatures, NodeContext, NodeLaunch, RouterDriver, distribution_version
from .command import CommandDriver
from .testbed_router import TestbedDriver
from .zenoh import ZenohDriver

__all__ = ["DriverError", "DriverFeatures", "NodeContext", "NodeLaunch", "RouterDriver", "driver_for",
           "resolve_paths", "with_router", "preflight_driver", "preflight_problems", "distribution_version",
           "TestbedDriver", "ZenohDriver", "CommandDriver"]


#: driver name (testbed.spec.routerchoice.DRIVER_NAMES) -> the driver, from the topology's router block
DRIVERS = {"testbed": lambda choice: TestbedDriver(), "zenoh": lambda choice: ZenohDriver(),
           "command": CommandDriver}


def driver_for(spec) -> RouterDriver:
    """The driver of the topology's ``router:`` choice."""
    try:
        make = DRIVERS[spec.router.driver]
    except KeyError:
        raise DriverError(f"unknown router driver {spec.router.driver!r}") from None
    return make(spec.router)


def resolve_paths(spec, base_dir: Union[str, Path]):
    """The spec with a command block's relative paths (config_template, ship) made absolute against
    ``base_dir`` (the folder of the file that holds the block)."""
    choice = spec.router
    if choice.driver != "command":
        return spec
    base = Path(base_dir)

    def absolute(p: Optional[str]) -> Optional[str]:
        return None if p is None else str((base / p).resolve()) if not Path(p).is_absolute() else p

    resolved = choice.model_copy(update={"config_template": absolute(choice.config_template),
                                         "ship": [absolute(p) for p in choice.ship]})
    return spec.model_copy(update={"router": resolved})


def with_router(spec, spec_file: Path, value: str):
    """The spec with ``--router VALUE``: a driver name, or a YAML file holding a ``router:`` block; a command
    block's paths are relative to that file. DriverError on bad input."""
    from testbed.spec import SpecError
    from testbed.spec.loader import validate_yaml
    from testbed.spec.routerchoice import DRIVER_NAMES, RouterFile

    path = Path(value)
    if value in DRIVER_NAMES or (not path.suffix and not path.exists()):
        text, filename, base = f"router: {value}\n", "--router", spec_file.parent
    else:
        try:
            text, filename, base = path.read_text(encoding="utf-8"), str(path), path.resolve().parent
        except OSError as exc:
            raise DriverError(f"--router {value}: {exc.strerror or exc}") from None
    try:
        chosen, _ = validate_yaml(text, filename, RouterFile, "the file is empty; it needs a router: block "
                                  "(docs/drivers.md)", "router")
    except SpecError as exc:
        raise DriverError(str(exc)) from None
    return resolve_paths(spec.model_copy(update={"router": chosen.router}), base)


def preflight_problems(spec) -> list[str]:
    """What stops the topology's driver from running it here: not installed on this machine (one sentence
    saying what to install), or what in the topology it cannot run (a sentence per item)."""
    try:
        driver = driver_for(spec)
        driver.check_installed()
    except DriverError as exc:
        return [str(exc)]
    return driver.problems(spec)


def preflight_driver(spec) -> RouterDriver:
    """The topology's driver, checked before anything is built (``preflight_problems``). DriverError (exit 2)
    listing every problem."""
    problems = preflight_problems(spec)
    if problems:
        raise DriverError(f"router driver {spec.router.driver} cannot run this topology:\n  "
                          + "\n  ".join(problems))
    return driver_for(spec)
