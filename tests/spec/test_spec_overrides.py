"""Router settings from the command line (testbed/spec/overrides.py): `testbed run --router-setting` and
`testbed suite run --router-setting` read them the same way."""
from __future__ import annotations

import pytest

from testbed.spec.overrides import RouterOverrideError, parse_router_settings, typed_router_settings


def test_values_are_yaml_and_typed_for_the_spec():
    raw = parse_router_settings(["congestion_aware=false", "batch_bytes=32KiB", "flow_ttl=2s"], "--router-setting")
    assert raw == {"congestion_aware": False, "batch_bytes": "32KiB", "flow_ttl": "2s"}
    typed = typed_router_settings(raw)
    assert typed == {"congestion_aware": False, "batch_bytes": 32768, "flow_ttl": 2_000_000_000}


@pytest.mark.parametrize("items, message", [
    (["congestion_aware"], "write KEY=VALUE, e.g. --router-setting congestion_aware=false"),
    (["=1"], "write KEY=VALUE"),
    (["congestion_awre=false"], "no router setting congestion_awre"),
    (["batch_bytes=lots"], "--router-setting: batch_bytes"),
    (["scheduler=[unclosed"], "the value is not YAML"),
])
def test_bad_settings_name_the_option(items, message):
    with pytest.raises(RouterOverrideError, match=message.replace("[", r"\[")):
        parse_router_settings(items, "--router-setting")
