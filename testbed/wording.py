"""Words a count goes with, for what the console and the reports print."""
from __future__ import annotations

from typing import Optional

__all__ = ["plural"]


def plural(n: int, one: str, many: Optional[str] = None) -> str:
    """``1 expectation``, ``2 expectations``, ``0 expectations``; ``many`` for an irregular plural
    (``plural(3, "delivery", "deliveries")``)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"
