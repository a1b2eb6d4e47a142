"""Reading a topology file into a ``Spec``, with every problem tied to a line.

Three stages, each reporting all it finds: YAML (syntax, duplicate keys), the
models (types, units, ranges, unknown keys), then the cross-checks of
``checks.py``.  A later stage runs only when the earlier ones found nothing,
because its findings would be noise otherwise.
"""
from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from pydantic import BaseModel, ValidationError

from runfolder.wording import did_you_mean

from .errors import Loc, SpecError, SpecProblem, format_path
from .topology import Spec
from .yamltree import ParsedYaml, parse_yaml

__all__ = ["load_spec", "load_spec_text", "read_source", "validate_yaml", "pydantic_problems"]


def load_spec(path: Union[str, Path]) -> Spec:
    """Read, parse and validate a topology file; raises ``SpecError`` listing every problem.

    File-system errors (missing file, no permission, not UTF-8) are reported
    as a ``SpecError`` too, so callers need to handle one exception only.
    """
    return load_spec_text(read_source(path, "a topology file"), filename=str(path))


def read_source(path: Union[str, Path], what: str) -> str:
    """The text of a YAML file, or a ``SpecError`` saying why it cannot be read (``what``: "a topology file")."""
    name = str(path)
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([SpecProblem(name, None, "", "no such file")]) from None
    except IsADirectoryError:
        raise SpecError([SpecProblem(name, None, "", f"is a directory, not {what}")]) from None
    except PermissionError:
        raise SpecError([SpecProblem(name, None, "", "permission denied")]) from None
    except UnicodeDecodeError as err:
        raise SpecError([SpecProblem(name, None, "", f"not UTF-8 text ({err.reason} at byte {err.start})")]) from None
    except OSError as err:
        raise SpecError([SpecProblem(name, None, "", f"cannot read: {err.strerror or err}")]) from None


def load_spec_text(text: str, filename: str = "<string>") -> Spec:
    """Parse and validate topology YAML given as text (``filename`` is used in messages)."""
    return validate_yaml(text, filename, Spec, "the file is empty; a topology needs at least 'name' and 'nodes' "
                                               "(see docs/spec.md)", "name, nodes, links, ...")[0]


def validate_yaml(text: str, filename: str, root: type, empty: str, keys: str) -> Tuple[Any, ParsedYaml]:
    """A YAML document validated as the pydantic model ``root``, and its parse (for lines), or a ``SpecError``
    with every problem at its line. ``empty``: the message for an empty file; ``keys``: the top-level keys,
    for the message when the document is not a mapping. The model's validators may add problems of their own
    to the list in the ``problems`` entry of the validation context."""
    parsed = parse_yaml(text)
    if parsed.problems:
        raise SpecError(sorted((SpecProblem(filename, p.line, format_path(p.loc), p.message)
                                for p in parsed.problems), key=_order))
    if parsed.data is None:
        raise SpecError([SpecProblem(filename, 1, "", empty)])
    if not isinstance(parsed.data, dict):
        raise SpecError([SpecProblem(filename, parsed.line_of(()), "",
                                     f"the file must be a mapping of keys ({keys}), not a {_yaml_kind(parsed.data)}")])
    collected: List[Tuple[Loc, str]] = []
    try:
        model = root.model_validate(parsed.data, context={"problems": collected})
    except ValidationError as err:
        raise SpecError(pydantic_problems(err, parsed, filename, root)) from None
    if collected:
        raise SpecError(sorted((SpecProblem(filename, parsed.line_of(loc), format_path(loc), msg)
                                for loc, msg in collected), key=_order))
    return model, parsed


def _order(problem: SpecProblem) -> Tuple[int, str]:
    return (problem.line or 0, problem.path)


def _yaml_kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    return "number"


# --- pydantic errors -> problems ----------------------------------------------


def _data_loc(data: Any, loc: Sequence[Union[str, int]]) -> Tuple[Loc, bool]:
    """The YAML path of a pydantic location: drops union tags and the like.

    Returns (path, complete): ``complete`` is False when the last part does
    not exist in the data (a missing key), in which case it is still appended.
    """
    out: List[Union[str, int]] = []
    node = data
    for n, part in enumerate(loc):
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            out.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        elif n == len(loc) - 1 and isinstance(node, dict) and isinstance(part, str) and not part.startswith("["):
            out.append(part)
            return tuple(out), False
        # anything else is a pydantic-internal step (a union tag, "[key]", a function name)
    return tuple(out), True


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin is Union:
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) == 1:
                tp = args[0]
            else:
                return tp
        else:
            return tp


def _model_at(loc: Sequence[Union[str, int]], root: type = Spec) -> Optional[type]:
    """The model class that validated the mapping at pydantic location ``loc`` (in a ``root`` document)."""
    tp: Any = root
    for part in loc:
        tp = _unwrap(tp)
        origin = typing.get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {f.alias or k: f for k, f in tp.model_fields.items()}
            if part not in fields:
                return None
            tp = fields[part].annotation
        elif origin in (list, tuple) and isinstance(part, int):
            tp = typing.get_args(tp)[0]
        elif origin is dict:
            tp = typing.get_args(tp)[1]
        elif origin is Union:
            tp = _union_member(tp, part)
            if tp is None:
                return None
        else:
            return None
    tp = _unwrap(tp)
    if typing.get_origin(tp) is Union:
        return None
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _union_member(tp: Any, tag: Any) -> Optional[type]:
    for member in typing.get_args(tp):
        member = _unwrap(member)
        if isinstance(member, type) and issubclass(member, BaseModel):
            for field in member.model_fields.values():
                if typing.get_origin(field.annotation) is typing.Literal and tag in typing.get_args(field.annotation):
                    return member
    return None


