"""`devctl doctor`'s catalogue of known failures, and the rules that recognize them from outside JAX.

Each entry mirrors reference/failure-modes.md §1 (its number, cause and fix).
Rules read the shared inventory, the environment report, a few extra machine
facts (devctl.checks.facts) and the checks' verdicts; each finding carries the
evidence (JAX's exact message, or the fact that gives it away), and names the
checks whose verdict it explains. A failed or warned check that no rule
explains becomes a finding of its own, so the doctor never says "nothing
wrong" while a check disagrees.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass
from typing import Iterable, Mapping

from devctl import __version__
from devctl.checks.advice import code_of, finding_of
from devctl.model.check import CheckResult, CheckStatus
from devctl.model.doctor import (
    DOCTOR_SCHEMA,
    DiagnosisFinding,
    DoctorReport,
    KnownFailure,
    Overview,
)
from devctl.model.list_ import BackendStatus
from devctl.privilege import as_root, thp_fix
from devctl.units import format_bytes

_CUDA_FIX = 'pip install -U "jax[cuda13]" (NVIDIA driver >= 580) or "jax[cuda12]" (driver >= 525)'

CATALOGUE: dict[str, KnownFailure] = {
    k.id: k
    for k in (
        KnownFailure(
            "cuda-plugin-missing", 1, "NVIDIA GPU present but no CUDA plugin",
            "an NVIDIA GPU is on the machine but no CUDA plugin is installed (plain `pip install jax`, or a CPU-only conda jaxlib), so JAX falls back to the CPU",
            _CUDA_FIX,
            ("https://github.com/jax-ml/jax/issues/29068",),
        ),
        KnownFailure(
            "plugin-version-skew", 2, "jax / jaxlib / plugin version skew",
            "jax, jaxlib and the jax-cuda*/rocm plugin and pjrt packages are at different versions (often after another package up- or downgraded one of them); JAX ignores the plugin, or crashes",
            'reinstall all of them at one version: pip install -U "jax[cuda12]==<jax version>"',
            ("https://github.com/jax-ml/jax/issues/26750", "https://github.com/jax-ml/jax/issues/24901"),
        ),
        KnownFailure(
            "pjrt-api-mismatch", 3, "PJRT API version mismatch between plugin and jaxlib",
            "the plugin library and jaxlib were built from different XLA revisions and speak different PJRT C API versions",
            "install the plugin release built for this jaxlib; as a stopgap, ENABLE_PJRT_COMPATIBILITY=true",
            ("https://github.com/jax-ml/jax/issues/22416",),
        ),
        KnownFailure(
            "jax-jaxlib-skew", 4, "jax / jaxlib version skew",
            "jax and jaxlib are at versions that reject each other (check_jaxlib_version)",
            'upgrade both together: pip install -U jax jaxlib',
            ("https://github.com/jax-ml/jax/issues/17638",),
        ),
        KnownFailure(
            "no-visible-gpu", 5, "no visible GPU",
            "the GPUs are hidden from CUDA: CUDA_VISIBLE_DEVICES is empty or -1, or the container was started without GPUs",
            "unset CUDA_VISIBLE_DEVICES (or list the GPUs); start the container with --gpus all (NVIDIA Container Toolkit) or request nvidia.com/gpu in Kubernetes",
            ("https://github.com/jax-ml/jax/issues/28376",),
        ),
        KnownFailure(
            "fabric-manager-missing", 6, "NVIDIA fabric manager not running on an NVSwitch system",
            "on NVSwitch systems (HGX A100/H100/H200) CUDA cannot start until nvidia-fabricmanager, matching the driver, is running: cuInit fails with CUDA_ERROR_SYSTEM_NOT_READY",
            "install nvidia-fabricmanager-<driver branch> and start it: " + as_root("systemctl enable --now nvidia-fabricmanager"),
            ("https://github.com/jax-ml/jax/issues/24866", "https://github.com/jax-ml/jax/pull/34113"),
        ),
        KnownFailure(
            "driver-library-mismatch", 7, "NVIDIA user-space driver does not match the kernel module",
            "the user-space libcuda/libnvidia-ml differ from the loaded kernel module, e.g. after a driver upgrade without a reboot, or driver libraries baked into a container image",
            "reboot (or reload the nvidia kernel module); in containers, let the NVIDIA Container Toolkit mount the host's driver libraries",
            ("https://github.com/jax-ml/jax/issues/3568", "https://github.com/jax-ml/jax/issues/15961"),
        ),
        KnownFailure(
            "cuda-library-shadowed", 8, "outdated CUDA library shadows the pip one",
            "an older system or conda CUDA library is found before the nvidia-* pip wheels (through LD_LIBRARY_PATH or a conda env), and JAX's version check rejects it",
            "unset LD_LIBRARY_PATH (or drop the CUDA directories from it) so the pip wheels load; JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 only hides the check",
            ("https://github.com/jax-ml/jax/issues/18032", "https://github.com/jax-ml/jax/issues/17497"),
        ),
        KnownFailure(
            "cuda-library-missing", 9, "CUDA library cannot be loaded",
            "a CUDA library is missing or not on the loader path (nvidia-* wheels absent or at mixed versions)",
            'reinstall: pip install -U "jax[cuda12]" (or [cuda13]); inspect with LD_DEBUG=libs',
            ("https://github.com/jax-ml/jax/issues/20519",),
        ),
        KnownFailure(
            "cudnn-failure", 10, "cuDNN version or handle failure",
            "an older cuDNN is found first, or cuDNN could not create its handle (too little free GPU memory, or a driver too old)",
            "install the matching cuDNN wheel in a fresh venv; lower the preallocation; update the driver",
            ("https://github.com/jax-ml/jax/issues/16901",),
        ),
        KnownFailure(
            "driver-too-old", 11, "NVIDIA driver older than the CUDA runtime / ptxas",
            "the driver supports an older CUDA than the runtime wheels or ptxas in use: PTX fails to load and compilation slows",
            "update the NVIDIA driver (>= 525 for CUDA 12, >= 580 for CUDA 13), or install CUDA wheels no newer than the driver",
            ("https://github.com/jax-ml/jax/issues/25344", "https://github.com/jax-ml/jax/issues/19821"),
        ),
        KnownFailure(
            "preallocation-contention", 12, "GPU preallocation leaves no room",
            "each JAX process preallocates 75% of every GPU it sees; with another process already on the GPU, the next one finds no memory ('no supported devices found', RESOURCE_EXHAUSTED)",
            "XLA_PYTHON_CLIENT_PREALLOCATE=false, or XLA_CLIENT_MEM_FRACTION=.XX so every process fits, set before JAX starts; or give each process its own GPU with CUDA_VISIBLE_DEVICES",
            ("https://github.com/jax-ml/jax/issues/17217", "https://github.com/jax-ml/jax/issues/19267"),
        ),
        KnownFailure(
            "nccl-shm-too-small", 13, "/dev/shm too small for NCCL",
            "NCCL (and RCCL) put their intra-node buffers in /dev/shm; Docker's default 64 MB runs out with several GPUs ('No space left on device')",
            "docker run --shm-size=16g (or --ipc=host); in Kubernetes mount an emptyDir with medium: Memory at /dev/shm",
            ("https://github.com/jax-ml/jax/issues/26465",),
        ),
        KnownFailure(
            "tpu-held", 14, "TPU held by another process",
            "libtpu lets one process own the TPU chips; another live process has them (JAX then prints the misleading 'libtpu is not installed')",
            "stop that process; to share the chips set TPU_VISIBLE_CHIPS, TPU_CHIPS_PER_PROCESS_BOUNDS and TPU_PROCESS_BOUNDS per process",
            ("https://github.com/jax-ml/jax/issues/22070", "https://github.com/jax-ml/jax/issues/10192"),
        ),
        KnownFailure(
            "tpu-stale-lockfile", 14, "stale libtpu lockfile",
            "a process that used the TPU died without removing /tmp/libtpu_lockfile; no live process holds it",
            as_root("rm /tmp/libtpu_lockfile"),
            ("https://github.com/jax-ml/jax/issues/22070",),
        ),
        KnownFailure(
            "libtpu-missing", 15, "libtpu missing or TPU_LIBRARY_PATH wrong",
            "TPU chips are present but no libtpu can be loaded: the libtpu package is not installed, or TPU_LIBRARY_PATH names a file that does not exist",
            "pip install -U \"jax[tpu]\"; fix or unset TPU_LIBRARY_PATH",
            ("https://github.com/jax-ml/jax/issues/13321",),
        ),
        KnownFailure(
            "tpu-device-permission", 16, "no access to the TPU device nodes",
            "the TPU device nodes (/dev/accel*, /dev/vfio/*) are missing or not accessible: a container that is not privileged or was not given the devices, or a VM device problem",
            "run the container privileged or pass the devices (--device /dev/vfio/<group> --device /dev/vfio/vfio, or /dev/accel*); if a node is missing on the VM, stop and start (or recreate) it",
            ("https://github.com/jax-ml/jax/issues/13260",),
        ),
        KnownFailure(
            "multihost-slice-waiting", 17, "multi-host TPU slice waits for its other hosts",
            "on a multi-host slice, TPU initialization blocks until the program runs on every host of the slice",
            "start the program on all hosts at once: gcloud compute tpus tpu-vm ssh NAME --worker=all --command='...'",
            ("https://github.com/jax-ml/jax/issues/19971",),
        ),
        KnownFailure(
            "cpu-without-avx", 18, "CPU lacks AVX",
            "jaxlib is built with AVX instructions, which this CPU (or its emulator) does not support",
            "run on native hardware with AVX, or build jaxlib from source",
        ),
        KnownFailure(
            "libtpu-version-skew", None, "libtpu does not match jax's pin",
            "jax[tpu] pins one libtpu release; another one may not load or may misbehave",
            'pip install -U "jax[tpu]==<jax version>"',
        ),
        KnownFailure(
            "tpu-thp-off", None, "transparent hugepages off on TPU v5e and newer",
            "JAX warns that the TPU runtime starts and stops much more slowly without transparent hugepages",
            thp_fix(),
        ),
        KnownFailure(
            "jax-platforms-unavailable", None, "JAX_PLATFORMS names a platform that does not start",
            "every platform JAX_PLATFORMS lists must initialize, or jax.devices() raises 'Unable to initialize backend'",
            "set JAX_PLATFORMS to platforms that work here (devctl list), or unset it so JAX picks the best available",
        ),
        KnownFailure(
            "cuda-plugin-without-gpu", None, "CUDA plugin installed on a machine without an NVIDIA GPU",
            "jax[cuda12]/[cuda13] is installed but this machine has no NVIDIA GPU (or its driver is not loaded or not mounted): the plugin's initialize() fails, JAX logs the error and falls back to CPU",
            "to silence the plugin set JAX_PLATFORMS=cpu, or uninstall the CUDA extra",
        ),
        KnownFailure(
            "nvidia-driver-not-mounted", None, "NVIDIA device nodes without the driver's libraries",
            "/dev/nvidia* exists but libcuda and libnvidia-ml cannot be loaded: typically a container given the devices but not the NVIDIA runtime",
            "start the container with the NVIDIA runtime (docker run --gpus all, or the NVIDIA device plugin in Kubernetes); on a host, install the driver",
        ),
        KnownFailure(
            "rocm-plugin-without-gpu", None, "ROCm plugin installed on a machine without an AMD GPU",
            "a jax-rocm plugin is installed but no AMD GPU is visible through KFD: the plugin fails, JAX falls back to CPU",
            "to silence the plugin set JAX_PLATFORMS=cpu, or uninstall it",
        ),
        KnownFailure(
            "pjrt-entry-broken", None, "a PJRT_NAMES_AND_LIBRARY_PATHS entry cannot be loaded",
            "JAX loads every PJRT_NAMES_AND_LIBRARY_PATHS entry before it looks at JAX_PLATFORMS, and does not catch a failure: every jax.devices() raises",
            "fix the entry's path, or remove it from PJRT_NAMES_AND_LIBRARY_PATHS",
        ),
        KnownFailure(
            "plugin-broken", None, "a JAX plugin fails to load",
            "the plugin's import or initialize() raised, crashed or hung; JAX logs it and goes on (or dies with it); JAX_PLATFORMS does not stop JAX from loading it",
            "reinstall the plugin at jaxlib's version, or uninstall it",
        ),
        KnownFailure(
            "backend-failed", None, "a JAX backend fails to initialize",
            "the backend's client could not be created; with JAX_PLATFORMS unset, jax.devices() raises for it",
            "fix the backend (its error says how) or uninstall its plugin; JAX_PLATFORMS=cpu skips it meanwhile",
        ),
        KnownFailure(
            "accelerator-unused", None, "accelerator present but JAX does not use it",
            "discovery finds the hardware, but no JAX backend initialized on it",
            "see each accelerator's reason",
        ),
        KnownFailure("check-failed", None, "a health check failed", "see the check's message", "see the check's remediation"),
        KnownFailure("check-warned", None, "a health check warned", "see the check's message", "see the check's remediation"),
    )
}  # fmt: skip

# JAX's and XLA's own words (failure-modes.md §1), matched in backend and plugin errors.
MESSAGES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fid, re.compile(pattern, re.IGNORECASE))
    for fid, pattern in (
        ("cuda-plugin-missing", r"a CUDA-enabled jaxlib is not installed"),
        ("plugin-version-skew", r"Jax plugin configuration error|is not compatible with the installed jaxlib version|has no attribute 'register_custom_type_id_handler'"),
        ("pjrt-api-mismatch", r"Mismatched PJRT plugin PJRT API"),
        ("jax-jaxlib-skew", r"is newer than and incompatible with jax version|but this version of jax requires version"),
        ("no-visible-gpu", r"CUDA_ERROR_NO_DEVICE|No visible GPU devices"),
        ("fabric-manager-missing", r"CUDA_ERROR_SYSTEM_NOT_READY"),
        ("driver-library-mismatch", r"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|does not match DSO version|versions differ \(driver upgraded"),
        ("cuda-library-shadowed", r"Outdated \w+ installation found"),
        ("cuda-library-missing", r"Unable to load cu\w+\. Is it installed\?"),
        ("cudnn-failure", r"DNN library initialization failed|Could not create cudnn handle|CuDNN library needs to have matching"),
        ("driver-too-old", r"older than the ptxas CUDA version|Unsupported \.version|CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
        ("preallocation-contention", r"no supported devices found for platform CUDA|RESOURCE_EXHAUSTED: Out of memory"),
        ("nccl-shm-too-small", r"/dev/shm/nccl-"),
        ("tpu-held", r"TPU is already in use by process with pid|libtpu\.so already in use"),
        ("libtpu-missing", r"TPU_LIBRARY_PATH is set to a non-existent path"),
        ("tpu-device-permission", r"Couldn't open device: /dev/(accel|vfio)|open\(/dev/(accel|vfio)"),
        ("multihost-slice-waiting", r"TPU backend initialization is taking more than"),
        ("cpu-without-avx", r"built using AVX instructions"),
    )
)  # fmt: skip

# Linux driver branch that first supports each CUDA release (CUDA Toolkit release notes, table 3).
CUDA_MIN_DRIVER_BRANCH = (
    ((13, 0), 580), ((12, 9), 575), ((12, 8), 570), ((12, 6), 560), ((12, 5), 555), ((12, 4), 550),
    ((12, 3), 545), ((12, 2), 535), ((12, 1), 530), ((12, 0), 525), ((11, 8), 520), ((11, 7), 515),
    ((11, 6), 510), ((11, 5), 495), ((11, 4), 470), ((11, 0), 450),
)  # fmt: skip

_PREALLOCATE_OFF = ("false", "False", "0")
_BROKEN = (BackendStatus.FAILED, BackendStatus.TIMEOUT, BackendStatus.CRASHED)
_TPU_IDS = ("tpu-held", "libtpu-missing", "tpu-device-permission", "multihost-slice-waiting")
_HIDDEN_GPU_VALUES = ("", "-1", "none", "NoDevFiles")


@dataclass
class Scene:
    """Everything the rules read, gathered once."""

    inv: object  # devctl.collect.list_.Inventory
    env: object  # devctl.collect.env.EnvironmentReport
    facts: object  # devctl.checks.facts.MachineFacts
    nvml: object | None  # model.check.NvmlHealth, when the nvml-health check ran
    checks: dict[str, CheckResult]
    environ: Mapping[str, str]

    @property
    def hw(self):
        return self.inv.hardware

    def ok(self, platform: str) -> bool:
        return any(b.platform == platform and b.status is BackendStatus.OK for b in self.inv.backends)

    def nvidia_gpus(self) -> list[str]:
        """Where NVIDIA GPUs are, by NVML if it works, else by the PCI bus."""
        gpus = getattr(self.hw.nvidia, "gpus", None) or ()
        if gpus:
            return [g.pci_bus_id or f"NVML GPU {g.index}" for g in gpus]
        return [f.address for f in self.hw.nvidia_pci if f.driver in (None, "nvidia")]

    def cuda_packages(self) -> list:
        return [p for p in self.env.packages if p.role in ("plugin", "pjrt") and "cuda" in p.name and p.version]

    def errors(self) -> list[tuple[str, str, list[str]]]:
        """(where, message, checks it shows up in) for every error text devctl collected: backends, plugins, NVML."""
        out = []
        for b in self.inv.backends:
            if b.error and b.status in _BROKEN and not _explained_by_evidence(b):
                out.append((f"{b.platform} backend", b.error, ["plugins"] if b.plugin else ["backends"]))
        out += [(f"plugin {p.name}", p.error, ["plugins"]) for p in self.inv.plugins if p.error]
        reason = getattr(self.hw.nvidia, "reason", None)
        if reason and getattr(self.hw.nvidia, "status", None) == "error":
            out.append(("NVML", reason, ["nvml-health"]))
        return out


@dataclass
class _Draft:
    id: str
    evidence: list[str]
    checks: list[str]
    fix: str | None = None
    severity: str = "error"


# ---- the rules ------------------------------------------------------------------------------------

# Advice (devctl.checks.advice) reached from the machine's evidence, not from error text: list, check and doctor say the same.
_EVIDENCE_FIRST = ("cuda-plugin-without-gpu", "nvidia-driver-not-mounted", "rocm-plugin-without-gpu", "pjrt-entry-broken")


def _explained_by_evidence(b) -> bool:
    return b.code in {code_of(f) for f in _EVIDENCE_FIRST}


def _outcome(s: Scene) -> Iterable[_Draft]:
    """jax.devices() itself fails: the finding devctl list leads with, with the same fix."""
    outcome = getattr(s.inv, "jax_outcome", None)
    if outcome is None or not outcome.fails or not outcome.code:
        return
    finding, fix = finding_of(outcome.code), outcome.fix
    if finding in ("backend-failed", "plugin-broken"):
        # A generic advice: a catalogue entry that recognizes JAX's words says more.
        known = next((fid for fid, pattern in MESSAGES if pattern.search(outcome.error or "")), None)
        finding, fix = (known, None) if known else (finding, fix)
    yield _Draft(finding, [f"jax.devices() {outcome.result}: {outcome.error or outcome.culprit}"], ["backends", "devices"], fix=fix)


def _evidence(s: Scene) -> Iterable[_Draft]:
    from devctl.checks.advice import nvidia_evidence

    for b in s.inv.backends:
        if not _explained_by_evidence(b):
            continue
        finding = finding_of(b.code)
        evidence = [f"{b.platform} {'plugin' if b.plugin else 'backend'} {b.status.value}: {b.error}"]
        if finding == "cuda-plugin-without-gpu":
            evidence.append("no NVIDIA GPU: no NVML GPU, no NVIDIA device on the PCI bus, no /dev/nvidia* node")
        elif finding == "nvidia-driver-not-mounted":
            evidence.append(f"{nvidia_evidence(s.hw)} exist, but NVML: {getattr(s.hw.nvidia, 'reason', None)}")
        fails = getattr(s.inv, "jax_outcome", None) is not None and s.inv.jax_outcome.fails
        severity = "error" if fails or finding in ("nvidia-driver-not-mounted", "pjrt-entry-broken") else "warning"
        yield _Draft(finding, evidence, ["plugins"] if b.plugin else ["backends"], fix=b.hint, severity=severity)


def _messages(s: Scene) -> Iterable[_Draft]:
    for where, message, checks in s.errors():
        for fid, pattern in MESSAGES:
            if pattern.search(message):
                yield _Draft(fid, [f"{where}: {message}"], checks)


def _broken_rows(s: Scene, drafts: list[_Draft]) -> Iterable[_Draft]:
    """Backends and plugins that fail in a way no catalogue entry recognized: still named, with the error."""
    said = " ".join(e for d in drafts for e in d.evidence)
    tpu_explained = any(d.id in _TPU_IDS for d in drafts)
    for b in s.inv.backends:
        if b.status not in _BROKEN or (b.error and b.error in said) or (b.platform == "tpu" and tpu_explained) or _explained_by_evidence(b):
            continue
        evidence = [f"{b.platform} {'plugin' if b.plugin else 'backend'} {b.status.value}: {b.error}"]
        if b.plugin:
            yield _Draft("plugin-broken", evidence, ["plugins"], fix=b.hint)
        else:
            yield _Draft("backend-failed", evidence, ["backends"], fix=b.hint)
    from devctl.checks.software import is_plugin_failure

    for p in s.inv.plugins:
        if p.source.value == "libtpu" and tpu_explained:
            continue  # libtpu's own entry: the TPU findings already say what is wrong with it
        if any(b.platform == p.name and _explained_by_evidence(b) for b in s.inv.backends):
            continue  # the same plugin as a row the evidence already explains
        if is_plugin_failure(p) and not (p.error and p.error in said):
            yield _Draft("plugin-broken", [f"plugin {p.name} ({p.source.value}): {p.status.value}: {p.error}"], ["plugins"])


def _jax_platforms(s: Scene) -> Iterable[_Draft]:
    from devctl.checks.backends import platform_matches

    listed = [p.strip().lower() for p in (s.environ.get("JAX_PLATFORMS") or "").split(",") if p.strip()]
    for name in listed:
        if any(platform_matches(name, b.platform) and b.status is BackendStatus.OK for b in s.inv.backends):
            continue
        rows = [b for b in s.inv.backends if platform_matches(name, b.platform)]
        state = f"the {rows[0].platform} backend {rows[0].status.value}: {rows[0].error}" if rows else f"no {name} backend is installed"
        yield _Draft(
            "jax-platforms-unavailable",
            [f"JAX_PLATFORMS={s.environ['JAX_PLATFORMS']!r}, and {state}"],
            ["backends", "devices", "env"],
            fix=f"drop {name} from JAX_PLATFORMS, or unset it so JAX picks the best available backend",
        )


def _cuda_plugin(s: Scene) -> Iterable[_Draft]:
    gpus = s.nvidia_gpus()
    if not gpus or s.ok("cuda") or s.cuda_packages():
        return
    bound = [f for f in s.hw.nvidia_pci if f.driver == "nvidia"]
    if not bound and not getattr(s.hw.nvidia, "gpus", None):
        return  # no driver: that is the machine's problem first, not the plugin's
    evidence = [f"{len(gpus)} NVIDIA GPU(s): {_few(gpus)}", "no jax-cuda12/13 plugin package is installed"]
    if any(n in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg") for n in s.hw.nvidia_device_nodes):
        evidence.append(
            "JAX says: An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed. "
            f"Falling back to {s.inv.default_platform or 'cpu'}."
        )
    yield _Draft("cuda-plugin-missing", evidence, ["devices", "backends"], fix=_cuda_fix(s))


def _cuda_fix(s: Scene) -> str:
    branch = _driver_branch(getattr(s.hw.nvidia, "driver_version", None) or s.facts.kernel_driver_version)
    if branch is None:
        return _CUDA_FIX
    if branch >= 580:
        return f'pip install -U "jax[cuda13]" (driver branch {branch} supports CUDA 13)'
    if branch >= 525:
        return f'pip install -U "jax[cuda12]" (driver branch {branch} supports CUDA 12, not 13)'
    return f"update the NVIDIA driver to >= 525 (it is {branch}), then pip install -U \"jax[cuda12]\""


def _version_findings(s: Scene) -> Iterable[_Draft]:
    """Every version skew of the stack is one finding with one fix, the `versions` check's (jax's own pins for
    its release); the NVIDIA driver and CUDA wheel findings stay findings of their own."""
    fix = s.env.stack_fix
    roles = {p.name: p.role for p in s.env.packages}
    stack = []
    for f in s.env.findings:
        pkgs = set(f.packages)
        if fix is not None and f.remediation == fix.command:
            stack.append(f)
            continue
        if pkgs & {"nvidia-driver", "cuda-runtime"}:
            fid = "driver-too-old"
        elif any(roles.get(p) in ("plugin", "pjrt") for p in pkgs):
            fid = "plugin-version-skew"
        elif any(roles.get(p) == "libtpu" for p in pkgs):
            fid = "libtpu-version-skew"
        elif any(p.startswith("nvidia-") for p in pkgs):
            fid = "cuda-library-shadowed"
        else:
            fid = "jax-jaxlib-skew"
        yield _Draft(fid, [f.message], ["versions"], fix=f.remediation or None, severity="error" if f.severity == "error" else "warning")
    if not stack:
        return
    involved = {roles.get(p) for f in stack for p in f.packages}
    if any(set(f.packages) == {"jax", "jaxlib"} for f in stack):
        fid = "jax-jaxlib-skew"  # `import jax` raises: the first thing a user meets
    elif involved & {"plugin", "pjrt"}:
        fid = "plugin-version-skew"
    else:
        fid = "libtpu-version-skew"
    severity = "error" if any(f.severity == "error" for f in stack) else "warning"
    evidence = [f.message for f in stack] + ([f"the fix {fix.summary}"] if fix.summary else [])
    yield _Draft(fid, evidence, ["versions"], fix=fix.command, severity=severity)


def _pjrt_major(s: Scene) -> Iterable[_Draft]:
    """A plugin library whose PJRT C API version jaxlib's plugin check refuses (xla/pjrt/pjrt_api.cc), by jaxlib's
    own version and rule as measured; compatibility mode, the default, takes any 0.x with x >= 29."""
    from devctl.checks.software import pjrt_refusal, pjrt_refused, pjrt_remedy

    fix = s.env.stack_fix
    stack = {p.name for p in s.env.packages if p.role in ("pjrt", "libtpu")}
    for p in s.inv.plugins:
        if not pjrt_refused(p):
            continue
        by_setting = p.pjrt_refused_by_setting
        packaged = fix is not None and (p.distribution or "").replace("_", "-").lower() in stack
        # Strict mode (ENABLE_PJRT_COMPATIBILITY): the setting; a package of the stack: the one fix; else that entry or
        # package. Never "set ENABLE_PJRT_COMPATIBILITY=true" for a library compatibility mode itself refuses.
        remedy = fix.command if packaged and not by_setting else pjrt_remedy(p)
        yield _Draft(
            "pjrt-api-mismatch",
            [f"plugin {p.name} ({p.library_path}): {pjrt_refusal(p)}"],
            ["plugins", "backends"],
            fix=remedy,
        )


def _hidden_gpus(s: Scene) -> Iterable[_Draft]:
    gpus = s.nvidia_gpus()
    if not gpus or s.ok("cuda"):
        return
    value = s.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None and value.strip() in _HIDDEN_GPU_VALUES:
        yield _Draft(
            "no-visible-gpu",
            [f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU from CUDA, and {len(gpus)} NVIDIA GPU(s) are present"],
            ["devices", "backends", "env"],
            fix="unset CUDA_VISIBLE_DEVICES, or list the GPUs this job should use (CUDA_VISIBLE_DEVICES=0,1,...)",
        )
    bound = [f.address for f in s.hw.nvidia_pci if f.driver == "nvidia"]
    nodes = [n for n in s.hw.nvidia_device_nodes if re.fullmatch(r"/dev/nvidia(\d+|ctl)", n)]
    if bound and not nodes:
        yield _Draft(
            "no-visible-gpu",
            [f"{len(bound)} GPU(s) bound to the nvidia driver ({_few(bound)}) but no /dev/nvidia* device node: a container started without GPUs"],
            ["devices", "backends"],
            fix="start the container with --gpus all (NVIDIA Container Toolkit), or request nvidia.com/gpu in Kubernetes",
        )


def _fabric_manager(s: Scene) -> Iterable[_Draft]:
    if not s.facts.nvswitches or s.facts.fabric_manager is not None or not s.nvidia_gpus():
        return
    branch = _driver_branch(getattr(s.hw.nvidia, "driver_version", None) or s.facts.kernel_driver_version)
    package = f"nvidia-fabricmanager-{branch}" if branch else "nvidia-fabricmanager-<driver branch>"
    yield _Draft(
        "fabric-manager-missing",
        [
            f"{len(s.facts.nvswitches)} NVSwitch bridge(s) on the PCI bus ({_few(list(s.facts.nvswitches))}, class 0x0680)",
            "no nv-fabricmanager process is running",
        ],
        ["backends", "devices"],
        fix=f"install {package} (the same branch as the driver) and start it: sudo systemctl enable --now nvidia-fabricmanager",
    )


def _driver_mismatch(s: Scene) -> Iterable[_Draft]:
    kernel, libs = s.facts.kernel_driver_version, s.facts.libcuda_versions
    if kernel and libs and kernel not in libs:
        yield _Draft(
            "driver-library-mismatch",
            [f"kernel module {kernel} (/proc/driver/nvidia/version), user-space libcuda.so.{', libcuda.so.'.join(libs)}"],
            ["backends", "nvml-health"],
        )


def _driver_vs_runtime_offline(s: Scene) -> Iterable[_Draft]:
    """Without NVML (a host root, a broken driver) the kernel module's version still says which CUDA it supports."""
    from devctl.discovery.nvidia import check_driver_vs_runtime, cuda_runtime_version

    if getattr(s.hw.nvidia, "cuda_driver_version", None) or not s.facts.kernel_driver_version:
        return
    supported = _cuda_for_branch(_driver_branch(s.facts.kernel_driver_version))
    if supported is None:
        return
    finding = check_driver_vs_runtime(supported[0] * 1000 + supported[1] * 10, cuda_runtime_version(s.env.cuda_wheels))
    if finding is not None:
        yield _Draft(
            "driver-too-old",
            [f"driver {s.facts.kernel_driver_version} (kernel module): {finding.message}"],
            ["versions"],
            fix=finding.hint,
            severity="error" if finding.severity == "error" else "warning",
        )


