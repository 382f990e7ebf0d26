"""The doctor's rules over JAX's own stack: jax.devices() itself, backend and plugin errors, versions, JAX_PLATFORMS, PJRT.

Each rule reads a Scene and yields Drafts (devctl.checks.scene); the order
they run in is devctl.checks.diagnosis.RULES.
"""

from __future__ import annotations

from typing import Iterable

from devctl.checks.advice import code_of, finding_of
from devctl.checks.catalogue import MESSAGES
from devctl.checks.scene import BROKEN, Draft, Scene, Severity, explained_by_evidence
from devctl.discovery.versions import HALF_INSTALLED, JAXLIB_MISSING
from devctl.model.env import EnvFinding
from devctl.model.plugins import PluginSource
from devctl.model.remedy import pip_remedy

# A TPU finding already explains why the tpu backend and libtpu fail: they are not named again.
_TPU_IDS = ("tpu-held", "libtpu-missing", "tpu-device-permission", "multihost-slice-waiting")


def jax_devices_fails(s: Scene) -> Iterable[Draft]:
    """jax.devices() itself fails: the finding devctl list leads with, with the same fix."""
    outcome = getattr(s.inv, "jax_outcome", None)
    if outcome is None or not outcome.fails or not outcome.code:
        return
    finding, fix, remedies = finding_of(outcome.code), outcome.fix, outcome.remedies
    if finding in ("backend-failed", "plugin-broken"):
        # A generic advice: a catalogue entry that recognizes JAX's words says more.
        known = next((fid for fid, pattern in MESSAGES if pattern.search(outcome.error or "")), None)
        finding, fix, remedies = (known, None, []) if known else (finding, fix, remedies)
    culprit = s.not_ok(b for b in s.inv.backends if b.platform == outcome.culprit)
    evidence = [f"jax.devices() {outcome.result}: {outcome.error or outcome.culprit}"]
    # The checks that fail of it: a variable's cause fails the env check too (its row says the same fix).
    checks = ["backends", "devices"] + (["env"] if finding in ("xla-flags-invalid", "jax-platforms-unavailable", "jax-env-invalid") else [])
    if any(b.plugin for b in s.inv.backends if b.platform == outcome.culprit):
        checks.append("plugins")  # a plugin that kills or hangs every JAX program fails the plugins check too
    yield Draft(finding, evidence, checks, fix=fix, remedies=list(remedies), backends=culprit)


def evidence_first(s: Scene) -> Iterable[Draft]:
    """Rows whose advice the machine's evidence gave (no GPU for the CUDA plugin, a driver not mounted, ...): the same advice."""
    from devctl.checks.advice import nvidia_evidence

    for b in s.inv.backends:
        if b.code is None or not explained_by_evidence(b):
            continue
        finding = finding_of(b.code)
        evidence = [f"{b.platform} {'plugin' if b.plugin else 'backend'} {b.status.value}: {b.error}"]
        if finding == "cuda-plugin-without-gpu":
            evidence.append("no NVIDIA GPU: no NVML GPU, no NVIDIA device on the PCI bus, no /dev/nvidia* node")
        elif finding == "nvidia-driver-not-mounted":
            evidence.append(f"{nvidia_evidence(s.hw)} exist, but NVML: {getattr(s.hw.nvidia, 'reason', None)}")
        outcome = getattr(s.inv, "jax_outcome", None)
        fails = outcome is not None and outcome.fails
        severity: Severity = "error" if fails or finding in ("nvidia-driver-not-mounted", "pjrt-entry-broken") else "warning"
        checks = ["plugins"] if b.plugin else ["backends"]
        yield Draft(finding, evidence, checks, fix=b.hint, remedies=list(b.remedies), severity=severity, backends=[b.platform])


# Entries about NVIDIA GPUs that are there: their words in an error say nothing on a machine without one (the
# CUDA plugin's initialize() reports CUDA_ERROR_NO_DEVICE wherever there is no GPU at all).
_NEEDS_NVIDIA_GPU = ("no-visible-gpu", "fabric-manager-missing", "driver-library-mismatch")


