"""Router settings given on the command line as ``KEY=VALUE`` (``testbed run --router-setting``,
``testbed suite run --router-setting``): parsed as YAML values and validated as the topology's
``router:`` settings are, so a mistake is refused with the same words."""
from __future__ import annotations

from typing import Any, Dict, List

import yaml
from pydantic import ValidationError

from .models import RouterSettings


class RouterOverrideError(ValueError):
    """A ``KEY=VALUE`` router setting that cannot be used (the message names the option and the fix)."""


def parse_router_settings(items: List[str], option: str) -> Dict[str, Any]:
    """``["congestion_aware=false", "limits={clients: {input_rate: 3mbit}}"]`` -> the settings as YAML
    values, validated against :class:`RouterSettings`; raises :class:`RouterOverrideError`."""
    out: Dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise RouterOverrideError(f"{option} {item!r}: write KEY=VALUE, e.g. {option} congestion_aware=false")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise RouterOverrideError(f"{option} {item!r}: the value is not YAML: {exc}") from None
    unknown = sorted(set(out) - set(RouterSettings.model_fields))
    if unknown:
        raise RouterOverrideError(f"{option}: no router setting {', '.join(unknown)} "
                                  f"(settings: {', '.join(RouterSettings.model_fields)})")
    try:
        RouterSettings.model_validate(out)
    except ValidationError as exc:
        raise RouterOverrideError(f"{option}: " + "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from None
    return out


def typed_router_settings(raw: Dict[str, Any]) -> Dict[str, Any]:
    """Settings from :func:`parse_router_settings` as the model's typed values (for ``Spec.with_router_settings``)."""
    validated = RouterSettings.model_validate(raw)
    return {key: getattr(validated, key) for key in raw}
