"""`devctl check` for people (a table) and for CI (JUnit XML, GitHub annotations)."""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from typing import overload

from devctl.model.check import CheckReport, CheckStatus
from devctl.render.console import data_table, out

_LABEL = {CheckStatus.PASS: "pass", CheckStatus.WARN: "WARN", CheckStatus.FAIL: "FAIL", CheckStatus.SKIP: "skip"}
_STYLE = {CheckStatus.PASS: "green", CheckStatus.WARN: "yellow", CheckStatus.FAIL: "bold red", CheckStatus.SKIP: "dim"}


# ---- check: table -------------------------------------------------------------------------------


def render_check(report: CheckReport) -> None:
    from rich.text import Text

    console = out()
    table = data_table()
    for col in ("check", "status", "time", "result", "what to do"):
        table.add_column(col, justify="right" if col == "time" else "left", overflow="fold")
    for r in report.checks:
        table.add_row(
            r.name,
            Text(_LABEL[r.status], style=_STYLE[r.status]),
            f"{r.duration_s:.2f} s",
            Text(r.message),
            Text(r.remediation or "-"),
        )
    console.print(table)
    console.print(summary_line(report), markup=False, highlight=False)


def summary_line(report: CheckReport) -> str:
    counts = {s: sum(1 for r in report.checks if r.status is s) for s in CheckStatus}
    parts = [f"{counts[CheckStatus.PASS]} passed", f"{counts[CheckStatus.FAIL]} failed"]
    if counts[CheckStatus.WARN]:
        parts.append(f"{counts[CheckStatus.WARN]} warning(s)")
    if counts[CheckStatus.SKIP]:
        parts.append(f"{counts[CheckStatus.SKIP]} skipped")
    verdict = {"pass": "PASS", "warn": "PASS with warnings", "fail": "FAIL"}[report.status]
    strict = " (--strict: warnings fail)" if report.strict else ""
    return f"{verdict}: {', '.join(parts)} in {report.elapsed_s:.1f} s{strict}"


@contextmanager
def progress(text: str):
    """A spinner on stderr while the checks run, only when stderr is a terminal; yields an update(text) function."""
    if not sys.stderr.isatty():
        yield lambda _text: None
        return
    from rich.text import Text

    from devctl.render.console import err

    # A status line's str is markup to rich's Spinner, whatever the console says.
    with err().status(Text(text)) as status:
        yield lambda new: status.update(Text(new))


# ---- check: JUnit XML -----------------------------------------------------------------------------


def junit_xml(report: CheckReport) -> str:
    """One <testcase> per check: failures as <failure>, skips as <skipped>, warnings in <system-out>.

    The shape Jenkins, GitLab and the GitHub test reporters read (the Ant JUnit schema).
    """
    import xml.etree.ElementTree as ET

    counts = {s: sum(1 for r in report.checks if r.status is s) for s in CheckStatus}
    report = _xml_safe(report)
    suites = ET.Element("testsuites", name="devctl check", tests=str(len(report.checks)), failures=str(counts[CheckStatus.FAIL]),
                        errors="0", skipped=str(counts[CheckStatus.SKIP]), time=f"{report.elapsed_s:.3f}")  # fmt: skip
    suite = ET.SubElement(
        suites, "testsuite",
        name="devctl check", hostname=report.hostname, tests=str(len(report.checks)),
        failures=str(counts[CheckStatus.FAIL]), errors="0", skipped=str(counts[CheckStatus.SKIP]),
        time=f"{report.elapsed_s:.3f}",
    )  # fmt: skip
    for r in report.checks:
        case = ET.SubElement(suite, "testcase", classname="devctl.check", name=r.name, time=f"{r.duration_s:.3f}")
        if r.status is CheckStatus.FAIL:
            failure = ET.SubElement(case, "failure", message=r.message, type="fail")
            failure.text = r.message + (f"\nremediation: {r.remediation}" if r.remediation else "")
        elif r.status is CheckStatus.SKIP:
            ET.SubElement(case, "skipped", message=r.message)
        else:
            system_out = ET.SubElement(case, "system-out")
            prefix = "warning: " if r.status is CheckStatus.WARN else ""
            system_out.text = prefix + r.message + (f"\nremediation: {r.remediation}" if r.remediation else "")
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


# XML 1.0 has no way to write these characters, escaped or not; ElementTree would write them raw and CI
# servers would reject the whole file. A message quoting a user's value (--device-kind '\x01') may hold one.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@overload
def _xml_text(text: str) -> str: ...
@overload
def _xml_text(text: None) -> None: ...
def _xml_text(text: str | None) -> str | None:
    return None if text is None else _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _xml_safe(report: CheckReport) -> CheckReport:
    from dataclasses import replace

    checks = [replace(r, name=_xml_text(r.name), message=_xml_text(r.message), remediation=_xml_text(r.remediation)) for r in report.checks]
    return replace(report, hostname=_xml_text(report.hostname), checks=checks)


# ---- check: GitHub Actions annotations --------------------------------------------------------------


def github_annotations(report: CheckReport, stream=None) -> None:
    """`::error` / `::warning` workflow commands on stderr, shown on the run's summary page."""
    stream = stream or sys.stderr
    for r in report.checks:
        level = {CheckStatus.FAIL: "error", CheckStatus.WARN: "warning"}.get(r.status)
        if level is None:
            continue
        text = r.message + (f" | fix: {r.remediation}" if r.remediation else "")
        stream.write(f"::{level} title={_escape_property(f'devctl check: {r.name}')}::{_escape_data(text)}\n")
    stream.flush()


def in_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _escape_data(text: str) -> str:
    # github.com/actions/toolkit packages/core/src/command.ts escapeData / escapeProperty
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
