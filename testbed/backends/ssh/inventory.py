"""The lab machines of the ssh backend, from a standard Ansible inventory (INI or YAML).

Parsed with Ansible's own inventory manager, so groups, ``[group:vars]``, ``host_vars``
and every spelling Ansible accepts work as they do for ``ansible-playbook``. The
connection variables are read as Ansible users write them: ``ansible_host``,
``ansible_port``, ``ansible_user``, ``ansible_ssh_private_key_file``,
``ansible_password``, ``ansible_become`` (and ``_method``/``_user``/``_password``),
``ansible_python_interpreter``, ``ansible_ssh_common_args``/``ansible_ssh_extra_args``
(their ``-o UserKnownHostsFile=...`` and ``-o StrictHostKeyChecking=...`` are honoured).

A topology node maps to the inventory host of the same name, or to the one its ``host:``
key names.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from testbed.backends.base import BackendError

#: Variables that are Ansible's own bookkeeping, not the user's connection settings.
_MAGIC = {"ansible_version", "ansible_playbook_python", "ansible_config_file", "ansible_facts", "inventory_file",
          "inventory_dir", "inventory_hostname", "inventory_hostname_short", "group_names", "groups",
          "omit", "playbook_dir", "ansible_check_mode", "ansible_diff_mode", "ansible_forks",
          "ansible_inventory_sources", "ansible_run_tags", "ansible_skip_tags", "ansible_verbosity"}


@dataclass(frozen=True)
class InventoryHost:
    """One lab machine and how to reach it, as the inventory says."""

    name: str
    address: str
    port: int = 22
    user: Optional[str] = None
    key_file: Optional[str] = None
    password: Optional[str] = None
    become: bool = False
    become_method: str = "sudo"
    become_user: str = "root"
    become_password: Optional[str] = None
    python: str = "/usr/bin/python3"
    ssh_args: tuple[str, ...] = ()
    #: every variable the inventory gives the host (passed on to Ansible as they are)
    vars: dict = field(default_factory=dict, compare=False)

    @property
    def login(self) -> str:
        return self.user or "root"

    def ip(self) -> str:
        """The address the controller reaches the machine on (``ansible_host`` resolved)."""
        import socket

        try:
            return socket.gethostbyname(self.address)
        except OSError:
            return self.address

    @property
    def needs_sudo(self) -> bool:
        """Commands that need root go through sudo unless the login is root."""
        return self.login != "root"

    def ssh_option(self, name: str) -> Optional[str]:
        """The value of ``-o Name=value`` in the inventory's SSH arguments (last one wins), if any."""
        value = None
        args = list(self.ssh_args)
        for i, arg in enumerate(args):
            opt = None
            if arg == "-o" and i + 1 < len(args):
                opt = args[i + 1]
            elif arg.startswith("-o") and len(arg) > 2:
                opt = arg[2:]
            if opt:
                key, sep, val = opt.replace(" ", "=", 1).partition("=")
                if sep and key.strip().lower() == name.lower():
                    value = val.strip()
        return value

    @property
    def known_hosts_files(self) -> list[str]:
        """Where this host's key is looked up: the inventory's UserKnownHostsFile, else ~/.ssh/known_hosts;
        and the system's file."""
        user_files = self.ssh_option("UserKnownHostsFile")
        files = shlex.split(user_files) if user_files else [str(Path("~/.ssh/known_hosts").expanduser())]
        system = self.ssh_option("GlobalKnownHostsFile")
        files += shlex.split(system) if system else ["/etc/ssh/ssh_known_hosts"]
        return [f for f in files if f != "/dev/null"]

    @property
    def host_key_checking_off(self) -> bool:
        """The inventory itself turns host key checking off (StrictHostKeyChecking=no, or
        ansible_host_key_checking / ansible_ssh_host_key_checking false)."""
        strict = (self.ssh_option("StrictHostKeyChecking") or "").lower()
        flag = self.vars.get("ansible_host_key_checking", self.vars.get("ansible_ssh_host_key_checking"))
        return strict in ("no", "off") or (flag is not None and not _boolean(flag))


