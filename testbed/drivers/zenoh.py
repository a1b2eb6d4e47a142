"""The ``zenoh`` driver: stock Zenoh routers from the ``eclipse-zenoh`` Python package (zenohrouter/).

Per node one router-mode process (``python -m zenohrouter --config zenoh.json5``) listening on its
address of every link to another router (``router_port``) and on ``127.0.0.1:client_port`` for the
node's traffic processes; it connects to the other end of each link it is the first end of (link
order), so every topology link is one Zenoh link and nothing else is: multicast scouting and gossip
are off, and nothing listens on the management address. Shared memory is off: Zenoh would otherwise
carry payloads above 3 KiB between routers of one host (a Mininet lab) through /dev/shm, past the
shaped links (found in the first zenoh run: the 12.5 kB zpub messages never crossed a link). Routers of one Zenoh network route with
link-state among themselves. Traffic processes are Zenoh client sessions (traffic/zenohclient.py).

Each router gets a fixed Zenoh id (:func:`zenoh_id`) and the topology's link weights
(``routing/router/linkstate/transport_weights``), so Zenoh's link-state prefers the same paths as ours.

Settings of the topology applied: ``lease`` (transport/link/tx/lease), ``keepalive`` (keep_alive =
lease / keepalive, at least 1), ``batch_bytes`` (transport/link/tx/batch_size, at most 65535),
``log_level`` (RUST_LOG). The others are our router's and are ignored (warned, recorded in the manifest).
"""
from __future__ import annotations

import json

from .base import DriverFeatures, NodeContext, NodeLaunch, RouterDriver, client_problems, router_neighbours

CONFIG_FILE = "zenoh.json5"
RUST_LOG = {"debug": "debug", "info": "info", "warning": "warn", "error": "error"}


def zenoh_id(router_index: int) -> str:
    """A router's Zenoh id (hex, no leading zero), fixed by its place among the topology's routers: the
    link weights name their neighbours by it, and logs and captures read the same in every run."""
    return f"{0x7E570000 + router_index + 1:x}"


class ZenohDriver(RouterDriver):
    name = "zenoh"
    client = "zenoh"
    wire = "zenoh"
    features = DriverFeatures(metrics=False, events=False, admin=False)
    packages = (*RouterDriver.packages, "zenohrouter")
    distributions = ("prometheus-client", "eclipse-zenoh")
    settings_applied = frozenset({"lease", "keepalive", "batch_bytes", "log_level"})

    def problems(self, spec) -> list[str]:
        out = client_problems(spec, self.client)
        routers, seen = set(spec.routers()), {}
        for link in spec.resolved_links():
            pair = tuple(sorted((link.a.node, link.b.node)))
            if set(pair) <= routers:
                if pair in seen:
                    out.append(f"links {seen[pair]} and {link.label}: two links between {pair[0]} and {pair[1]} "
                               "would be one Zenoh transport (the first link's), not two; the zenoh driver "
                               "takes one link per pair of routers")
                seen.setdefault(pair, link.label)
        return out

    def config(self, spec, lab, ctx: NodeContext) -> dict:
        settings = spec.router_settings(ctx.node)
        routers = spec.routers()
        listen, connect, weights, seen = [], [], {}, set()
        for link, mine, other in router_neighbours(spec, lab, ctx.node):
            endpoint = f"tcp/{mine.ip}:{ctx.router_port}"
            if endpoint not in listen:
                listen.append(endpoint)
            weights.setdefault(other.node, int(link.weight))  # parallel links: one Zenoh transport, the first's weight
            if mine is link.a and other.node not in seen:
                seen.add(other.node)
                connect.append(f"tcp/{other.ip}:{ctx.router_port}")
        lease_ms = max(1, int(settings.lease) // 1_000_000)
        keep_alive = max(1, int(settings.lease) // max(1, int(settings.keepalive)))
        return {
            "mode": "router",
            "id": zenoh_id(routers.index(ctx.node)),
            # the topology's link weights, as Zenoh's link-state takes them (without them every link weighs
            # the same and Zenoh picks among equal-hop paths by itself)
            "routing": {"router": {"linkstate": {"transport_weights": [
                {"dst_zid": zenoh_id(routers.index(peer)), "weight": max(1, min(65535, w))}
                for peer, w in weights.items()]}}},
            "listen": {"endpoints": listen + [f"tcp/127.0.0.1:{ctx.client_port}"]},
            # a lost neighbour (a restarted router) is dialled again within a second (Zenoh's default: 1 s
            # growing to 4 s)
            "connect": {"endpoints": connect,
                        "retry": {"period_init_ms": 100, "period_max_ms": 1000, "period_increase_factor": 2}},
            # no scouting, and no 500 ms wait for it at start
            "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}, "delay": 0},
            "transport": {"link": {"tx": {"lease": lease_ms, "keep_alive": keep_alive,
                                          "batch_size": min(65535, int(settings.batch_bytes))}},
                          # Zenoh's default moves payloads above 3 KiB into shared memory between processes
                          # of one host (namespaces of a Mininet lab share /dev/shm): past the shaped links
                          "shared_memory": {"enabled": False}},
        }

    def launch(self, spec, lab, ctx: NodeContext) -> NodeLaunch:
        level = RUST_LOG[spec.router_settings(ctx.node).log_level]
        return NodeLaunch(self.name, ("{python}", "-m", "zenohrouter", "--config", "{dir}/" + CONFIG_FILE),
                          {CONFIG_FILE: json.dumps(self.config(spec, lab, ctx), indent=2) + "\n"},
                          {"tcp": ctx.client_port}, env={"RUST_LOG": level})
