"""Each router setting is declared once (router/settings.py); this guards that everything else follows:

- the settings tables of docs/router.md and docs/spec.md are the ones the declarations make;
- every declared key is a field of the router's config classes, and nothing else is;
- every setting with a name in the spec is a field of the topology's models, and nothing else is;
- end to end: a topology that gives every such setting a value other than its default yields, through
  the driver's mapping, a router config the router parses to exactly those values.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Tuple

import pytest

from router.config import PIPELINE_KEYS, PipelineConfig, RouterConfig, config_from_dict
from router.limits import LimitsConfig, RoleLimits
from router.settings import (
    LIMITS_SETTINGS, ROLE_SETTINGS, ROLES, ROUTER_SETTINGS, UNIT_NS, Setting, role_default, spec_settings,
)
from router.settingsdocs import DOCS, TABLES, with_tables
from testbed.drivers.routerconfig import settings_to_router_keys
from testbed.spec import load_spec_text
from testbed.spec.models import Limits, RoleLimits as SpecRoleLimits, RouterSettings


@pytest.mark.parametrize("page", sorted(TABLES))
def test_the_docs_tables_are_the_declarations(page):
    text = (DOCS / page).read_text()
    assert with_tables(page, text) == text, (
        f"docs/{page}: a settings table differs from router/settings.py; run python -m router.settingsdocs")


def _fields(cls) -> set:
    return {f.name for f in dataclasses.fields(cls)}


def test_the_router_config_classes_hold_exactly_the_declared_keys():
    keys = {s.key for s in ROUTER_SETTINGS}
    assert _fields(RouterConfig) | _fields(PipelineConfig) == keys | {"pipeline"}
    assert _fields(PipelineConfig) == set(PIPELINE_KEYS)
    assert _fields(LimitsConfig) == {s.key for s in LIMITS_SETTINGS}
    assert _fields(RoleLimits) == {s.key for s in ROLE_SETTINGS}


def test_the_topology_models_hold_exactly_the_settings_with_a_spec_name():
    assert set(RouterSettings.model_fields) == {s.spec for s in spec_settings(ROUTER_SETTINGS)}
    assert set(Limits.model_fields) == {s.spec for s in spec_settings(LIMITS_SETTINGS)}
    assert set(SpecRoleLimits.model_fields) == {s.spec for s in spec_settings(ROLE_SETTINGS)}


def _sample(setting: Setting, role: str = "") -> Any:
    """A value of ``setting`` in the router's unit, in its range and not its default."""
    default = role_default(setting, role) if role else setting.default
    low = setting.low if setting.low is not None else 0
    if setting.kind == "bool":
        return not default
    if setting.kind == "choice":
        return next(c for c in setting.choices if c != default)
    if setting.kind == "priorities":
        return (1, 2)
    if setting.kind == "per_priority":
        return 5 if setting.item == "int" else 2.5
    if setting.kind == "number":
        return (low + (setting.high if setting.high is not None else low + 10)) / 2 + 0.25
    if setting.kind == "int":
        value = max(int(low), 1) * 3 + 7
        return value if setting.high is None or value <= setting.high else int(setting.high) - 1
    raise AssertionError(f"no sample for {setting.key} ({setting.kind})")


def _as_written(setting: Setting, value: Any) -> Any:
    """``value`` (router unit) as a topology writes it."""
    if setting.kind == "per_priority" and setting.spec_form == "mapping":
        return {"data": _as_written(dataclasses.replace(setting, kind=setting.item), value)}
    if setting.unit in UNIT_NS:
        return f"{value}{setting.unit}"
    if setting.unit == "bit/s":
        return f"{value}bit"
    if setting.kind == "choice":
        return value.lower()
    if setting.kind == "priorities":
        return list(value)
    return value


def _expected(setting: Setting, value: Any) -> Any:
    """What the router parses from the topology's ``value``."""
    if setting.kind == "per_priority":
        if setting.spec_form == "all":
            return (value,) * 8
        out = list(setting.default) if setting.default is not None else [None] * 8
        out[5] = value
        return tuple(out)
    return value


def _plain(settings: Tuple[Setting, ...], role: str = "") -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(what a topology writes, what the router must parse) for every plain setting with a spec name."""
    written, expected = {}, {}
    for s in spec_settings(settings):
        if s.kind in ("limits", "role"):
            continue
        value = _sample(s, role)
        written[s.spec] = _as_written(s, value)
        expected[s.key] = _expected(s, value)
    return written, expected


def test_every_spec_setting_reaches_the_router_through_the_driver():
    router_written, router_expected = _plain(ROUTER_SETTINGS)
    limits_written, limits_expected = _plain(LIMITS_SETTINGS)
    roles = {role: _plain(ROLE_SETTINGS, role) for role in ROLES}
    router_written["keepalive"] = "100ms"  # below the sample lease
    router_expected["keepalive_ms"] = 100
    limits_written.update({spec: roles[role][0] for role, spec in ROLES.items()})
    router_written["limits"] = limits_written
    spec = load_spec_text("name: t\nnodes: {a: {}, b: {}}\nlinks: [{endpoints: [a, b]}]\n", filename="t.yaml")
    spec = spec.model_validate({**spec.model_dump(by_alias=True, mode="json"),
                                "defaults": {"router": router_written}})
    keys = settings_to_router_keys(spec.router_settings("a"))
    parsed = config_from_dict({"node": "a", "client_listen": ["127.0.0.1:1"], **keys})
    for key, value in router_expected.items():
        held = getattr(parsed.pipeline if key in PIPELINE_KEYS else parsed, key)
        assert held == value, f"{key}: the router holds {held!r}, the topology gave {value!r}"
    for key, value in limits_expected.items():
        assert getattr(parsed.limits, key) == value, key
    for role in ROLES:
        for key, value in roles[role][1].items():
            assert getattr(getattr(parsed.limits, role), key) == value, f"{role}.{key}"


def test_a_topology_without_router_settings_gives_the_routers_own_defaults():
    spec = load_spec_text("name: t\nnodes: {a: {}, b: {}}\nlinks: [{endpoints: [a, b]}]\n", filename="t.yaml")
    parsed = config_from_dict({"node": "a", "client_listen": ["127.0.0.1:1"],
                               **settings_to_router_keys(spec.router_settings("a"))})
    plain = config_from_dict({"node": "a", "client_listen": ["127.0.0.1:1"]})
    differ = {s.key for s in ROUTER_SETTINGS if s.spec_default is not None}
    assert dataclasses.replace(parsed, **{key: getattr(plain, key) for key in differ}) == plain
