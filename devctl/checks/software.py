"""Checks of the installed software and settings: versions, plugins, environment variables."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from devctl.checks.verdict import Verdict, failed, join, passed, warned
from devctl.model import to_jsonable
from devctl.model.plugins import PluginStatus

if TYPE_CHECKING:
    # collect/ runs the checks and hands each its Context: named here for the checker only (no runtime import upward).
    from devctl.collect.check_context import Context

# A plugin module without a library beside it may still find one in initialize(): only its failure counts.
_NOT_A_FAILURE = (PluginStatus.OK, PluginStatus.NO_LIBRARY)
# Every released XLA speaks PJRT C API major 0: the rule applied when jaxlib's own version could not be asked.
FRAMEWORK_PJRT_MAJOR = 0


def check_versions(ctx: Context) -> Verdict:
    env = ctx.environment()
    versions = {p.name: p.version for p in env.packages}
    stack = ", ".join(f"{p.name} {p.version}" for p in env.packages if p.role in ("jax", "jaxlib", "plugin", "pjrt", "libtpu") and p.version)
    errors = [f for f in env.findings if f.severity == "error"]
    warnings = [f for f in env.findings if f.severity != "error"]
    details = {"packages": versions, "findings": [f.message for f in env.findings]}
    pjrt = {p.name: str(p.pjrt_api_version) for p in env.packages if p.pjrt_api_version is not None}
    if pjrt:
        details["pjrt_api_versions"] = pjrt  # jaxlib's own beside each plugin library's
    fix = env.stack_fix
    if fix is not None:  # one command for every skew: each finding's remediation is this command
        details["fix"] = {"command": fix.command, "pip": fix.pip, "changes": [f"{c.name} {c.installed or '(not installed)'} -> {c.target}" for c in fix.changes]}
    found = errors + warnings
    if not found:
        return passed(f"{stack or 'jax and jaxlib'}: consistent", **details)
    # The one rule (devctl.checks.diagnosis.severity_of): fail where JAX fails, warn where it leaves this machine's
    # accelerator unused, else JAX works on what is here and the skew is said without failing the run.
    inv = ctx.inventory()
    outcome = inv.jax_outcome
    said, remedy = join([f.message for f in found], 2), found[0].remediation
    if outcome is None or outcome.fails:
        return failed(said, remedy, **details) if errors else warned(said, remedy, **details)
    if inv.unused_accelerators:
        return warned(said, remedy, **details)
    return passed(f"JAX works on what is here; {said}", remedy=remedy, **details)


def check_plugins(ctx: Context) -> Verdict:
    inv = ctx.inventory()
    # A plugin whose import or initialize() failed in the backend probe is a backend row naming the plugin.
    broken_init = {b.platform: b for b in inv.backends if b.plugin}
    problems: list[str] = []
    remedies: list[str] = []
    codes: list[str | None] = []  # the finding code of each remedy: list's and doctor's for the same row
    data: list[list] = []  # each remedy as data (model.remedy), where it is commands
    names: list[str] = []
    for p in inv.plugins:
        names.append(p.name)
        row = broken_init.pop(p.name, None) or broken_init.pop(p.module or "", None)
        if row is not None:
            problems.append(f"{p.name}: {row.status.value}: {row.error}")
            remedies.append(row.hint or f"reinstall or uninstall {p.distribution or p.module or p.name}")
            codes.append(row.code)
            data.append(to_jsonable(row.remedies) if row.hint else [])
        elif is_plugin_failure(p):
            problems.append(f"{p.name}: {p.status.value}: {p.error}")
            remedies.append(_plugin_remedy(p))
            codes.append(None)
            data.append([])
        elif pjrt_refused(p):
            problems.append(f"{p.name}: {pjrt_refusal(p)}")
            remedies.append(pjrt_remedy(p))
            codes.append(None)
            data.append([])
    for row in broken_init.values():  # a failing plugin discovery did not list (entry point only seen by JAX)
        names.append(row.platform)
        problems.append(f"{row.platform}: {row.status.value}: {row.error}")
        remedies.append(row.hint or "reinstall or uninstall it")
        codes.append(row.code)
        data.append(to_jsonable(row.remedies) if row.hint else [])
    details: dict[str, Any] = {"plugins": names, "problems": problems}
    if problems:
        details["remedies"] = data[0]
        # The one rule (devctl.checks.diagnosis.severity_of): a failure when jax.devices() fails, a warning when
        # JAX works but leaves this machine's accelerator unused, else JAX goes on without them (info).
        outcome = inv.jax_outcome
        if outcome is None or outcome.fails:
            return failed(join(problems, 2), remedies[0], code=codes[0], **details)
        if inv.unused_accelerators:
            return warned(join(problems, 2), remedies[0], code=codes[0], **details)
        return passed(f"JAX works without {join(problems, 2)}", code=codes[0], remedy=remedies[0], **details)
    if not names:
        return passed("no JAX plugins installed: nothing to load beyond jaxlib's own CPU backend", **details)
    return passed(f"{len(names)} plugin(s) load: {', '.join(names)}", **details)


def is_plugin_failure(p) -> bool:
    """Discovery or the library probe says this plugin cannot load (its absence of a library alone is no failure)."""
    return p.status not in _NOT_A_FAILURE


def pjrt_refused(p) -> bool:
    """jaxlib's plugin check refuses this library's PJRT C API version (xla/pjrt/pjrt_api.cc). Without jaxlib's
    own version (it could not be asked), only a major other than every released XLA's counts."""
    accepted = p.pjrt_accepted
    if accepted is not None:
        return not accepted
    return p.pjrt_api_version is not None and p.pjrt_api_version.major != FRAMEWORK_PJRT_MAJOR


