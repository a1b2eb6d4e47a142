"""OpenMetrics exposition of the router's statistics, and a tiny asyncio HTTP
server for ``/metrics`` and the token-protected admin API.

Metrics are read from the router's own counters at scrape time (a custom
collector), so the forwarding path never calls into prometheus-client.
Every metric is documented in docs/metrics.md.
"""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import os
import resource
import time
from typing import TYPE_CHECKING, Iterable, Iterator, List, Optional, Tuple

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST as TEXT_CONTENT_TYPE
from prometheus_client.exposition import generate_latest as generate_text
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_CONTENT_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from .codec import NUM_PRIORITIES, PRIORITY_NAMES

from .node import LinkMismatch

if TYPE_CHECKING:
    from .node import RouterNode

log = logging.getLogger(__name__)

QUEUE_LABELS = ["peer", "peer_kind", "priority", "priority_name"]
MAX_BODY = 64 * 1024


class RouterCollector:
    def __init__(self, node: "RouterNode") -> None:
        self.node = node

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        node = self.node
        info = GaugeMetricFamily("router_info", "Router identity (always 1)", labels=["node", "node_id"])
        info.add_metric([node.name, str(node.id)], 1)
        yield info

        qsize = GaugeMetricFamily("router_queue_avg_size_messages",
                                  "EMA (alpha 0.1) of messages in the priority queue, sampled on each offer",
                                  labels=QUEUE_LABELS)
        qdelay = GaugeMetricFamily("router_queue_avg_delay_seconds",
                                   "EMA (alpha 0.1) of the time a message waited in the priority queue",
                                   labels=QUEUE_LABELS)
        inq = GaugeMetricFamily("router_queue_messages", "Messages currently in the priority queue",
                                labels=QUEUE_LABELS)
        tried = CounterMetricFamily("router_queue_tried_messages", "Messages offered to the priority queue",
                                    labels=QUEUE_LABELS)
        dropped = CounterMetricFamily("router_queue_dropped_messages",
                                      "Messages dropped because the queue had no room within the drop deadline",
                                      labels=QUEUE_LABELS)
        rate = GaugeMetricFamily("router_queue_drop_ratio", "dropped / tried for the priority queue",
                                 labels=QUEUE_LABELS)
        txb = CounterMetricFamily("router_tx_bytes", "Bytes of DATA frames sent, per peer and priority",
                                  labels=QUEUE_LABELS)
        txm = CounterMetricFamily("router_tx_messages", "Messages sent, per peer and priority", labels=QUEUE_LABELS)
        rxb = CounterMetricFamily("router_rx_bytes", "Bytes of messages received, per peer and priority",
                                  labels=QUEUE_LABELS)
        rxm = CounterMetricFamily("router_rx_messages", "Messages received, per peer and priority",
                                  labels=QUEUE_LABELS)
        conns = [(c.peer_name, "router", c) for c in node.routers.values()]
        conns += [(c.peer_name, "client", c) for c in node.clients]
        for peer, kind, conn in conns:
            pipe = conn.pipeline
            for p in range(NUM_PRIORITIES):
                labels = [peer, kind, str(p), PRIORITY_NAMES[p]]
                st = pipe.queues[p].stats
                qsize.add_metric(labels, st.avg_qsize)
                qdelay.add_metric(labels, st.avg_qdelay_ns / 1e9)
                inq.add_metric(labels, st.in_queue)
                tried.add_metric(labels, st.tried)
                dropped.add_metric(labels, st.dropped)
                rate.add_metric(labels, st.drop_rate)
                txb.add_metric(labels, pipe.tx.bytes[p])
                txm.add_metric(labels, pipe.tx.messages[p])
                rxb.add_metric(labels, conn.rx.bytes[p])
                rxm.add_metric(labels, conn.rx.messages[p])
        yield from (qsize, qdelay, inq, tried, dropped, rate, txb, txm, rxb, rxm)

        up = GaugeMetricFamily("router_link_up", "1 if the link to the neighbour router is up, else 0",
                               labels=["neighbour"])
        weight = GaugeMetricFamily("router_link_weight", "Link weight advertised for the neighbour router",
                                   labels=["neighbour"])
        names = sorted(set(node.neighbour_cfg) | set(node.routers))
        for n in names:
            up.add_metric([n], 1 if n in node.routers else 0)
            if n in node.router_weights:
                weight.add_metric([n], node.router_weights[n])
        yield up
        yield weight
        dweight = GaugeMetricFamily("router_link_data_weight",
                                    "Data-tree link weight advertised for the neighbour router", labels=["neighbour"])
        congested = GaugeMetricFamily("router_link_congested",
                                      "1 while the congestion monitor holds the link blocked, else 0",
                                      labels=["neighbour"])
        data_bps = GaugeMetricFamily("router_monitor_data_throughput_bps",
                                     "Data-priority throughput toward the neighbour in the last monitor interval",
                                     labels=["neighbour"])
        high_bps = GaugeMetricFamily("router_monitor_high_throughput_bps",
                                     "High-priority throughput toward the neighbour in the last monitor interval",
                                     labels=["neighbour"])
        cap_limit = GaugeMetricFamily("router_monitor_cap_limit_bps",
                                      "capacity - high-priority throughput - buffer, last monitor interval",
                                      labels=["neighbour"])
        decisions = CounterMetricFamily("router_monitor_decisions", "Congestion monitor decisions",
                                        labels=["neighbour", "kind"])
        capacity = GaugeMetricFamily("router_link_capacity_bps",
                                     "Link capacity the congestion monitor decides against (configured "
                                     "link_capacity_bps, or set at run time through POST /admin/capacity)",
                                     labels=["neighbour"])
        for n in names:
            cap = node.link_capacity(n)
            if cap:
                capacity.add_metric([n], cap)
            if n in node.router_weights:
                dweight.add_metric([n], node._data_weight(n))
            st = node.monitor.links.get(n)
            congested.add_metric([n], 1 if st is not None and st.blocked else 0)
            if st is not None:
                data_bps.add_metric([n], st.data_bps)
                high_bps.add_metric([n], st.high_bps)
                cap_limit.add_metric([n], st.cap_limit_bps)
                for kind, count in sorted(st.decisions.items()):
                    decisions.add_metric([n, kind], count)
        yield from (dweight, congested, data_bps, high_bps, cap_limit, decisions, capacity)
        yield GaugeMetricFamily("router_flows", "Flows in the flow table (data tree set)", value=len(node.flows))
        yield GaugeMetricFamily("router_flows_pinned", "Pinned flows", value=node.flows.pinned_count())
        yield CounterMetricFamily("router_flow_pins", "Flows pinned (any reason)", value=node.counters.flows_pinned)
        yield CounterMetricFamily("router_flows_expired", "Flows expired after flow_ttl_ms idle",
                                  value=node.counters.flows_expired)
        yield GaugeMetricFamily("router_congestion_aware", "1 if congestion-aware routing is on",
                                value=1 if node.config.congestion_aware else 0)
        yield GaugeMetricFamily("router_clients", "Connected clients", value=len(node.clients))
        yield GaugeMetricFamily("router_known_routers", "Routers in the link-state database",
                                value=len(node.lsdb.all()))
        c = node.counters
        yield CounterMetricFamily("router_trees_recomputed", "Route (tree) recomputations", value=c.trees_recomputed)
        yield CounterMetricFamily("router_no_route_messages",
                                  "Messages received that had no subscriber to go to", value=c.no_route)
        yield CounterMetricFamily("router_ttl_expired_messages", "Messages dropped because their TTL ran out",
                                  value=c.ttl_expired)
        yield CounterMetricFamily("router_links_closed_block",
                                  "Links closed because a Block message waited past the close deadline",
                                  value=c.links_closed_block)
        yield from limit_metrics(node)
        yield from stream_metrics(node)
        yield from query_metrics(node)
        rss = resident_memory_bytes()
        if rss is not None:
            yield GaugeMetricFamily("router_resident_memory_bytes", "Resident set size of the router process",
                                    value=rss)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        yield CounterMetricFamily("router_cpu_seconds", "CPU time (user + system) the router process has used",
                                  value=usage.ru_utime + usage.ru_stime)


