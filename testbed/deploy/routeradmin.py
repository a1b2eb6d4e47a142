"""Client of the routers' admin API for changes the orchestrator makes at run time.

When the scenario changes a link's bandwidth (``set_link ... bw:``), the routers at its
ends must hear of it, or their congestion monitors keep deciding against the capacity
written into their configs at deploy time (``link_capacity_bps``). Each router is told
the capacity of the direction it sends in::

    plans = links.set_shape(index, direction=event.node, bw_bps=event.bw)
    notify_link_bandwidth(endpoints, lab.links[index], event.bw, direction=event.node)

which calls, for each sending end that is a deployed router facing another router,

    set_link_capacity(endpoints[sender], neighbour=<other end's node>, capacity_bps=bw,
                      address=<other end's IP>)

= ``POST <admin_url>/capacity`` with ``Authorization: Bearer <admin_token>`` and
``{"neighbour", "capacity_bps", "address", "reason"}`` (docs/router.md, "Admin API").
The router answers the capacity its monitor now uses; it applies it from its next
monitor interval and logs ``link_capacity_changed``.

Failures raise :class:`RouterAdminError` naming the router, the URL and the router's
own reason.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from testbed.backends.base import LabLink
from testbed.deploy.deployer import RouterEndpoint

#: Default time allowed for one admin request (connect + answer).
DEFAULT_TIMEOUT_S = 5.0


class RouterAdminError(RuntimeError):
    """An admin request to a router failed: ``status`` is the HTTP status (None: no answer)."""

    def __init__(self, message: str, *, node: str, url: str, status: Optional[int] = None):
        super().__init__(message)
        self.node = node
        self.url = url
        self.status = status


@dataclass(frozen=True)
class CapacityUpdate:
    """What one router was told (or why it was not): the result of :func:`notify_link_bandwidth`."""

    router: str
    neighbour: str
    capacity_bps: Optional[int]
    applied: bool
    answer: Optional[dict] = None  # the router's answer when applied
    skipped: str = ""  # why not, when not applied


def _request(endpoint: RouterEndpoint, method: str, path: str, body: Optional[dict], timeout_s: float) -> Any:
    url = f"{endpoint.admin_url.rstrip('/')}/{path.lstrip('/')}"
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {endpoint.admin_token}", "Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            payload = resp.read()
    except urllib.error.HTTPError as exc:
        raw = exc.read().decode("utf-8", "replace").strip()
        try:
            reason = json.loads(raw).get("error", raw)
        except (ValueError, AttributeError):
            reason = raw
        raise RouterAdminError(f"router {endpoint.node}: {method} {url} answered HTTP {exc.code}: {reason}",
                               node=endpoint.node, url=url, status=exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise RouterAdminError(f"router {endpoint.node}: cannot reach its admin API at {url}: {why} "
                               f"(is the router running, and its metrics_listen reachable from here?)",
                               node=endpoint.node, url=url) from None
    try:
        return json.loads(payload)
    except ValueError:
        raise RouterAdminError(f"router {endpoint.node}: {method} {url} answered something that is not JSON: "
                               f"{payload[:200]!r}", node=endpoint.node, url=url, status=200) from None


def set_link_capacity(endpoint: RouterEndpoint, neighbour: str, capacity_bps: Optional[int], *,
                      address: Optional[str] = None, reason: str = "", timeout_s: float = DEFAULT_TIMEOUT_S) -> dict:
    """Tell the router at ``endpoint`` that its link to the router ``neighbour`` now carries
    ``capacity_bps`` bit/s in the direction router -> neighbour (``None``: no limit, the
    monitor ignores the link). ``address``: the neighbour's IP on the link meant (checked by
    the router; a link it does not use for that neighbour answers HTTP 409).

    Returns the router's answer: ``{"neighbour", "capacity_bps_before", "capacity_bps",
    "configured_capacity_bps", "cap_limit_bps", "congested", "up", "monitor_interval_ms"}``.
    Raises :class:`RouterAdminError` when the router refuses it or cannot be reached.
    """
    if capacity_bps is not None and (not isinstance(capacity_bps, int) or isinstance(capacity_bps, bool)
                                     or capacity_bps <= 0):
        raise ValueError(f"capacity_bps must be a positive integer (bit/s) or None, got {capacity_bps!r}")
    body: dict = {"neighbour": neighbour, "capacity_bps": capacity_bps}
    if address is not None:
        body["address"] = address
    if reason:
        body["reason"] = reason
    answer = _request(endpoint, "POST", "capacity", body, timeout_s)
    if not isinstance(answer, dict) or answer.get("neighbour") != neighbour or answer.get("capacity_bps") != capacity_bps:
        raise RouterAdminError(f"router {endpoint.node}: the capacity of its link to {neighbour} did not become "
                               f"{capacity_bps} (answer: {answer!r})", node=endpoint.node,
                               url=f"{endpoint.admin_url.rstrip('/')}/capacity", status=200)
    return answer


def link_capacities(endpoint: RouterEndpoint, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict:
    """``GET <admin_url>/capacity``: per neighbour, the capacity the router's monitor uses."""
    return _request(endpoint, "GET", "capacity", None, timeout_s)


