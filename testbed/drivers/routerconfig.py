"""Each router's config (router/config.py, docs/router.md) from the spec and the lab as built.

What goes into a node's config:

- ``router_listen``: the node's address on every data link to another router, all on
  ``ports.router`` — never the management address;
- ``client_listen``: ``127.0.0.1:ports.client`` (traffic clients run on the node);
- ``neighbours``: the other end of each of its links to a router: name, that end's
  data address, ``ports.router``, the link's weight and ``link_capacity_bps`` = the
  link's bandwidth in the direction node -> neighbour (``None`` when that direction has
  no bandwidth limit), which the router's congestion monitor uses. ``capacity_bps``
  (the router pacing its own writer, to emulate a link on loopback) is never written:
  tc shapes the real links. Both ends list each other; the router keeps one connection;
- ``metrics_listen``: ``<management IP>:ports.metrics``; ``admin_token``: per run;
- ``event_log``: ``<install dir>/events.jsonl``;
- router settings from ``spec.router_settings(node)``: each setting a topology gives (or defaults) under its
  router key, converted to the router's unit, as declared once in router/settings.py (the tables of
  docs/spec.md "Router settings" and "Resource limits" show the names side by side). Unset optional settings
  (limits, priority lists, per-priority settings) are not written: the router keeps its defaults.

Parallel links between the same two routers: the router keeps one connection per
neighbour name, so only the first such link (in link order) becomes a neighbour;
the router still listens on every link's address.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from router.codec import NUM_PRIORITIES
from router.settings import LIMITS_SETTINGS, ROLE_SETTINGS, ROUTER_SETTINGS, UNIT_NS, Setting, spec_settings
from runfolder.layout import LAYOUT

@dataclass(frozen=True)
class RouterPorts:
    router: int = 7447
    client: int = 7448
    metrics: int = 9464


def new_admin_token() -> str:
    return secrets.token_hex(16)


def _router_value(setting: Setting, value: Any) -> Any:
    """One value of a topology's ``setting`` in the router's unit (durations from nanoseconds)."""
    if value == "off":
        return None
    if setting.unit in UNIT_NS:
        kind = setting.item if setting.kind == "per_priority" else setting.kind
        return value / UNIT_NS[setting.unit] if kind == "number" else int(value) // UNIT_NS[setting.unit]
    if setting.kind == "choice":
        return next(choice for choice in setting.choices if choice.lower() == value)
    if isinstance(value, (bool, str, float)):
        return value
    return int(value)


def _router_keys(settings: Tuple[Setting, ...], values: Any) -> dict[str, Any]:
    """``values`` (a model of the spec: RouterSettings, Limits, RoleLimits) as the router's keys: every
    setting it holds a value for, converted."""
    out: dict[str, Any] = {}
    for setting in spec_settings(settings):
        value = getattr(values, setting.spec)
        if value is None or value == {}:
            continue
        if setting.kind == "limits":
            out[setting.key] = _router_keys(LIMITS_SETTINGS, value)
        elif setting.kind == "role":
            out[setting.key] = _router_keys(ROLE_SETTINGS, value)
        elif setting.kind == "priorities":
            out[setting.key] = sorted({int(p) for p in value})
        elif setting.kind == "per_priority" and setting.spec_form == "all":
            out[setting.key] = [_router_value(setting, value)] * NUM_PRIORITIES
        elif setting.kind == "per_priority":
            out[setting.key] = {str(int(prio)): _router_value(setting, v) for prio, v in value.items()}
        else:
            out[setting.key] = _router_value(setting, value)
    return out


def settings_to_router_keys(settings) -> dict[str, Any]:
    """The spec's ``RouterSettings`` as router config keys (router/settings.py: spec name -> router key)."""
    return _router_keys(ROUTER_SETTINGS, settings)


def router_config(spec, lab, node: str, *, mgmt_ip: str, install_dir: str, admin_token: str,
                  ports: RouterPorts = RouterPorts()) -> dict[str, Any]:
    """The config dict of the router on ``node`` (validated by the router's own ``--check`` on the node)."""
    routers = set(spec.routers())
    if node not in routers:
        raise ValueError(f"node {node!r} is not a router (kind {lab.node(node).kind})")
    listen: list[str] = []
    neighbours: list[dict[str, Any]] = []
    seen: set[str] = set()
    for link in lab.links:
        if node not in (link.a.node, link.b.node):
            continue
        mine, other = link.end(node), link.other(node)
        if other.node not in routers:
            continue
        listen.append(f"{mine.ip}:{ports.router}")
        if other.node in seen:
            continue
        seen.add(other.node)
        shape = link.shape_ab if mine is link.a else link.shape_ba
        capacity: Optional[int] = shape.bw_bps or None
        neighbours.append({"name": other.node, "address": other.ip, "port": ports.router,
                           "weight": int(link.weight), "link_capacity_bps": capacity})
    config: dict[str, Any] = {
        "node": node,
        "router_listen": listen,
        "client_listen": [f"127.0.0.1:{ports.client}"],
        "neighbours": neighbours,
        "metrics_listen": f"{mgmt_ip}:{ports.metrics}",
        "admin_token": admin_token,
        "event_log": f"{install_dir.rstrip('/')}/{LAYOUT.router_events_name}",
    }
    config.update(settings_to_router_keys(spec.router_settings(node)))
    return config
