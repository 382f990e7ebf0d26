"""`devctl --python PATH COMMAND`: one installed devctl inspects another interpreter's JAX (issue 24).

The other interpreters are real: a venv made here with nothing in it (not even pip, nor any of devctl's
dependencies), and, in the heavy run, the cached venv of jax 0.12 on Python 3.12.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import devctl_env, run_devctl


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return str(venv / "bin" / "python")


def _inspect(python: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return run_devctl("--python", python, *args, env=devctl_env(devices=1, **env), timeout=300)


def test_the_other_interpreter_is_what_env_and_list_report(bare_python, tmp_path):
    """The bare venv has no jax: devctl says so of it (its own venv has jax 0.10), and names it in env."""
    doc = json.loads(_inspect(bare_python, "env", "--json", XDG_CACHE_HOME=str(tmp_path)).stdout)
    assert doc["python_executable"] == bare_python
    assert {p["name"]: p["version"] for p in doc["packages"]}.get("jax") is None, doc["packages"]
    listed = _inspect(bare_python, "list", "--json", XDG_CACHE_HOME=str(tmp_path))
    assert listed.returncode == 1 and json.loads(listed.stdout)["jax_outcome"]["result"] != "ok", listed.stdout[-2000:]
    # The links devctl runs from are the user's own, and nothing of jax's is among them.
    (links,) = (tmp_path / "devctl" / "python-path").iterdir()
    names = sorted(p.name for p in links.iterdir())
    assert "devctl" in names and "rich" in names and not [n for n in names if n.startswith(("jax", "numpy"))], names
    assert links.stat().st_uid == os.getuid() and not links.stat().st_mode & 0o022


def test_by_default_the_links_are_in_the_user_s_cache(bare_python):
    """The twin of the test above, with no XDG_CACHE_HOME: ~/.cache/devctl/python-path."""
    env = {k: v for k, v in devctl_env(devices=1).items() if k != "XDG_CACHE_HOME"}
    proc = subprocess.run([sys.executable, "-m", "devctl", "--python", bare_python, "env", "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1) and json.loads(proc.stdout)["python_executable"] == bare_python, proc.stderr
    assert (Path(os.path.expanduser("~")) / ".cache" / "devctl" / "python-path").is_dir()


def test_a_planted_cache_directory_is_refused(bare_python, tmp_path):
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    (tmp_path / "devctl").mkdir()
    os.symlink(victim, tmp_path / "devctl" / "python-path")
    proc = _inspect(bare_python, "env", XDG_CACHE_HOME=str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.startswith("devctl: error: --python") and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert not list(victim.iterdir())


@pytest.mark.parametrize(
    "args, says",
    [
        (["--python"], "needs the path of a Python interpreter"),
        (["--python", "/nonexistent/python", "list"], "not an executable file"),
        (["--python", "/etc/passwd", "list"], "not an executable file"),
        (["--python", "/bin/true", "list"], "does not run as a Python interpreter"),
    ],
)
def test_what_is_not_an_interpreter_is_one_line_and_exit_2(args, says):
    proc = run_devctl(*args, env=devctl_env(devices=1), timeout=120)
    assert proc.returncode == 2 and says in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr


@pytest.mark.heavy
def test_jax_0_12_on_python_3_12_is_reported_from_devctl_s_own_3_11(tmp_path):
    import scenarios

    python = scenarios.get("py312-jax-0.12")
    if python is None:
        pytest.skip("the package registry cannot be reached to build py312-jax-0.12")
    doc = json.loads(_inspect(str(python), "list", "--json", XDG_CACHE_HOME=str(tmp_path)).stdout)
    assert doc["jax_version"].startswith("0.12") and doc["jax_outcome"]["result"] == "ok", doc.get("jax_version")
