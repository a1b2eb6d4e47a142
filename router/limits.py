"""Resource limits (after AllJoyn's routing-node limits): the bytes every
endpoint (client or neighbour router) holds in the router's queues, a total,
and the two decisions taken on them.

Accounting, per endpoint (one :class:`EndpointAccount` per connection):

- ``queued_to``: bytes of DATA waiting in the endpoint's own transmission
  pipeline (what it has yet to read);
- ``queued_from``: bytes of DATA it sent that wait in any pipeline (what it
  costs the router);
- ``control``: bytes of control frames waiting for it (bounded on their own).

The :class:`Ledger` keeps the totals.  A data message is refused by a pipeline
when the target's ``queued_to`` or the total would pass its limit (the sender
then waits or drops, as its congestion control says); control frames never
count against the data budget and are always written first, so data can never
take their room.

Decisions:

- **noisy sender**: an endpoint whose input rate passes ``input_rate_bps``
  (token bucket with ``input_burst_bytes``) or whose ``queued_from`` passes
  ``sender_bytes``.  Policy ``throttle`` (stop reading from it for as long as
  its bucket is in debt, so TCP pushes back), ``drop`` (drop its messages of
  ``drop_priorities`` while it is noisy), or ``disconnect``.
- **slow reader**: an endpoint whose own queue refuses a message and which is
  either *stalled* (nothing has left its queue for ``stalled_reader_ms``: it
  stopped reading; on by default for clients, 200 ms) or *backlogged* (its
  queue has held something without emptying for ``slow_reader_ms``: a reader
  slower than what is sent to it never catches up; off by default, since a
  reader on a saturated link is backlogged without being at fault).  The
  event and the metrics say which (``cause``: ``stalled`` or ``backlog``).  A
  message that finds a slow reader's queue full is never waited for, so it
  holds nobody else up; before that point a wait lasts at most what is left
  until the endpoint would count as slow.  Policy ``drop`` (messages for it
  that find no room are dropped at once, never waited for, until its queue
  empties) or ``disconnect``.

Every decision is an event (with the endpoint, the policy and the numbers) and
a counter in the metrics.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from .settings import LIMITS_SETTINGS, ROLE_SETTINGS, ROLES, by_key, config_class, role_default

#: a noisy or slow state ends only after this long without cause (no event flapping)
CLEAR_AFTER_NS = 1_000_000_000
#: the measured input rate reported in events is over windows of this length
RATE_WINDOW_NS = 1_000_000_000
#: subscriptions and queryables one client may hold by default (AllJoyn's per-endpoint limits)
DEFAULT_DECLARATIONS_PER_CLIENT: int = by_key(LIMITS_SETTINGS)["declarations_per_client"].default


def _burst_bytes(self) -> int:
    """The token bucket's depth: as configured, else 100 ms at the rate (at least 64 KiB)."""
    if self.input_burst_bytes is not None:
        return self.input_burst_bytes
    return max(64 * 1024, (self.input_rate_bps or 0) // 80)


#: Limits for one role of endpoint (clients, or neighbour routers): one field per ``ROLE_SETTINGS`` key
#: (router/settings.py), with the plain defaults (no limits); ``LimitsConfig`` holds each role's own.
RoleLimits = config_class("RoleLimits", ROLE_SETTINGS, module=__name__,
                          namespace={"burst_bytes": property(_burst_bytes)})


def _role_limits(role: str) -> Callable[[], Any]:
    return lambda: RoleLimits(**{s.key: role_default(s, role) for s in ROLE_SETTINGS})


def _for_kind(self, kind: str):
    return self.router if kind == "router" else self.client


#: The router's ``limits``: one field per ``LIMITS_SETTINGS`` key (router/settings.py).
LimitsConfig = config_class("LimitsConfig", LIMITS_SETTINGS, module=__name__,
                            factories={role: _role_limits(role) for role in ROLES},
                            namespace={"for_kind": _for_kind})


_UNBOUNDED = 1 << 62


class EndpointAccount:
    """What one endpoint holds in the router's queues, and its noisy / slow state."""

    __slots__ = ("name", "kind", "limits", "queued_to", "queued_from", "control", "limit_to", "limit_from",
                 "rate_Bps", "burst", "tokens", "last_ns", "window_start_ns", "window_bytes", "last_rate_bps",
                 "noisy", "noisy_since_ns", "noisy_cause", "calm_since_ns", "full_since_ns", "backlog_since_ns", "noisy_bytes", "slow",
                 "slow_cause", "moved_ns", "stalled_max_ns",
                 "slow_since_ns", "slow_calm_since_ns", "dropped_noisy", "dropped_slow", "throttled_ns", "decisions", "peak_to",
                 "peak_from", "tracks_from")

    def __init__(self, name: str, kind: str, limits: RoleLimits, now_ns: int) -> None:
        self.name = name
        self.kind = kind
        self.limits = limits
        self.queued_to = 0
        self.queued_from = 0
        self.control = 0
        self.limit_to = limits.endpoint_bytes if limits.endpoint_bytes is not None else _UNBOUNDED
        self.limit_from = limits.sender_bytes if limits.sender_bytes is not None else _UNBOUNDED
        #: ``queued_from`` is kept only when a sender limit is set for the role (it costs on every message)
        self.tracks_from = limits.sender_bytes is not None
        self.rate_Bps = (limits.input_rate_bps or 0) / 8.0
        self.burst = float(limits.burst_bytes)
        self.tokens = self.burst
        self.last_ns = now_ns
        self.window_start_ns = now_ns
        self.window_bytes = 0
        self.last_rate_bps = 0.0
        self.noisy = False
        self.noisy_bytes = 0
        self.noisy_since_ns = 0
        self.noisy_cause = ""
        self.calm_since_ns = 0
        self.full_since_ns = 0
        self.backlog_since_ns = 0
        self.slow = False
        self.slow_cause = ""
        self.moved_ns = 0
        self.stalled_max_ns = 0
        self.slow_since_ns = 0
        self.slow_calm_since_ns = 0
        self.dropped_noisy = 0
        self.dropped_slow = 0
        self.throttled_ns = 0
        self.decisions: Dict[Tuple[str, str], int] = {}
        self.peak_to = 0
        self.peak_from = 0

    # ------------------------------------------------------------ input (noisy sender)

    def observe_input(self, nbytes: int, now_ns: int) -> float:
        """Count ``nbytes`` read from this endpoint; return the debt in seconds
        (> 0 when its input is above ``input_rate_bps``), 0.0 without a rate limit."""
        if now_ns - self.window_start_ns >= RATE_WINDOW_NS:
            self.last_rate_bps = self.window_bytes * 8e9 / (now_ns - self.window_start_ns)
            self.window_start_ns = now_ns
            self.window_bytes = 0
        self.window_bytes += nbytes
        if self.noisy:
            self.noisy_bytes += nbytes
        rate = self.rate_Bps
        if not rate:
            return 0.0
        tokens = self.tokens + (now_ns - self.last_ns) * rate / 1e9
        if tokens > self.burst:
            tokens = self.burst
        tokens -= nbytes
        self.tokens = tokens
        self.last_ns = now_ns
        return -tokens / rate if tokens < 0 else 0.0

    def refill(self, now_ns: int) -> float:
        """The bucket's tokens (bytes; negative = debt) now, after refilling it for the time passed."""
        tokens = self.tokens + (now_ns - self.last_ns) * self.rate_Bps / 1e9
        if tokens > self.burst:
            tokens = self.burst
        self.tokens = tokens
        self.last_ns = now_ns
        return tokens

    def input_rate_bps(self, now_ns: int) -> Optional[float]:
        """Input rate over the current window if it is at least 10 ms long, else the last full window's
        (None when neither is known: the endpoint just started sending)."""
        span = now_ns - self.window_start_ns
        if span >= 10_000_000:
            return self.window_bytes * 8e9 / span
        return self.last_rate_bps or None

    def noisy_reason(self, debt_s: float) -> str:
        """Why this endpoint counts as noisy now ("" = it does not)."""
        if debt_s > 0:
            return "input_rate"
        if self.queued_from > self.limit_from:
            return "sender_bytes"
        return ""

    # ------------------------------------------------------------ output (slow reader)

    def push_refused(self, now_ns: int) -> None:
        """A message for this endpoint found no room: it is full from now until its queue empties."""
        if not self.full_since_ns:
            self.full_since_ns = now_ns

    def full_for_ns(self, now_ns: int) -> int:
        """How long since a message for it first found no room (and its queue has not emptied since)."""
        return now_ns - self.full_since_ns if self.full_since_ns else 0

    def backlog_ns(self, now_ns: int) -> int:
        """How long its queue has held something without emptying (0 = empty)."""
        return now_ns - self.backlog_since_ns if self.backlog_since_ns else 0

    def moved(self, now_ns: int) -> None:
        """Bytes left its queue (the writer pulled a frame): whatever stall there was ends now
        (its length is kept as the longest seen)."""
        start = max(self.moved_ns, self.backlog_since_ns)
        if self.backlog_since_ns and now_ns - start > self.stalled_max_ns:
            self.stalled_max_ns = now_ns - start
        self.moved_ns = now_ns

    def stalled_ns(self, now_ns: int) -> int:
        """How long nothing has left its queue while it held something (0 = empty)."""
        if not self.backlog_since_ns:
            return 0
        return now_ns - max(self.moved_ns, self.backlog_since_ns)

    def slow_cause_now(self, now_ns: int) -> str:
        """Why it counts as a slow reader now ("" = it does not): its own queue refused a message
        (``full_since_ns``) and nothing left it for ``stalled_reader_ms`` (``stalled``), or it held
        something without emptying for ``slow_reader_ms`` (``backlog``)."""
        if not self.full_since_ns:
            return ""
        lim = self.limits
        if lim.stalled_reader_ms is not None and self.stalled_ns(now_ns) >= lim.stalled_reader_ms * 1_000_000:
            return "stalled"
        if lim.slow_reader_ms is not None and self.backlog_ns(now_ns) >= lim.slow_reader_ms * 1_000_000:
            return "backlog"
        return ""

    def until_slow_s(self, now_ns: int) -> Optional[float]:
        """Seconds until it would count as a slow reader if nothing changes (None: no threshold set)."""
        lim = self.limits
        left: Optional[float] = None
        if lim.stalled_reader_ms is not None:
            left = lim.stalled_reader_ms / 1000.0 - self.stalled_ns(now_ns) / 1e9
        if lim.slow_reader_ms is not None:
            backlog = lim.slow_reader_ms / 1000.0 - self.backlog_ns(now_ns) / 1e9
            left = backlog if left is None else min(left, backlog)
        return left

    def count(self, kind: str, policy: str) -> None:
        key = (kind, policy)
        self.decisions[key] = self.decisions.get(key, 0) + 1

    def view(self, now_ns: int) -> Dict[str, Any]:
        return {
            "endpoint": self.name, "kind": self.kind,
            "queued_to_bytes": self.queued_to, "queued_from_bytes": self.queued_from,
            "control_bytes": self.control,
            "peak_queued_to_bytes": self.peak_to, "peak_queued_from_bytes": self.peak_from,
            "endpoint_limit_bytes": self.limits.endpoint_bytes, "sender_limit_bytes": self.limits.sender_bytes,
            "input_rate_bps": round(self.input_rate_bps(now_ns) or 0), "input_rate_limit_bps": self.limits.input_rate_bps,
            "noisy": self.noisy, "noisy_cause": self.noisy_cause or None, "slow": self.slow,
            "slow_cause": self.slow_cause or None,
            "full_for_ms": self.full_for_ns(now_ns) // 1_000_000,
            "backlog_ms": self.backlog_ns(now_ns) // 1_000_000,
            "stalled_ms": self.stalled_ns(now_ns) // 1_000_000,
            "stalled_max_ms": self.stalled_max_ns // 1_000_000,
            "dropped_noisy": self.dropped_noisy, "dropped_slow": self.dropped_slow,
            "throttled_s": round(self.throttled_ns / 1e9, 3),
        }


class Ledger:
    """Totals over every endpoint: data bytes queued (bounded by ``total_bytes``)
    and control bytes queued (bounded per connection by ``control_bytes``).

    The data total is the sum of the endpoints' ``queued_to``, computed when it
    is needed (a batch opening, a scrape) rather than kept on every message."""

    __slots__ = ("config", "limit", "control", "peak", "accounts")

    def __init__(self, config: LimitsConfig) -> None:
        self.config = config
        self.limit = config.total_bytes if config.total_bytes is not None else _UNBOUNDED
        self.control = 0
        self.peak = 0
        self.accounts: List[EndpointAccount] = []

    @property
    def total(self) -> int:
        """DATA bytes queued for all endpoints now."""
        return sum(a.queued_to for a in self.accounts)

    def open(self, name: str, kind: str, now_ns: int) -> EndpointAccount:
        acct = EndpointAccount(name, kind, self.config.for_kind(kind), now_ns)
        self.accounts.append(acct)
        return acct

    def close(self, acct: EndpointAccount) -> None:
        try:
            self.accounts.remove(acct)
        except ValueError:
            pass

    def view(self, now_ns: int) -> Dict[str, Any]:
        return {
            "total_bytes": self.total, "total_limit_bytes": self.config.total_bytes, "peak_total_bytes": self.peak,
            "control_bytes": self.control, "control_limit_bytes_per_endpoint": self.config.control_bytes,
            "endpoints": [a.view(now_ns) for a in sorted(self.accounts, key=lambda a: (a.kind, a.name))],
        }
