"""One advice per condition: what is wrong with a backend, a plugin or JAX as a whole, and what fixes it.

`list` shows it beside the row, `check` gives it as the remediation and `doctor`
as the finding, so the three never disagree. Evidence about the machine comes
first (no NVIDIA GPU at all is not a broken plugin); error text second. Each
advice carries a stable code (docs/doctor.md: "Finding codes") and its fix as data
(devctl.model.remedy: environment changes, pip commands), one Remedy per way the
line offers, which the oracle tests (tests/test_oracle*.py) apply to real JAX.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from dataclasses import dataclass
from typing import Mapping

from devctl.discovery.envvars import Assessment, EnvFix
from devctl.model.list_ import BackendInfo, BackendStatus, JaxOutcome
from devctl.model.remedy import Remedy, env_remedy, pip_command, pip_remedy
from devctl.model.xla_flags import refused_flags, without, xla_flags_failure

PJRT_ENV = "PJRT_NAMES_AND_LIBRARY_PATHS"
CODE_PREFIX = "DEVCTL_FR_"


@dataclass(frozen=True)
class Advice:
    finding: str  # the doctor catalogue id; `code` derives from it
    summary: str  # what is wrong, one line
    fix: str  # what to do, one line
    remedies: tuple[Remedy, ...] = ()  # the fix as data: each way `fix` offers; none where it is no command

    @property
    def code(self) -> str:
        return code_of(self.finding)

    @property
    def fix_env(self) -> dict[str, str | None] | None:
        """The environment change that fixes it (None: unset the variable), where one does."""
        return next((dict(r.env) for r in self.remedies if r.env and not r.pip), None)


def code_of(finding: str) -> str:
    """The stable code of a finding id: cuda-plugin-without-gpu -> DEVCTL_FR_CUDA_PLUGIN_WITHOUT_GPU."""
    return CODE_PREFIX + finding.upper().replace("-", "_")


def finding_of(code: str) -> str:
    """The finding id of a code: the inverse of code_of."""
    return code.removeprefix(CODE_PREFIX).lower().replace("_", "-")


# ---- machine evidence ---------------------------------------------------------------------------


def nvidia_evidence(hw) -> str | None:
    """None when the machine shows no NVIDIA GPU at all; else what shows one."""
    gpus = getattr(hw.nvidia, "gpus", None) or ()
    if gpus:
        return f"NVML sees {len(gpus)} GPU(s)"
    if hw.nvidia_pci:
        return f"{len(hw.nvidia_pci)} NVIDIA GPU(s) on the PCI bus"
    if hw.nvidia_device_nodes:
        return f"device nodes {', '.join(hw.nvidia_device_nodes[:3])}"
    return None


def nodes_without_driver(hw) -> bool:
    """/dev/nvidia* exists but the driver's libraries do not: a container given the devices, not the runtime."""
    nodes = any(n in ("/dev/nvidiactl", "/dev/nvidia0") for n in hw.nvidia_device_nodes)
    # "libnvidia-ml.so.1 not found": the library is missing (not NVML left unread under --host-root).
    missing = getattr(hw.nvidia, "status", None) == "unavailable" and "not found" in (getattr(hw.nvidia, "reason", None) or "")
    return nodes and missing


def amd_present(hw) -> bool:
    return bool(getattr(hw.amd, "gpus", None))


def is_cuda(row: BackendInfo) -> bool:
    """The CUDA backend, or a plugin that provides it (jax_plugins.xla_cuda13)."""
    return row.platform == "cuda" or "cuda" in (row.plugin or "")


def _is_rocm(row: BackendInfo) -> bool:
    return row.platform == "rocm" or "rocm" in (row.plugin or "")


# ---- advice -------------------------------------------------------------------------------------


def _rocm_packages(row: BackendInfo) -> list[str]:
    """The distributions that provide a ROCm plugin module: jax_plugins.xla_rocm7 -> jax-rocm7-plugin jax-rocm7-pjrt."""
    match = re.search(r"rocm(\d+)", row.plugin or "")
    series = match.group(1) if match else "7"
    return _installed_of([f"jax-rocm{series}-plugin", f"jax-rocm{series}-pjrt"])


