"""Traffic tools: the client library for the router protocol (``traffic.client``)."""
from .client import CongestionControl, Priority, Publisher, Sample, Session, Subscriber, connect

__all__ = ["connect", "Session", "Publisher", "Subscriber", "Sample", "Priority", "CongestionControl"]