def _shadowing(s: Scene) -> Iterable[_Draft]:
    wheels = [w for w in s.env.cuda_wheels if w.component in ("cuda_runtime", "cudnn", "cublas", "cusparse", "cufft", "cusolver", "nccl", "nvjitlink")]
    if not s.facts.ld_library_cuda or not (wheels or s.cuda_packages()):
        return
    dirs = [f"{d} ({', '.join(libs[:3])})" for d, libs in s.facts.ld_library_cuda.items()]
    pip = ", ".join(f"{w.distribution} {w.version}" for w in wheels[:3]) or ", ".join(p.name for p in s.cuda_packages())
    yield _Draft(
        "cuda-library-shadowed",
        [f"LD_LIBRARY_PATH puts {'; '.join(dirs)} ahead of the pip CUDA libraries ({pip})"],
        ["env", "backends"],
        fix=f"unset LD_LIBRARY_PATH (or drop {', '.join(s.facts.ld_library_cuda)} from it) so JAX loads the pip wheels",
        severity="warning",
    )


def _contention(s: Scene) -> Iterable[_Draft]:
    if s.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "") in _PREALLOCATE_OFF and "XLA_PYTHON_CLIENT_PREALLOCATE" in s.environ:
        return
    evidence = []
    for g in getattr(s.nvml, "gpus", None) or ():
        others = [p for p in g.processes if p.pid != os.getpid()]
        if others and g.memory_total_bytes:
            used = g.memory_used_bytes or 0
            evidence.append(
                f"GPU {g.index}: {len(others)} process(es) ({', '.join(str(p.pid) for p in others[:4])}) hold "
                f"{format_bytes(used)} of {format_bytes(g.memory_total_bytes)}"
            )
    if not evidence:
        for path, refs in sorted(s.facts.nvidia_holders.items()):
            refs = refs
            if refs:
                evidence.append(f"{path} is open in " + ", ".join(f"pid {p.pid} ({p.command or '?'})" for p in refs[:3]))
    if evidence:
        evidence.append("XLA_PYTHON_CLIENT_PREALLOCATE is not false: a new JAX process asks for 75% of each GPU at start")
        yield _Draft("preallocation-contention", evidence, ["memory"], severity="warning")