def resident_memory_bytes() -> Optional[int]:
    """The process's resident set size from /proc (None where there is no /proc)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def limit_metrics(node: "RouterNode") -> Iterator[Metric]:
    """Resource limits (router/limits.py): bytes held per endpoint and in total, decisions, drops."""
    ledger = node.ledger
    yield GaugeMetricFamily("router_queued_bytes", "DATA bytes held in all transmission queues", value=ledger.total)
    yield GaugeMetricFamily("router_queued_bytes_peak", "Highest router_queued_bytes since the router started",
                            value=ledger.peak)
    if ledger.config.total_bytes is not None:
        yield GaugeMetricFamily("router_queued_bytes_limit", "Limit on router_queued_bytes (limits.total_bytes)",
                                value=ledger.config.total_bytes)
    yield GaugeMetricFamily("router_control_queued_bytes", "Control frame bytes held in all queues",
                            value=ledger.control)
    labels = ["peer", "peer_kind"]
    held = GaugeMetricFamily("router_endpoint_queued_bytes",
                             "DATA bytes held per endpoint: direction 'to' = waiting to be sent to it, "
                             "'from' = sent by it and waiting in any queue", labels=labels + ["direction"])
    peak = GaugeMetricFamily("router_endpoint_queued_bytes_peak", "Highest router_endpoint_queued_bytes",
                             labels=labels + ["direction"])
    rate = GaugeMetricFamily("router_endpoint_input_rate_bps", "Input rate of the endpoint (bit/s, last window)",
                             labels=labels)
    noisy = GaugeMetricFamily("router_endpoint_noisy", "1 while the endpoint counts as a noisy sender",
                              labels=labels)
    slow = GaugeMetricFamily("router_endpoint_slow", "1 while the endpoint counts as a slow reader", labels=labels)
    decisions = CounterMetricFamily("router_limit_decisions", "Noisy-sender and slow-reader decisions",
                                    labels=labels + ["kind", "policy"])
    dropped = CounterMetricFamily("router_limit_dropped_messages",
                                  "Messages dropped by a resource-limit policy (noisy_sender: from the endpoint; "
                                  "slow_reader: to it)", labels=labels + ["reason"])
    throttled = CounterMetricFamily("router_endpoint_throttled_seconds",
                                    "Time the router stopped reading from the endpoint (throttle policy)",
                                    labels=labels)
    now = time.time_ns()
    for acct in list(ledger.accounts):
        lab = [acct.name, acct.kind]
        held.add_metric(lab + ["to"], acct.queued_to)
        held.add_metric(lab + ["from"], acct.queued_from)
        peak.add_metric(lab + ["to"], acct.peak_to)
        peak.add_metric(lab + ["from"], acct.peak_from)
        rate.add_metric(lab, acct.input_rate_bps(now) or 0.0)
        noisy.add_metric(lab, 1 if acct.noisy else 0)
        slow.add_metric(lab, 1 if acct.slow else 0)
        for (kind, policy), count in sorted(acct.decisions.items()):
            decisions.add_metric(lab + [kind, policy], count)
        dropped.add_metric(lab + ["noisy_sender"], acct.dropped_noisy)
        dropped.add_metric(lab + ["slow_reader"], acct.dropped_slow)
        throttled.add_metric(lab, acct.throttled_ns / 1e9)
    yield from (held, peak, rate, noisy, slow, decisions, dropped, throttled)
    slow_total = CounterMetricFamily("router_slow_readers",
                                     "Endpoints that became slow readers, by cause (stalled: nothing left their "
                                     "full queue for stalled_reader_ms; backlog: their queue held data without "
                                     "emptying for slow_reader_ms) and policy; kept after they are gone",
                                     labels=["peer_kind", "cause", "policy"])
    for (kind, cause, policy), count in sorted(node.counters.slow_readers.items()):
        slow_total.add_metric([kind, cause, policy], count)
    yield slow_total
    yield CounterMetricFamily("router_declarations_refused",
                              "Clients disconnected for declaring more subscriptions and queryables than "
                              "limits.declarations_per_client", value=node.counters.declarations_refused)


def stream_metrics(node: "RouterNode") -> Iterator[Metric]:
    """Streaming links (router/streaming.py): each endpoint's pool of stream connections."""
    labels = ["peer", "peer_kind"]
    links = GaugeMetricFamily("router_stream_links", "Stream connections of the endpoint: free and busy (this "
                              "router sends on them), receiving (the endpoint sends on them)",
                              labels=labels + ["state"])
    opened = CounterMetricFamily("router_stream_links_opened", "Stream connections opened to send on",
                                 labels=labels)
    trimmed = CounterMetricFamily("router_stream_links_trimmed",
                                  "Free stream connections closed beyond stream_pool_max_idle", labels=labels)
    messages = CounterMetricFamily("router_stream_messages", "Messages sent over stream connections", labels=labels)
    on_shared = CounterMetricFamily("router_stream_messages_on_shared",
                                    "Large messages sent on the shared connection: no stream connection to be had "
                                    "(stream_pool_max_busy busy, the endpoint limit, a slow reader, an opening slow "
                                    "or failing)", labels=labels)
    for pool in node.stream_pools():
        lab = [pool.main.peer_name, pool.main.kind]
        links.add_metric(lab + ["free"], len(pool.free))
        links.add_metric(lab + ["busy"], len(pool.busy))
        links.add_metric(lab + ["receiving"], len(pool.receiving))
        opened.add_metric(lab, pool.opened)
        trimmed.add_metric(lab, pool.trimmed)
        messages.add_metric(lab, pool.messages)
        on_shared.add_metric(lab, pool.overflow)
    yield from (links, opened, trimmed, messages, on_shared)


