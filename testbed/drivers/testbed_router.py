"""The ``testbed`` driver: our router (router/, docs/router.md), configured by testbed.drivers.routerconfig."""
from __future__ import annotations

import json

from .routerconfig import RouterPorts, router_config

from .base import DriverFeatures, NodeContext, NodeLaunch, RouterDriver

CONFIG_FILE = "router.json"


class TestbedDriver(RouterDriver):
    name = "testbed"
    client = "testbed"
    wire = "testbed"
    features = DriverFeatures(metrics=True, events=True, admin=True)
    distributions = ("prometheus-client",)
    optional_distributions = ("uvloop",)  # its event loop, where the node can have it (router/eventloop.py)
    configurable = True

    def config(self, spec, lab, ctx: NodeContext) -> dict:
        return router_config(spec, lab, ctx.node, mgmt_ip=ctx.mgmt_ip, install_dir=ctx.install_dir,
                             admin_token=ctx.admin_token,
                             ports=RouterPorts(ctx.router_port, ctx.client_port, ctx.metrics_port))

    def launch(self, spec, lab, ctx: NodeContext) -> NodeLaunch:
        return self.launch_for(self.config(spec, lab, ctx))

    def launch_for(self, config: dict) -> NodeLaunch:
        return NodeLaunch(self.name, ("{python}", "-m", "router", "--config", "{dir}/" + CONFIG_FILE),
                          {CONFIG_FILE: json.dumps(config, indent=2) + "\n"},
                          {"http": f"http://{config['metrics_listen']}/metrics"},
                          check=("{python}", "-m", "router", "--config", "{dir}/" + CONFIG_FILE, "--check"))
