"""Which event loop the router runs on (router/eventloop.py): uvloop where importable unless the
``event_loop`` setting forces asyncio's; a required uvloop that cannot be imported is an error that says
what to do."""
import asyncio
import sys
import types

import pytest

from router.eventloop import LoopUnavailable, choose_loop, run_on


def test_auto_takes_uvloop_where_importable_and_asyncio_forces_the_standard_loop(monkeypatch):
    fake = types.ModuleType("uvloop")
    fake.__version__ = "9.9.9"
    fake.new_event_loop = asyncio.new_event_loop
    monkeypatch.setitem(sys.modules, "uvloop", fake)
    assert choose_loop("auto") == ("uvloop 9.9.9", asyncio.new_event_loop)
    assert choose_loop("uvloop")[0] == "uvloop 9.9.9"
    assert choose_loop("asyncio") == ("asyncio", None)

    async def main():
        return "ran"
    assert run_on(asyncio.new_event_loop, main()) == "ran"


def test_without_uvloop_auto_is_asyncio_and_a_required_uvloop_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    assert choose_loop("auto") == ("asyncio", None)
    with pytest.raises(LoopUnavailable, match="set event_loop to auto or asyncio"):
        choose_loop("uvloop")