def query_metrics(node: "RouterNode") -> Iterator[Metric]:
    """Queries that entered at this router (router/queries.py) and its serving peers' channels."""
    ended = CounterMetricFamily("router_queries", "Queries of local clients ended here, by outcome",
                                labels=["outcome"])
    for outcome in ("ok", "timeout", "no_match", "error", "shutdown", "cancelled"):
        ended.add_metric([outcome], node.query_outcomes.get(outcome, 0))
    yield ended
    yield CounterMetricFamily("router_query_retries", "Query attempts after the first (failovers)",
                              value=node.query_retries)
    outstanding = GaugeMetricFamily("router_query_outstanding", "Query attempts of this router in flight at a "
                                    "serving router (at most router_query_channels)", labels=["router"])
    channels = GaugeMetricFamily("router_query_channels", "Channels of a serving router: the most query attempts "
                                 "of this router it is given at once", labels=["router"])
    qs = node.query_scheduler
    for peer, n in sorted((qs.peers() if qs is not None else {}).items()):
        outstanding.add_metric([peer], qs.outstanding(peer))
        channels.add_metric([peer], n)
    yield from (outstanding, channels)
    yield GaugeMetricFamily("router_queries_waiting", "Queries waiting for an open channel",
                            value=qs.waiting_senders() if qs is not None else 0)