def known_messages(s: Scene) -> Iterable[Draft]:
    """Every error devctl collected that carries JAX's or XLA's own words for a catalogue entry, where the
    machine has what the entry is about (evidence first)."""
    for where, message, checks, rows in s.errors():
        for fid, pattern in MESSAGES:
            if pattern.search(message) and not (fid in _NEEDS_NVIDIA_GPU and not s.nvidia_gpus()):
                yield Draft(fid, [f"{where}: {message}"], checks, backends=rows)


def jax_platforms_unavailable(s: Scene) -> Iterable[Draft]:
    """JAX_PLATFORMS names a platform that does not start here (or no platform at all: "CPU", " cpu", "cpu,"):
    the one advice list gives (devctl.checks.advice.jax_platforms), whatever JAX then does."""
    from devctl.checks.advice import jax_platforms
    from devctl.checks.backends import platform_matches

    found = jax_platforms(s.environ, s.inv.backends)
    if found is None:
        return
    entries = (s.environ.get("JAX_PLATFORMS") or "").split(",")
    names = [e.strip().lower() for e in entries if e.strip()]
    # The rows of the platforms it names, and those only its misnamed entries made ("CPU", " cpu", "").
    # ...and every row whose own advice is this one (JAX_PLATFORMS=gpu makes a oneapi row no plugin provides).
    rows = [
        b for b in s.inv.backends
        if b.platform in entries or any(platform_matches(n, b.platform) for n in names) or b.code == code_of("jax-platforms-unavailable")
    ]  # fmt: skip
    outcome = getattr(s.inv, "jax_outcome", None)
    evidence = [found.summary]
    if outcome is not None and outcome.result == "ok":
        evidence.append(f"JAX skips what does not start and runs on {outcome.default_backend}")
    checks = ["backends", "devices", "env"]
    yield Draft("jax-platforms-unavailable", evidence, checks, fix=found.fix, remedies=list(found.remedies), backends=s.not_ok(rows))


def version_skew(s: Scene) -> Iterable[Draft]:
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
        if f.message == JAXLIB_MISSING:
            fid = "jaxlib-missing"
        elif HALF_INSTALLED in f.message:
            fid = "plugin-half-installed"
        elif pkgs & {"nvidia-driver", "cuda-runtime"}:
            fid = "driver-too-old"
        elif any(roles.get(p) in ("plugin", "pjrt") for p in pkgs):
            fid = "plugin-version-skew"
        elif any(roles.get(p) == "libtpu" for p in pkgs):
            fid = "libtpu-version-skew"
        elif any(p.startswith("nvidia-") for p in pkgs):
            fid = "cuda-library-shadowed"
        else:
            fid = "jax-jaxlib-skew"
        severity: Severity = "error" if f.severity == "error" else "warning"
        yield Draft(fid, [f.message], ["versions"], fix=f.remediation or None, severity=severity, backends=_skewed_rows(s, [f]))
    if not stack or fix is None:  # stack holds only findings of the one fix
        return
    involved = {roles.get(p) for f in stack for p in f.packages}
    if any(f.message == JAXLIB_MISSING for f in stack):
        fid = "jaxlib-missing"
    elif all(HALF_INSTALLED in f.message for f in stack):
        fid = "plugin-half-installed"
    elif any(set(f.packages) == {"jax", "jaxlib"} for f in stack):
        fid = "jax-jaxlib-skew"  # `import jax` raises: the first thing a user meets
    elif involved & {"plugin", "pjrt"}:
        fid = "plugin-version-skew"
    else:
        fid = "libtpu-version-skew"
    worst: Severity = "error" if any(f.severity == "error" for f in stack) else "warning"
    evidence = [f.message for f in stack] + ([f"the fix {fix.summary}"] if fix.summary else [])
    yield Draft(fid, evidence, ["versions"], fix=fix.command, remedies=list(pip_remedy(fix.pip)), severity=worst, backends=_skewed_rows(s, stack))


