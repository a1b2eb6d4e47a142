from __future__ import annotations

import pytest

from router.keyexpr import KeyExprError, intersects, validate


@pytest.mark.parametrize("a, b, expected", [
    ("a/b", "a/b", True),
    ("a/b", "a/c", False),
    ("a/*", "a/b", True),
    ("a/*", "a/b/c", False),
    ("a/**", "a", True),
    ("a/**", "a/b/c", True),
    ("**", "x/y", True),
    ("a/**/c", "a/c", True),
    ("a/**/c", "a/b/d/c", True),
    ("a/**/c", "a/b/d", False),
    ("*/b", "a/**", True),
    ("a/*/c", "a/**/d", False),
])
def test_intersects(a, b, expected):
    assert intersects(a, b) is expected
    assert intersects(b, a) is expected


@pytest.mark.parametrize("bad", ["", "/a", "a/", "a//b", "a/b*", "a/$x", "a/?"])
def test_validate_rejects(bad):
    with pytest.raises(KeyExprError):
        validate(bad)


def test_validate_accepts():
    assert validate("a/*/b/**") == "a/*/b/**"
