"""What the analysis found wrong with its input: a ``Problem`` per damaged, missing or odd file."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem"]


@dataclass
class Problem:
    severity: str   # "error": data missing from the analysis; "warning": analysed, but look
    file: str
    problem: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.file}: {self.problem}"
