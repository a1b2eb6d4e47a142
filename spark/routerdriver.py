"""What the run's router driver provides, as the manifest records it (``router_driver``), and the words the
report and the checks use for what it does not provide.

``router_driver``: ``{"name": "testbed"|"zenoh"|"command", "wire": "testbed"|"zenoh"|"unknown", "client":
"testbed"|"zenoh", "metrics": bool, "events": bool, "admin": bool, ...}``: a top-level field of
``manifest.json``, one record for writer and reader: ``runfolder.records.DriverRecord``.

A figure the run cannot give is ``{"available": false, "reason": "not available: <cause>[; <cause>]"}`` in
summary.json (:func:`unavailable`; read back with :func:`unavailable_reason`, by the report, compare and the
checks alike). The causes: the driver provides no metrics or no event log (:meth:`RecordedDriver.lacks`), or the
router's scraped metrics carry none of the testbed's metric names (:data:`METRIC_NAMES_CAUSE`): spark reads
metrics only under the names of docs/metrics.md. :class:`Availability` puts them together.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, List, Optional, Tuple

from runfolder.records import DriverRecord

__all__ = ["RecordedDriver", "read_router_driver", "TESTBED_DRIVER", "Availability", "unavailable",
           "unavailable_reason", "not_available", "METRIC_NAMES_CAUSE"]

#: what each thing a driver may provide is called in a reason
_THINGS = {"metrics": "metrics", "events": "event log"}
#: why the router figures read from metrics are not available although the driver's metrics were scraped
METRIC_NAMES_CAUSE = "the router's metrics have none of the testbed's metric names (docs/metrics.md)"


def not_available(*causes: str) -> str:
    """The reason shown for a figure the run cannot give, from its causes."""
    return "not available: " + "; ".join(causes)


def unavailable(reason: str) -> dict:
    """What summary.json has in place of a section the run cannot have: ``{"available": false, "reason": ...}``,
    never an empty list or a zero."""
    return {"available": False, "reason": reason}


def unavailable_reason(section: Any) -> Optional[str]:
    """The reason of a section marked :func:`unavailable`, else None."""
    if isinstance(section, dict) and section.get("available") is False:
        return str(section.get("reason") or "not available in this run")
    return None


@dataclass(frozen=True)
class RecordedDriver(DriverRecord):
    """The manifest's record (``runfolder.records.DriverRecord``) with what the analysis makes of it."""

    @property
    def frames_decodable(self) -> bool:
        """Our wire format: the captures decode as router frames (``spark.pcap``); any other is searched for
        the traffic header (``spark.streamsearch``)."""
        return self.wire == "testbed"

    @property
    def observation_method(self) -> str:
        return "router-frames" if self.frames_decodable else "header-search"

    def lacks(self, *whats: str) -> Optional[str]:
        """The cause, for those of ``whats`` ("metrics", "events") the driver does not provide (None: it
        provides them all): "router driver zenoh provides no metrics and no event log"."""
        missing = [_THINGS[w] for w in whats if not getattr(self, w)]
        return f"router driver {self.name} provides no {' and no '.join(missing)}" if missing else None

    def reason(self, *whats: str) -> Optional[str]:
        """None when the driver provides every one of ``whats``, else why not."""
        cause = self.lacks(*whats)
        return not_available(cause) if cause else None

    def as_dict(self) -> dict:
        return asdict(self)


TESTBED_DRIVER = RecordedDriver(recorded=False)


def read_router_driver(manifest: Optional[dict]) -> Tuple[RecordedDriver, List[str]]:
    """The run's driver and the problems reading it (``DriverRecord.from_manifest``)."""
    return RecordedDriver.from_manifest(manifest)


@dataclass(frozen=True)
class Availability:
    """What of the router's own figures a run can give: its driver's, less the metrics when the router's
    metrics (scraped) carry none of the testbed's metric names."""

    driver: RecordedDriver = TESTBED_DRIVER
    metrics_unnamed: bool = False

    def reason(self, *whats: str) -> Optional[str]:
        """None when the run gives every one of ``whats`` ("metrics", "events"), else why not: every cause."""
        causes = []
        lacking = [w for w in whats if not getattr(self.driver, w)]
        for what in whats:
            if what in lacking:
                if what == lacking[0]:
                    causes.append(self.driver.lacks(*lacking))
            elif what == "metrics" and self.metrics_unnamed:
                causes.append(METRIC_NAMES_CAUSE)
        return not_available(*causes) if causes else None
