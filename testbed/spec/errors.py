"""Problems found in a topology file, each pointing at a file, line and YAML path."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = ["SpecProblem", "SpecError", "Loc", "format_path"]

#: A location inside the YAML document: mapping keys and sequence indexes.
Loc = Tuple[Union[str, int], ...]

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


def format_path(loc: Sequence[Union[str, int]]) -> str:
    """``("links", 2, "bw")`` -> ``"links[2].bw"``; odd keys are quoted."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a topology file."""

    file: str
    line: Optional[int]
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.path:
            return f"{where} {self.path}: {self.message}"
        return f"{where}: {self.message}"


class SpecError(Exception):
    """A topology file that cannot be used; ``problems`` lists everything found."""

    def __init__(self, problems: Iterable[SpecProblem]):
        self.problems: List[SpecProblem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)