def _cuda_packages(row: BackendInfo | None) -> list[str]:
    """The distributions that provide the failing CUDA plugin (jax_plugins.xla_cuda13 -> jax-cuda13-plugin
    jax-cuda13-pjrt): only what is installed is named. A row that names no series: both series' names."""
    match = re.search(r"cuda(\d+)", (row.plugin or "") if row else "")
    series = [match.group(1)] if match else ["12", "13"]
    return _installed_of([f"jax-cuda{s}-{half}" for s in series for half in ("plugin", "pjrt")])


def _installed_of(names: list[str]) -> list[str]:
    """Those of `names` installed here (evidence first: no uninstall of a package that is not there); all of them
    when none is (a plugin without its distribution's metadata: the names say what to look for)."""
    from devctl.discovery.versions import installed_packages

    have = {p.name.lower().replace("_", "-") for p in installed_packages() if p.version}
    return [n for n in names if n in have] or names


# CUDA_VISIBLE_DEVICES values that hide every GPU from CUDA.
HIDDEN_GPU_VALUES = ("", "-1", "none", "NoDevFiles")
UNHIDE_GPUS = "unset CUDA_VISIBLE_DEVICES, or list the GPUs this job should use (CUDA_VISIBLE_DEVICES=0,1,...)"


def hidden_gpus(row: BackendInfo, hw, environ: Mapping[str, str]) -> Advice | None:
    """The CUDA row fails because CUDA_VISIBLE_DEVICES hides every GPU, on a machine that has some (evidence
    first: without a GPU there is nothing to hide). The plugin is fine."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if not is_cuda(row) or value is None or value.strip() not in HIDDEN_GPU_VALUES or nvidia_evidence(hw) is None:
        return None
    return Advice(
        "no-visible-gpu",
        f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU from CUDA, and this machine has NVIDIA GPUs ({nvidia_evidence(hw)})",
        UNHIDE_GPUS,
        env_remedy({"CUDA_VISIBLE_DEVICES": None}),
    )


def no_nvidia_gpu(row: BackendInfo | None = None) -> Advice:
    summary = "this machine has no NVIDIA GPU (or its driver is not loaded or not mounted into this container); JAX falls back to CPU"
    command = ["uninstall", *_cuda_packages(row)]
    uninstall = f"uninstall the CUDA extra ({pip_command(command)})"
    if row is not None and row.plugin and _plugin_ignores_jax_platforms(row.plugin):
        # jax-cuda12-plugin 0.6.2's initialize() fails before it could look at JAX_PLATFORMS: only uninstalling helps.
        return Advice("cuda-plugin-without-gpu", summary, f"to silence the CUDA plugin {uninstall}; this release ignores JAX_PLATFORMS", pip_remedy(command))
    fix = f"to silence the CUDA plugin set JAX_PLATFORMS=cpu, or {uninstall}"
    return Advice("cuda-plugin-without-gpu", summary, fix, env_remedy({"JAX_PLATFORMS": "cpu"}) + pip_remedy(command))


def _plugin_ignores_jax_platforms(module: str) -> bool:
    from devctl.discovery.plugins import honours_jax_platforms

    return honours_jax_platforms(module) is False


def for_row(row: BackendInfo, hw, environ: Mapping[str, str] | None = None, backends: list[BackendInfo] | None = None) -> Advice | None:
    """The advice for one backend or plugin row that is not ok; None for a row that needs none. `backends`, every
    row, lets a row that only JAX_PLATFORMS made say what JAX_PLATFORMS should be."""
    environ = os.environ if environ is None else environ
    if row.status is BackendStatus.OK:
        return None
    if not row.plugin and _UNKNOWN_PLATFORM in (row.error or "") and environ.get("JAX_PLATFORMS"):
        # No plugin provides it: the row exists because JAX_PLATFORMS names it (a typo, "CPU", "gpu" here).
        return jax_platforms(environ, backends or [row])
    if row.status is BackendStatus.SKIPPED and row.platform == "tpu" and not getattr(hw.tpu, "chips", None):
        return None  # no TPU here: JAX ignores the backend, and so does devctl
    broken = row.status in (BackendStatus.FAILED, BackendStatus.CRASHED, BackendStatus.TIMEOUT, BackendStatus.EXITED)
    if broken and (refused := xla_flags_failure(row.error or "")) is not None:
        return xla_flags(refused, environ)  # XLA's flag parser ends every process at its first backend, whichever it is
    if broken and row.platform == "jax" and not row.plugin:
        return jax_import(row)  # jax itself does not import: no backend, and no JAX_PLATFORMS, matters
    if broken and row.plugin and row.platform in env_entries(environ):
        # Before the machine's evidence: an entry's failure propagates out of every jax.devices(),
        # JAX_PLATFORMS=cpu or not (a CUDA entry beside jax[cuda12] fails with ALREADY_EXISTS exactly then).
        return pjrt_entry(row, environ)
    if (broken or row.status is BackendStatus.SKIPPED) and (hidden := hidden_gpus(row, hw, environ)) is not None:
        return hidden
    if broken and is_cuda(row) and nodes_without_driver(hw):
        return Advice(
            "nvidia-driver-not-mounted",
            "NVIDIA device nodes exist but the driver's libraries (libcuda, libnvidia-ml) cannot be loaded",
            "in a container, start it with the NVIDIA runtime (docker run --gpus all, or the NVIDIA device plugin in Kubernetes) so the driver libraries are mounted; on a host, install the NVIDIA driver",
        )
    if broken and is_cuda(row) and nvidia_evidence(hw) is None:
        return no_nvidia_gpu(row)
    if broken and _is_rocm(row) and not amd_present(hw):
        # Unlike the CUDA plugin's, the ROCm plugin's initialize() counts AMD GPUs before it reads
        # JAX_PLATFORMS (jax-rocm7-plugin 0.10.2): JAX logs its error under JAX_PLATFORMS=cpu too.
        command = ["uninstall", *_rocm_packages(row)]
        return Advice(
            "rocm-plugin-without-gpu",
            "this machine has no AMD GPU visible through /sys/class/kfd; JAX logs the ROCm plugin's error and falls back to CPU",
            f"to silence the ROCm plugin uninstall it ({pip_command(command)}); JAX_PLATFORMS=cpu does not silence it",
            pip_remedy(command),
        )
    if broken and row.platform in env_entries(environ):
        # Its library loaded (a failed load is the entry's advice above); its client did not start.
        # Not a skipped row: JAX skips CUDA without a word on a machine with no NVIDIA device node.
        return Advice(
            "backend-failed",
            f"the {row.platform} backend of {PJRT_ENV} fails to start, so jax.devices() {'raises' if row.status is BackendStatus.FAILED else 'dies'} for every program",
            f"drop it from {PJRT_ENV} ({_without(row.platform, environ)}), or set JAX_PLATFORMS=cpu to skip it",
            env_remedy({PJRT_ENV: _remaining(row.platform, environ)}) + env_remedy({"JAX_PLATFORMS": "cpu"}),
        )
    if row.plugin and row.status is BackendStatus.FAILED:
        # JAX logs it and goes on; JAX_PLATFORMS does not stop it: JAX imports every plugin it finds.
        return Advice(
            "plugin-broken",
            f"the plugin {row.plugin} fails to load; JAX logs the error and goes on without it",
            f"reinstall it at jaxlib's version, or uninstall it (pip uninstall the package that provides {row.plugin})",
        )
    if row.plugin:
        return Advice(
            "plugin-broken",
            f"the plugin {row.plugin} {'kills' if row.status is BackendStatus.CRASHED else 'hangs'} every JAX program while it loads",
            f"uninstall it (pip uninstall the package that provides {row.plugin}); JAX_PLATFORMS does not help: JAX loads every plugin",
        )
    if row.status is BackendStatus.TIMEOUT:
        return Advice(
            "backend-failed",
            f"the {row.platform} backend hangs while it starts",
            "another process may hold the device (devctl memstats names it), or a multi-host slice waits for its other hosts: start the program on every host",
        )
    if row.platform == "tpu" and not getattr(hw.tpu, "chips", None):
        # Only JAX_PLATFORMS or --platform makes a machine without TPU fail on tpu (else the row is skipped above).
        named = jax_platforms(environ, backends or [row])
        # Else the row exists because `list --platform tpu` asked for it: the flag, not the variable, is said.
        return named or Advice("backend-failed", "this machine has no TPU chip (--platform tpu asked for it)", "run it on a TPU VM, or leave out --platform tpu")
    if row.platform == "tpu" and "libtpu" in (row.error or ""):
        command = ["install", "-U", "jax[tpu]"]
        return Advice("libtpu-missing", "TPU chips are present but libtpu cannot be loaded", pip_command(command), pip_remedy(command))
    if row.status is BackendStatus.SKIPPED:
        return None
    quiet = row.fail_quietly and not environ.get("JAX_PLATFORMS")
    return Advice(
        "backend-failed",
        f"the {row.platform} backend fails to start" + ("; JAX ignores it" if quiet else "; jax.devices() raises for every program"),
        f"fix what its error says, or uninstall the plugin that provides {row.platform}; meanwhile JAX_PLATFORMS=cpu skips it",
        () if quiet else env_remedy({"JAX_PLATFORMS": "cpu"}),
    )


_JAXLIB_NEWER = re.compile(r"jaxlib version (\S+) is newer than and incompatible with jax version (\S+?)\.?(?:\s|$)")
# jax._src.config.bool_env's words for a JAX_* boolean it cannot read (JAX_ENABLE_X64=maybe).
_BAD_TRUTH_VALUE = re.compile(r"invalid truth value '(.*?)' for environment '(\w+)'")
_JAXLIB_OLDER = re.compile(r"jaxlib is version (\S+), but this version of jax requires version >= (\S+?)\.?(?:\s|$)")


def jax_import(row: BackendInfo) -> Advice:
    """`import jax` itself raises (or dies): every JAX program fails before any backend or plugin is touched."""
    error = row.error or ""
    if "jax requires jaxlib to be installed" in error:
        from devctl.discovery.versions import installed_packages, stack_fix

        fix = stack_fix(installed_packages())
        command = fix.pip if fix else ["install", "-U", "jax", "jaxlib"]
        summary = "jaxlib is not installed: `import jax` raises, so every JAX program fails; JAX_PLATFORMS does not help"
        return Advice("jaxlib-missing", summary, pip_command(command), pip_remedy(command))
    if (bad := _BAD_TRUTH_VALUE.search(error)) is not None:
        value, name = bad.groups()
        return Advice(
            "jax-env-invalid",
            f"{name}={value!r} is no truth value to JAX: `import jax` raises ValueError, so every JAX program fails; JAX_PLATFORMS does not help",
            f"unset {name}, or set it to true or false",
            env_remedy({name: None}),
        )
    newer, older = _JAXLIB_NEWER.search(error), _JAXLIB_OLDER.search(error)
    if newer or older:
        # The whole stack at jax's own pins, word for word the `versions` check's one fix: a plugin installed
        # beside jaxlib moves with it, and a jax released without its own jaxlib (0.5.2) gets the one it pins.
        from devctl.discovery.versions import installed_packages, stack_fix

        fix = stack_fix(installed_packages())
        named = newer.group(2) if newer else None  # the jax of the error: another host's, under --distributed
        if fix is not None and named in (None, fix.jax_version):
            command = fix.pip
        else:
            version = named or (fix.jax_version if fix else None)
            command = ["install", "-U", f"jax=={version}", f"jaxlib=={version}"] if version else ["install", "-U", "jax", "jaxlib"]
        if newer:
            what = f"jaxlib {newer.group(1)} is newer than jax {newer.group(2)}"
        else:
            assert older is not None  # one of the two matched
            what = f"jaxlib {older.group(1)} is older than jax needs ({older.group(2)})"
        summary = f"{what}: `import jax` raises, so every JAX program fails; JAX_PLATFORMS does not help"
        return Advice("jax-jaxlib-skew", summary, pip_command(command), pip_remedy(command))
    # No remedy as data: reinstalling cures a broken install, not every cause an import can have.
    return Advice(
        "backend-failed",
        f"`import jax` {'raises' if row.status is BackendStatus.FAILED else 'dies'}, so every JAX program fails before any backend starts; JAX_PLATFORMS does not help",
        f"fix what its error says; a broken install is fixed by reinstalling both at one version: {pip_command(['install', '-U', '--force-reinstall', 'jax', 'jaxlib'])}",
    )


def xla_flags(refused: str, environ: Mapping[str, str]) -> Advice:
    """XLA_FLAGS holds a flag XLA's parser refuses: every JAX program exits (status 1) at its first backend."""
    value = environ.get("XLA_FLAGS") or ""
    items = refused_flags(refused, value)
    rest = without(value, items)
    named = " ".join(items) or "the flag it names"
    fix = f"remove {named} from XLA_FLAGS: " + (f"export XLA_FLAGS={shlex.quote(rest)}" if rest else "unset XLA_FLAGS")
    return Advice(
        "xla-flags-invalid",
        f"XLA refuses XLA_FLAGS ({refused}) and ends the process inside jax.devices() (exit status 1; older XLA aborts): every JAX program, whatever JAX_PLATFORMS says",
        fix,
        env_remedy({"XLA_FLAGS": rest or None}) if items else (),
    )