def _shm(s: Scene) -> Iterable[_Draft]:
    from devctl.checks.machine import SHM_FAIL_BYTES, SHM_WARN_BYTES, gpu_count

    gpus = gpu_count(s.hw, s.inv.devices)
    shm = s.inv.host.shm_total_bytes
    if gpus >= 2 and shm is not None and shm < SHM_WARN_BYTES:
        yield _Draft(
            "nccl-shm-too-small",
            [f"/dev/shm is {format_bytes(shm)} with {gpus} GPUs"],
            ["host"],
            severity="error" if shm <= SHM_FAIL_BYTES else "warning",
        )


def _tpu(s: Scene) -> Iterable[_Draft]:
    from devctl.checks.machine import THP_TPU_VERSIONS

    tpu = s.hw.tpu
    lock = tpu.lockfile
    held: dict[int, tuple[object, list[str]]] = {}
    for chip in tpu.chips:
        for p in chip.holders:
            held.setdefault(p.pid, (p, []))[1].append(chip.device_path)
    if lock.state == "held":
        for p in lock.holders:
            held.setdefault(p.pid, (p, []))[1].append(lock.path)
    for pid, (p, paths) in sorted(held.items()):
        evidence = [f"pid {pid} ({p.command or '?'}, user {p.user or '?'}) has {', '.join(paths)} open"]
        tpu_row = next((b for b in s.inv.backends if b.platform == "tpu" and b.status is not BackendStatus.OK), None)
        if tpu_row is not None and tpu_row.error:
            evidence.append(f"so the tpu backend {tpu_row.status.value}: {tpu_row.error}")
        yield _Draft(
            "tpu-held", evidence, ["tpu", "backends", "devices"],
            fix=f"stop it when it is safe (kill {pid}; {as_root(f'lsof -w {paths[0]}')} lists every holder); to share the chips set TPU_VISIBLE_CHIPS, TPU_CHIPS_PER_PROCESS_BOUNDS and TPU_PROCESS_BOUNDS",
        )  # fmt: skip
    if lock.state == "stale":
        named = f", and the pid it names ({lock.pid_in_file}) is not running" if lock.pid_in_file else ""
        yield _Draft(
            "tpu-stale-lockfile",
            [f"{lock.path} exists, no live process has it open or locked{named}"],
            ["tpu"], fix=as_root(f"rm {lock.path}"), severity="warning",
        )  # fmt: skip

    path = s.environ.get("TPU_LIBRARY_PATH")
    if path is not None and not os.path.exists(path):
        yield _Draft(
            "libtpu-missing",
            [f"TPU_LIBRARY_PATH={path!r} does not exist (JAX: TPU_LIBRARY_PATH is set to a non-existent path)"],
            ["env", "tpu", "backends"],
            fix="point TPU_LIBRARY_PATH at an existing libtpu.so, or unset it and pip install -U \"jax[tpu]\"",
            severity="error" if tpu.chips else "warning",
        )
    has_libtpu = any(p.role == "libtpu" and p.version for p in s.env.packages) or (path is not None and os.path.exists(path))
    if tpu.chips and not has_libtpu and not held and not s.ok("tpu"):
        yield _Draft(
            "libtpu-missing",
            [
                f"{len(tpu.chips)} TPU {'/'.join(tpu.versions)} chip(s) at {_few([c.pci_address for c in tpu.chips])}, but no libtpu package is installed",
                "JAX says: A Google TPU may be present on this machine, but either a TPU-enabled jaxlib or libtpu is not installed.",
            ],
            ["tpu", "backends", "devices"],
        )

    for chip in tpu.chips:
        if not chip.device_path_exists:
            why = f"{chip.device_path} does not exist"
        elif chip.accessible is False:
            why = f"{chip.device_path} is not readable and writable by this user"
        elif any(n.startswith("no /dev/vfio/vfio") for n in chip.notes):
            why = "/dev/vfio/vfio (the vfio container node) is missing"
        else:
            continue
        yield _Draft("tpu-device-permission", [f"TPU {chip.index} ({chip.version}, {chip.pci_address}): {why}"], ["tpu", "backends", "devices"])

    hosts = [h for h in (s.environ.get("TPU_WORKER_HOSTNAMES") or "").split(",") if h.strip()]
    tpu_row = next((b for b in s.inv.backends if b.platform == "tpu"), None)
    timed_out = tpu_row is not None and tpu_row.status is BackendStatus.TIMEOUT
    if len(hosts) > 1 and (tpu.chips or timed_out):
        evidence = [f"TPU_WORKER_HOSTNAMES lists {len(hosts)} hosts ({_few(hosts)}): TPU initialization waits until every one runs the program"]
        if timed_out:
            evidence.append(f"the tpu backend did not initialize: {tpu_row.error}")
        yield _Draft("multihost-slice-waiting", evidence, ["backends", "tpu", "devices"], severity="error" if timed_out else "warning")

    thp_versions = [v for v in tpu.versions if v in THP_TPU_VERSIONS]
    host = s.inv.host
    if thp_versions and host.thp_enabled is False:
        yield _Draft(
            "tpu-thp-off",
            [f"/sys/kernel/mm/transparent_hugepage/enabled is [{host.thp_mode}] on a TPU {', '.join(thp_versions)} host (JAX wants [always])"],
            ["host"], fix=thp_fix(), severity="warning",
        )  # fmt: skip


