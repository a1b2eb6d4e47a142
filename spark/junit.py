"""junit.xml: one test case per expectation."""
from __future__ import annotations

from typing import List
from xml.etree import ElementTree as ET

from .expectations import Verdict

__all__ = ["junit_xml"]


def junit_xml(verdicts: List[Verdict], suite: str, problems: List[str] = ()) -> str:
    failures = sum(1 for v in verdicts if not v.passed)
    ts = ET.Element("testsuite", name=suite, tests=str(len(verdicts)), failures=str(failures), errors="0",
                    skipped="0")
    for v in verdicts:
        case = ET.SubElement(ts, "testcase", classname=f"{suite}.expect", name=v.expectation)
        if not v.passed:
            f = ET.SubElement(case, "failure", message=v.message, type="not measured" if v.measured is None
                              else "expectation failed")
            f.text = v.message
        else:
            out = ET.SubElement(case, "system-out")
            out.text = v.message
    if problems:
        err = ET.SubElement(ts, "system-err")
        err.text = "\n".join(problems)
    suites = ET.Element("testsuites", name="testbed", tests=str(len(verdicts)), failures=str(failures))
    suites.append(ts)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
