"""The /metrics exposition (router/metrics.py): formatted a few families at a time, with turns of the
event loop between them, and byte for byte what prometheus-client formats at once."""
from __future__ import annotations

import asyncio

import pytest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest as generate_text
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from router.metrics import SAMPLES_PER_TURN, exposition


class _Static:
    """A registry of fixed families shaped like the router's: many small ones and a few per-peer ones."""

    def __init__(self) -> None:
        self.families = []
        for i in range(30):
            g = GaugeMetricFamily(f"router_thing_{i}", f"thing {i}", labels=["peer", "priority"])
            for peer in ("r2", "r3", "c1@127.0.0.1:4000"):
                for prio in range(i % 8 + 1):
                    g.add_metric([peer, str(prio)], i * 0.5 + prio)
            self.families.append(g)
            c = CounterMetricFamily(f"router_count_{i}", 'a "counter"\nwith a line break', labels=["peer"])
            c.add_metric(["r2"], i)
            self.families.append(c)

    def collect(self):
        return list(self.families)


@pytest.mark.parametrize("openmetrics, generate", [(False, generate_text), (True, generate_openmetrics)],
                         ids=["text", "openmetrics"])
def test_the_exposition_is_what_prometheus_client_formats_at_once_with_turns_between(openmetrics, generate):
    registry = _Static()
    samples = sum(len(f.samples) for f in registry.families)
    turns = [0]

    async def go():
        stop = asyncio.Event()

        async def ticker():  # counts the event loop's turns while the exposition is formatted
            while not stop.is_set():
                turns[0] += 1
                await asyncio.sleep(0)
        t = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        turns[0] = 0
        body = await exposition(registry, openmetrics)
        stop.set()
        await t
        return body

    body = asyncio.run(go())
    assert body == generate(registry)
    assert body.endswith(b"# EOF\n") == openmetrics and body.count(b"# EOF") == int(openmetrics)
    # the loop ran other work between the chunks: about one turn per SAMPLES_PER_TURN samples
    assert turns[0] >= samples // (SAMPLES_PER_TURN + 16) >= 5, (turns[0], samples)
