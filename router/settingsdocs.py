"""The settings tables of docs/router.md and docs/spec.md, made from router/settings.py.

Each table sits between ``<!-- settings:NAME -->`` and ``<!-- /settings:NAME -->`` in its page.
``python -m router.settingsdocs`` rewrites them; ``--check`` exits 1 (naming the tables) when a page
differs from the declarations, which tests/router/test_router_settings_table.py asserts too.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from .settings import (
    LIMITS_SETTINGS, ROLE_SETTINGS, ROLES, ROUTER_SETTINGS, UNIT_NS, Setting, doc_text, role_default, spec_settings, with_names,
)

DOCS = Path(__file__).resolve().parents[1] / "docs"
_SIZES = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))
_DURATIONS = ((10**9, "s"), (10**6, "ms"), (10**3, "us"))


def _number(x: Any) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _size(n: Any, space: str = " ") -> str:
    for scale, unit in _SIZES:
        if n >= scale and n % scale == 0:
            return f"{n // scale}{space}{unit}"
    return _number(n)


def _duration(ns: int) -> str:
    for scale, unit in _DURATIONS:
        if ns >= scale and ns % scale == 0:
            return f"{ns // scale}{unit}"
    return f"{ns}ns"


def _range(setting: Setting, show: Callable[[Any], str]) -> str:
    low, high = setting.low, setting.high
    if low is None:
        return ""
    if high is not None:
        return f" {show(low)}..{show(high)}"
    return f" ≥ {show(low)}" if low else ""


def _choices(choices: Tuple[str, ...]) -> str:
    return " \\| ".join(f"`{c}`" for c in choices)


# ------------------------------------------------------------------ the router's side

def _router_type(s: Setting) -> str:
    show = _size if s.unit == "bytes" else _number
    item = "ints" if s.item == "int" else "numbers"
    text = {
        "int": "int" + _range(s, show), "number": "number" + _range(s, show), "bool": "bool",
        "choice": _choices(s.choices), "string": "string" + (f" ≥ {_number(s.low)} chars" if s.low else ""),
        "name": "string", "address": '`"host:port"` or `{host, port}`', "addresses": "list of addresses",
        "neighbours": "list", "limits": "object", "role": "object",
        "per_priority": f"8 {item}{_range(s, show)}, or `{{priority: value}}`",
        "priorities": "list of priorities (0..7 or names)",
    }[s.kind]
    if s.unit and s.kind in ("int", "number", "per_priority"):
        text += f" ({s.unit})"
    return text + (" or null" if s.null else "")


def _router_value(s: Setting, value: Any) -> str:
    if value is None:
        return "null" if s.null in ("", "none", "off") else f"null: {with_names(s.null, spec=False)}"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return f"`[{','.join(_number(v) for v in value)}]`" if value else "`[]`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return _size(value) if s.unit == "bytes" else _number(value)


def _router_default(s: Setting, role: Optional[str] = None) -> str:
    if s.default_doc:
        return s.default_doc
    if s.by_role:
        return ", ".join(f"{r} {_router_value(s, role_default(s, r))}" for r in ROLES)
    return _router_value(s, s.default)


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def router_config_table() -> str:
    lines = [_row("key", "type", "default", "meaning"), "|-----|------|---------|---------|"]
    lines += [_row(f"`{s.key}`", _router_type(s), _router_default(s), doc_text(s, spec=False))
              for s in ROUTER_SETTINGS]
    return "\n".join(lines)


def router_limits_table() -> str:
    lines = [_row("key", "type", "default", "meaning"), "|-----|------|---------|---------|"]
    for s in LIMITS_SETTINGS:
        if s.kind != "role":
            lines.append(_row(f"`{s.key}`", _router_type(s), _router_default(s), doc_text(s, spec=False)))
    lines.append(_row(" / ".join(f"`{r}`" for r in ROLES), "object", "", "the limits of one role of endpoint:"))
    lines += [_row(f"`.{s.key}`", _router_type(s), _router_default(s), doc_text(s, spec=False))
              for s in ROLE_SETTINGS]
    return "\n".join(lines)


# ------------------------------------------------------------------ a topology's side

def _spec_scalar_type(s: Setting, kind: str) -> str:
    if s.unit in UNIT_NS:
        scale = UNIT_NS[s.unit]
        return "duration" + _range(s, lambda v: _duration(int(v * scale)))
    if s.unit == "bytes":
        return "size" + _range(s, lambda v: _size(v, ""))
    if s.unit == "bit/s":
        return "bandwidth"
    if kind in ("int", "number"):
        return kind + _range(s, _number)
    if kind == "choice":
        return _choices(tuple(c.lower() for c in s.choices))
    return kind


def _spec_type(s: Setting) -> str:
    if s.kind == "limits":
        return "[limits](#resource-limits)"
    if s.kind == "role":
        return "the keys `*.` below"
    if s.kind == "priorities":
        return "list of priorities"
    if s.kind == "per_priority":
        item = _spec_scalar_type(s, s.item)
        return item + " (all 8 priorities)" if s.spec_form == "all" else f"mapping priority → {item}"
    return _spec_scalar_type(s, s.kind) + (" or `off`" if s.null == "off" else "")


def _spec_value(s: Setting, value: Any) -> str:
    """A value in the router's unit as a topology writes it (``200ms``, ``64MiB``, ``off``)."""
    if value is None:
        return "`off`" if s.null == "off" else "none"
    if s.unit in UNIT_NS:
        return f"`{_duration(int(round(value * UNIT_NS[s.unit])))}`"
    if s.unit == "bytes":
        return f"`{_size(value, '')}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f"`{value.lower()}`"
    if isinstance(value, tuple):
        return f"`[{','.join(_number(v) for v in value)}]`"
    return f"`{_number(value)}`"