class _Families:
    """Some metric families, collected already, as the registry the exposition functions format."""

    def __init__(self, families: List[Metric]) -> None:
        self.families = families

    def collect(self) -> List[Metric]:
        return self.families


#: Samples formatted between two turns of the event loop while answering a scrape.
SAMPLES_PER_TURN = 10
_EOF = b"# EOF\n"


async def exposition(registry: CollectorRegistry, openmetrics: bool) -> bytes:
    """The registry's metrics in the text format (or OpenMetrics), formatted by prometheus-client a few
    families at a time with a turn of the event loop between them: formatting costs 10-15 us per
    sample (4 ms for a router with a few peers and ~400 samples), which at once would hold up every
    message the router forwards for that long at each scrape; in turns, the longest hold is the
    largest family (~0.5 ms for 32 samples). Each family's values are read as it is reached."""
    generate = generate_openmetrics if openmetrics else generate_text
    chunks: List[bytes] = []
    batch: List[Metric] = []
    samples = 0
    for family in registry.collect():
        batch.append(family)
        samples += len(family.samples) + 1
        if samples >= SAMPLES_PER_TURN:
            chunks.append(_formatted(generate, batch, openmetrics))
            batch, samples = [], 0
            await asyncio.sleep(0)
    chunks.append(_formatted(generate, batch, openmetrics))
    if openmetrics:
        chunks.append(_EOF)
    return b"".join(chunks)


