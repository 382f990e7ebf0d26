"""Assemble `devctl env`: versions of everything and the environment variables that matter, with no backend initialized."""

from __future__ import annotations

import platform
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

from devctl import __version__
from devctl.model.environment import EnvVar, PackageVersion, VersionFinding

SCHEMA = "devctl.env/1"


@dataclass(frozen=True)
class EnvironmentReport:
    schema: str
    devctl_version: str
    timestamp: float
    hostname: str
    python: str
    python_executable: str
    os: str
    packages: list[PackageVersion]
    cuda_wheels: list[Any]  # model.hardware.CudaWheel
    nvidia_driver: str | None
    nvidia_cuda_driver_version: str | None
    findings: list[VersionFinding]
    env: list[EnvVar]
    notes: list[str]


def collect_environment() -> EnvironmentReport:
    """Package metadata, NVML's driver version and os.environ only: safe while a job holds the TPU or the GPU."""
    from devctl.discovery import nvidia
    from devctl.discovery.envvars import FALLBACK_RULES, env_vars, jaxlib_rules
    from devctl.discovery.versions import check_versions, installed_packages, libtpu_pin, minimum_jaxlib_version

    packages = installed_packages()
    jax_version = next((p.version for p in packages if p.name == "jax"), None)
    findings = check_versions(packages, minimum_jaxlib_version(), libtpu_pin(jax_version))
    wheels = nvidia.cuda_wheels()
    nvml = nvidia.nvml_report()
    notes = []
    driver = getattr(nvml, "driver_version", None)
    cuda_driver = nvml.cuda_driver_version_str
    if nvml.status != "ok":
        notes.append(f"NVML: {nvml.reason}")
    rules = jaxlib_rules()
    if rules.source == FALLBACK_RULES.source:
        notes.append(f"environment variables judged by {rules.source}: {rules.origin}")
    for w in wheels:
        if w.verdict == "too old":
            findings.append(
                VersionFinding(
                    "error", [w.distribution],
                    f"{w.distribution} {w.version} is older than the {w.minimum} JAX requires ({w.minimum_source})",
                    f"pip install -U '{w.distribution}>={w.minimum}'",
                )
            )  # fmt: skip
        elif w.verdict == "too new":
            findings.append(
                VersionFinding(
                    "error", [w.distribution],
                    f"{w.distribution} {w.version} is newer than the installed JAX CUDA packages accept ({w.minimum_source})",
                    "reinstall with the versions JAX pins: pip install -U --force-reinstall 'jax[cuda13]' (or 'jax[cuda12]')",
                )
            )  # fmt: skip
    skew = nvidia.check_driver_vs_runtime(nvml.cuda_driver_version, nvidia.cuda_runtime_version(wheels))
    if skew is not None:
        findings.append(VersionFinding(skew.severity, ["nvidia-driver", "cuda-runtime"], skew.message, skew.hint or ""))
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
        env=env_vars(),
        notes=notes,
    )
