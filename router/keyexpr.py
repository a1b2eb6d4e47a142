"""Key expressions: '/'-separated chunks, '*' matches one chunk, '**' any number.

A subset of Zenoh's key-expression language (no '$*' in-chunk wildcards).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Tuple


class KeyExprError(ValueError):
    pass


def validate(key: str) -> str:
    """Return ``key`` if it is a well-formed key expression, else raise KeyExprError."""
    if not key:
        raise KeyExprError("key expression must not be empty")
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
