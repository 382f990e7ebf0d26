"""What the doctor's rules read (a Scene, gathered once by devctl.collect.doctor) and what they yield (Drafts).

A rule is a function Scene -> Iterable[Draft]; devctl.checks.diagnosis runs
them in order, merges drafts of one catalogue entry and turns them into
findings. The helpers here are the few that rules of several modules share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Literal, Mapping

from devctl.checks.advice import code_of, is_cuda
from devctl.checks.catalogue import CUDA_MIN_DRIVER_BRANCH
from devctl.model.check import CheckResult
from devctl.model.env import EnvironmentReport, PackageVersion
from devctl.model.hardware import MachineFacts, NvmlHealth
from devctl.model.list_ import BackendInfo, BackendStatus, Hardware, Inventory
from devctl.model.plugins import PluginReport
from devctl.model.remedy import Remedy

BROKEN = (BackendStatus.FAILED, BackendStatus.TIMEOUT, BackendStatus.CRASHED)
Severity = Literal["error", "warning", "info"]  # model.doctor.DoctorFinding.severity

# Advice (devctl.checks.advice) reached from the machine's evidence, not from error text: list, check and doctor say the same.
EVIDENCE_FIRST = ("cuda-plugin-without-gpu", "nvidia-driver-not-mounted", "rocm-plugin-without-gpu", "pjrt-entry-broken")


@dataclass
class Scene:
    """Everything the rules read, gathered once."""

    inv: Inventory
    env: EnvironmentReport
    facts: MachineFacts
    nvml: NvmlHealth | None  # when the nvml-health check ran
    checks: dict[str, CheckResult]
    environ: Mapping[str, str]

    @property
    def hw(self) -> Hardware:
        return self.inv.hardware

    def ok(self, platform: str) -> bool:
        return any(b.platform == platform and b.status is BackendStatus.OK for b in self.inv.backends)

    def nvidia_gpus(self) -> list[str]:
        """Where NVIDIA GPUs are, by NVML if it works, else by the PCI bus."""
        gpus = getattr(self.hw.nvidia, "gpus", None) or ()
        if gpus:
            return [g.pci_bus_id or f"NVML GPU {g.index}" for g in gpus]
        return [f.address for f in self.hw.nvidia_pci if f.driver in (None, "nvidia")]

    def cuda_packages(self) -> list[PackageVersion]:
        return [p for p in self.env.packages if p.role in ("plugin", "pjrt") and "cuda" in p.name and p.version]

    def errors(self) -> list[tuple[str, str, list[str], list[str]]]:
        """(where, message, checks it shows up in, backend rows it is the error of) for every error text devctl
        collected: backends, plugins, NVML."""
        out = []
        for b in self.inv.backends:
            if b.error and b.status in BROKEN and not explained_by_evidence(b):
                out.append((f"{b.platform} backend", b.error, ["plugins"] if b.plugin else ["backends"], [b.platform]))
        evidenced = {b.platform for b in self.inv.backends if explained_by_evidence(b)}  # said once, from the evidence
        out += [(f"plugin {p.name}", p.error, ["plugins"], self.rows_of_plugin(p)) for p in self.inv.plugins if p.error and p.name not in evidenced]
        reason = getattr(self.hw.nvidia, "reason", None)
        if reason and getattr(self.hw.nvidia, "status", None) == "error":
            out.append(("NVML", reason, ["nvml-health"], self.cuda_rows()))
        return out

    # What a finding explains, as the rows of `devctl list` that did not start (their platform names): "What JAX
    # will use" gives each such row the fix of the finding that explains it (diagnosis.explanations).

    def not_ok(self, which: Iterable[BackendInfo] | None = None) -> list[str]:
        return [b.platform for b in (self.inv.backends if which is None else which) if b.status is not BackendStatus.OK]

    def cuda_rows(self) -> list[str]:
        """The CUDA backend and the plugins that provide it: what a cause on the NVIDIA side (driver, GPUs) explains."""
        return self.not_ok(b for b in self.inv.backends if is_cuda(b))

    def tpu_rows(self) -> list[str]:
        return self.not_ok(b for b in self.inv.backends if b.platform == "tpu")

    def rows_of_plugin(self, p: PluginReport) -> list[str]:
        """The row of a plugin: a PJRT_NAMES_AND_LIBRARY_PATHS entry's by its name, a package's by its module."""
        return self.not_ok(b for b in self.inv.backends if b.platform == p.name or (b.plugin and b.plugin == p.module))

    def rows_of_packages(self, packages: Iterable[str]) -> list[str]:
        """The rows whose code these distributions install: jax's own for jax and jaxlib, the tpu backend for libtpu,
        a plugin's for either distribution of its pair (jax-cuda13-plugin and jax-cuda13-pjrt are one plugin)."""
        families = {_family(p) for p in packages}
        modules = {p.module for p in self.inv.plugins if p.module and p.distribution and _family(p.distribution) in families}
        rows = []
        for b in self.inv.backends:
            series = re.search(r"(cuda|rocm)\d+", b.plugin or "")
            if b.plugin and (b.plugin in modules or (series and f"jax-{series.group(0)}" in families)):
                rows.append(b)
            elif not b.plugin and b.platform == "jax" and families & {"jax", "jaxlib"}:
                rows.append(b)
            elif not b.plugin and b.platform == "tpu" and "libtpu" in families:
                rows.append(b)
        return self.not_ok(rows)


@dataclass
class Draft:
    """A finding before merging: one catalogue id, the evidence one rule saw, and the checks it explains."""

    id: str
    evidence: list[str]
    checks: list[str]
    fix: str | None = None  # None: the catalogue's fix
    remedies: list[Remedy] = field(default_factory=list)  # `fix` as data (model.remedy), where it is commands
    severity: Severity = "error"
    backends: list[str] = field(default_factory=list)  # the rows (platforms) whose failure this explains: Scene.not_ok


def explained_by_evidence(b: BackendInfo) -> bool:
    """A backend row whose advice came from the machine's evidence: rules_software says it once, from that evidence."""
    return b.code in {code_of(f) for f in EVIDENCE_FIRST}


def _family(distribution: str) -> str:
    """jax-cuda13-pjrt, jax_cuda13_plugin -> jax-cuda13; libtpu-nightly -> libtpu."""
    name = distribution.lower().replace("_", "-")
    return "libtpu" if name.startswith("libtpu") else re.sub(r"-(plugin|pjrt)$", "", name)


def few(items: list[str], n: int = 3) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def driver_branch(version: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", version or "")
    return int(m.group(1)) if m else None


def cuda_for_branch(branch: int | None) -> tuple[int, int] | None:
    """The newest CUDA release a Linux driver branch supports, or None."""
    if branch is None:
        return None
    for cuda, minimum in CUDA_MIN_DRIVER_BRANCH:
        if branch >= minimum:
            return cuda
    return None