RULES = (_outcome, _evidence, _messages, _version_findings, _jax_platforms, _cuda_plugin, _pjrt_major, _hidden_gpus, _fabric_manager, _driver_mismatch,
         _driver_vs_runtime_offline, _shadowing, _contention, _shm, _tpu)  # fmt: skip


# ---- assembling the diagnosis -------------------------------------------------------------------------


def diagnose(s: Scene) -> list[DiagnosisFinding]:
    drafts: list[_Draft] = [d for rule in RULES for d in rule(s)]
    drafts += list(_broken_rows(s, drafts))
    if any(d.id == "tpu-held" for d in drafts):
        # JAX's "libtpu is not installed" is a symptom of the lock here, not its own failure (failure-modes.md §3.4).
        drafts = [d for d in drafts if not (d.id == "libtpu-missing" and "non-existent" not in " ".join(d.evidence))]
    merged: dict[str, _Draft] = {}
    for d in drafts:
        m = merged.get(d.id)
        if m is None:
            merged[d.id] = _Draft(d.id, list(d.evidence), list(d.checks), d.fix, d.severity)
            continue
        m.evidence += [e for e in d.evidence if e not in m.evidence]
        m.checks += [c for c in d.checks if c not in m.checks]
        m.fix = m.fix or d.fix
        if d.severity == "error":
            m.severity = "error"
    merged.update(_unexplained(s, merged))
    order = list(CATALOGUE)
    findings = [_finding(d) for d in merged.values()]
    return sorted(findings, key=lambda f: (f.severity != "error", order.index(f.id)))


