"""Which event loop the router runs on: uvloop where it is importable (the node bundle ships its
wheel where one exists for the node's platform), asyncio's standard loop otherwise, or the one the
``event_loop`` setting forces.  Standard library only, uvloop optional."""
from __future__ import annotations

import asyncio
import sys
from typing import Any, Awaitable, Callable, Optional, Tuple


class LoopUnavailable(RuntimeError):
    pass


def choose_loop(setting: str) -> Tuple[str, Optional[Callable[[], asyncio.AbstractEventLoop]]]:
    """(the loop's name as the ``ready`` event says it, e.g. ``uvloop 0.23.0`` or ``asyncio``, its factory:
    None for asyncio's own).  ``setting`` is ``auto``, ``asyncio`` or ``uvloop`` (LoopUnavailable when
    uvloop is asked for and cannot be imported)."""
    if setting != "asyncio":
        try:
            import uvloop
        except ImportError as exc:
            if setting == "uvloop":
                raise LoopUnavailable(f"event_loop is uvloop but uvloop cannot be imported ({exc}); ship it in "
                                      f"the node bundle, or set event_loop to auto or asyncio") from None
        else:
            return f"uvloop {uvloop.__version__}", uvloop.new_event_loop
    return "asyncio", None


def run_on(factory: Optional[Callable[[], asyncio.AbstractEventLoop]], main: Awaitable[Any]) -> Any:
    """``asyncio.run(main)`` on a loop made by ``factory`` (None: asyncio's standard loop)."""
    if factory is None:
        return asyncio.run(main)  # type: ignore[arg-type]
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)  # type: ignore[arg-type]
    loop = factory()  # Python 3.9/3.10: what asyncio.run does, on this loop
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
