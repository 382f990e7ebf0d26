"""`devctl env` as tables.

The versions are a two-column table. Version problems and environment variables are prose: where their
table fits the terminal one row a line (a pipe, a wide terminal) it is a table; where it does not, each is
a paragraph whose wrapped lines keep their hanging indent (`error    JAX plugin ...` / `         it is ...`,
`XLA_FLAGS=...` / `  XLA compiler and runtime flags`).
"""

from __future__ import annotations

from devctl.render.console import Column, fit_columns, print_table, say


def render_environment(rep) -> None:
    versions = [["python", f"{rep.python} ({rep.python_executable})"], ["os", rep.os], ["devctl", rep.devctl_version]]
    versions += [[p.name, _with_pjrt(p)] for p in rep.packages]
    for w in rep.cuda_wheels:
        versions.append([w.distribution, w.version + (f" ({w.verdict})" if w.verdict not in ("ok", "not checked") else "")])
    versions += [["nvidia driver", rep.nvidia_driver or "-"], ["cuda (driver supports)", rep.nvidia_cuda_driver_version or "-"]]
    columns = [Column("component"), Column("version", priority=1)]
    if _fits(columns, versions):
        print_table(columns, versions, title="versions")
    else:  # a long path or OS string: one line each, continued under the value
        say("versions")
        hang = " " * (max(len(name) for name, _ in versions) + 2)
        for name, value in versions:
            say(value, indent=name.ljust(len(hang)), hang=hang)

    if rep.findings:
        fix = rep.stack_fix
        rows = []
        for f in rep.findings:
            same = fix is not None and f.remediation == fix.command
            rows.append([f.severity, f.message, "the one fix below" if same else f.remediation or "-"])
        columns = [Column("severity"), Column("problem", priority=1), Column("fix", priority=2)]
        if _fits(columns, rows):
            print_table(columns, rows, title="version problems")
        else:
            say("version problems")
            hang = " " * (max(len(r[0]) for r in rows) + 2)
            for severity, problem, what in rows:
                say(problem, indent=severity.ljust(len(hang)), hang=hang)
                say(what, indent=f"{hang}fix: ", hang=hang + "     ")
        if fix is not None:
            say(f"one fix for all of them: {fix.command}", hang="  ")
            if fix.summary:
                say(fix.summary, indent="  ")

    title = "environment variables that change JAX's device behaviour"
    if not rep.env:
        say("No JAX-related environment variable is set.")
    else:
        columns = [Column("variable"), Column("value", priority=1), Column("meaning", priority=2), Column("problem", priority=3)]
        rows = [[e.name, e.value, e.meaning or "-", e.problem or ""] for e in rep.env]
        if _fits(columns, rows):
            print_table(columns, rows, title=title)
        else:
            say(title)
            for e in rep.env:
                say(f"{e.name}={e.value}", hang="    ")  # a long value breaks after a ',' or '/', never mid-name
                say(e.meaning or "-", indent="  ")
                if e.problem:
                    say(e.problem, indent="  problem: ", hang="           ")
    for note in rep.notes:
        say(note, hang="  ")


def _fits(columns: list[Column], rows: list[list[str]]) -> bool:
    """Whether the table fits the terminal one row a line with every column in it."""
    from devctl.render.console import out, stdout_is_terminal

    placement = fit_columns(columns, rows, out().width, boxed=stdout_is_terminal()).placement
    return all(p == "table" for p in placement)


def csv_rows(rep) -> tuple[list[str], list[list]]:
    """The environment variables that change JAX's device behaviour, one row each (versions and problems: --json)."""
    return ["variable", "value", "meaning", "problem"], [[e.name, e.value, e.meaning, e.problem] for e in rep.env]


def _with_pjrt(p) -> str:
    """A package's version, and beside jaxlib's and each plugin library's the PJRT C API version it speaks."""
    text = p.version or "not installed"
    v = p.pjrt_api_version
    if v is None:
        return text
    if p.role == "jaxlib":
        return f"{text}  (PJRT C API {v}, its own)"
    verdict = {True: "jaxlib accepts it", False: "jaxlib refuses it"}.get(p.pjrt_accepted, "jaxlib's verdict unknown")
    return f"{text}  (PJRT C API {v}: {verdict})"