def _unexplained(s: Scene, merged: dict[str, _Draft]) -> dict[str, _Draft]:
    """Failed or warned checks no rule explains, each a finding of its own."""
    explained = {c for d in merged.values() for c in d.checks}
    out: dict[str, _Draft] = {}
    for r in s.checks.values():
        if r.status not in (CheckStatus.FAIL, CheckStatus.WARN) or r.name in explained:
            continue
        severity = "error" if r.status is CheckStatus.FAIL else "warning"
        if r.name == "devices" and s.inv.unused_accelerators:
            evidence = [f"{u.name} at {u.location}: {u.reason}" for u in s.inv.unused_accelerators]
            out["accelerator-unused"] = _Draft("accelerator-unused", evidence, ["devices"], fix=s.inv.unused_accelerators[0].reason, severity=severity)
            continue
        fid = "check-failed" if severity == "error" else "check-warned"
        key = f"{fid}:{r.name}"
        # The doctor is what "run devctl doctor" points to: it never sends the user back to itself.
        fix = r.remediation if r.remediation and "devctl doctor" not in r.remediation else f"see devctl check --only {r.name}"
        out[key] = _Draft(fid, [f"check {r.name}: {r.message}"], [r.name], fix=fix, severity=severity)
    return out


def _finding(d: _Draft) -> DiagnosisFinding:
    known = CATALOGUE[d.id]
    title = known.title
    if d.id in ("check-failed", "check-warned"):
        title = f"check {d.checks[0]} {'failed' if d.id == 'check-failed' else 'warned'}"
    return DiagnosisFinding(
        id=d.id,
        code=code_of(d.id),
        catalogue_number=known.number,
        title=title,
        severity=d.severity,
        evidence=d.evidence,
        cause=known.cause,
        fix=d.fix or known.fix,
        references=list(known.references),
        checks=d.checks,
    )