def with_xla_flags_verdict(variables: list[Assessment], refused: str | None, environ: Mapping[str, str]) -> list[Assessment]:
    """assess_env()'s rows with XLA_FLAGS as XLA's own parser judged it (`refused`: its words, from devctl env's
    child): an error whose fix is the variable without the refused items. `devctl env` and check's env row."""
    if refused is None:
        return variables
    advice = xla_flags(refused, environ)
    change = advice.fix_env or {}
    fix = EnvFix({k: v for k, v in change.items() if v is not None}, tuple(k for k, v in change.items() if v is None))
    problem = f"XLA refuses it ({refused}): every JAX program ends there (exit status 1; older XLA aborts); {advice.fix}"
    return [dataclasses.replace(v, problem=problem, severity="error", remedy=advice.fix, fix=fix) if v.name == "XLA_FLAGS" else v for v in variables]


_UNKNOWN_PLATFORM = "is not in the list of known backends"
# What "gpu" means to JAX_PLATFORMS (xla_bridge expands the alias to every GPU platform).
_GPU_PLATFORMS = ("cuda", "rocm", "oneapi")


def jax_platforms(environ: Mapping[str, str], backends: list[BackendInfo]) -> Advice | None:
    """What is wrong with JAX_PLATFORMS, entry by entry as JAX splits it (on commas, nothing stripped, case kept),
    and the value that keeps what starts here; None when every entry names a platform that starts."""
    value = environ.get("JAX_PLATFORMS") or ""
    if not value:
        return None  # empty is unset to JAX: it picks the best backend that starts
    rows = {b.platform: b for b in backends}
    said: list[str] = []
    keep: list[str] = []
    for entry in value.split(","):
        name = entry.strip().lower()
        platforms = _GPU_PLATFORMS if name == "gpu" else (name,)
        if any(_starts(p, rows) for p in platforms):
            if name not in keep:
                keep.append(name)
            if entry != name:
                said.append(_misnamed(entry))
            continue
        said.append(_misnamed(entry) if entry != name or not name else _does_not_start(entry, platforms, rows))
    if not said:
        return None
    fixed = ",".join(keep) or None
    return Advice(
        "jax-platforms-unavailable",
        f"JAX_PLATFORMS={value!r}: {'; '.join(said)}",
        f"export JAX_PLATFORMS={fixed}" if fixed else "unset JAX_PLATFORMS, so JAX picks the best backend that starts",
        env_remedy({"JAX_PLATFORMS": fixed}),
    )


