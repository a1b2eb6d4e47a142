"""JSON-lines event log: one object per line, ``ts_ns`` = ns since the Unix epoch.

Event names used by the router: ready, link_up, link_down, peer_disconnected,
noisy_sender, noisy_sender_cleared, slow_reader, slow_reader_cleared,
client_connected, client_disconnected, trees_recomputed, messages_dropped (one
summary per second per peer and priority), link_closed, trees_recompute_failed,
weight_changed, congestion_detected, congestion_cleared, link_capacity_changed,
flow_pinned, flow_unpinned, flow_expired, stopping (fields: docs/router.md).
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional, TextIO


class EventLog:
    def __init__(self, node: str, path: Optional[str] = None) -> None:
        self.node = node
        self._file: TextIO
        if path:
            self._file = open(path, "a", encoding="utf-8", buffering=1)
            self._owned = True
        else:
            self._file = sys.stdout
            self._owned = False

    def emit(self, event: str, **fields: Any) -> None:
        record = {"ts_ns": time.time_ns(), "node": self.node, "event": event}
        record.update(fields)
        self._file.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._owned:
            self._file.close()
