"""A plugin that raises, hangs, segfaults or aborts costs a status row, never devctl itself."""

from __future__ import annotations

import json
import os

import pytest
from conftest import devctl_env, run_devctl
from plugin_packages import write_plugin


def _list(tmp_path, *plugins: tuple[str, str], timeout: str = "30") -> tuple[dict, str]:
    for name, behaviour in plugins:
        write_plugin(tmp_path, name, behaviour)
    env = devctl_env(devices=2, PYTHONPATH=f"{tmp_path}{os.pathsep}{devctl_env()['PYTHONPATH']}")
    proc = run_devctl("list", "--json", "--timeout", timeout, env=env)
    doc = json.loads(proc.stdout)
    # A plugin that kills or hangs the probe kills or hangs every JAX program too: list exits 1 for it.
    fails = doc["jax_outcome"]["result"] in ("raises", "crashes", "hangs")
    assert proc.returncode == (1 if fails else 0), proc.stderr
    return doc, proc.stderr


def _backend(doc: dict, name: str) -> dict:
    matches = [b for b in doc["backends"] if b["platform"] == name]
    assert matches, f"no backend {name!r} in {[b['platform'] for b in doc['backends']]}"
    return matches[0]


def _cpu_devices(doc: dict) -> list[dict]:
    return [d for d in doc["devices"] if d["platform"] == "cpu"]


def test_plugin_that_raises_is_named_and_cpu_still_listed(tmp_path):
    doc, _ = _list(tmp_path, ("boom", "raises"))
    b = _backend(doc, "boom")
    assert b["status"] == "failed"
    assert "plugin exploded on purpose" in b["error"]
    assert len(_cpu_devices(doc)) == 2
    assert doc["jax_outcome"]["result"] == "ok"  # JAX logs the plugin's error and goes on


def test_plugin_that_segfaults_is_reported_crashed_with_signal(tmp_path):
    doc, _ = _list(tmp_path, ("segv", "segfaults"))
    b = _backend(doc, "segv")
    assert b["status"] == "crashed"
    assert "SIGSEGV" in b["error"]
    assert len(_cpu_devices(doc)) == 2
    assert doc["jax_outcome"]["result"] == "crashes" and doc["jax_outcome"]["culprit"] == "segv"


def test_plugin_that_aborts_is_reported_crashed(tmp_path):
    doc, _ = _list(tmp_path, ("abrt", "aborts"))
    b = _backend(doc, "abrt")
    assert b["status"] == "crashed"
    assert "SIGABRT" in b["error"]


@pytest.mark.slow
def test_plugin_that_hangs_times_out_and_the_rest_is_listed(tmp_path):
    doc, _ = _list(tmp_path, ("stuck", "hangs"), timeout="4")
    b = _backend(doc, "stuck")
    assert b["status"] == "timeout"
    assert len(_cpu_devices(doc)) == 2
    assert doc["jax_outcome"]["result"] == "hangs"


def test_several_bad_plugins_each_named_once(tmp_path):
    doc, _ = _list(tmp_path, ("boom", "raises"), ("segv", "segfaults"))
    assert _backend(doc, "boom")["status"] == "failed"
    assert _backend(doc, "segv")["status"] == "crashed"
    assert [b["platform"] for b in doc["backends"]].count("segv") == 1
    assert len(_cpu_devices(doc)) == 2
