"""A lab's backend and its options as one value, resolved once from the command line and the topology.

`testbed up` and `testbed run` resolve it (:meth:`BackendOptions.resolve`) before anything is built; the lab
holder process gets it on its command line (:meth:`BackendOptions.argv`), the lab session and
:func:`testbed.backends.get_backend` take it as it is, and a run's manifest records it.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from testbed.backends.base import BackendError

BACKENDS = ("mininet", "docker", "ssh")
DEFAULT_BACKEND = "mininet"
IMPAIRMENT_PROVIDERS = ("auto", "appliance")


@dataclass(frozen=True)
class BackendOptions:
    """Which backend builds a lab, and how. Each option is one backend's; the others keep the default."""

    name: str = DEFAULT_BACKEND
    #: docker: the node image (None: the one `testbed image build` makes)
    image: Optional[str] = None
    #: ssh: the Ansible inventory of the lab machines (an absolute path)
    inventory: Optional[str] = None
    #: ssh: keep the machines' own addresses on the data interfaces instead of the topology's
    keep_addresses: bool = False
    #: ssh: the machines' host keys are checked against known_hosts
    check_host_keys: bool = True
    #: who provides the impairments: auto (the host kernel where it can, else the appliance) or appliance
    impairments: str = "auto"

    def __post_init__(self) -> None:
        if self.name not in BACKENDS:
            raise BackendError(f"unknown backend {self.name!r} (available: {', '.join(BACKENDS)})")
        if self.name != "ssh" and (self.keep_addresses or not self.check_host_keys):
            raise BackendError(f"--keep-addresses and --no-host-key-check are for the ssh backend only (this lab "
                               f"uses {self.name})")
        if self.image and self.name != "docker":
            raise BackendError(f"an image is for the docker backend only (this lab uses {self.name})")
        if self.inventory and self.name != "ssh":
            raise BackendError("--inventory is for the ssh backend only: add --backend ssh")
        if self.impairments not in IMPAIRMENT_PROVIDERS:
            raise BackendError(f"unknown impairment provider {self.impairments!r} "
                               f"(available: {', '.join(IMPAIRMENT_PROVIDERS)})")
        if self.impairments == "appliance" and self.name == "ssh":
            raise BackendError("the impairment appliance is for the mininet and docker backends: lab machines "
                               "of the ssh backend use their own kernel")

    @property
    def force_appliance(self) -> bool:
        return self.impairments == "appliance"

    @classmethod
    def resolve(cls, spec, backend: Optional[str] = None, image: Optional[str] = None, *,
                inventory: Optional[str] = None, keep_addresses: bool = False, check_host_keys: bool = True,
                spec_path: str = "", impairments: Optional[str] = None) -> "BackendOptions":
        """The options of ``spec``'s lab: ``backend`` (from `--backend`) or the topology's `backend:`; likewise
        the image (Docker) and the inventory (ssh; the topology's `inventory:` is relative to the topology
        file ``spec_path``). Raises BackendError naming what does not fit the backend."""
        name = backend or spec.backend
        # The file's `image:` is the Docker backend's: a run of the same file on Mininet ignores it
        # (an explicit --image with Mininet is refused); likewise its `inventory:`.
        if name == "ssh" and not inventory and spec.inventory:
            base = Path(spec_path).parent if spec_path else Path.cwd()
            inventory = str(base / spec.inventory)
        return cls(name, image=image or (spec.image if name == "docker" else None),
                   inventory=str(Path(inventory).resolve()) if inventory else None,
                   keep_addresses=keep_addresses, check_host_keys=check_host_keys,
                   impairments=impairments or spec.impairments)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The options of :meth:`argv` on the command line of a lab holder process (testbed.lab.holder)."""
        parser.add_argument("--backend", required=True, choices=BACKENDS)
        parser.add_argument("--image", default=None)
        parser.add_argument("--inventory", default=None)
        parser.add_argument("--keep-addresses", action="store_true")
        parser.add_argument("--no-host-key-check", action="store_true")
        parser.add_argument("--impairments", default="auto", choices=IMPAIRMENT_PROVIDERS)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "BackendOptions":
        """The options :meth:`add_arguments` parsed."""
        return cls(args.backend, image=args.image, inventory=args.inventory, keep_addresses=args.keep_addresses,
                   check_host_keys=not args.no_host_key_check, impairments=args.impairments)

    def argv(self) -> list[str]:
        """The same options on the command line of a lab holder process (testbed.lab.holder)."""
        out = ["--backend", self.name]
        if self.image:
            out += ["--image", self.image]
        if self.inventory:
            out += ["--inventory", self.inventory]
        if self.keep_addresses:
            out.append("--keep-addresses")
        if not self.check_host_keys:
            out.append("--no-host-key-check")
        if self.impairments != "auto":
            out += ["--impairments", self.impairments]
        return out
