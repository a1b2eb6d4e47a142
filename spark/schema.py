"""summary.json's JSON Schema (draft 2020-12 subset) and a small validator for exactly that subset.

The validator understands: type (string or list), properties, required, additionalProperties
(bool or schema), items, enum, minimum, $ref to "#/$defs/<name>". That is all the schema uses, so
no third-party package is needed to validate a summary (a full validator such as ``jsonschema``
accepts the same schema).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List

__all__ = ["SUMMARY_SCHEMA", "validate", "schema_errors"]

SUMMARY_SCHEMA = json.loads((Path(__file__).with_name("summary.schema.json")).read_text())

_TYPES = {
    "object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
}


def _is(value: Any, t: str) -> bool:
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[t])


def schema_errors(value: Any, schema: dict = None, path: str = "$", root: dict = None) -> List[str]:
    root = root if root is not None else (schema if schema is not None else SUMMARY_SCHEMA)
    schema = schema if schema is not None else SUMMARY_SCHEMA
    if "$ref" in schema:
        name = schema["$ref"].split("/")[-1]
        return schema_errors(value, root["$defs"][name], path, root)
    errors: List[str] = []
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        if not any(_is(value, t) for t in types):
            return [f"{path}: {type(value).__name__} is not {' or '.join(types)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and _is(value, "number") and value < schema["minimum"]:
        errors.append(f"{path}: {value} is below the minimum {schema['minimum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path}: required key {key!r} missing")
        extra = schema.get("additionalProperties", True)
        for key, v in value.items():
            if key in props:
                errors += schema_errors(v, props[key], f"{path}.{key}", root)
            elif extra is False:
                errors.append(f"{path}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                errors += schema_errors(v, extra, f"{path}.{key}", root)
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            errors += schema_errors(v, schema["items"], f"{path}[{i}]", root)
    return errors


def validate(summary: Any) -> None:
    """Raise ValueError listing every way ``summary`` does not match the schema."""
    errors = schema_errors(summary)
    if errors:
        raise ValueError("summary.json does not match its schema:\n  " + "\n  ".join(errors[:50]))