def _spec_router_default(s: Setting) -> str:
    """The router's default of a limit, as a topology writes it."""
    if s.by_role:
        return ", ".join(f"{spec} {_spec_value(s, role_default(s, role))}" for role, spec in ROLES.items())
    if s.default is None and s.null not in ("", "none", "off"):
        return s.null
    return _spec_value(s, s.default)


def _spec_default(s: Setting) -> str:
    if s.kind in ("priorities", "limits", "role") or (s.kind == "per_priority" and s.spec_form == "all"):
        return f"unset (the router's: {_router_default(s)})" if s.default is not None else "unset (the router's)"
    if s.kind == "per_priority" and s.default is None:
        return f"`{{}}` (all: {with_names(s.null, spec=True)})"
    if s.kind == "per_priority":
        return f"`{{}}` (the router's: {_router_default(s)})"
    return _spec_value(s, s.spec_default if s.spec_default is not None else s.default)


def spec_settings_table() -> str:
    lines = [_row("key", "router key", "type", "default", "meaning"), "|---|---|---|---|---|"]
    lines += [_row(f"`{s.spec}`", f"`{s.key}`", _spec_type(s), _spec_default(s), doc_text(s, spec=True))
              for s in spec_settings(ROUTER_SETTINGS)]
    return "\n".join(lines)


def spec_limits_table() -> str:
    lines = [_row("key", "router key", "type", "router default", "meaning"), "|---|---|---|---|---|"]
    for s in spec_settings(LIMITS_SETTINGS):
        if s.kind != "role":
            lines.append(_row(f"`{s.spec}`", f"`{s.key}`", _spec_type(s), _spec_router_default(s),
                              doc_text(s, spec=True)))
    roles = " / ".join(f"`{spec}`" for spec in ROLES.values())
    lines.append(_row(roles, " / ".join(f"`{r}`" for r in ROLES), "object", "", "the limits of each client / "
                      "neighbour router, keys `*.` below"))
    lines += [_row(f"`*.{s.spec}`", f"`{s.key}`", _spec_type(s), _spec_router_default(s), doc_text(s, spec=True))
              for s in spec_settings(ROLE_SETTINGS)]
    return "\n".join(lines)


#: page -> table name -> how it is made
TABLES: Dict[str, Dict[str, Callable[[], str]]] = {
    "router.md": {"config": router_config_table, "limits": router_limits_table},
    "spec.md": {"router": spec_settings_table, "limits": spec_limits_table},
}


def _markers(name: str) -> Tuple[str, str]:
    return f"<!-- settings:{name} -->", f"<!-- /settings:{name} -->"


def with_tables(page: str, text: str) -> str:
    """``text`` (of docs/``page``) with each of its tables made anew; a missing marker is an error."""
    for name, make in TABLES[page].items():
        begin, end = _markers(name)
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise ValueError(f"docs/{page}: no {begin} ... {end} around the {name} table")
        text = pattern.sub(lambda _m: f"{begin}\n{make()}\n{end}", text, count=1)
    return text


def stale_tables(docs: Path = DOCS) -> List[str]:
    """The pages whose tables differ from the declarations."""
    return [page for page in TABLES if with_tables(page, (docs / page).read_text()) != (docs / page).read_text()]


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        stale = stale_tables()
        for page in stale:
            print(f"docs/{page}: the settings tables differ from router/settings.py; run python -m router.settingsdocs")
        return 1 if stale else 0
    for page in TABLES:
        path = DOCS / page
        path.write_text(with_tables(page, path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
