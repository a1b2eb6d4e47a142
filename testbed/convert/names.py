"""Foreign names made into names our topology accepts (testbed.spec.fieldtypes: a node 1-10 lowercase letters
or digits starting with a letter, an interface 1-15, a topology 1-20 with hyphens), and unique."""
from __future__ import annotations

import re
import unicodedata
from typing import Callable, Dict, Iterable, Set

from testbed.spec.fieldtypes import IFNAME_RE, NODE_NAME_RE, SPEC_NAME_RE

NODE_NAME_MAX = 10
IFNAME_MAX = 15
SPEC_NAME_MAX = 20


def _ascii(text: str) -> str:
    """``São Paulo`` -> ``sao paulo``: accents dropped, lowercase."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()


def _unique(base: str, longest: int, taken: Set[str]) -> str:
    name, n = base[:longest], 1
    while name in taken:
        n += 1
        name = f"{base[:longest - len(str(n))]}{n}"
    taken.add(name)
    return name


def node_name(text: str, taken: Set[str], prefix: str = "n") -> str:
    """A valid node name for ``text`` not in ``taken`` (and added to it): letters and digits kept, a ``prefix``
    before one that does not start with a letter, cut to 10 characters, a number at the end where it is taken."""
    base = re.sub(r"[^a-z0-9]", "", _ascii(text))
    if not base[:1].isalpha():
        base = prefix + base
    name = _unique(base, NODE_NAME_MAX, taken)
    assert re.fullmatch(NODE_NAME_RE, name), name
    return name


def ifname(text: str, taken: Set[str]) -> str:
    """A valid interface name for ``text`` (``e1-1`` -> ``e11``, ``Ethernet1`` -> ``ethernet1``) not in ``taken``
    (the node's names so far, and added to it)."""
    base = re.sub(r"[^a-z0-9]", "", _ascii(text))
    if not base[:1].isalpha():
        base = "eth" + base
    name = _unique(base, IFNAME_MAX, taken)
    assert re.fullmatch(IFNAME_RE, name), name
    return name


def _kept_where_valid(texts: Iterable[str], pattern: str, make: Callable[[str, Set[str]], str]) -> Dict[str, str]:
    texts = list(dict.fromkeys(texts))
    taken = {t for t in texts if re.fullmatch(pattern, t)}
    return {t: t if re.fullmatch(pattern, t) else make(t, taken) for t in texts}


def node_names(texts: Iterable[str]) -> Dict[str, str]:
    """Each of ``texts`` (distinct names) -> a valid node name: itself where it is one, else one made from it
    (:func:`node_name`) that is none of the others."""
    return _kept_where_valid(texts, NODE_NAME_RE, node_name)


def ifnames(texts: Iterable[str]) -> Dict[str, str]:
    """Each of ``texts`` (one node's interface names) -> a valid interface name, as :func:`node_names` does."""
    return _kept_where_valid(texts, IFNAME_RE, ifname)


def topology_name(text: str) -> str:
    """A valid topology name for ``text`` (a file's stem, a lab's name): lowercase letters, digits and hyphens."""
    base = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", _ascii(text))).strip("-")
    if not base[:1].isalpha():
        base = "t-" + base if base else "imported"
    name = base[:SPEC_NAME_MAX].rstrip("-")
    assert re.fullmatch(SPEC_NAME_RE, name), name
    return name