def _starts(platform: str, rows: dict[str, BackendInfo]) -> bool:
    """Whether the platform starts here: its row says so; jaxlib's own CPU backend, probed or not, unless its
    row says otherwise (a JAX_PLATFORMS of "CPU" probes no "cpu" row). A row XLA's flag parser ended is no
    fault of JAX_PLATFORMS: XLA_FLAGS ends every backend, and is said as the cause on its own."""
    row = rows.get(platform)
    if row is not None and xla_flags_failure(row.error or "") is not None:
        return True
    return row.status is BackendStatus.OK if row is not None else platform == "cpu"


def _misnamed(entry: str) -> str:
    if not entry.strip():
        return "an empty name (a comma too many), which JAX looks for as a platform"
    if entry != entry.strip():
        return f"{entry!r} has spaces around it, which JAX keeps: no platform has that name"
    return f"{entry!r}: JAX's platform names are lower case ({entry.lower()!r})"


def _does_not_start(entry: str, platforms: tuple[str, ...], rows: dict[str, BackendInfo]) -> str:
    def why(p: str) -> str:
        row = rows.get(p)
        if row is None or _UNKNOWN_PLATFORM in (row.error or ""):
            return f"{p}: no installed plugin provides it"
        return f"{p}: {row.status.value}: {' '.join((row.error or '').split())[:160]}"

    if entry == "gpu":
        return f"gpu (to JAX: {', '.join(platforms)}) does not start here ({'; '.join(why(p) for p in platforms)})"
    return f"{entry} does not start here ({why(entry)})"


