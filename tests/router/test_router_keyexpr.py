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


def test_a_key_expression_is_at_most_4096_bytes_of_utf8():
    from router.codec import MAX_KEY_LEN
    from router.keyexpr import MAX_KEY_BYTES, check_length
    assert MAX_KEY_LEN == MAX_KEY_BYTES == 4096  # the message header's limit is the key expressions' limit
    assert validate("a/" + "x" * 4094) == "a/" + "x" * 4094
    with pytest.raises(KeyExprError, match="4097 bytes"):
        validate("a/" + "x" * 4095)
    assert check_length("é" * 2048) == "é" * 2048  # 2 bytes each: exactly 4096
    with pytest.raises(KeyExprError, match="4098 bytes"):
        check_length("é" * 2049)
    with pytest.raises(KeyExprError, match="not valid UTF-8"):
        check_length("\udcff" * 1025)
