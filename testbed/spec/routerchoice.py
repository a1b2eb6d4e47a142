"""The topology's top-level ``router:`` key: which router driver deploys the router under test.

    router: testbed            # our router (the default)
    router: zenoh              # stock Zenoh routers (the eclipse-zenoh package)
    router:                    # any router started from a command line (docs/drivers.md)
      driver: command
      command: "{python} -m zenohrouter --config {config}"
      config_template: zenoh-router.json5.j2
      client: zenoh

Paths in a ``command`` block (``config_template``, ``ship``) are relative to the file that holds the
block; :func:`testbed.drivers.resolve_paths` makes them absolute once that file is known.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic import BeforeValidator
from typing_extensions import Annotated, Literal

from runfolder.wording import did_you_mean
from .fieldtypes import user_error

#: the drivers configured by their name alone (``router: zenoh``)
NAMED_DRIVERS = ("testbed", "zenoh")
#: the drivers a topology can name (testbed/drivers/__init__.py ``DRIVERS`` implements each; a test checks)
DRIVER_NAMES = NAMED_DRIVERS + ("command",)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NamedRouter(_Strict):
    """A driver that needs nothing but its name (``testbed``, ``zenoh``)."""

    driver: Literal[NAMED_DRIVERS] = "testbed"  # type: ignore[valid-type]


class ReadyCheck(_Strict):
    """When a started router counts as up: a TCP port listening in its node, or an HTTP URL answering 200."""

    tcp: Optional[Annotated[int, Field(ge=1, le=65535)]] = None
    http: Optional[str] = None

    @model_validator(mode="after")
    def _one(self) -> "ReadyCheck":
        if (self.tcp is None) == (self.http is None):
            raise user_error("ready", "give exactly one of tcp: PORT (a port the router listens on in its node) "
                                      "or http: URL (answers 200 once the router is up)")
        return self


class CommandRouter(_Strict):
    """Any router binary: a command line, a config template rendered per node (Jinja2), and what the
    traffic and the analysis should expect of it (docs/drivers.md "Bring your own router")."""

    driver: Literal["command"]
    #: the command line (a string split like a shell would, or a list); placeholders {python}, {dir}, {code},
    #: {config} (the rendered config file on the node), {node}
    command: Union[str, Annotated[List[str], Field(min_length=1)]]
    #: a Jinja2 template of the router's config file (path relative to this file) ...
    config_template: Optional[str] = None
    #: ... or the template's text inline
    config: Optional[str] = None
    #: the rendered file's name in the node's install folder (default: the template's name without .j2)
    config_file: Optional[str] = None
    #: the client library the traffic processes use to reach the router on 127.0.0.1:{client_port}
    client: Literal["testbed", "zenoh"]
    #: how the analysis reads the captures: "testbed" decodes our wire protocol; anything else finds the
    #: traffic payload header in the reassembled TCP streams
    wire: Literal["testbed", "zenoh", "unknown"] = "unknown"
    #: default: tcp on the client port
    ready: Optional[ReadyCheck] = None
    #: an OpenMetrics URL the scraper reads from this machine during the run ({mgmt_ip}, {metrics_port}, {node});
    #: none: no metrics
    metrics: Optional[str] = None
    #: files or folders (relative to this file) shipped with the code to every node ({code}/<name>), e.g. a router binary
    ship: List[str] = Field(default_factory=list)
    #: environment variables of the router process
    env: Dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _template(self) -> "CommandRouter":
        if (self.config_template is None) == (self.config is None):
            raise user_error("router", "a command router needs exactly one of config_template: FILE (a Jinja2 "
                                       "template, relative to this file) or config: TEXT (the template inline)")
        if self.config_file is not None and ("/" in self.config_file or self.config_file in ("", ".", "..")):
            raise user_error("router", f"config_file {self.config_file!r} must be a plain file name (it is "
                                       "written into the node's install folder)")
        return self


def _named(value: Any) -> Any:
    """``router: zenoh`` is short for ``router: {driver: zenoh}``; an unknown name is refused with the list."""
    if isinstance(value, str):
        if value not in DRIVER_NAMES:
            raise user_error("router", f"unknown router driver {value!r}: one of {', '.join(DRIVER_NAMES)} "
                                       f"(docs/drivers.md){_did_you_mean(value)}")
        if value == "command":
            raise user_error("router", "the command driver needs a block: router: {driver: command, command: ..., "
                                       "config_template: ..., client: ...} (docs/drivers.md)")
        return {"driver": value}
    if isinstance(value, dict) and "driver" not in value:
        return {"driver": "testbed", **value}
    if isinstance(value, dict) and isinstance(value.get("driver"), str) and value["driver"] not in DRIVER_NAMES:
        raise user_error("router", f"unknown router driver {value['driver']!r}: one of {', '.join(DRIVER_NAMES)} "
                                   f"(docs/drivers.md){_did_you_mean(value['driver'])}")
    return value


def _did_you_mean(name: str) -> str:
    hint = did_you_mean(name, DRIVER_NAMES)
    return f"; {hint.strip()}" if hint else ""


RouterChoice = Annotated[Union[CommandRouter, NamedRouter], Field(discriminator="driver"), BeforeValidator(_named)]


class RouterFile(_Strict):
    """A file holding a router block only (``testbed run --router FILE``)."""

    router: RouterChoice
