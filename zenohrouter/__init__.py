"""A stock Zenoh router for the testbed's nodes: ``python -m zenohrouter --config zenoh.json5``.

The second router driver (the first is ``router/``, ours): the eclipse-zenoh library opened in
router mode from a Zenoh JSON5 configuration written by the orchestrator. It needs python3 (>= 3.9)
and ``zenoh`` (shipped unpacked in the bundle's ``lib/``), nothing else. See ``__main__.py``.
"""

#: the line (on stderr) that says the router is up; followed by `` zid=<zid> listen=[...]``
READY = "zenohrouter ready"
