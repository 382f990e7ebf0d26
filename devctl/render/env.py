"""`devctl env` as tables."""

from __future__ import annotations

from devctl.render.console import data_table, out


def render_environment(rep) -> None:
    console = out()
    versions = data_table(title="versions")
    versions.add_column("component")
    versions.add_column("version")
    versions.add_row("python", f"{rep.python} ({rep.python_executable})")
    versions.add_row("os", rep.os)
    versions.add_row("devctl", rep.devctl_version)
    for p in rep.packages:
        versions.add_row(p.name, _with_pjrt(p))
    for w in rep.cuda_wheels:
        versions.add_row(w.distribution, w.version + (f" ({w.verdict})" if w.verdict not in ("ok", "not checked") else ""))
    versions.add_row("nvidia driver", rep.nvidia_driver or "-")
    versions.add_row("cuda (driver supports)", rep.nvidia_cuda_driver_version or "-")
    console.print(versions)

    if rep.findings:
        problems = data_table(title="version problems")
        for col in ("severity", "problem", "fix"):
            problems.add_column(col, overflow="fold")
        fix = rep.stack_fix
        for f in rep.findings:
            same = fix is not None and f.remediation == fix.command
            problems.add_row(f.severity, f.message, "the one fix below" if same else f.remediation or "-")
        console.print(problems)
        if fix is not None:
            console.print(f"one fix for all of them: {fix.command}", markup=False)
            if fix.summary:
                console.print(f"  {fix.summary}", markup=False)

    env = data_table(title="environment variables that change JAX's device behaviour")
    for col in ("variable", "value", "meaning", "problem"):
        env.add_column(col, overflow="fold")
    for e in rep.env:
        env.add_row(e.name, e.value, e.meaning or "-", e.problem or "")
    if rep.env:
        console.print(env)
    else:
        console.print("No JAX-related environment variable is set.", markup=False)
    for note in rep.notes:
        console.print(note, markup=False)


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