def _formatted(generate, families: List[Metric], openmetrics: bool) -> bytes:
    text = generate(_Families(families)) if families else b""
    return text[:-len(_EOF)] if openmetrics and text.endswith(_EOF) else text


def make_registry(node: "RouterNode") -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RouterCollector(node))  # type: ignore[arg-type]
    return registry


class HttpServer:
    """GET /metrics (OpenMetrics), GET /admin/{state,linkstate,routes,weights,flows,capacity,limits} (JSON),
    POST/PUT /admin/weights and /admin/capacity.

    The admin routes need ``Authorization: Bearer <admin_token>`` when a token
    is configured; without a token they answer only to loopback clients.
    """

    def __init__(self, node: "RouterNode", registry: CollectorRegistry, token: Optional[str]) -> None:
        self.node = node
        self.registry = registry
        self.token = token
        self.server: Optional[asyncio.AbstractServer] = None

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self._handle, host, port)
        return self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            lines = request.decode("latin-1").split("\r\n")
            method, path, _ = (lines[0].split(" ") + ["", "", ""])[:3]
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
            req_body = b""
            length = headers.get("content-length", "0")
            if length.isdigit() and 0 < int(length) <= MAX_BODY:
                req_body = await asyncio.wait_for(reader.readexactly(int(length)), 5.0)
            path = path.split("?")[0]
            if method == "GET" and path == "/metrics":
                # OpenMetrics when asked for (Prometheus does), else the classic text format.
                openmetrics = "application/openmetrics-text" in headers.get("accept", "")
                status, ctype = "200 OK", OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE
                body = await exposition(self.registry, openmetrics)
            else:
                status, ctype, body = self._route(method, path, headers, writer.get_extra_info("peername"), req_body)
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n".encode("latin-1") + body)
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        except Exception:
            log.exception("HTTP request failed")
        finally:
            writer.close()

    def _authorised(self, headers: dict, peer: Optional[Tuple[str, int]]) -> bool:
        if self.token:
            given = headers.get("authorization", "")
            return hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode())
        try:
            return peer is not None and ipaddress.ip_address(peer[0]).is_loopback
        except ValueError:
            return False

    def _route(self, method: str, path: str, headers: dict, peer, req_body: bytes = b"") -> Tuple[str, str, bytes]:
        if method in ("POST", "PUT") and path in ("/admin/weights", "/admin/capacity"):
            if not self._authorised(headers, peer):
                return "403 Forbidden", "text/plain", b"admin API needs the admin token (or a loopback client)\n"
            change = self.node.admin_set_weights if path == "/admin/weights" else self.node.admin_set_capacity
            try:
                result = change(json.loads(req_body.decode("utf-8") or "null"))
            except LinkMismatch as exc:
                return "409 Conflict", "application/json", json.dumps({"error": str(exc)}).encode()
            except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError included
                return "400 Bad Request", "application/json", json.dumps({"error": str(exc)}).encode()
            return "200 OK", "application/json", json.dumps(result, indent=1).encode()
        if method != "GET":
            return "405 Method Not Allowed", "text/plain", b"only GET (and POST/PUT /admin/weights, /admin/capacity)\n"
        if path.startswith("/admin/"):
            if not self._authorised(headers, peer):
                return "403 Forbidden", "text/plain", b"admin API needs the admin token (or a loopback client)\n"
            state = self.node.describe()
            views = {
                "/admin/state": state,
                "/admin/linkstate": state["linkstate"],
                "/admin/routes": state["routing"],
                "/admin/weights": state["weights"],
                "/admin/flows": state["flows"],
                "/admin/capacity": state["capacity"],
                "/admin/limits": state["limits"],
                "/admin/streams": state["streams"],
            }
            if path in views:
                return "200 OK", "application/json", json.dumps(views[path], indent=1, default=str).encode()
        return "404 Not Found", "text/plain", b"not found\n"
