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


def _installed() -> set[str]:
    return {(d.metadata["Name"] or "").lower() for d in distributions()}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_doctor_and_check_conclude_what_jax_does_with_one_fix(scenario: Scenario, tmp_path, pjrt_libs):
    _, proc, doc, truth = beside_jax("doctor", scenario, tmp_path, pjrt_libs)
    outcome = doc["overview"]["jax_outcome"]
    assert outcome["result"] == truth["result"], (outcome, truth.get("error"))

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