def overview(s: Scene) -> Overview:
    inv, hw, host = s.inv, s.hw, s.inv.host
    sees = []
    cores = f"{host.logical_cores} CPUs" if host.logical_cores else "CPUs unknown"
    shm = f", /dev/shm {format_bytes(host.shm_total_bytes)}" if host.shm_total_bytes is not None else ""
    sees.append(f"host {host.hostname or '?'}: {host.os_name or 'unknown OS'}, {cores}, {format_bytes(host.memory_total_bytes)} memory{shm}")
    stack = ", ".join(f"{p.name} {p.version}" for p in s.env.packages if p.version and p.role in ("jax", "jaxlib", "plugin", "pjrt", "libtpu"))
    sees.append(f"software: {stack or 'jax not installed'}")
    plugins = ", ".join(f"{p.name} ({p.status.value})" for p in inv.plugins)
    sees.append(f"JAX plugins: {plugins or 'none'}")
    nvml = hw.nvidia
    if getattr(nvml, "gpus", None):
        names = sorted({g.name or "?" for g in nvml.gpus})
        sees.append(f"NVIDIA: {len(nvml.gpus)} GPU(s) ({', '.join(names)}), driver {nvml.driver_version}, CUDA {nvml.cuda_driver_version_str}")
    elif hw.nvidia_pci:
        drivers = sorted({f.driver or "no driver" for f in hw.nvidia_pci})
        sees.append(f"NVIDIA: {len(hw.nvidia_pci)} GPU(s) on the PCI bus ({', '.join(drivers)}); NVML: {nvml.reason}")
    else:
        sees.append("NVIDIA: no GPU")
    if s.facts.nvswitches:
        fm = f"running (pid {s.facts.fabric_manager.pid})" if s.facts.fabric_manager else "not running"
        sees.append(f"NVSwitch: {len(s.facts.nvswitches)} bridge(s); fabric manager {fm}")
    tpu = hw.tpu
    if tpu.chips:
        sees.append(f"TPU: {len(tpu.chips)} {'/'.join(tpu.versions)} chip(s); lockfile {tpu.lockfile.state}")
    else:
        sees.append("TPU: no chip" + (f"; lockfile {tpu.lockfile.state}" if tpu.lockfile.state != "absent" else ""))
    amd = getattr(hw.amd, "gpus", None) or ()
    sees.append(f"AMD: {len(amd)} GPU(s)" if amd else "AMD: no GPU")
    if inv.unused_accelerators:
        sees.append(f"accelerators JAX does not use: {len(inv.unused_accelerators)}")

    will = []
    default = inv.default_platform
    devices = [d for d in inv.devices if default and (d.platform == default or (default in ("cuda", "rocm") and d.platform == "gpu"))]
    kinds = sorted({d.device_kind for d in devices})
    outcome = getattr(inv, "jax_outcome", None)
    if outcome is not None and outcome.fails:
        will.append(f"jax.devices() {outcome.result}: {outcome.error or outcome.culprit}")
    elif default:
        will.append(f"default backend {default}: {len(devices)} device(s) ({', '.join(kinds)})")
    else:
        will.append("no backend: jax.devices() raises")
    if s.environ.get("JAX_PLATFORMS"):
        will.append(f"JAX_PLATFORMS={s.environ['JAX_PLATFORMS']} decides which backends JAX starts")
    for b in inv.backends:
        if b.platform != default:
            state = b.status.value if b.status is not BackendStatus.OK else f"ok ({b.device_count} device(s))"
            why = f": {b.hint or b.error}" if b.status is not BackendStatus.OK and (b.hint or b.error) else ""
            will.append(f"{b.platform}: {state}{why}")
    return Overview(sees=sees, jax_will_use=will, default_platform=default, device_count=len(devices), device_kinds=kinds)


