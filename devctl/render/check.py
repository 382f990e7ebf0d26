"""`devctl check` for people (a table) and for CI (JUnit XML, GitHub annotations)."""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from typing import overload

from devctl.model.check import ASKED_BY, PHASES, CheckReport, CheckResult, CheckStatus, split_check_name

_LABEL = {CheckStatus.PASS: "pass", CheckStatus.WARN: "WARN", CheckStatus.FAIL: "FAIL", CheckStatus.SKIP: "skip"}
# Colour where the console has it (a terminal without NO_COLOR); the labels' case tells them apart without.
_STYLE = {CheckStatus.PASS: "green", CheckStatus.WARN: "yellow", CheckStatus.FAIL: "bold red", CheckStatus.SKIP: "dim"}
_VERDICT_STYLE = {"pass": "bold green", "warn": "bold yellow", "fail": "bold red"}
# The shared probes of CheckReport.phases_s, as people call them (after "shared probes:").
_PHASE_LABEL = {
    "busy": "busy-ness",
    "inventory": "backends",
    "environment": "packages",
    "health": "health",
    "bench-memory": "memory bench",
    "bench-matmul": "matmul bench",
    "bench-collective": "collective bench",
    "nvml": "NVML",
    "hardware": "hardware",
    "host": "host facts",
}
# A view taller than this (a terminal's classic height) says its verdict again at its end, where the eye lands.
SCREEN_ROWS = 24
# Below this many cells for the result, it goes on lines of its own under its row rather than in a sliver.
_MIN_RESULT_CELLS = 24
_REMEDY_LABEL = "what to do: "


# ---- check: table -------------------------------------------------------------------------------


def render_check(report: CheckReport) -> None:
    from devctl.render.console import out, print_lines

    print_lines(check_lines(report, out().width))


