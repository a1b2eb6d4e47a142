"""PySpark analysis of a results folder (docs/reports.md).

Entry points: ``spark.cli.analyze_command`` / ``spark.cli.check_command`` (what ``testbed analyze`` and
``testbed check`` call), ``python -m spark analyze|check``; the pieces: ``spark.pcap`` (capture decoder),
``spark.ingest`` (results folder -> Parquet), ``spark.latency``, ``spark.drops``, ``spark.reroutes``,
``spark.analyze`` (all of it -> summary), ``spark.report`` (report.html), ``spark.expectations`` and
``spark.junit`` (the verdict), ``spark.testing`` (hand-made results folders).
"""
