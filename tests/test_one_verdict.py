"""One verdict: `devctl doctor` (its findings, its "What JAX will use" and the checks it runs) draws the conclusion
real JAX does, by one severity rule, with one fix per cause (issue 21).

Every light scenario of tests/test_oracle.py (JAX_PLATFORMS values, PJRT_NAMES_AND_LIBRARY_PATHS entries, plugin
packages that raise, crash or hang, XLA_FLAGS that XLA refuses) is run through `devctl doctor --json` and through
real JAX under the same environment. test_oracle.py proves list's prediction and applies its fix; here:

- the outcome doctor states is what JAX did;
- the rule: an error finding (and exit 1, and check's `backends` failing) exactly when jax.devices() fails; when
  JAX works on what this machine has, no error and no failing `backends` or `plugins` row;
- one fix: when JAX fails, the outcome's fix is the fix of a finding doctor states and check's `backends`
  remediation, word for word, and no finding advises uninstalling a package that is not installed.
"""

from __future__ import annotations

import json
from importlib.metadata import distributions

import pytest
from conftest import devctl_env, run_devctl
from test_oracle import SCENARIOS, Scenario, beside_jax

from devctl.model.remedy import pip_command

# What doctor must find in each light scenario, and nothing else: finding id -> severity. Exactly these, so each
# scenario also asserts that no other finding fires (the near misses: JAX_PLATFORMS=cuda,cpu or an empty
# CUDA_VISIBLE_DEVICES on a machine without a GPU, a plugin JAX logs and goes on without).
JPU, ENTRY, BROKEN, FAILED, FLAGS = "jax-platforms-unavailable", "pjrt-entry-broken", "plugin-broken", "backend-failed", "xla-flags-invalid"
DOCTOR_FINDINGS: dict[str, dict[str, str]] = {
    **dict.fromkeys(
        ["plain-cpu-4-devices", "plain-cpu-1-device", "jax-platforms-cpu", "jax-platforms-empty", "allocator-and-preallocation",
         "pjrt-library-named-away", "plugin-registered-but-jax-platforms-cpu", "cuda-visible-devices-empty-no-gpu"],
        {},
    ),
    **dict.fromkeys(
        ["jax-platforms-cuda-no-gpu", "jax-platforms-gpu-no-gpu", "jax-platforms-tpu-no-libtpu", "jax-platforms-cpu-tpu", "jax-platforms-unknown",
         "jax-platforms-uppercase", "jax-platforms-space", "jax-platforms-trailing-comma", "jax-platforms-leading-space",
         "jax-platforms-empty-entry", "jax-platforms-gpu-cpu-no-gpu", "jax-platforms-unknown-then-cpu"],
        {JPU: "error"},
    ),
    **dict.fromkeys(["jax-platforms-cpu-cuda", "jax-platforms-cuda-cpu-no-gpu"], {JPU: "info"}),
    "tpu-library-path-missing": {"libtpu-missing": "info"},
    **dict.fromkeys(["jax-env-bool-invalid", "jax-env-bool-invalid-with-jax-platforms-cpu"], {"jax-env-invalid": "error"}),
    **dict.fromkeys(
        ["pjrt-missing-file", "pjrt-missing-file-with-cpu-only", "pjrt-two-missing-files", "pjrt-not-a-library", "pjrt-no-get-pjrt-api",
         "pjrt-json-without-library-path", "pjrt-json-missing", "pjrt-segfaulting-library"],
        {ENTRY: "error"},
    ),
    **dict.fromkeys(["pjrt-library-without-client", "pjrt-json-config", "plugin-registers-library-without-client"], {FAILED: "error"}),
    **dict.fromkeys(
        ["pjrt-malformed-item", "plugin-initialize-raises", "plugin-import-fails", "plugin-registers-missing-library"], {BROKEN: "info"}
    ),
    **dict.fromkeys(["plugin-segfaults", "plugin-aborts", "plugin-hangs"], {BROKEN: "error"}),
    **dict.fromkeys(
        ["xla-flags-unknown-flag", "xla-flags-bad-value", "xla-flags-bad-among-good", "xla-flags-bad-with-jax-platforms-cpu"], {FLAGS: "error"}
    ),
}  # fmt: skip


def test_every_light_scenario_says_what_doctor_must_find():
    assert sorted(DOCTOR_FINDINGS) == sorted(s.name for s in SCENARIOS)


def _installed() -> set[str]:
    return {(d.metadata["Name"] or "").lower() for d in distributions()}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_doctor_and_check_conclude_what_jax_does_with_one_fix(scenario: Scenario, tmp_path, pjrt_libs):
    _, proc, doc, truth = beside_jax("doctor", scenario, tmp_path, pjrt_libs)
    outcome = doc["overview"]["jax_outcome"]
    assert outcome["result"] == truth["result"], (outcome, truth.get("error"))
    # One cause, one finding: exactly what this scenario has, at the severity the rule gives.
    found = {f["id"]: f["severity"] for f in doc["findings"]}
    assert found == DOCTOR_FINDINGS[scenario.name], [(f["id"], f["severity"], f["evidence"]) for f in doc["findings"]]
    # Each finding's data is its line's: a program acting on `remedies` does what a person reading `fix` does.
    for f in doc["findings"]:
        for r in f["remedies"]:
            assert all(pip_command(args) in f["fix"] for args in r["pip"]), f

    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    checks = {c["name"]: c for c in doc["checks"]}
    if truth["result"] == "ok":
        assert not errors, errors
        assert checks["backends"]["status"] != "fail" and checks["plugins"]["status"] != "fail", (checks["backends"], checks["plugins"])
        assert proc.returncode == (1 if doc["findings"] and any(f["severity"] == "warning" for f in doc["findings"]) else 0)
        return
    assert proc.returncode == 1 and errors, doc["findings"]
    fix = outcome["fix"]
    assert fix and checks["backends"]["status"] == "fail" and checks["backends"]["remediation"] == fix, checks["backends"]
    assert fix in [f["fix"] for f in errors], (fix, [(f["id"], f["fix"]) for f in errors])


@pytest.mark.parametrize("value", ["gpu", "rocm", "cuda", "CPU", " cpu", "cpu,"])
def test_no_advice_names_a_package_that_is_not_installed(value, tmp_path, pjrt_libs):
    """JAX_PLATFORMS=gpu made doctor advise `pip uninstall jax-rocm7-plugin jax-rocm7-pjrt` where no ROCm package
    is installed; "CPU" made it say "uninstall the plugin that provides CPU"."""
    env = devctl_env(devices=1, JAX_PLATFORMS=value)
    doc = json.loads(run_devctl("doctor", "--json", env=env, timeout=300).stdout)
    advice = [f["fix"] for f in doc["findings"]] + [doc["overview"]["jax_outcome"]["fix"] or ""]
    installed = _installed()
    for text in advice:
        if "pip uninstall" in text:
            named = text.split("pip uninstall", 1)[1].replace(")", " ").split()
            assert all(n.lower() in installed for n in named if n.startswith("jax")), text
        assert "the plugin that provides" not in text, text