def check_lines(report: CheckReport, width: int) -> list:
    """The view, `width` cells wide (off a terminal: unbounded, one line per row). Issue 24 shaped it to fit a
    24-row terminal for a default run:

    - the verdict first, one line (again at the end when the view is taller than SCREEN_ROWS);
    - one row per check: status (coloured), the check's own time only where it is meaningful (shared probes
      are said once below), and the result, wrapped under its own column rather than pushed to lines of its
      own; a `what to do` column only when some row has a remedy and it fits beside the results, else the
      remedy under its row's result;
    - a check that failed or skipped because another failed (caused_by: no backend, so no device) sits under
      that one, indented, saying so, rather than as a FAIL row of its own;
    - the benchmarks nobody asked for, one line; the shared probes' times, one line.
    JSON, CSV and JUnit keep every check with its own status and message."""
    from rich.text import Text

    from devctl.render.console import wrap
    from devctl.text import printable

    cluster = _is_cluster(report)
    asked_not = not_asked(report)
    shown = [r for r in report.checks if r.name not in asked_not]
    tree = _under_causes(shown)
    timed = any(_own_time(r) for _, r in tree)

    headers = ["check", *(["host", "process"] if cluster else []), "status", *(["time"] if timed else [])]
    right = {"process", "proc", "time"}
    left_cells: list[list[str]] = []
    results: list[str] = []
    remedies: list[str] = []
    statuses: list[CheckStatus] = []
    for depth, r in tree:
        check, host, index = split_check_name(r.name)
        cells = ["  " * depth + check]
        if cluster:
            cells += [host or "?", "" if index is None else str(index)]
        cells.append(_LABEL[r.status])
        if timed:
            cells.append(_own_time(r))
        left_cells.append([printable(c) for c in cells])
        statuses.append(r.status)
        if depth and r.caused_by is not None:
            results.append(f"because {split_check_name(r.caused_by)[0]} failed")
            remedies.append("")
        else:
            results.append(printable(r.message))
            remedies.append(printable(r.remediation or ""))

    from rich.cells import cell_len

    widths = [max([cell_len(h), *(cell_len(row[i]) for row in left_cells)]) for i, h in enumerate(headers)]
    if cluster and width - sum(widths) - 2 * len(widths) < 2 * _MIN_RESULT_CELLS:
        headers[2] = "proc"  # three cells more for the results
        widths[2] = max([cell_len("proc"), *(cell_len(row[2]) for row in left_cells)])
    # A terminal too narrow even for the short columns: the time goes, then the host and process move into the result.
    for gone in ("time", "host"):
        if sum(widths) + 2 * (len(widths) - 1) <= width or gone not in headers:
            continue
        at = headers.index(gone)
        if gone == "host":
            results = [f"{cells[at]} process {cells[at + 1]}: {result}" for cells, result in zip(left_cells, results)]
        span = 2 if gone == "host" else 1
        del headers[at : at + span], widths[at : at + span]
        for cells in left_cells:
            del cells[at : at + span]
    start = sum(widths) + 2 * len(widths)
    longest_result = max([cell_len("result"), *map(cell_len, results)])
    longest_remedy = max([0, *map(cell_len, remedies)])
    beside = longest_remedy > 0 and start + longest_result + 2 + max(longest_remedy, cell_len("what to do")) <= width
    room = width - start
    under = room < _MIN_RESULT_CELLS  # a narrow terminal: results and remedies on lines of their own

    def left(values: list[str], status: CheckStatus | None = None) -> Text:
        line = Text()
        for i, value in enumerate(values):
            gap = " " * (widths[i] - cell_len(value))
            cell = gap + value if headers[i] in right else value + gap
            if status is not None and headers[i] == "status":
                line.append(value, style=_STYLE[status])
                line.append(gap)
            else:
                line.append(cell)
            line.append("  ")
        return line

    lines: list = [_verdict_text(report, width)]
    header = left(headers)
    header.append("result" if not under else "")
    if beside:
        header.append(" " * (longest_result - cell_len("result") + 2) + "what to do")
    header.stylize("bold")
    header.rstrip()
    lines.append(header)
    pad = " " * start
    for values, status, result, remedy in zip(left_cells, statuses, results, remedies):
        row = left(values, status)
        if beside:
            row.append(result + (" " * (longest_result - cell_len(result) + 2) + remedy if remedy else ""))
            row.rstrip()
            lines.append(row)
            continue
        if under:
            row.rstrip()
            lines.append(row)
            lines += [Text(line) for line in wrap(result, width, indent="    ")]
            if remedy:
                lines += [Text(line) for line in wrap(remedy, width, indent="    " + _REMEDY_LABEL, hang="      ")]
            continue
        first, *rest = wrap(result, room) or [""]
        row.append(first)
        row.rstrip()
        lines.append(row)
        lines += [Text(pad + line) for line in rest]
        if remedy:
            lines += [Text(pad + line) for line in wrap(remedy, room, indent=_REMEDY_LABEL, hang="  ")]
    if asked_not:
        names = list(dict.fromkeys(split_check_name(name)[0] for name in asked_not))
        flags = [ASKED_BY[n][1] for n in names]
        text = f"not asked: {', '.join(names)} (set {_or(flags)} to run {'it' if len(names) == 1 else 'them'})"
        lines += [Text(line) for line in wrap(text, width, hang="  ")]
    phases = phases_line(report, unit_space=_KEEP, timed=timed)
    if phases:  # wrapped between words, never between a figure and its unit
        lines += [Text(line.replace(_KEEP, " ")) for line in wrap(phases, width, hang="  ")]
    if len(lines) > SCREEN_ROWS:
        lines.append(_verdict_text(report, width))
    return lines


def _root(name: str, report: CheckReport) -> str:
    """The check at the start of `name`'s chain of causes (env, for devices because backends because env)."""
    cause_of = {r.name: r.caused_by for r in report.checks}
    seen = {name}
    while (cause := cause_of.get(name)) is not None and cause not in seen:
        name = cause
        seen.add(name)
    return name


def _verdict_text(report: CheckReport, width: int):
    """The verdict line, its first word in the verdict's colour."""
    from rich.text import Text

    from devctl.render.console import wrap

    text = Text("\n".join(wrap(summary_line(report), width, hang="  ")))
    text.stylize(_VERDICT_STYLE[report.status], 0, text.plain.index(":"))
    return text


def _or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _own_time(r: CheckResult) -> str:
    """A check's own time where it means something: its work here, without the shared probes it read. Most checks
    only read those, and take well under a hundredth of a second: "0.00 s" would say nothing, so nothing is said."""
    return f"{r.duration_s:.2f} s" if r.duration_s >= 0.005 else ""


def not_asked(report: CheckReport) -> list[str]:
    """Names of the skipped checks that run only when their expectation is set, and it was not (ASKED_BY)."""
    return [
        r.name
        for r in report.checks
        if r.status is CheckStatus.SKIP
        and split_check_name(r.name)[0] in ASKED_BY
        and not _asked(report.expectations, split_check_name(r.name)[0])
    ]


