"""The ``command`` driver: any router started from a command line with a config rendered per node from a
Jinja2 template (docs/drivers.md "Bring your own router").

The template sees, per node:

=============== ===========================================================================
``node``         the node's name; ``node_index``: its position among the routers (0, 1, ...)
``mgmt_ip``      its management address (for a metrics endpoint; never for router traffic)
``install_dir``  its install folder (where the config and ``router.log`` are; shipped files are in
                 the bundle's root, ``{code}`` in the command)
``router_port``  the port routers listen on at their link addresses (7447)
``client_port``  the port the node's traffic clients connect to on 127.0.0.1 (7448)
``metrics_port`` 9464
``links``        its links to other routers, in link order: ``index``, ``label``, ``iface``, ``ip``,
                 ``peer``, ``peer_ip``, ``weight``, ``bw_bps`` (node -> peer; None: unlimited),
                 ``initiator`` (true on the link's first end: that end connects)
``listen``       ``"ip:port"`` of each of its link addresses
``connect``      ``"ip:port"`` of the peers it initiates to (one per peer)
``neighbours``   every neighbour router once: ``name``, ``index`` (its node_index), ``ip``, ``port``,
                 ``weight`` (of the first link to it)
``settings``     the topology's router settings for the node (``defaults.router`` merged with the node's;
                 durations in ns, sizes in bytes)
=============== ===========================================================================

The command may use ``{python}``, ``{dir}``, ``{code}`` (filled on the node), ``{config}`` (the rendered
file on the node) and ``{node}``.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Optional

from .base import DriverError, DriverFeatures, NodeContext, NodeLaunch, RouterDriver, client_problems

DEFAULT_CONFIG_FILE = "router.conf"


class CommandDriver(RouterDriver):
    name = "command"

    def __init__(self, choice) -> None:
        self.choice = choice
        self.client = choice.client
        self.wire = choice.wire
        self.features = DriverFeatures(metrics=choice.metrics is not None, events=False, admin=False)
        if choice.client == "zenoh":
            # the traffic's Zenoh client and the Zenoh Python router (zenohrouter/) travel with it
            self.packages = (*RouterDriver.packages, "zenohrouter")
            self.distributions = ("prometheus-client", "eclipse-zenoh")

    # -- the template --------------------------------------------------------------------

    @property
    def config_file(self) -> str:
        if self.choice.config_file:
            return self.choice.config_file
        if self.choice.config_template:
            name = Path(self.choice.config_template).name
            return name[:-3] if name.endswith(".j2") and len(name) > 3 else name
        return DEFAULT_CONFIG_FILE

    def _template(self):
        import jinja2

        where = self.choice.config_template or "router.config (inline)"
        if self.choice.config_template is not None:
            path = Path(self.choice.config_template)
            if not path.is_absolute():
                raise DriverError(f"router.config_template {path}: not resolved against the topology's folder")
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise DriverError(f"router.config_template {path}: {exc.strerror or exc}") from None
        else:
            text = self.choice.config
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                 autoescape=False)
        try:
            return env.from_string(text), where
        except jinja2.TemplateSyntaxError as exc:
            raise DriverError(f"{where}:{exc.lineno}: {exc.message}") from None

    def render(self, variables: dict[str, Any]) -> str:
        template, where = self._template()
        try:
            return template.render(**variables)
        except Exception as exc:  # noqa: BLE001 - undefined names, and e.g. a TypeError in an expression
            line = _template_line(exc)
            raise DriverError(f"{where}{':' + str(line) if line else ''}: {exc} (node {variables['node']}; "
                              "the variables are listed in docs/drivers.md)") from None

    # -- the interface --------------------------------------------------------------------

    def argv(self) -> list[str]:
        """The command line as given (a string split like a shell would); DriverError if it is empty or
        does not split."""
        command = self.choice.command
        try:
            argv = shlex.split(command) if isinstance(command, str) else list(command)
        except ValueError as exc:
            raise DriverError(f"router.command {command!r}: {exc}") from None
        if not argv or not argv[0].strip():
            raise DriverError("router.command is empty: give the router's command line")
        return argv

    def problems(self, spec) -> list[str]:
        """The command line splits; client and wire agree; the template renders for every router with the
        topology's planned addresses; shipped files exist."""
        out = []
        try:
            self.argv()
        except DriverError as exc:
            out.append(str(exc))
        if self.client == "zenoh" and self.wire == "testbed":
            out.append("router.wire: testbed (our protocol) with client: zenoh — the routers' links cannot speak our "
                       "protocol to Zenoh clients; say wire: zenoh (or unknown)")
        for path in self.choice.ship:
            if not Path(path).exists():
                out.append(f"router.ship: {path} does not exist")
        try:
            self._settings_read(spec)
        except DriverError as exc:
            out.append(str(exc))
        return out + client_problems(spec, self.client)

    def _settings_read(self, spec) -> set:
        """Render the template for every router (planned addresses) and return the router settings it read."""
        ends = _planned_ends(spec)
        read: set = set()
        for i, node in enumerate(spec.routers()):
            ctx = NodeContext(node, "192.0.2.1", f"/var/lib/testbed/nodes/lab/{node}", "token", 7447, 7448, 9464)
            variables = template_variables(spec, ctx, i, ends.get(node, []))
            variables["settings"] = _ReadSettings(variables["settings"], read)
            self.render(variables)
        return read

    def applied_settings(self, spec) -> frozenset:
        """The settings the template reads (none if it does not render: preflight has said why)."""
        try:
            return frozenset(self._settings_read(spec))
        except DriverError:
            return frozenset()

    def launch(self, spec, lab, ctx: NodeContext) -> NodeLaunch:
        ends = _lab_ends(spec, lab).get(ctx.node, [])
        text = self.render(template_variables(spec, ctx, spec.routers().index(ctx.node), ends))
        config_path = "{dir}/" + self.config_file
        argv = [_fill(a, ctx, config_path) for a in self.argv()]
        if self.choice.ready is None:
            ready: dict[str, Any] = {"tcp": ctx.client_port}
        elif self.choice.ready.tcp is not None:
            ready = {"tcp": self.choice.ready.tcp}
        else:
            ready = {"http": _fill(self.choice.ready.http, ctx, config_path)}
        env = {k: _fill(v, ctx, config_path) for k, v in self.choice.env.items()}
        return NodeLaunch(self.name, tuple(argv), {self.config_file: text}, ready, env=env)

    def metrics_url(self, ctx: NodeContext) -> Optional[str]:
        return _fill(self.choice.metrics, ctx, "{dir}/" + self.config_file) if self.choice.metrics else None

    def ship(self) -> list[Path]:
        """Files and folders copied into the bundle's root on every node (``{code}/<name>``)."""
        return [Path(p) for p in self.choice.ship]


