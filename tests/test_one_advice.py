"""One condition, one advice: list, check and doctor give the same finding code and the same fix."""

from __future__ import annotations

import json
import os

import pytest
from conftest import devctl_env, run_devctl
from plugin_packages import write_plugin
from test_one_voice import assert_one_voice


def _setups(tmp_path, pjrt_libs):
    site = tmp_path / "site"
    write_plugin(site, "segv", "segfaults")
    return {
        "broken-pjrt-entry": {"PJRT_NAMES_AND_LIBRARY_PATHS": f"ghost{os.pathsep}/nonexistent/libghost.so"},
        "jax-platforms-names-tpu": {"JAX_PLATFORMS": "cpu,tpu"},
        "plugin-segfaults": {"PYTHONPATH": f"{site}{os.pathsep}{devctl_env()['PYTHONPATH']}"},
    }


@pytest.mark.parametrize("name", ["broken-pjrt-entry", "jax-platforms-names-tpu", "plugin-segfaults"])
def test_list_check_and_doctor_agree(name, tmp_path, pjrt_libs):
    env = devctl_env(devices=2, **_setups(tmp_path, pjrt_libs)[name])
    listed = run_devctl("list", "--json", env=env)
    outcome = json.loads(listed.stdout)["jax_outcome"]
    assert listed.returncode == 1 and outcome["code"] and outcome["fix"], outcome

    checked = run_devctl("check", "--only", "backends", "--json", env=env, cwd=tmp_path)
    (backends,) = json.loads(checked.stdout)["checks"]
    assert checked.returncode == 1 and backends["status"] == "fail"
    assert backends["details"]["code"] == outcome["code"] and backends["remediation"] == outcome["fix"]

    doctored = run_devctl("doctor", "--json", env=env, cwd=tmp_path)
    doc = json.loads(doctored.stdout)
    findings = {f["code"]: f for f in doc["findings"]}
    assert doctored.returncode == 1 and findings[outcome["code"]]["fix"] == outcome["fix"]
    # And within doctor: the failing backend's line in "What JAX will use" gives the same fix as its finding.
    assert_one_voice(doc["findings"], doc["overview"]["jax_will_use"])
    # Nothing in doctor sends the user back to doctor.
    assert not [f for f in findings.values() if "devctl doctor" in f["fix"]]
