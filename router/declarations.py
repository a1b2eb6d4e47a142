"""Declarations of clients (subscriptions and queryables): the per-client limit
(after AllJoyn's per-endpoint limits, reference/alljoyn-routing-node-limits.md)
and the batching of what they change in the link state.

A client may hold ``limits.declarations_per_client`` subscriptions and
queryables together (default 10 000); the declaration past it closes the
client with a CLOSE whose reason names the limit (the client library raises
it), an event ``declarations_refused`` and the counter
``router_declarations_refused_total``.

A declaration changes this router's link-state packet (its subscriptions), but
the packet is not originated once per declaration: a change schedules one
origination, spaced after the last by ``route_hold_factor`` times what that
one cost (at least ``SUBS_BATCH_S``), so 20 000 declarations cost a few dozen
packets and floods, not 20 000 (each carrying every key: quadratic).  Local
delivery follows a declaration at once (the route cache is cleared then).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Dict, Optional

from . import keyexpr
from .codec import CodecError, required_field

#: the least time between a declaration and the link-state packet that carries it
SUBS_BATCH_S = 0.005


class Declarations:
    """Mixin of :class:`router.node.RouterNode`: clients' subscriptions and queryables."""

    def _declarations_init(self) -> None:
        self._subs_handle: Optional[asyncio.TimerHandle] = None
        #: (loop time at the end, duration in s) of the last origination for a declaration change
        self._last_subs_lsp = (0.0, 0.0)

    def _declare(self, state: Any, table: Dict[int, str], obj: Dict[str, Any], what: str) -> bool:
        """Record one DECLARE (``table``: the client's subscriptions or queryables); False when it
        passes the client's limit (the client is then closed, the refusal logged and counted)."""
        decl_id = required_field(obj, "id", int, what)
        key = required_field(obj, "key", str, what)
        try:
            keyexpr.validate(key)
        except keyexpr.KeyExprError as exc:
            raise CodecError(str(exc)) from None
        limit = self.config.limits.declarations_per_client
        held = len(state.subs) + len(state.queryables)
        if limit is not None and decl_id not in table and held >= limit:
            self._refuse_declarations(state, held, limit)
            return False
        old = table.get(decl_id)
        if table is state.subs:
            if old is not None:
                state.sub_keys.discard(old)
            state.sub_keys.add(key)
        table[decl_id] = key
        self._local_subs_changed()
        return True

    def _undeclare(self, state: Any, table: Dict[int, str], obj: Dict[str, Any], what: str) -> None:
        key = table.pop(required_field(obj, "id", int, what), None)
        if key is not None:
            if table is state.subs:
                state.sub_keys.discard(key)
            self._local_subs_changed()

    def _refuse_declarations(self, state: Any, held: int, limit: int) -> None:
        conn = state.conn
        self.counters.declarations_refused += 1
        self.events.emit("declarations_refused", endpoint=conn.peer_name, kind=conn.kind,
                         subscriptions=len(state.subs), queryables=len(state.queryables), declarations=held,
                         limit=limit, policy="disconnect")
        conn.close(f"too many declarations: {len(state.subs)} subscriptions and {len(state.queryables)} "
                   f"queryables held, limit {limit} (limits.declarations_per_client); disconnected by the "
                   f"router's resource limits")

    def _local_subs_changed(self) -> None:
        """A local declaration changed: local delivery follows at once; the link-state packet that
        tells the other routers follows in one batch (module docstring)."""
        self._remote_cache.clear()
        if self._subs_handle is not None:
            return
        loop = asyncio.get_running_loop()
        last_end, last_cost = self._last_subs_lsp
        delay = max(SUBS_BATCH_S, last_end + last_cost * self.config.route_hold_factor - loop.time())
        self._subs_handle = loop.call_later(delay, self._originate_for_declarations)

    def _originate_for_declarations(self) -> None:
        self._subs_handle = None
        started = time.monotonic()
        self._originate_lsp()
        ended = time.monotonic()
        self._last_subs_lsp = (asyncio.get_running_loop().time(), ended - started)

    def _declarations_stop(self) -> None:
        if self._subs_handle is not None:
            self._subs_handle.cancel()
            self._subs_handle = None
