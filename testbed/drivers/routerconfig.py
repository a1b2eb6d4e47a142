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
- router settings from ``spec.router_settings(node)``:

  ============== =======================================================
  spec           router key
  ============== =======================================================
  scheduler      scheduler
  wrr_weights    wrr_weights (only the priorities given; the router's defaults for the rest)
  queue_batches  queue_sizes (the same number of batches for all 8 priorities; unset: the router's defaults)
  data_priorities  data_priorities (which priorities the data trees serve)
  batch_bytes    batch_size_bytes
  batch_time     batch_time_limit_us
  drop_deadline  drop_deadline_ms
  close_deadline close_deadline_ms
  lease          lease_ms
  keepalive      keepalive_ms
  log_level      log_level (upper case)
  congestion_aware congestion_aware
  monitor_interval monitor_interval_ms
  flow_ttl       flow_ttl_ms
  fragmentation  fragmentation
  max_message    max_message_bytes
  streaming_links streaming_links
  streaming_threshold streaming_threshold_bytes
  stream_pool_idle stream_pool_max_idle
  stream_pool_busy stream_pool_max_busy
  stream_idle    stream_idle_ms
  stream_pacing  stream_pacing
  query_channels query_channels
  query_attempt_timeout query_attempt_timeout_ms
  limits         limits (total -> total_bytes, control -> control_bytes, clients/routers -> client/router
                 with endpoint/sender -> *_bytes, input_rate -> input_rate_bps, input_burst -> input_burst_bytes,
                 slow_reader -> slow_reader_ms, stalled_reader -> stalled_reader_ms, declarations ->
                 declarations_per_client, off -> null; only the keys set)
  ============== =======================================================

:data:`UNMAPPED_SETTINGS` lists spec settings the router has no key for (none now).

Parallel links between the same two routers: the router keeps one connection per
neighbour name, so only the first such link (in link order) becomes a neighbour;
the router still listens on every link's address.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Optional

UNMAPPED_SETTINGS: tuple = ()


@dataclass(frozen=True)
class RouterPorts:
    router: int = 7447
    client: int = 7448
    metrics: int = 9464


def new_admin_token() -> str:
    return secrets.token_hex(16)


def settings_to_router_keys(settings) -> dict[str, Any]:
    """The spec's ``RouterSettings`` as router config keys (see the table above)."""
    out: dict[str, Any] = {
        "scheduler": settings.scheduler,
        "batch_size_bytes": int(settings.batch_bytes),
        "batch_time_limit_us": int(settings.batch_time) // 1000,
        "drop_deadline_ms": settings.drop_deadline / 1e6,
        "close_deadline_ms": settings.close_deadline / 1e6,
        "lease_ms": int(settings.lease) // 1_000_000,
        "keepalive_ms": int(settings.keepalive) // 1_000_000,
        "log_level": settings.log_level.upper(),
        "congestion_aware": bool(settings.congestion_aware),
        "monitor_interval_ms": max(10, int(settings.monitor_interval) // 1_000_000),
        "flow_ttl_ms": max(1, int(settings.flow_ttl) // 1_000_000),
        "fragmentation": bool(settings.fragmentation),
        "max_message_bytes": int(settings.max_message),
        "streaming_links": bool(settings.streaming_links),
        "streaming_threshold_bytes": int(settings.streaming_threshold),
        "stream_pool_max_idle": int(settings.stream_pool_idle),
        "stream_pool_max_busy": int(settings.stream_pool_busy),
        "stream_idle_ms": max(1, int(settings.stream_idle) // 1_000_000),
        "stream_pacing": float(settings.stream_pacing),
        "query_channels": int(settings.query_channels),
        "query_attempt_timeout_ms": max(1, int(settings.query_attempt_timeout) // 1_000_000),
    }
    if settings.queue_batches is not None:
        out["queue_sizes"] = [int(settings.queue_batches)] * 8
    if settings.data_priorities is not None:
        out["data_priorities"] = sorted({int(p) for p in settings.data_priorities})
    if settings.wrr_weights:
        out["wrr_weights"] = {str(int(prio)): int(w) for prio, w in settings.wrr_weights.items()}
    if settings.limits is not None:
        out["limits"] = limits_to_router_keys(settings.limits)
    return out


_ROLE_KEYS = {"endpoint": "endpoint_bytes", "sender": "sender_bytes", "input_rate": "input_rate_bps",
              "input_burst": "input_burst_bytes", "noisy_policy": "noisy_policy", "drop_priorities": "drop_priorities",
              "slow_reader": "slow_reader_ms", "stalled_reader": "stalled_reader_ms",
              "slow_reader_policy": "slow_reader_policy"}


def _off_or(value: Any) -> Any:
    """A limit the spec switched ``off`` is the router's null (no limit)."""
    return None if value == "off" else value


def limits_to_router_keys(limits) -> dict[str, Any]:
    """The spec's ``limits`` as the router's ``limits`` object: only what the topology sets."""
    out: dict[str, Any] = {}
    if limits.total is not None:
        out["total_bytes"] = int(limits.total)
    if limits.control is not None:
        out["control_bytes"] = int(limits.control)
    if limits.declarations is not None:
        out["declarations_per_client"] = _off_or(limits.declarations)
    for spec_key, router_key in (("clients", "client"), ("routers", "router")):
        role = getattr(limits, spec_key)
        if role is None:
            continue
        keys: dict[str, Any] = {}
        for name, key in _ROLE_KEYS.items():
            value = getattr(role, name)
            if value is None:
                continue
            if value == "off":
                value = None
            elif name in ("slow_reader", "stalled_reader"):
                value = max(1, int(value) // 1_000_000)
            elif name == "drop_priorities":
                value = sorted({int(p) for p in value})
            elif not isinstance(value, str):
                value = int(value)
            keys[key] = value
        out[router_key] = keys
    return out


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
        "event_log": f"{install_dir.rstrip('/')}/events.jsonl",
    }
    config.update(settings_to_router_keys(spec.router_settings(node)))
    return config
