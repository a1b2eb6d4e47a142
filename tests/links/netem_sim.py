"""A paced one-way probe through netem, drawn as sch_netem draws (for the tests of impairstats): per datagram,
duplicate first, then loss (plain or Gilbert–Elliott), then the copy enqueued again (no duplication, loss
again), then reorder with gap or a delay from tabledist (DelayModel.draw), a negative delay sent at once."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from testbed.links.impairstats import DelayModel, GilbertElliottChain, Record

U32 = 2 ** 32


@dataclass
class Netem:
    delay: DelayModel
    loss_pct: float = 0.0
    gemodel: Optional[GilbertElliottChain] = None
    duplicate_pct: float = 0.0
    reorder_pct: float = 0.0
    gap: int = 1
    base_ns: int = 40_000  # the path without netem (stack, scheduling)


def probe(netem: Netem, sent: int, interval_ns: int, seed: int) -> list[Record]:
    """``(seq, arrival_ns, send_ns)`` of every datagram that arrives, in order of arrival."""
    rng = np.random.default_rng(seed)

    def rnd() -> int:
        return int(rng.integers(0, U32))

    def chance(pct: float) -> bool:
        return bool(pct) and pct / 100 * U32 >= rnd()

    state = {"bad": False, "counter": 0}

    def lost() -> bool:
        ge = netem.gemodel
        if ge is None:
            return chance(netem.loss_pct)
        bad = state["bad"]
        if rnd() < (ge.r if bad else ge.p) * U32:
            state["bad"] = not bad
        return rnd() < (ge.loss_bad if bad else ge.loss_good) * U32

    def delayed(send: int) -> int:
        """netem_enqueue's reorder test, then tabledist: the time it leaves."""
        if netem.reorder_pct and state["counter"] >= netem.gap - 1 and chance(netem.reorder_pct):
            state["counter"] = 0
            return send
        state["counter"] += 1
        return send + max(0, int(netem.delay.draw(np.array([rnd()]))[0]))

    out: list[tuple[int, int, int]] = []
    for seq in range(sent):
        send = seq * interval_ns
        count = 1 + chance(netem.duplicate_pct)
        if lost():
            count -= 1
        if count == 0:
            continue
        if count > 1 and not lost():  # the copy, enqueued at the root again
            out.append((seq, delayed(send) + netem.base_ns, send))
        out.append((seq, delayed(send) + netem.base_ns, send))
    out.sort(key=lambda r: r[1])
    return out
