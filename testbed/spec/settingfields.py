"""The topology's router settings as pydantic fields, made from the router's declarations
(router/settings.py): one field per setting that has a name in the spec, its type from the
setting's kind, unit and range, so a value the router would refuse is refused at its line.

What a topology writes: durations with their unit (``200ms``) where the router's key ends in
``_ms`` / ``_us``, sizes (``64KiB``) for ``bytes``, bandwidths (``3mbit``) for ``bit/s``;
``off`` where the router's null means no limit; a per-priority setting as ``{priority: value}``
(or one value for all eight, ``spec_form="all"``). Defaults: the router's, converted, except
that an optional setting (a limit, a priority list, a per-priority setting) is unset, so the
router keeps its own.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from pydantic import BeforeValidator, Field, StrictBool
from typing_extensions import Annotated, Literal

from router.settings import UNIT_NS, Setting, doc_text, spec_settings

from runfolder import units
from .fieldtypes import (
    _AS_DURATION, Bandwidth, PositiveInt, PositiveSize, PriorityValue, _size_between, _unit,
)

#: a limit that can be switched off: ``off`` (YAML reads a bare off as false: the same) or a value
Off = Annotated[Literal["off"], BeforeValidator(lambda v: "off" if v is False else v)]
#: kinds a topology leaves unset by default (the router keeps its own)
_UNSET_BY_DEFAULT = ("priorities", "limits", "role")


def _duration_at_least(low_ns: int, high_ns: Optional[int]):
    def parse(value: Any) -> int:
        ns = units.parse_duration(value)
        if low_ns > 0 and ns == 0:
            raise units.UnitError(f"{value!r}: must be longer than zero (examples: {units.DURATION_EXAMPLES})")
        if ns < low_ns or (high_ns is not None and ns > high_ns):
            bound = (f"between {units.format_duration(low_ns)} and {units.format_duration(high_ns)}"
                     if high_ns is not None else f"at least {units.format_duration(low_ns)}")
            raise units.UnitError(f"{value!r}: must be {bound} (the router refuses anything else)")
        return ns

    return parse


def _scalar_type(setting: Setting, kind: str) -> Any:
    """The type of one value of ``setting`` (of ``kind``: the setting's, or its per-priority item's)."""
    low, high = setting.low, setting.high
    if setting.unit in UNIT_NS:
        scale = UNIT_NS[setting.unit]
        low_ns = int((low or 0) * scale)
        high_ns = None if high is None else int(high * scale)
        return Annotated[int, _unit("duration", _duration_at_least(low_ns, high_ns)), _AS_DURATION]
    if setting.unit == "bytes":
        if (low or 0) <= 1 and high is None:
            return PositiveSize
        return Annotated[int, _unit("size", _size_between(int(low or 0), None if high is None else int(high)))]
    if setting.unit == "bit/s":
        return Bandwidth
    if kind == "int":
        if low == 1 and high is None:
            return PositiveInt
        return Annotated[int, Field(ge=low, le=high)]
    if kind == "number":
        return Annotated[float, Field(ge=low, le=high)]
    if kind == "bool":
        return StrictBool
    if kind == "choice":
        return Literal[tuple(choice.lower() for choice in setting.choices)]  # type: ignore[misc]
    raise ValueError(f"router setting {setting.key}: no spec type for kind {kind!r}")


def spec_type(setting: Setting, objects: Mapping[str, Any]) -> Any:
    """The type a topology's value of ``setting`` has (``objects``: the models of ``limits`` and ``role``)."""
    if setting.kind in objects:
        return objects[setting.kind]
    if setting.kind == "priorities":
        return List[PriorityValue]
    if setting.kind == "per_priority":
        item = _scalar_type(setting, setting.item)
        return item if setting.spec_form == "all" else Dict[PriorityValue, item]
    scalar = _scalar_type(setting, setting.kind)
    return Union[Off, scalar] if setting.null == "off" else scalar


def spec_default(setting: Setting) -> Any:
    """The topology's default for ``setting``: the router's own in the topology's units, or None (unset)."""
    value = setting.spec_default if setting.spec_default is not None else setting.default
    if value is None or setting.kind in _UNSET_BY_DEFAULT or (setting.kind == "per_priority"
                                                               and setting.spec_form == "all"):
        return None
    if setting.unit in UNIT_NS:
        return int(round(value * UNIT_NS[setting.unit]))
    if setting.kind == "choice":
        return value.lower()
    return value


def spec_fields(settings: Tuple[Setting, ...], objects: Mapping[str, Any] = {},
                all_optional: bool = False) -> Dict[str, Any]:
    """``pydantic.create_model`` field definitions for the settings with a name in the spec;
    ``all_optional``: every one unset by default (the limits: the router keeps its own)."""
    fields: Dict[str, Any] = {}
    for setting in spec_settings(settings):
        kind = spec_type(setting, objects)
        if setting.kind == "per_priority" and setting.spec_form == "mapping":
            fields[setting.spec] = (kind, Field(default_factory=dict, description=doc_text(setting, spec=True)))
            continue
        default = None if all_optional else spec_default(setting)
        if default is None:
            kind = Optional[kind]
        fields[setting.spec] = (kind, Field(default=default, description=doc_text(setting, spec=True)))
    return fields
