"""Key expressions: '/'-separated chunks, '*' matches one chunk, '**' any number.

A subset of Zenoh's key-expression language (no '$*' in-chunk wildcards).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Tuple


#: the longest key expression, in UTF-8 bytes: what a message header can carry (codec.MAX_KEY_LEN), and the
#: limit of every key a subscription, a query, a queryable or a reply names
MAX_KEY_BYTES = 4096


class KeyExprError(ValueError):
    pass


def check_length(key: str) -> str:
    """Return ``key`` if it is at most ``MAX_KEY_BYTES`` in UTF-8, else raise KeyExprError."""
    if len(key) * 4 > MAX_KEY_BYTES:  # (else it fits whatever its characters)
        try:
            size = len(key.encode("utf-8"))
        except UnicodeEncodeError:
            raise KeyExprError(f"key expression {key[:40]!r}... is not valid UTF-8") from None
        if size > MAX_KEY_BYTES:
            raise KeyExprError(f"key expression of {size} bytes ({key[:40]!r}...) exceeds the limit of "
                               f"{MAX_KEY_BYTES} bytes")
    return key


def validate(key: str) -> str:
    """Return ``key`` if it is a well-formed key expression, else raise KeyExprError."""
    if not key:
        raise KeyExprError("key expression must not be empty")
    check_length(key)
    chunks = key.split("/")
    for chunk in chunks:
        if chunk == "":
            raise KeyExprError(f"key expression {key!r} has an empty chunk (leading, trailing or double '/')")
        if ("*" in chunk and chunk not in ("*", "**")) or any(c in chunk for c in "?#$"):
            raise KeyExprError(f"key expression {key!r}: chunk {chunk!r} may be '*', '**' or a literal without '*?#$'")
    return key


@lru_cache(maxsize=65536)
def _split(key: str) -> Tuple[str, ...]:
    return tuple(key.split("/"))


def intersects(a: str, b: str) -> bool:
    """True when some concrete key matches both expressions."""
    return _intersects(_split(a), _split(b))


@lru_cache(maxsize=65536)
def _intersects(a: Tuple[str, ...], b: Tuple[str, ...]) -> bool:
    if not a:
        return all(c == "**" for c in b)
    if not b:
        return all(c == "**" for c in a)
    if a[0] == "**":
        return _intersects(a[1:], b) or _intersects(a, b[1:])
    if b[0] == "**":
        return _intersects(a, b[1:]) or _intersects(a[1:], b)
    if a[0] == "*" or b[0] == "*" or a[0] == b[0]:
        return _intersects(a[1:], b[1:])
    return False


class KeySet:
    """The key expressions of a set of declarations (one client's, one router's), for the question
    "does any of them intersect this key?" asked on every route-cache miss: literal keys are looked up,
    only the wildcard ones are scanned (a client holding 20 000 literal subscriptions costs one lookup,
    not 20 000 intersections).  Each key counts how many declarations hold it."""

    __slots__ = ("_literal", "_wild")

    def __init__(self, keys=()) -> None:
        self._literal: dict = {}
        self._wild: dict = {}
        for key in keys:
            self.add(key)

    def _table(self, key: str) -> dict:
        return self._wild if "*" in key else self._literal

    def add(self, key: str) -> None:
        table = self._table(key)
        table[key] = table.get(key, 0) + 1

    def discard(self, key: str) -> None:
        table = self._table(key)
        n = table.get(key, 0)
        if n > 1:
            table[key] = n - 1
        else:
            table.pop(key, None)

    def __len__(self) -> int:
        return len(self._literal) + len(self._wild)

    def matches(self, key: str) -> bool:
        """True when some key of the set intersects ``key``."""
        if "*" in key:  # a wildcard publication: every key may intersect it
            return any(intersects(k, key) for table in (self._literal, self._wild) for k in table)
        return key in self._literal or any(intersects(w, key) for w in self._wild)