def _skewed_rows(s: Scene, skews: list[EnvFinding]) -> list[str]:
    """The rows skews explain: those their packages install; every CUDA row for a driver or CUDA library JAX refuses."""
    rows = []
    for f in skews:
        rows += s.rows_of_packages(f.packages)
        if f.severity == "error" and any(p in ("nvidia-driver", "cuda-runtime") or p.startswith("nvidia-") for p in f.packages):
            rows += s.cuda_rows()
    return list(dict.fromkeys(rows))


def pjrt_api_mismatch(s: Scene) -> Iterable[Draft]:
    """A plugin library whose PJRT C API version jaxlib's plugin check refuses (xla/pjrt/pjrt_api.cc), by jaxlib's
    own version and rule as measured; compatibility mode, the default, takes any 0.x with x >= 29."""
    from devctl.checks.software import pjrt_refusal, pjrt_refused, pjrt_remedy

    fix = s.env.stack_fix
    fix_command = fix.command if fix is not None else None
    stack = {p.name for p in s.env.packages if p.role in ("pjrt", "libtpu")}
    for p in s.inv.plugins:
        if not pjrt_refused(p):
            continue
        packaged = fix_command is not None and (p.distribution or "").replace("_", "-").lower() in stack
        evidence = [f"plugin {p.name} ({p.library_path}): {pjrt_refusal(p)}"]
        if packaged:
            # A package of the stack at another release than jaxlib's: the skew is the cause (strict mode only makes
            # it refused), and the stack's one fix cures both: one finding with the version skew's.
            checks = ["versions", "plugins", "backends"]
            remedies = list(pip_remedy(fix.pip)) if fix is not None else []
            yield Draft("plugin-version-skew", evidence, checks, fix=fix_command, remedies=remedies, backends=s.rows_of_plugin(p))
            continue
        # Strict mode (ENABLE_PJRT_COMPATIBILITY): the setting; else that entry or package. Never "set
        # ENABLE_PJRT_COMPATIBILITY=true" for a library compatibility mode itself refuses.
        yield Draft("pjrt-api-mismatch", evidence, ["plugins", "backends"], fix=pjrt_remedy(p), backends=s.rows_of_plugin(p))


def unrecognized_failures(s: Scene, drafts: list[Draft]) -> Iterable[Draft]:
    """Backends and plugins that fail in a way no catalogue entry recognized: still named, with the error.

    Runs after every rule of diagnosis.RULES, with their drafts: an error they already quote is not repeated."""
    said = " ".join(e for d in drafts for e in d.evidence)
    tpu_explained = any(d.id in _TPU_IDS for d in drafts)
    rows_explained = {r for d in drafts for r in d.backends}  # a rule that names the row has said why it fails
    for b in s.inv.backends:
        if b.status not in BROKEN or (b.error and b.error in said) or (b.platform == "tpu" and tpu_explained) or explained_by_evidence(b):
            continue
        if b.platform in rows_explained:
            continue
        evidence = [f"{b.platform} {'plugin' if b.plugin else 'backend'} {b.status.value}: {b.error}"]
        if b.plugin:
            yield Draft("plugin-broken", evidence, ["plugins"], fix=b.hint, remedies=list(b.remedies), backends=[b.platform])
        else:
            yield Draft("backend-failed", evidence, ["backends"], fix=b.hint, remedies=list(b.remedies), backends=[b.platform])
    from devctl.checks.software import is_plugin_failure

    for p in s.inv.plugins:
        if p.source.value == "libtpu" and tpu_explained:
            continue  # libtpu's own entry: the TPU findings already say what is wrong with it
        if any(b.platform == p.name and explained_by_evidence(b) for b in s.inv.backends):
            continue  # the same plugin as a row the evidence already explains
        if is_plugin_failure(p) and not (p.error and p.error in said):
            evidence = [f"plugin {p.name} ({p.source.value}): {p.status.value}: {p.error}"]
            if p.source is PluginSource.ENV and any(d.id == "pjrt-entry-broken" for d in drafts):
                # JAX stops at the first entry that fails; the entry's fix drops every entry whose file is missing.
                yield Draft("pjrt-entry-broken", evidence, ["plugins"], backends=s.rows_of_plugin(p))
                continue
            yield Draft("plugin-broken", evidence, ["plugins"], backends=s.rows_of_plugin(p))
