"""Writing in the reader's turn: the wake-ups of idle writers held while a connection's reader handles what
one read brought, then released by that reader, which writes for them.

A frame that a reader forwards to a connection whose writer is idle used to wake that writer task, which
wrote it on the next turn of the event loop: a task switch, and a future and a timer for its next wait, per
write (~10 us on a lab VM), and one turn of latency per hop.  While a reader handles frames it *holds* such
wake-ups (``TransmissionPipeline`` hands its wake-up to the holder instead of waking the writer); before it
waits for more bytes (or yields the loop) it *releases* them: each connection then writes what its pipeline
has ready, as its writer would have -- through ``TransmissionPipeline.pull``, so priority order, batches,
limits and statistics are the pipeline's as before; everything one read brought leaves in one write per
connection -- unless something stops it there (the transport is paused, the link is paced, a stream
connection, a FRAGMENT frame, more than a write's worth ready, or a second batch still filling), and then
its writer is woken as before.

A reader that suspends while holding (back-pressure, a throttled sender) does not keep the others waiting:
the first wake-up held also schedules a release at the next turn of the event loop, when the writer would
have run anyway.
"""
from __future__ import annotations

import asyncio
from typing import Any, List


class HeldWakes:
    """The wake-ups of idle writers, held while a reader handles frames (one per router: readers take turns)."""

    __slots__ = ("_holding", "_held", "_release_due")

    def __init__(self) -> None:
        self._holding = False
        self._held: List[Any] = []  # TransmissionPipelines whose idle writer was not woken
        self._release_due = False  # a release at the next turn of the loop is scheduled

    def hold(self) -> None:
        """A reader starts handling frames."""
        self._holding = True

    def take(self, pipeline: Any) -> bool:
        """``pipeline``'s writer is idle and something was queued: True when the wake-up is held (the
        release writes or wakes), False when nobody holds (wake the writer now)."""
        if not self._holding:
            return False
        self._held.append(pipeline)
        if not self._release_due:
            self._release_due = True
            asyncio.get_running_loop().call_soon(self._release_at_next_turn)
        return True

    def release(self) -> None:
        """The reader is done for now: each held connection writes what is ready, or its writer is woken."""
        self._holding = False
        if self._held:
            held, self._held = self._held, []
            for pipeline in held:
                pipeline.write_held()

    def _release_at_next_turn(self) -> None:
        self._release_due = False
        self.release()
