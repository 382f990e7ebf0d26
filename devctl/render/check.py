"""`devctl check` for people (a table) and for CI (JUnit XML, GitHub annotations)."""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from typing import overload

from devctl.model.check import PHASES, CheckReport, CheckStatus, split_check_name

_LABEL = {CheckStatus.PASS: "pass", CheckStatus.WARN: "WARN", CheckStatus.FAIL: "FAIL", CheckStatus.SKIP: "skip"}
# The shared probes of CheckReport.phases_s, as people call them.
_PHASE_LABEL = {
    "inventory": "backend probe",
    "environment": "package scan",
    "health": "health probe",
    "bench-memory": "memory bench",
    "bench-matmul": "matmul bench",
    "bench-collective": "collective bench",
    "nvml": "NVML",
    "hardware": "hardware discovery",
    "host": "host facts",
}


# ---- check: table -------------------------------------------------------------------------------


def render_check(report: CheckReport) -> None:
    """One line per check (and per process, with --distributed); what does not fit the terminal goes on
    lines of its own under its row (render.console.table_lines), then the shared probes' times and the verdict."""
    from rich.text import Text

    from devctl.render.console import Column, out, print_lines, say, table_lines, wrap

    cluster = _is_cluster(report)
    columns = [Column("check")]
    if cluster:
        # The host gives way last of all (one host: a line above the table); the process index never does.
        columns += [Column("host", priority=1), Column("process", justify="right", short="proc")]
    columns += [
        Column("status"),
        Column("time", justify="right"),
        Column("result", priority=2),
        Column("what to do", priority=3),
    ]
    rows = []
    for r in report.checks:
        check, host, index = split_check_name(r.name)
        where = [host or "?", index] if cluster else []
        rows.append([check, *where, _LABEL[r.status], f"{r.duration_s:.2f} s", r.message, r.remediation or "-"])
    print_lines(table_lines(columns, rows))
    phases = phases_line(report, unit_space=_KEEP)
    if phases:  # wrapped between words, never between a figure and its unit
        print_lines([Text(line.replace(_KEEP, " ")) for line in wrap(phases, out().width, hang="  ")])
    say(summary_line(report))


def _is_cluster(report: CheckReport) -> bool:
    return any(split_check_name(r.name)[1] is not None for r in report.checks)


# Holds a figure and its unit on one line when the phases line is wrapped (a character no text here has).
_KEEP = "\ue000"


def phases_line(report: CheckReport, unit_space: str = " ") -> str | None:
    """The shared probes' times, said apart from the checks' own: each ran once, for every check that read it."""
    order: dict[str, int] = {name: i for i, name in enumerate(PHASES)}
    timed = sorted(report.phases_s.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
    if not timed:
        return None
    where = ", the slowest process's" if _is_cluster(report) else ""
    shown = ", ".join(f"{_PHASE_LABEL.get(name, name)} {seconds:.2f}{unit_space}s" for name, seconds in timed)
    return f"shared probes{where} (each run once for the checks that read it; not in their times): {shown}"


def csv_rows(report: CheckReport) -> tuple[list[str], list[list]]:
    """One row per check (per process with --distributed): raw seconds, the host and process index apart."""
    header = ["check", "hostname", "process_index", "status", "duration_s", "message", "remediation"]
    rows: list[list] = []
    for r in report.checks:
        check, host, index = split_check_name(r.name)
        rows.append([check, host or report.hostname, index, r.status.value, r.duration_s, r.message, r.remediation])
    return header, rows


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
    if report.phases_s:
        # A case's time is the check's own; the shared probes it read are said once, for the suite.
        properties = ET.SubElement(suite, "properties")
        for name, seconds in report.phases_s.items():
            ET.SubElement(properties, "property", name=f"devctl.shared_probe_s.{name}", value=f"{seconds:.3f}")
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