def _boolean(value) -> bool:
    from ansible.module_utils.parsing.convert_bool import boolean

    return boolean(value, strict=False)


def load_inventory(path: "str | Path") -> dict[str, InventoryHost]:
    """Every host of the inventory at ``path``, by name (BackendError naming the file when unusable)."""
    path = Path(path)
    if not path.is_file():
        raise BackendError(f"inventory {path} does not exist: give an Ansible inventory (INI or YAML) with "
                           "--inventory FILE or `inventory:` in the topology")
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    try:
        manager = InventoryManager(loader=loader, sources=[str(path)], parse=False)
        manager.parse_sources(cache=False)
    except AnsibleError as exc:
        raise BackendError(f"inventory {path} cannot be read: {exc}") from exc
    variables = VariableManager(loader=loader, inventory=manager)
    hosts = {}
    for host in manager.get_hosts():
        v = {k: val for k, val in variables.get_vars(host=host, include_hostvars=False).items() if k not in _MAGIC}
        hosts[host.name] = _host_from_vars(host.name, v, path)
    if not hosts:
        raise BackendError(f"inventory {path} has no hosts (is it an Ansible inventory in INI or YAML?)")
    return hosts


def _host_from_vars(name: str, v: dict, path: Path) -> InventoryHost:
    def get(*keys: str, default=None):
        for key in keys:
            if v.get(key) not in (None, ""):
                return v[key]
        return default

    try:
        port = int(get("ansible_port", "ansible_ssh_port", default=22))
    except (TypeError, ValueError):
        raise BackendError(f"inventory {path}: host {name}: ansible_port {get('ansible_port')!r} is not a number") \
            from None
    args: list[str] = []
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if v.get(key):
            args += shlex.split(str(v[key]))
    key_file = get("ansible_ssh_private_key_file", "ansible_private_key_file")
    if key_file:
        key_file = str((path.parent / Path(str(key_file)).expanduser()).resolve()) \
            if not Path(str(key_file)).expanduser().is_absolute() else str(Path(str(key_file)).expanduser())
    return InventoryHost(
        name=name,
        address=str(get("ansible_host", "ansible_ssh_host", default=name)),
        port=port,
        user=get("ansible_user", "ansible_ssh_user"),
        key_file=key_file,
        password=get("ansible_password", "ansible_ssh_pass", "ansible_ssh_password"),
        become=_boolean(get("ansible_become", default=False)),
        become_method=str(get("ansible_become_method", default="sudo")),
        become_user=str(get("ansible_become_user", default="root")),
        become_password=get("ansible_become_password", "ansible_become_pass", "ansible_sudo_pass"),
        python=str(get("ansible_python_interpreter", default="/usr/bin/python3")),
        ssh_args=tuple(args),
        vars=dict(v),
    )


def node_hosts(spec, inventory: dict[str, InventoryHost], inventory_path: str) -> dict[str, InventoryHost]:
    """node -> its inventory host: the node's ``host:`` key, else the host of the node's name."""
    mapping, missing, taken = {}, [], {}
    for node, node_spec in spec.nodes.items():
        wanted = getattr(node_spec, "host", None) or node
        host = inventory.get(wanted)
        if host is None:
            missing.append(f"node {node} -> host {wanted!r}")
            continue
        if wanted in taken:
            raise BackendError(f"nodes {taken[wanted]} and {node} both map to inventory host {wanted!r}: "
                               "one machine per node")
        taken[wanted] = node
        mapping[node] = host
    if missing:
        raise BackendError(f"inventory {inventory_path} has no host for {', '.join(missing)} (hosts: "
                           f"{', '.join(sorted(inventory))}); name the host like the node or give the node "
                           "a `host:` key")
    return mapping
