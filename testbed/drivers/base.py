"""The router driver interface: everything the orchestrator, the playbooks and the analysis need to
know about the router under test (docs/drivers.md).

A driver says

- what to install on a node: code packages and Python distributions of the bundle
  (:attr:`RouterDriver.packages`, :attr:`RouterDriver.distributions`), plus files it ships itself;
- how to configure and start the router on one node from the topology: a :class:`NodeLaunch`
  (command line, config files, readiness check, environment), carried out on the node by
  ``playbooks/files/nodectl.py`` (which also stops and kills it, by the pid it recorded);
- where its logs and metrics are (``router.log`` in the install folder; a metrics URL or none;
  an event log or none: :class:`DriverFeatures`);
- which client library the traffic processes use to talk to it (:attr:`RouterDriver.client`)
  and how the analysis reads its packets (:attr:`RouterDriver.wire`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any, Optional

from runfolder.records import DriverRecord
from testbed.trafficplanner import client_problems  # noqa: F401  (the drivers' check of their client)


class DriverError(ValueError):
    """A driver cannot run this topology on this machine (bad input: exit 2); the message says why."""


@dataclass(frozen=True)
class DriverFeatures:
    """What a driver's router provides beyond forwarding: shown in the report when true, marked
    "not available" when false."""

    metrics: bool  # an OpenMetrics endpoint the scraper reads
    events: bool  # an event log (nodes/<node>/events.jsonl)
    admin: bool  # our admin API (link capacities told on set_link)


@dataclass(frozen=True)
class NodeContext:
    """What a driver may use to configure one node, beside the spec and the lab."""

    node: str
    mgmt_ip: str
    install_dir: str
    admin_token: str
    router_port: int  # on every data-link address, between routers
    client_port: int  # on 127.0.0.1 in the node, for its traffic processes
    metrics_port: int  # on the management address, if the router serves metrics


@dataclass(frozen=True)
class NodeLaunch:
    """How ``nodectl.py`` starts the router on one node (written there as ``launch.json``).

    ``argv`` and ``env`` values may hold ``{python}`` (the node's python3), ``{dir}`` (the install
    folder) and ``{code}`` (where router/, traffic/ and lib/ are), filled in on the node. ``files`` are
    written into the install folder before the start (the router's config). ``ready`` is
    ``{"http": URL}`` (answers 200) or ``{"tcp": PORT}`` (the router process listens on it in its node).
    ``check``: an argv that validates the config without starting (optional).
    """

    driver: str
    argv: tuple[str, ...]
    files: dict[str, str]
    ready: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    check: Optional[tuple[str, ...]] = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["argv"] = list(self.argv)
        out["check"] = list(self.check) if self.check else None
        return out


def distribution_version(name: str) -> str:
    """The installed version of a Python distribution on this machine, or DriverError saying how to install it."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        raise DriverError(f"the Python package {name} is not installed on this machine: "
                          f"`pip install {name}` (or run scripts/setup.sh)") from None


class RouterDriver(ABC):
    """One kind of router under test. Subclasses set the class attributes and :meth:`launch`."""

    name: str = ""
    #: the client library of the traffic processes (traffic/sessions.py): "testbed" | "zenoh"
    client: str = "testbed"
    #: how spark reads the captures: "testbed" decodes our protocol; else the payload header is searched
    wire: str = "testbed"
    features: DriverFeatures = DriverFeatures(metrics=True, events=True, admin=True)
    #: code folders of this repository shipped to the nodes (traffic reads its plan through runfolder)
    packages: tuple[str, ...] = ("router", "traffic", "runfolder")
    #: Python distributions shipped unpacked into the bundle's lib/
    distributions: tuple[str, ...] = ("prometheus-client",)
    #: Python distributions shipped as a wheel for the nodes when there is one, else left out (testbed/deploy/bundle.py)
    optional_distributions: tuple[str, ...] = ()
    #: router settings of the topology (defaults.router / nodes.<n>.router) this driver applies
    settings_applied: Optional[frozenset] = None  # None: all of them
    #: the router is started from a config dict (:meth:`config`, then :meth:`launch_for`) that may be changed
    #: before deployment (e.g. a test breaking one node's setting); False: from :meth:`launch` alone
    configurable: bool = False

    def check_installed(self) -> None:
        """Raise DriverError if something the driver ships is missing on this machine."""
        for dist in self.distributions:
            distribution_version(dist)

    def problems(self, spec) -> list[str]:
        """What in this topology the driver cannot do (bad input), as sentences naming the item."""
        return []

    def applied_settings(self, spec) -> Optional[frozenset]:
        """The router settings this driver applies for ``spec`` (None: all of them)."""
        return self.settings_applied

    def settings_ignored(self, spec) -> list[str]:
        """Router settings the topology sets explicitly that this driver does not apply (warned, recorded)."""
        applied = self.applied_settings(spec)
        if applied is None:
            return []
        given: set[str] = set(spec.defaults.router.model_fields_set)
        for node in spec.nodes.values():
            if node.router is not None:
                given |= set(node.router.model_fields_set)
        return sorted(given - applied)

    @abstractmethod
    def launch(self, spec, lab, ctx: NodeContext) -> NodeLaunch:
        """How to start the router on ``ctx.node``."""

    def config(self, spec, lab, ctx: NodeContext) -> dict[str, Any]:
        """The router config of ``ctx.node`` (drivers with :attr:`configurable` only)."""
        raise NotImplementedError(f"the {self.name} driver starts its router from launch(), not from a config")

    def launch_for(self, config: dict[str, Any]) -> NodeLaunch:
        """How to start the router from ``config`` (drivers with :attr:`configurable` only)."""
        raise NotImplementedError(f"the {self.name} driver starts its router from launch(), not from a config")

    def ship(self) -> list:
        """Files and folders (paths on this machine) copied into the bundle's root on every node."""
        return []

    def metrics_url(self, ctx: NodeContext) -> Optional[str]:
        """Where the scraper reads the router's metrics from the controller (None: it has none)."""
        return f"http://{ctx.mgmt_ip}:{ctx.metrics_port}/metrics" if self.features.metrics else None

    def describe(self, spec) -> dict[str, Any]:
        """The run manifest's ``router_driver``."""
        return DriverRecord(self.name, self.wire, self.client, **asdict(self.features)).to_json(
            self.settings_ignored(spec))


def router_neighbours(spec, lab, node: str):
    """The node's ends of its links to other routers, in link order: ``(link, mine, other)``."""
    routers = set(spec.routers())
    for link in lab.links:
        if node in (link.a.node, link.b.node):
            other = link.other(node)
            if other.node in routers:
                yield link, link.end(node), other