class _ReadSettings(dict):
    """The template's ``settings``, noting which keys it reads."""

    def __init__(self, values: dict, read: set) -> None:
        super().__init__(values)
        self._read = read

    def __getitem__(self, key):
        self._read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._read.add(key)
        return super().get(key, default)


def _fill(text: str, ctx: NodeContext, config_path: str) -> str:
    """The controller's placeholders; {python}, {dir} and {code} are left for the node."""
    for key, value in (("{config}", config_path), ("{node}", ctx.node), ("{mgmt_ip}", ctx.mgmt_ip),
                       ("{client_port}", str(ctx.client_port)), ("{router_port}", str(ctx.router_port)),
                       ("{metrics_port}", str(ctx.metrics_port))):
        text = text.replace(key, value)
    return text


def _template_line(exc: Exception) -> Optional[int]:
    import traceback

    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == "<template>":
            return frame.lineno
    return getattr(exc, "lineno", None)


def template_variables(spec, ctx: NodeContext, node_index: int, ends: list[dict[str, Any]]) -> dict[str, Any]:
    listen, connect, neighbours, seen = [], [], [], set()
    for end in ends:
        address = f"{end['ip']}:{ctx.router_port}"
        if address not in listen:
            listen.append(address)
        if end["peer"] not in seen:
            seen.add(end["peer"])
            neighbours.append({"name": end["peer"], "index": spec.routers().index(end["peer"]), "ip": end["peer_ip"],
                               "port": ctx.router_port, "weight": end["weight"]})
            if end["initiator"]:
                connect.append(f"{end['peer_ip']}:{ctx.router_port}")
    return {"node": ctx.node, "node_index": node_index, "mgmt_ip": ctx.mgmt_ip, "install_dir": ctx.install_dir,
            "router_port": ctx.router_port, "client_port": ctx.client_port, "metrics_port": ctx.metrics_port,
            "links": ends, "listen": listen, "connect": connect, "neighbours": neighbours,
            "settings": spec.router_settings(ctx.node).model_dump()}


def _lab_ends(spec, lab) -> dict[str, list[dict[str, Any]]]:
    from .base import router_neighbours

    out: dict[str, list[dict[str, Any]]] = {}
    for node in spec.routers():
        for link, mine, other in router_neighbours(spec, lab, node):
            shape = link.shape_ab if mine is link.a else link.shape_ba
            out.setdefault(node, []).append({
                "index": link.index, "label": link.label, "iface": mine.ifname, "ip": mine.ip, "peer": other.node,
                "peer_ip": other.ip, "weight": int(link.weight), "bw_bps": shape.bw_bps or None,
                "initiator": mine is link.a})
    return out


def _planned_ends(spec) -> dict[str, list[dict[str, Any]]]:
    """The same as :func:`_lab_ends` from the topology's planned addresses (before any lab exists)."""
    routers = set(spec.routers())
    out: dict[str, list[dict[str, Any]]] = {}
    for link in spec.resolved_links():
        for mine, other in ((link.a, link.b), (link.b, link.a)):
            if mine.node in routers and other.node in routers:
                out.setdefault(mine.node, []).append({
                    "index": link.index, "label": link.label, "iface": mine.ifname, "ip": str(mine.address.ip),
                    "peer": other.node, "peer_ip": str(other.address.ip), "weight": int(link.weight),
                    "bw_bps": mine.egress.bw_bps or None, "initiator": mine is link.a})
    return out
