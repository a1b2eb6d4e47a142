"""The router under test: a pub/sub router with Zenoh priorities, a batching
transmission pipeline, link schedulers, link-state routing and metrics.

Run with ``python -m router --config node.json``.  Standard library only,
plus prometheus-client for the metrics exposition.
"""
__version__ = "0.1.0"
