"""JUnit XML for CI systems (Jenkins, GitLab, GitHub test reporters): the subset every one of them reads.

A document is ``<testsuites>`` of ``<testsuite name tests failures skipped time>`` of
``<testcase classname name time>``, each optionally holding one ``<failure message>`` (its text: the
details, a reproduction line) or ``<skipped message>``.  pytest's own ``--junitxml`` writes the same
shape, so ``tools/gate`` nests pytest's suites beside its own.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

from tools.cli import UsageError


def testcase(classname: str, name: str, seconds: float = 0.0, failure: tuple[str, str] | None = None,
             skipped: str | None = None) -> ET.Element:
    """One test case; ``failure`` is (one-line message, details)."""
    case = ET.Element("testcase", classname=classname, name=name, time=f"{seconds:.3f}")
    if failure is not None:
        message, details = failure
        ET.SubElement(case, "failure", message=message).text = details
    elif skipped is not None:
        ET.SubElement(case, "skipped", message=skipped)
    return case


def testsuite(name: str, cases: list[ET.Element]) -> ET.Element:
    suite = ET.Element("testsuite", name=name, tests=str(len(cases)),
                       failures=str(sum(case.find("failure") is not None for case in cases)),
                       errors="0", skipped=str(sum(case.find("skipped") is not None for case in cases)),
                       time=f"{sum(float(case.get('time', 0)) for case in cases):.3f}")
    suite.extend(cases)
    return suite


def read_suites(path) -> list[ET.Element]:
    """The ``<testsuite>`` elements of a JUnit file (pytest writes ``<testsuites>`` around one)."""
    root = ET.parse(path).getroot()
    return [root] if root.tag == "testsuite" else list(root.iter("testsuite"))


def write(path: str, suites: list[ET.Element], flag: str = "--junit") -> None:
    root = ET.Element("testsuites")
    root.extend(suites)
    ET.indent(root)
    try:
        ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    except OSError as error:
        raise UsageError(f"{flag}: cannot write {path}: {error.strerror}") from None
