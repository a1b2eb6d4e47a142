"""The client libraries' error for what they do not do. Their names (``CLIENTS``) are the plan's
(runfolder/trafficplan.py); traffic/sessions.py opens them (traffic/client.py, traffic/zenohclient.py)."""
from __future__ import annotations

__all__ = ["UnsupportedByClient"]


class UnsupportedByClient(ValueError):
    """The plan asks the client library for what it does not do (e.g. queries of the zenoh client):
    retrying cannot help, so connecting gives up at once."""
