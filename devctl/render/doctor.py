"""`devctl doctor` for people: what devctl sees, what JAX will use, and each problem in plain words."""

from __future__ import annotations

from devctl.model.check import CheckResult, CheckStatus
from devctl.model.doctor import DoctorReport
from devctl.render.console import out
from devctl.text import printable


def render_doctor(report: DoctorReport) -> None:
    console = out()
    say = lambda text="", style=None: console.print(printable(text), markup=False, highlight=False, style=style)  # noqa: E731
    say("What devctl sees", style="bold")
    for line in report.overview.sees:
        say(f"  {line}")
    say()
    say("What JAX will use", style="bold")
    for line in report.overview.jax_will_use:
        say(f"  {line}")
    say()
    if not report.findings:
        say("No problems found.", style="bold green")
    else:
        say(f"Problems found: {len(report.findings)}", style="bold red")
        for i, f in enumerate(report.findings, 1):
            number = f"#{f.catalogue_number} " if f.catalogue_number else ""
            say()
            say(f"{i}. {f.title}  [{number}{f.code}, {f.severity}]", style="bold")
            for e in f.evidence:
                say(f"   evidence: {e}")
            say(f"   cause:    {f.cause}")
            say(f"   fix:      {f.fix}")
            if f.references:
                say(f"   see:      {', '.join(f.references[:2])}")
    say()
    say(_checks_line(report.checks), style="dim")


def _checks_line(checks: list[CheckResult]) -> str:
    counts = {s: sum(1 for r in checks if r.status is s) for s in CheckStatus}
    text = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)
    return f"Checks run: {text} (devctl check shows each one)"
