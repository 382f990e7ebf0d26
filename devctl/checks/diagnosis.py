"""`devctl doctor`'s diagnosis: run every rule over a Scene, merge what they found, and name what no rule explains.

Rules read the shared inventory, the environment report, a few extra machine
facts (devctl.discovery.machine_facts) and the checks' verdicts (devctl.checks.scene);
each finding carries the evidence (JAX's exact message, or the fact that
gives it away), and names the checks whose verdict it explains. A failed or
warned check that no rule explains becomes a finding of its own, so the
doctor never says "nothing wrong" while a check disagrees.
"""

from __future__ import annotations

from devctl.checks import rules_gpu, rules_software, rules_tpu
from devctl.checks.advice import code_of
from devctl.checks.catalogue import CATALOGUE
from devctl.checks.rules_software import unrecognized_failures
from devctl.checks.scene import Draft, Scene, Severity
from devctl.model.check import CheckStatus
from devctl.model.doctor import DoctorFinding
from devctl.model.list_ import BackendStatus

# In this order: when two rules draft one finding, the first one's evidence leads and its fix wins.
RULES = (
    rules_software.jax_devices_fails,
    rules_software.evidence_first,
    rules_software.known_messages,
    rules_software.version_skew,
    rules_software.jax_platforms_unavailable,
    rules_gpu.cuda_plugin_missing,
    rules_software.pjrt_api_mismatch,
    rules_gpu.hidden_gpus,
    rules_gpu.fabric_manager_missing,
    rules_gpu.driver_library_mismatch,
    rules_gpu.driver_too_old_offline,
    rules_gpu.cuda_library_shadowed,
    rules_gpu.preallocation_contention,
    rules_gpu.nccl_shm_too_small,
    rules_tpu.tpu_held,
    rules_tpu.libtpu_missing,
    rules_tpu.tpu_device_access,
    rules_tpu.multihost_slice_waiting,
    rules_tpu.tpu_thp_off,
)


def diagnose(s: Scene) -> list[DoctorFinding]:
    """Every finding, errors first, then in catalogue order."""
    drafts: list[Draft] = [d for rule in RULES for d in rule(s)]
    drafts += list(unrecognized_failures(s, drafts))
    if any(d.id == "tpu-held" for d in drafts):
        # JAX's "libtpu is not installed" is a symptom of the lock here, not its own failure (failure-modes.md §3.4).
        drafts = [d for d in drafts if not (d.id == "libtpu-missing" and "non-existent" not in " ".join(d.evidence))]
    merged: dict[str, Draft] = {}
    for d in drafts:
        m = merged.get(d.id)
        if m is None:
            merged[d.id] = Draft(d.id, list(d.evidence), list(d.checks), d.fix, list(d.remedies), d.severity, list(d.backends))
            continue
        m.evidence += [e for e in d.evidence if e not in m.evidence]
        m.checks += [c for c in d.checks if c not in m.checks]
        m.backends += [b for b in d.backends if b not in m.backends]
        if not m.fix:  # the first rule's fix wins, and its data comes with it
            m.fix, m.remedies = d.fix, list(d.remedies)
        if d.severity == "error":
            m.severity = "error"
    for d in merged.values():
        d.severity = severity_of(s, d)
    merged.update(_unexplained(s, merged))
    order = list(CATALOGUE)
    findings = [_finding(d) for d in merged.values()]
    rank = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: (rank[f.severity], order.index(f.id)))


# The checks of what JAX uses: the stack's packages, its plugins, backends and devices.
JAX_STACK_CHECKS = frozenset({"versions", "plugins", "backends", "devices"})


def severity_of(s: Scene, d: Draft) -> Severity:
    """One rule for a finding about what JAX uses (it explains a backend or plugin that did not start, or the
    stack's versions, plugins, backends or devices): an error when jax.devices() fails, a warning when JAX works
    but leaves this machine's accelerator unused, info when JAX runs on what is here (a CUDA plugin without a GPU,
    JAX_PLATFORMS naming a platform it skips, a plugin JAX logs and goes on without, a plugin skew jaxlib refuses
    there). Other findings (the host, memory, a TPU lockfile) keep theirs."""
    down = [b for b in s.inv.backends if b.platform in d.backends and b.status is not BackendStatus.OK]
    if not down and not set(d.checks) & JAX_STACK_CHECKS:
        return d.severity
    outcome = getattr(s.inv, "jax_outcome", None)
    if outcome is not None and outcome.fails:
        return "error"
    if s.inv.unused_accelerators:
        return "warning"
    return "info"


def _unexplained(s: Scene, merged: dict[str, Draft]) -> dict[str, Draft]:
    """Failed or warned checks no rule explains, each a finding of its own."""
    explained = {c for d in merged.values() for c in d.checks}
    out: dict[str, Draft] = {}
    for r in s.checks.values():
        if r.status not in (CheckStatus.FAIL, CheckStatus.WARN) or r.name in explained:
            continue
        severity: Severity = "error" if r.status is CheckStatus.FAIL else "warning"
        if r.name == "devices" and s.inv.unused_accelerators:
            evidence = [f"{u.name} at {u.location}: {u.reason}" for u in s.inv.unused_accelerators]
            out["accelerator-unused"] = Draft("accelerator-unused", evidence, ["devices"], fix=s.inv.unused_accelerators[0].reason, severity=severity)
            continue
        fid = "check-failed" if severity == "error" else "check-warned"
        key = f"{fid}:{r.name}"
        # The doctor is what "run devctl doctor" points to: it never sends the user back to itself.
        fix = r.remediation if r.remediation and "devctl doctor" not in r.remediation else f"see devctl check --only {r.name}"
        out[key] = Draft(fid, [f"check {r.name}: {r.message}"], [r.name], fix=fix, severity=severity)
    return out


def _finding(d: Draft) -> DoctorFinding:
    known = CATALOGUE[d.id]
    title = known.title
    if d.id in ("check-failed", "check-warned"):
        title = f"check {d.checks[0]} {'failed' if d.id == 'check-failed' else 'warned'}"
    return DoctorFinding(
        id=d.id,
        code=code_of(d.id),
        catalogue_number=known.number,
        title=title,
        severity=d.severity,
        evidence=d.evidence,
        cause=known.cause,
        fix=d.fix or known.fix,
        remedies=d.remedies if d.fix else [],
        references=list(known.references),
        checks=d.checks,
        backends=d.backends,
    )


# Findings that say only that a backend fails (its error unrecognized), or why its failure stops jax.devices()
# (JAX_PLATFORMS names it), not why it fails: a backend's line takes one only when no finding says why.
_NOT_A_CAUSE = ("jax-platforms-unavailable", "plugin-broken", "backend-failed")


def explanations(findings: list[DoctorFinding]) -> dict[str, DoctorFinding]:
    """Each backend row that did not start -> the finding that explains it, whose fix its line in "What JAX will use"
    gives: of those that list the row, the first in the catalogue's order that names a cause."""
    order = list(CATALOGUE)
    out: dict[str, DoctorFinding] = {}
    for f in sorted(findings, key=lambda f: (f.id in _NOT_A_CAUSE, order.index(f.id))):
        for platform in f.backends:
            out.setdefault(platform, f)
    return out
