"""Words a count goes with, for what the console and the reports print, and the hint for a misspelt name."""
from __future__ import annotations

import difflib
import re
from typing import Iterable, Mapping, Optional

__all__ = ["article", "plural", "did_you_mean"]


def plural(n: int, one: str, many: Optional[str] = None) -> str:
    """``1 expectation``, ``2 expectations``, ``0 expectations``; ``many`` for an irregular plural
    (``plural(3, "delivery", "deliveries")``)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def article(word: str) -> str:
    """``word`` after the indefinite article its sound takes: ``a 20s``, ``an 8s``, ``an 11s``, ``an 18s``,
    ``an 80s``, ``a 110s`` (a hundred and ten), ``an 11000s``; for a word, ``an`` before a, e, i, o (``an
    error``, ``a link``)."""
    digits = re.match(r"\d+", word)
    if digits:
        number = digits.group().lstrip("0") or "0"
        # read aloud: eight..., eleven / eighteen (as 11, 18, 11 thousand, 18 million: a group of two digits)
        vowel = number.startswith("8") or (len(number) % 3 == 2 and number[:2] in ("11", "18"))
    else:
        vowel = word[:1].lower() in ("a", "e", "i", "o")
    return f"{'an' if vowel else 'a'} {word}"


def did_you_mean(name: object, known: Iterable[str], synonyms: Optional[Mapping[str, str]] = None) -> str:
    """``"did you mean 'drop'? "`` when one of ``known`` is what ``name`` was meant to be, else ``""``: a
    synonym people write (``synonyms``: lowercase word -> the known one, e.g. ``cbr`` -> ``constant``), or
    the closest spelling (``dorp`` -> ``drop``). Keys, values and references all get their hint from here."""
    known = [str(k) for k in known]
    text = str(name)
    meant = (synonyms or {}).get(text.lower())
    close = [meant] if meant in known else difflib.get_close_matches(text, known, n=1)
    return f"did you mean {close[0]!r}? " if close else ""
