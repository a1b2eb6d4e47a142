"""Router metrics scraped over time into `metrics/<node>.jsonl` (one line per scrape)."""
from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_prometheus

from runfolder.layout import LAYOUT

OPENMETRICS = "application/openmetrics-text"
#: The scraper's threads run at this nice level: parsing a router's ~300-400 samples costs ~8 ms of CPU
#: (prometheus-client's parser), which on a machine shared with the routers under test must wait for
#: them rather than hold them up.
SCRAPER_NICE = 10


def lower_priority() -> None:
    """Run the calling thread ``SCRAPER_NICE`` below the process's main thread (Linux: nice is per
    thread, and a thread starts with the nice of the thread that made it)."""
    try:
        target = min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + SCRAPER_NICE)
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), target)
    except (AttributeError, OSError):  # not Linux, or not allowed: the scrape is the same, only not yielding
        pass


def scrape(url: str, timeout_s: float, headers: Optional[dict] = None) -> list[list]:
    """Fetch and parse one metrics endpoint: ``[[name, labels, value], ...]``."""
    request = urllib.request.Request(url, headers={"Accept": f"{OPENMETRICS}; version=1.0.0", **(headers or {})})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        body = response.read().decode()
        ctype = response.headers.get("Content-Type", "")
    parse = parse_openmetrics if ctype.startswith(OPENMETRICS) else parse_prometheus
    return [[s.name, dict(s.labels), s.value] for family in parse(body) for s in family.samples]


class MetricsScraper:
    """Scrapes every node's endpoint every ``interval_s`` in a background thread until stopped."""

    def __init__(self, endpoints: dict[str, str], out_dir: Path, interval_s: float = 1.0):
        self.endpoints = endpoints
        self.out_dir = out_dir
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)
        self._files = {node: open(out_dir / LAYOUT.metrics_name(node), "a", buffering=1) for node in endpoints}
        self._pool = ThreadPoolExecutor(max_workers=min(16, max(1, len(endpoints))), initializer=lower_priority,
                                        thread_name_prefix="metrics-scrape")
        self.failures = 0

    def start(self) -> None:
        self._thread.start()

    def scrape_once(self) -> None:
        now = time.time_ns()
        timeout = max(0.2, min(2.0, self.interval_s * 0.8))
        futures = {node: self._pool.submit(scrape, url, timeout) for node, url in self.endpoints.items()}
        for node, future in futures.items():
            try:
                record = {"ts_ns": now, "node": node, "ok": True, "error": None, "samples": future.result()}
            except Exception as exc:  # an unreachable router is data, not a crash
                self.failures += 1
                record = {"ts_ns": now, "node": node, "ok": False, "error": str(exc) or type(exc).__name__,
                          "samples": []}
            self._files[node].write(json.dumps(record) + "\n")

    def _loop(self) -> None:
        lower_priority()
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.scrape_once()
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for f in self._files.values():
            f.close()
