"""junit.xml: one test case per expectation, and one for the clock check (skipped when not measured)."""
from __future__ import annotations

from typing import List
from xml.etree import ElementTree as ET

from .expectations import CLOCK_METRIC, Verdict

__all__ = ["junit_xml"]


def junit_xml(verdicts: List[Verdict], suite: str, problems: List[str] = ()) -> str:
    failures = sum(1 for v in verdicts if not v.passed)
    skipped = sum(1 for v in verdicts if v.passed and v.skipped)
    ts = ET.Element("testsuite", name=suite, tests=str(len(verdicts)), failures=str(failures), errors="0",
                    skipped=str(skipped))
    for v in verdicts:
        clock = v.metric == CLOCK_METRIC
        case = ET.SubElement(ts, "testcase", classname=f"{suite}.{'clocks' if clock else 'expect'}",
                             name=v.expectation)
        if v.passed and v.skipped:
            ET.SubElement(case, "skipped", message=v.message)
        elif not v.passed:
            f = ET.SubElement(case, "failure", message=v.message, type="not measured" if v.measured is None
                              else "clock error too large" if clock else "expectation failed")
            f.text = v.message
        else:
            out = ET.SubElement(case, "system-out")
            out.text = v.message
    if problems:
        err = ET.SubElement(ts, "system-err")
        err.text = "\n".join(problems)
    suites = ET.Element("testsuites", name="testbed", tests=str(len(verdicts)), failures=str(failures),
                        skipped=str(skipped))
    suites.append(ts)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
