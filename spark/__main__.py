"""`python -m spark analyze RUN_DIR [--master URL | --remote sc://HOST:PORT] [--driver-memory SIZE] [--window DURATION]` / `python -m spark check RUN_DIR ...`
(for spark-submit on a cluster, where the testbed CLI is not installed)."""
from __future__ import annotations

import argparse
import sys

from .cli import analyze_command, check_command


def _share(text: str) -> float:
    """``15%`` -> 0.15 (the topology's spelling of clock_error_max_share)."""
    from runfolder.expectations import ExpectationError

    from .expectations import parse_max_share

    try:
        return parse_max_share(text, "--clock-error-max-share")
    except ExpectationError as err:
        raise argparse.ArgumentTypeError(str(err).split(": ", 2)[-1]) from None


def _seconds(text: str) -> float:
    """``500ms``, ``2s`` or a bare number of seconds (the testbed CLI's duration options)."""
    from runfolder.units import UnitError, parse_seconds

    try:
        return parse_seconds(text)
    except UnitError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark", description="testbed results analysis")
    sub = parser.add_subparsers(dest="verb", required=True)
    a = sub.add_parser("analyze", help="results folder -> parquet/ and report/")
    a.add_argument("run_dir")
    where = a.add_mutually_exclusive_group()
    where.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    where.add_argument("--remote", default=None, metavar="sc://HOST:PORT",
                       help="a Spark Connect server to run the analysis on, instead of a master")
    a.add_argument("--driver-memory", default=None, metavar="SIZE",
                   help="spark.driver.memory of the Spark started here, e.g. 4g (default Spark's, 1g)")
    a.add_argument("--window", type=_seconds, default=1.0, metavar="DURATION",
                   help="time-series window: 1s, 500ms, or a bare number of seconds (default 1s)")
    share_help = ("the clock check's limit: the share of a flow's latency p50 its clock error may reach, e.g. "
                  "15%% (default: the topology's clock_error_max_share, else 10%%)")
    a.add_argument("--clock-error-max-share", type=_share, default=None, metavar="PERCENT", help=share_help)
    c = sub.add_parser("check", help="evaluate expectations against report/summary.json")
    c.add_argument("run_dir")
    c.add_argument("--expect", default=None, help="expectations file (YAML list or {expect: [...]})")
    c.add_argument("--junit", default=None, help="also write junit.xml here")
    c.add_argument("--clock-error-max-share", type=_share, default=None, metavar="PERCENT", help=share_help)
    args = parser.parse_args(argv)
    if args.verb == "analyze":
        return analyze_command(args.run_dir, args.master, args.window, args.clock_error_max_share,
                               remote=args.remote, driver_memory=args.driver_memory)
    return check_command(args.run_dir, args.expect, args.junit, args.clock_error_max_share)


if __name__ == "__main__":
    sys.exit(main())
