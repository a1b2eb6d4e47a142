"""tb.lua's constants, frame kinds and priority names are the codec's (router/codec.py) and the default ports
RouterPorts's: the block between its markers is what testbed/wireshark/luatables.py generates from them."""
from __future__ import annotations

from router.codec import PRIORITY_NAMES
from testbed.wireshark.dissector import LUA_FILE
from testbed.wireshark.luatables import block_in, generated_block


def test_the_lua_tables_are_generated_from_the_codec():
    block = block_in(LUA_FILE.read_text())
    assert block, f"{LUA_FILE} lost its generated block's markers"
    assert block == generated_block(), (
        f"{LUA_FILE} differs from router/codec.py: run `python -m testbed.wireshark.luatables` to regenerate it")


def test_priority_names_are_the_codecs():
    block = block_in(LUA_FILE.read_text())
    for number, name in PRIORITY_NAMES.items():
        assert f'  [{number}] = "{name}",\n' in block
