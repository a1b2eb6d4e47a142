"""summary.json's JSON Schema (`summary.schema.json`, draft 2020-12), validated with `jsonschema`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List

from jsonschema import Draft202012Validator

__all__ = ["SUMMARY_SCHEMA", "validate", "schema_errors"]

SUMMARY_SCHEMA = json.loads((Path(__file__).with_name("summary.schema.json")).read_text())
_VALIDATOR = Draft202012Validator(SUMMARY_SCHEMA)


def schema_errors(value: Any) -> List[str]:
    """Every way ``value`` does not match the summary schema, as `$.path: message` lines."""
    return [f"{error.json_path}: {error.message}"
            for error in sorted(_VALIDATOR.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))]


def validate(summary: Any) -> None:
    """Raise ValueError listing every way ``summary`` does not match the schema."""
    errors = schema_errors(summary)
    if errors:
        raise ValueError("summary.json does not match its schema:\n  " + "\n  ".join(errors[:50]))
