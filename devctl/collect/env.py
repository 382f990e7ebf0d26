"""Assemble `devctl env`: versions of everything and the environment variables that matter, with no backend initialized."""

from __future__ import annotations

import os
import platform
import socket
import sys
import time

from devctl.model.env import SCHEMA, EnvFinding, EnvironmentReport, PackageVersion
from devctl.model.plugins import FrameworkPjrt
from devctl.version import __version__


def collect_environment(timeout_s: float = 20.0) -> EnvironmentReport:
    """Package metadata, NVML's driver version and os.environ, plus PJRT C API versions read in child processes
    (each plugin library dlopened without being initialized, jaxlib's own asked of its plugin check): safe while
    a job holds the TPU or the GPU."""
    from devctl.checks.advice import with_xla_flags_verdict
    from devctl.checks.cuda_driver import check_driver_vs_runtime
    from devctl.discovery.cuda_wheels import cuda_runtime_version, cuda_wheels
    from devctl.discovery.envvars import FALLBACK_RULES, assess_env, jaxlib_rules
    from devctl.discovery.nvml import nvml_report
    from devctl.discovery.versions import (
        check_versions,
        installed_packages,
        jaxlib_checks_plugin_versions,
        libtpu_pin,
        minimum_jaxlib_version,
        stack_fix,
    )

    packages, framework = _with_pjrt_versions(installed_packages(), timeout_s)
    jax_version = next((p.version for p in packages if p.name == "jax"), None)
    fix = stack_fix(packages)
    findings = check_versions(
        packages, minimum_jaxlib_version(), libtpu_pin(jax_version),
        fix=fix, plugin_check=jaxlib_checks_plugin_versions(), framework=framework,
    )  # fmt: skip
    skewed = fix is not None and any(f.remediation == fix.command for f in findings)
    wheels = cuda_wheels()
    nvml = nvml_report()
    notes = []
    driver = getattr(nvml, "driver_version", None)
    cuda_driver = nvml.cuda_driver_version_str
    if nvml.status != "ok":
        notes.append(f"NVML: {nvml.reason}")
    refused = _xla_flags_refused(timeout_s)
    rules = jaxlib_rules()
    if rules.source == FALLBACK_RULES.source:
        notes.append(f"environment variables judged by {rules.source}: {rules.origin}")
    for w in wheels:
        if w.verdict == "too old":
            findings.append(
                EnvFinding(
                    "error", [w.distribution],
                    f"{w.distribution} {w.version} is older than the {w.minimum} JAX requires ({w.minimum_source})",
                    f"pip install -U '{w.distribution}>={w.minimum}'",
                )
            )  # fmt: skip
        elif w.verdict == "too new":
            findings.append(
                EnvFinding(
                    "error", [w.distribution],
                    f"{w.distribution} {w.version} is newer than the installed JAX CUDA packages accept ({w.minimum_source})",
                    "reinstall with the versions JAX pins: pip install -U --force-reinstall 'jax[cuda13]' (or 'jax[cuda12]')",
                )
            )  # fmt: skip
    skew = check_driver_vs_runtime(nvml.cuda_driver_version, cuda_runtime_version(wheels))
    if skew is not None:
        findings.append(EnvFinding(skew.severity, ["nvidia-driver", "cuda-runtime"], skew.message, skew.hint or ""))
    return EnvironmentReport(
        schema=SCHEMA,
        devctl_version=__version__,
        timestamp=time.time(),
        hostname=socket.gethostname(),
        python=sys.version.split()[0],
        python_executable=sys.executable,
        os=platform.platform(),
        packages=packages,
        cuda_wheels=wheels,
        nvidia_driver=driver,
        nvidia_cuda_driver_version=cuda_driver,
        findings=findings,
        env=[a.env_var() for a in with_xla_flags_verdict(assess_env(), refused, os.environ)],
        notes=notes,
        framework_pjrt=framework,
        stack_fix=fix if skewed else None,
        xla_flags_refused=refused,
    )


def _xla_flags_refused(timeout_s: float) -> str | None:
    """What XLA's own parser refuses in XLA_FLAGS (a child creates jaxlib's CPU client, nothing more)."""
    from devctl.probe.xla_flags import refused

    return refused(timeout_s) if os.environ.get("XLA_FLAGS") else None


def _with_pjrt_versions(packages: list[PackageVersion], timeout_s: float) -> tuple[list[PackageVersion], FrameworkPjrt | None]:
    """Each plugin package beside the PJRT C API version its library speaks and jaxlib's verdict on it; jaxlib
    beside its own version. The libraries and jaxlib are asked at once, each in a child process."""
    from dataclasses import replace

    from devctl.collect.plugins import probe_libraries
    from devctl.discovery.plugins import find_plugin_packages
    from devctl.discovery.versions import _norm
    from devctl.model.plugins import PluginReport, PluginStatus
    from devctl.probe.framework_pjrt import framework_pjrt

    if not any(p.name == "jaxlib" and p.version for p in packages):
        return packages, None
    entries = [e for e in find_plugin_packages() if e.status is PluginStatus.OK and e.library_path and e.distribution]
    infos, framework = probe_libraries([e.library_path for e in entries if e.library_path], timeout_s)
    if framework is None:  # no plugin library: jaxlib's own version is still shown beside jaxlib
        framework = framework_pjrt(timeout_s)
    reports = [PluginReport.from_parts(e, infos.get(e.library_path or ""), framework) for e in entries]
    by_dist = {_norm(r.distribution or ""): r for r in reports if r.pjrt_api_version is not None}
    out = []
    for p in packages:
        if p.role == "jaxlib":
            p = replace(p, pjrt_api_version=framework.pjrt_api_version)
        elif p.role in ("pjrt", "libtpu") and p.name in by_dist:
            r = by_dist[p.name]
            p = replace(p, pjrt_api_version=r.pjrt_api_version, pjrt_check=r.pjrt_check, pjrt_accepted=r.pjrt_accepted)
        out.append(p)
    return out, framework