def pjrt_refusal(p) -> str:
    framework = p.framework_pjrt_api_version
    if p.pjrt_accepted is False:
        return f"jaxlib (PJRT C API {framework}) refuses its library (PJRT C API {p.pjrt_api_version}): {p.pjrt_check}"
    return f"its library speaks PJRT C API {p.pjrt_api_version}, every released jaxlib speaks major {FRAMEWORK_PJRT_MAJOR}"


def pjrt_remedy(p) -> str:
    """Strict mode refusing a version compatibility mode takes: the setting is the cause, not the package."""
    if p.pjrt_refused_by_setting:
        return (
            "unset ENABLE_PJRT_COMPATIBILITY (or set it to true): compatibility mode, jaxlib's default, takes this "
            f"library; or {_plugin_remedy(p)}"
        )
    return _plugin_remedy(p)


def _plugin_remedy(p) -> str:
    if p.source.value == "env":
        return f"fix or remove the {p.name} entry of PJRT_NAMES_AND_LIBRARY_PATHS"
    if p.distribution:
        return f"reinstall {p.distribution} at the version of jaxlib, or uninstall it"
    return f"reinstall or remove the plugin module {p.module or p.name}"


def check_env(ctx: Context) -> Verdict:
    from devctl.checks.advice import with_xla_flags_verdict
    from devctl.discovery.envvars import assess_env, jaxlib_rules

    variables = with_xla_flags_verdict(assess_env(), ctx.environment().xla_flags_refused, os.environ)
    errors = [v for v in variables if v.severity == "error"]
    warnings = [v for v in variables if v.severity == "warning"]
    details = {
        "set": {v.name: v.value for v in variables},
        "problems": {v.name: v.problem for v in errors + warnings},
        "errors": [v.name for v in errors],
        # Each fix as an environment change, so a script (and the oracle test) can apply it.
        "fixes": {v.name: v.fix.to_json() for v in errors + warnings if v.fix is not None},
        "jaxlib_rules": f"{jaxlib_rules().source}: {jaxlib_rules().origin}",
    }
    if errors:
        return failed(join([f"{v.name}={v.value!r}: {v.problem}" for v in errors], 2), errors[0].remedy, **details)
    if warnings:
        return warned(join([f"{v.name}={v.value!r}: {v.problem}" for v in warnings], 2), warnings[0].remedy, **details)
    if not variables:
        return passed("no JAX, XLA or TPU variables set", **details)
    return passed(f"{len(variables)} relevant variable(s) set, none with a problem: {', '.join(v.name for v in variables)}", **details)