def doctor(host_root: str = "/", timeout_s: float = 30.0) -> DoctorReport:
    """Discovery, every check without expectations, and the diagnosis."""
    from devctl.checks import CHECK_NAMES
    from devctl.checks.facts import machine_facts
    from devctl.collect.check import run_checks
    from devctl.collect.check_context import Context
    from devctl.model.check import Expectations

    started = time.monotonic()
    with Context(Expectations(timeout_s=timeout_s), host_root, list(CHECK_NAMES)) as ctx:
        results = run_checks(ctx)
        scene = Scene(
            inv=ctx.inventory(),
            env=ctx.environment(),
            facts=machine_facts(ctx.root),
            nvml=ctx.nvml(),
            checks={r.name: r for r in results},
            environ=dict(os.environ),
        )
    findings = diagnose(scene)
    return DoctorReport(
        schema=DOCTOR_SCHEMA,
        devctl_version=__version__,
        timestamp=time.time(),
        hostname=socket.gethostname(),
        status="problems" if findings else "ok",
        overview=overview(scene),
        findings=findings,
        checks=results,
        elapsed_s=round(time.monotonic() - started, 3),
    )


# ---- small helpers --------------------------------------------------------------------------------------


def _few(items: list[str], n: int = 3) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def _driver_branch(version: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", version or "")
    return int(m.group(1)) if m else None


def _cuda_for_branch(branch: int | None) -> tuple[int, int] | None:
    if branch is None:
        return None
    for cuda, minimum in CUDA_MIN_DRIVER_BRANCH:
        if branch >= minimum:
            return cuda
    return None