def notify_link_bandwidth(endpoints: Mapping[str, RouterEndpoint], link: LabLink, bw_bps: Optional[int], *,
                          direction: Optional[str] = None, reason: str = "",
                          timeout_s: float = DEFAULT_TIMEOUT_S) -> list[CapacityUpdate]:
    """After ``LinkControl.set_shape(link, direction=..., bw_bps=bw_bps)``: tell each sending end
    (``direction``, the sending node, or both ends when None) its new capacity toward the other.

    Ends that are not deployed routers, or face a node that is not one, are skipped; so is a
    router that reaches that neighbour over another (parallel) link (HTTP 409), as its
    monitor does not watch this one. Every other failure raises :class:`RouterAdminError`.
    """
    senders = [link.a, link.b] if direction is None else [link.end(direction)]
    out: list[CapacityUpdate] = []
    for end in senders:
        other = link.other(end.node)
        if end.node not in endpoints or other.node not in endpoints:
            out.append(CapacityUpdate(end.node, other.node, bw_bps, False,
                                      skipped="no router at both ends (a host end has no monitor)"))
            continue
        try:
            answer = set_link_capacity(endpoints[end.node], other.node, bw_bps, address=other.ip,
                                       reason=reason or f"set_link {link.label}", timeout_s=timeout_s)
        except RouterAdminError as exc:
            if exc.status != 409:
                raise
            out.append(CapacityUpdate(end.node, other.node, bw_bps, False, skipped=str(exc)))
            continue
        out.append(CapacityUpdate(end.node, other.node, bw_bps, True, answer=answer))
    return out


def tell_routers(endpoints: Mapping[str, RouterEndpoint], link: LabLink, bw_bps: Optional[int],
                 sender: Optional[str], *, driver: str, admin: bool) -> list[CapacityUpdate]:
    """Tell the routers that send on ``link`` (``sender``, or both ends) its new bandwidth, as a scenario
    `set_link` does. A router that cannot be told (killed by the scenario, a driver without our admin API) is
    reported in its update, not raised: the link's shaping has changed all the same."""
    if not admin:
        return [CapacityUpdate(end, link.other(end).node, bw_bps, False,
                               skipped=f"router driver {driver} has no admin API")
                for end in ([link.a.node, link.b.node] if sender is None else [sender])]
    updates: list[CapacityUpdate] = []
    for end in ([link.a.node, link.b.node] if sender is None else [sender]):
        try:
            updates += notify_link_bandwidth(endpoints, link, bw_bps, direction=end)
        except RouterAdminError as exc:
            updates.append(CapacityUpdate(end, link.other(end).node, bw_bps, False, skipped=str(exc)))
    return updates
