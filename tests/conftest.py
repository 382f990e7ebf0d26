"""Shared test fixtures: running devctl as a user does (a real subprocess) and in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


def devctl_env(devices: int = 4, **extra: str) -> dict[str, str]:
    """Environment for a devctl subprocess: CPU JAX with `devices` forced host devices."""
    env = dict(os.environ)
    env.pop("JAX_PLATFORMS", None)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["NO_COLOR"] = "1"
    env.update(extra)
    return env


def run_devctl(*args: str, env: dict[str, str] | None = None, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """Run `python -m devctl ARGS` in a fresh process, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "devctl", *args],
        env=env or devctl_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def run_json(*args: str, env: dict[str, str] | None = None, expect_code: int = 0, timeout: float = 120) -> dict:
    proc = run_devctl(*args, "--json", env=env, timeout=timeout)
    assert proc.returncode == expect_code, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout)


def assert_usage_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2, one line on stderr naming the bad value, no traceback."""
    assert proc.returncode == 2, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def validate_schema(document: dict, name: str) -> None:
    """Validate a real JSON document against the schema shipped in the package."""
    import jsonschema

    from devctl.schemas import load_schema

    jsonschema.validate(document, load_schema(name))


@pytest.fixture
def cpu_env():
    return devctl_env()


from pjrt_fixtures import pjrt_libs  # noqa: E402,F401  (session fixture: real PJRT libraries built with cc)


def _has_nvidia_gpu() -> bool:
    from devctl.discovery.nvml import nvml_report

    return bool(nvml_report().gpus)


def pytest_runtest_setup(item):
    # Heavy tests need multi-GB venvs (tests/scenarios.py): only when asked, so a plain run never downloads them.
    if item.get_closest_marker("heavy") and "heavy" not in (item.config.getoption("markexpr") or "") and not os.environ.get("DEVCTL_HEAVY"):
        pytest.skip("heavy: needs multi-GB packages from the registry; run with -m heavy (benchmarks/run_heavy.sh)")
    # Tests marked `gpu` need a real NVIDIA GPU and driver; everywhere else they are skipped, not faked.
    if item.get_closest_marker("gpu") and not _gpu_present():
        pytest.skip("needs a real NVIDIA GPU with NVML (run `pytest -m gpu` on a GPU machine)")


_GPU = None


def _gpu_present() -> bool:
    global _GPU
    if _GPU is None:
        _GPU = _has_nvidia_gpu()
    return _GPU


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; without xdist installed it is never called
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker more than the CPUs this process may use.

    Much of the suite waits on devctl subprocesses, timeouts and hung children rather than computing, so
    a spare worker keeps the CPUs busy: on the 2-core VM 3 workers took 151-165 s, 2 workers 236 s and 4
    no less than 3 (tests/README.md, "Speed"). PYTEST_XDIST_AUTO_NUM_WORKERS still overrides it.
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own implementation reads it
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return cpus + 1