def env_entries(environ: Mapping[str, str]) -> list[str]:
    """The plugin names PJRT_NAMES_AND_LIBRARY_PATHS gives, as JAX splits them."""
    return [i.split(os.pathsep, 1)[0] for i in (environ.get(PJRT_ENV) or "").split(",") if os.pathsep in i]


def _without(name: str, environ: Mapping[str, str]) -> str:
    """The shell command that drops `name`, and every other entry whose file is missing, from the variable."""
    remaining = _remaining(name, environ)
    return f"export {PJRT_ENV}={remaining}" if remaining else f"unset {PJRT_ENV}"


def _remaining(name: str, environ: Mapping[str, str]) -> str | None:
    # JAX stops at the first entry that fails: drop it and every other whose file is not there either.
    items = [i for i in (environ.get(PJRT_ENV) or "").split(",") if i]
    keep = [i for i in items if i.split(os.pathsep, 1)[0] != name and os.path.isfile(i.split(os.pathsep, 1)[-1])]
    return ",".join(keep) or None


def pjrt_entry(row: BackendInfo, environ: Mapping[str, str]) -> Advice:
    """A PJRT_NAMES_AND_LIBRARY_PATHS entry that fails: JAX raises for it on every call, JAX_PLATFORMS or not."""
    if "ALREADY_EXISTS" in (row.error or ""):
        # Its library is fine: an installed plugin (jax[cuda12] under JAX_PLATFORMS=cpu) registered the name first.
        return Advice(
            "pjrt-entry-broken",
            f"{PJRT_ENV} entry {row.platform} registers a platform an installed plugin already registered, so every jax.devices() raises, even with JAX_PLATFORMS=cpu",
            f"drop it, the installed plugin provides {row.platform}: {_without(row.platform, environ)}",
            env_remedy({PJRT_ENV: _remaining(row.platform, environ)}),
        )
    return Advice(
        "pjrt-entry-broken",
        f"{PJRT_ENV} entry {row.platform} cannot be loaded, so every jax.devices() {'raises' if row.status is BackendStatus.FAILED else 'dies'}, even with JAX_PLATFORMS=cpu",
        f"fix its path, or drop it: {_without(row.platform, environ)}",
        env_remedy({PJRT_ENV: _remaining(row.platform, environ)}),
    )


