"""`devctl doctor` for people: what devctl sees, what JAX will use, and each problem in plain words.

Every line is wrapped to the terminal between words, under its own label (`evidence:`, `fix:`), so a
command to run is never split from its line and nothing runs back to the left margin.
"""

from __future__ import annotations

from devctl.model.check import CheckResult, CheckStatus
from devctl.model.doctor import DoctorReport
from devctl.render.console import say

_LABEL = "   {:<10}"  # "   evidence: ", "   cause:    ": the text of every label starts in one column


def render_doctor(report: DoctorReport) -> None:
    say("What devctl sees", style="bold")
    for line in report.overview.sees:
        say(line, indent="  ", hang="    ")
    say("")
    say("What JAX will use", style="bold")
    for line in report.overview.jax_will_use:
        say(line, indent="  ", hang="    ")
    say("")
    problems = report.problems
    if not problems:
        say("No problems found.", style="bold green")
    else:
        say(f"Problems found: {len(problems)}", style="bold red")
    for i, f in enumerate(report.findings, 1):  # errors, then warnings, then info
        if f.severity == "info" and i == len(problems) + 1:
            say("")
            say("Notes: JAX works on what this machine has; change these only if you expected otherwise", style="bold")
        number = f"#{f.catalogue_number} " if f.catalogue_number else ""
        say("")
        say(f"{i}. {f.title}  [{number}{f.code}, {f.severity}]", hang="   ", style="bold")
        for e in f.evidence:
            _labelled("evidence:", e)
        _labelled("cause:", f.cause)
        _labelled("fix:", f.fix)
        if f.references:
            _labelled("see:", ", ".join(f.references[:2]))
    say("")
    say(_checks_line(report.checks), style="dim")


def _labelled(label: str, text: str) -> None:
    prefix = _LABEL.format(label) + " "
    say(text, indent=prefix, hang=" " * len(prefix))


def _checks_line(checks: list[CheckResult]) -> str:
    counts = {s: sum(1 for r in checks if r.status is s) for s in CheckStatus}
    text = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)
    return f"Checks run: {text} (devctl check shows each one)"
