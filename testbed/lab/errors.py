"""The error of the lab lifecycle: bad input or an environment problem that stops a lab."""
from __future__ import annotations


class LabError(RuntimeError):
    """Bad input or an environment problem that stops a lab from being built."""
