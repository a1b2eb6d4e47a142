"""The results folder as a package both sides import: the run that writes it (testbed) and the
analysis that reads it (spark), plus the traffic processes that read their plans from it.

Standard library only (and ``router``: priority names, key expressions, query consolidations): it is
shipped to the nodes in the deploy bundle and to Spark executors, and imports neither ``testbed`` nor
``spark``. docs/architecture.md, "The results folder package", lists its modules.
"""
from __future__ import annotations