def for_outcome(outcome: JaxOutcome, backends: list[BackendInfo], hw, environ: Mapping[str, str] | None = None) -> Advice | None:
    """The advice when jax.devices() itself fails: the culprit's, phrased for JAX as a whole."""
    environ = os.environ if environ is None else environ
    if not outcome.fails:
        return None
    rows = {b.platform: b for b in backends}
    if outcome.culprit == "XLA_FLAGS" and (refused := xla_flags_failure(outcome.error or "")) is not None:
        return xla_flags(refused, environ)
    culprit = rows.get(outcome.culprit or "")
    if culprit is not None and culprit.platform == "jax" and not culprit.plugin:
        return jax_import(culprit)  # before JAX_PLATFORMS: `import jax` fails whatever it says
    if outcome.culprit == PJRT_ENV or (culprit is not None and culprit.plugin and culprit.platform in env_entries(environ)):
        return pjrt_entry(culprit or BackendInfo(platform="?", status=BackendStatus.FAILED), environ)
    if culprit is not None and (hidden := hidden_gpus(culprit, hw, environ)) is not None:
        return hidden  # the root cause: JAX_PLATFORMS=cuda is right once the GPUs are visible
    named = environ.get("JAX_PLATFORMS")
    if named and (culprit is None or not culprit.plugin):
        found = jax_platforms(environ, backends)
        if found is not None:
            return dataclasses.replace(found, summary=f"{found.summary}, so jax.devices() raises")
    if culprit is not None:
        return for_row(culprit, hw, environ, backends)
    return Advice("backend-failed", f"jax.devices() {outcome.result}: {outcome.error}", "its error says what is wrong")