def _allowed_keys(loc: Sequence[Union[str, int]], root: type = Spec) -> List[str]:
    model = _model_at(loc, root)
    if model is None:
        return []
    return [f.alias or k for k, f in model.model_fields.items()]


#: What people write for a key, and the key they mean (offered as "did you mean").
_SYNONYMS = {
    "bandwidth": "bw", "bandwith": "bw", "rate": "bw", "latency": "delay", "limit": "queue",
    "queue_limit": "queue", "qlen": "queue", "cost": "weight", "type": "kind", "ends": "endpoints",
    "interfaces": "endpoints", "links": "endpoints", "ip": "addresses", "ips": "addresses",
    "subscriber": "subscribers", "publisher": "node", "time": "at", "event": "action",
}


#: What people write for a value (a traffic profile, a scenario action, an operator), and the one they mean.
_VALUE_SYNONYMS = {
    "=<": "<=", "=>": ">=", "=": "==",
    "cbr": "constant", "rate": "constant", "onoff": "burst", "on_off": "burst", "on-off": "burst",
    "bursty": "burst", "pubsub": "zpub", "get": "query", "request": "query",
    "set_bw": "set_link", "set_delay": "set_link", "set_loss": "set_link", "shape": "set_link",
    "down": "link_down", "up": "link_up", "kill": "kill_router", "restart": "restart_router",
    "start": "start_flow", "stop": "stop_flow",
}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(error: Dict[str, Any], root: type = Spec) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    loc = error["loc"]
    if "message" in ctx and isinstance(ctx["message"], str):
        return ctx["message"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        allowed = _allowed_keys(loc[:-1], root)
        hint = did_you_mean(key, allowed, _SYNONYMS)
        return f"unknown key {key!r} ({hint}allowed: {', '.join(allowed)})" if allowed else f"unknown key {key!r}"
    if kind == "missing":
        return f"missing required key {loc[-1]!r}"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        hint = did_you_mean(value, expected.split(", "), _VALUE_SYNONYMS)
        return f"{_show(value)} is not allowed ({hint}allowed: {expected})"
    if kind == "union_tag_invalid":
        expected = str(ctx.get("expected_tags", "")).replace("'", "")
        tag = ctx.get("tag")
        return (f"{_show(tag)} is not allowed ({did_you_mean(tag, expected.split(', '), _VALUE_SYNONYMS)}"
                f"allowed: {expected})")
    if kind == "union_tag_not_found":
        field = str(ctx.get("discriminator", "")).strip("'")
        allowed = _allowed_tags(loc, field, root)
        return f"missing required key {field!r}" + (f" (one of: {allowed})" if allowed else "")
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping (key: value), not a {_yaml_kind(value)}"
    if kind in ("list_type", "tuple_type"):
        return f"must be a list, not a {_yaml_kind(value)}"
    if kind in ("string_type",):
        return f"must be a string, not a {_yaml_kind(value)}"
    if kind in ("bool_type", "bool_parsing"):
        return f"{_show(value)} is not true or false"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"{_show(value)} is not a whole number"
    if kind == "too_short":
        return f"must not be empty (at least {ctx.get('min_length', 1)} item)"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return f"{_show(value)}: {error['msg']}"


def _allowed_tags(loc: Sequence[Union[str, int]], field: str, root: type = Spec) -> str:
    tp: Any = None
    # loc points at the union value; find the union type by walking to the parent list/field
    model = _model_at(loc[:-2], root) if len(loc) >= 2 else None
    if model is not None and isinstance(loc[-2], str):
        tp = model.model_fields.get(loc[-2])
        tp = _unwrap(tp.annotation) if tp else None
        if tp is not None and typing.get_origin(tp) is list:
            tp = _unwrap(typing.get_args(tp)[0])
    if tp is None or typing.get_origin(tp) is not Union:
        return ""
    tags: List[str] = []
    for member in typing.get_args(tp):
        f = _unwrap(member).model_fields.get(field)
        if f is not None:
            tags.extend(str(t) for t in typing.get_args(f.annotation))
    return ", ".join(tags)


def pydantic_problems(err: ValidationError, parsed: ParsedYaml, filename: str, root: type = Spec) -> List[SpecProblem]:
    """Every pydantic error of a YAML document validated as ``root``, as a problem at its line."""
    seen = set()
    problems: List[SpecProblem] = []
    for error in err.errors(include_url=False):
        loc, _ = _data_loc(parsed.data, error["loc"])
        if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            field = str((error.get("ctx") or {}).get("discriminator", "")).strip("'")
            if field:
                loc = loc + (field,)
        message = _message(error, root)
        key = (loc, message)
        if key in seen:
            continue
        seen.add(key)
        problems.append(SpecProblem(filename, parsed.line_of(loc), format_path(loc), message))
    return sorted(problems, key=_order)