def _asked(expectations, check: str) -> bool:
    """Whether an expectation that runs `check` is set (0% is an expectation: only None and False are not)."""
    return any((value := getattr(expectations, f)) is not None and value is not False for f in ASKED_BY[check][0])


def _under_causes(results: list[CheckResult]) -> list[tuple[int, CheckResult]]:
    """Each result with its depth, every dependant right under the result it follows from (caused_by), in the
    report's order otherwise; a cause not in `results` leaves its dependant a row of its own."""
    names = {r.name for r in results}
    children: dict[str, list[CheckResult]] = {}
    roots: list[CheckResult] = []
    for r in results:
        if r.caused_by is not None and r.caused_by in names and r.caused_by != r.name:
            children.setdefault(r.caused_by, []).append(r)
        else:
            roots.append(r)
    ordered: list[tuple[int, CheckResult]] = []
    seen: set[str] = set()

    def visit(r: CheckResult, depth: int) -> None:
        if r.name in seen:
            return
        seen.add(r.name)
        ordered.append((depth, r))
        for child in children.get(r.name, []):
            visit(child, depth + 1)

    for r in roots:
        visit(r, 0)
    for r in results:  # a cycle of causes has no root: shown as rows of their own
        visit(r, 0)
    return ordered


def _is_cluster(report: CheckReport) -> bool:
    return any(split_check_name(r.name)[1] is not None for r in report.checks)


# Holds a figure and its unit on one line when the phases line is wrapped (a character no text here has).
_KEEP = "\ue000"


def phases_line(report: CheckReport, unit_space: str = " ", timed: bool = True) -> str | None:
    """The shared probes' times, said apart from the checks' own: each ran once, for every check that read it.
    A probe that took under a hundredth of a second is left out (its "0.00 s" says nothing)."""
    order: dict[str, int] = {name: i for i, name in enumerate(PHASES)}
    timed_phases = sorted(
        ((name, s) for name, s in report.phases_s.items() if s >= 0.005), key=lambda kv: (order.get(kv[0], len(order)), kv[0])
    )
    if not timed_phases:
        return None
    where = ", the slowest process's" if _is_cluster(report) else ""
    shown = ", ".join(f"{_PHASE_LABEL.get(name, name)} {seconds:.2f}{unit_space}s" for name, seconds in timed_phases)
    apart = " (not in the checks' times)" if timed else ""
    return f"shared probes{where}: {shown}{apart}"


def csv_rows(report: CheckReport) -> tuple[list[str], list[list]]:
    """One row per check (per process with --distributed): raw seconds, the host and process index apart."""
    header = ["check", "hostname", "process_index", "status", "duration_s", "message", "remediation", "caused_by"]
    rows: list[list] = []
    for r in report.checks:
        check, host, index = split_check_name(r.name)
        cause = split_check_name(r.caused_by)[0] if r.caused_by else None
        rows.append([check, host or report.hostname, index, r.status.value, r.duration_s, r.message, r.remediation, cause])
    return header, rows


def summary_line(report: CheckReport) -> str:
    """The verdict and the counts of every check (as JSON and JUnit count them): "FAIL: 4 passed, 6 failed
    (4 because backends failed), 6 skipped in 1.9 s"."""
    counts = {s: sum(1 for r in report.checks if r.status is s) for s in CheckStatus}
    failed = f"{counts[CheckStatus.FAIL]} failed"
    causes = [r.caused_by for r in report.checks if r.status is CheckStatus.FAIL and r.caused_by is not None]
    if causes:
        named = {split_check_name(_root(c, report))[0] for c in causes}
        cause = f"{named.pop()} failed" if len(named) == 1 else "another check failed"
        failed += f" ({len(causes)} because {cause})"
    parts = [f"{counts[CheckStatus.PASS]} passed", *([failed] if counts[CheckStatus.FAIL] else [])]
    if counts[CheckStatus.WARN]:
        parts.append(f"{counts[CheckStatus.WARN]} warning{'' if counts[CheckStatus.WARN] == 1 else 's'}")
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
            if r.caused_by:  # the case a reader should fix first
                failure.text += f"\ncaused by: {r.caused_by} failing"
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
        text = r.message + (f" (because {r.caused_by} failed)" if r.caused_by else "") + (f" | fix: {r.remediation}" if r.remediation else "")
        stream.write(f"::{level} title={_escape_property(f'devctl check: {r.name}')}::{_escape_data(text)}\n")
    stream.flush()


def in_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _escape_data(text: str) -> str:
    # github.com/actions/toolkit packages/core/src/command.ts escapeData / escapeProperty
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
