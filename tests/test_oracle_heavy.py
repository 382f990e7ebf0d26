"""devctl's prediction against real JAX, with real multi-GB releases from the registry (`-m heavy`).

The light scenarios (tests/test_oracle.py) run the JAX in tests' own venv. These
run the packages users really install, each in a cached venv that
tests/scenarios.py builds once: jax[cuda12] and jax[cuda13] on a machine with no
GPU, jax[tpu] with no TPU, the ROCm plugin with no AMD GPU, the real CUDA PJRT
library named in PJRT_NAMES_AND_LIBRARY_PATHS, version skews made with
`--no-deps`, the oldest jax devctl supports and the newest jax on the newest
Python. In each, `devctl list --json` (run by that venv's interpreter, devctl
from the checkout through PYTHONPATH) must agree with what JAX does there; where
devctl advises a fix, the fix is applied (an environment change, or a venv built
with the advised `pip install`/`pip uninstall`) and JAX must then do what devctl
promised; `doctor` and `check` must give the same advice as `list`.

Run them with `python -m pytest -m heavy tests/test_oracle_heavy.py`, or
benchmarks/run_heavy.sh, which also records the run. Without `-m heavy` (or
DEVCTL_HEAVY=1) every test here skips: a plain `pytest` never downloads gigabytes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import scenarios
from conftest import devctl_env, validate_schema
from oracle import disagreements, jax_truth
from plugin_packages import write_plugin

from devctl.checks.advice import code_of, no_nvidia_gpu

pytestmark = pytest.mark.heavy

PJRT_ENV = "PJRT_NAMES_AND_LIBRARY_PATHS"
SEP = os.pathsep
OPTIONAL = {"jax-0.4.36-cuda12"}  # "if it installs": a release the registry may stop serving
# Advice that would mislead on a machine with no NVIDIA GPU at all: hidden GPUs, missing CUDA
# libraries, a broken plugin to reinstall, a driver to mount.
MISLEADING = {code_of(f) for f in ("no-visible-gpu", "cuda-library-missing", "plugin-broken", "nvidia-driver-not-mounted", "cuda-plugin-missing", "driver-too-old")}
MISLEADING_WORDS = ("reinstall", "CUDA_VISIBLE_DEVICES", "--gpus")


# ---- helpers ----------------------------------------------------------------------------------------

_FIX_VENVS: list[str] = []  # the venvs built to apply a fix in the running test: removed when it ends


@pytest.fixture(autouse=True)
def _remove_fix_venvs():
    yield
    while _FIX_VENVS:
        scenarios.remove(_FIX_VENVS.pop())


def _python(name: str, extra_steps: list[list[str]] | None = None, suffix: str = "fixed") -> str:
    """The interpreter of scenarios.VENVS[name] (with `extra_steps` after its own: a venv of its own)."""
    venv = scenarios.VENVS[name]
    label = f"{name}-{suffix}" if extra_steps else name
    if extra_steps:
        _FIX_VENVS.append(label)
    try:
        python = scenarios.scenario_python(label, venv.steps + (extra_steps or []), venv.python)
    except scenarios.ScenarioBuildError as e:
        if name in OPTIONAL:
            pytest.skip(f"{label} does not install here: {e}")
        raise
    if python is None:
        pytest.skip(f"the package registry cannot be reached to build {label} (tests/scenarios.py)")
    return str(python)


def _devctl(python: str, *args: str, env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "devctl", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.stdout.strip(), f"exit {proc.returncode}, no JSON; stderr:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


def _shown(truth: dict) -> str:
    brief = {k: v for k, v in truth.items() if k != "stderr"}
    return f"JAX: {json.dumps(brief)}\nJAX's stderr (tail):\n{truth.get('stderr', '')[-3000:]}"


def _predicted(python: str, env: dict[str, str], expect: str, cwd: Path) -> tuple[dict, dict]:
    """`devctl list --json` and real JAX under `env`: JAX does `expect`, and devctl says so, exit code included."""
    proc = _devctl(python, "list", "--json", env=env, cwd=cwd)
    doc = _json(proc)
    validate_schema(doc, "list")
    truth = jax_truth(env, python=python, timeout=120)
    assert truth["result"] == expect, f"the scenario no longer exercises what it says\n{_shown(truth)}"
    found = disagreements(doc, truth)
    assert not found, "devctl and JAX disagree: " + "; ".join(found) + "\n" + _shown(truth)
    # `devctl list` exits 1 exactly when jax.devices() would fail.
    assert proc.returncode == (1 if expect != "ok" else 0), proc.stderr[-3000:]
    return doc, truth


def _env_fixed(env: dict[str, str], fix_env: dict[str, str | None]) -> dict[str, str]:
    fixed = {k: v for k, v in env.items() if k not in fix_env}
    fixed.update({k: v for k, v in fix_env.items() if v is not None})
    return fixed


def _apply_env_fix(python: str, env: dict[str, str], fix_env: dict, cwd: Path, machine_broken: list[str] = ()) -> tuple[dict, dict]:
    """Apply an environment fix: JAX then works and logs no broken plugin but those the machine breaks whatever the
    environment (`machine_broken`: a CUDA plugin on a machine without a GPU), and devctl agrees."""
    fixed = _env_fixed(env, fix_env)
    doc, truth = _predicted(python, fixed, "ok", cwd)
    assert set(truth["broken_plugins"]) <= set(machine_broken), _shown(truth)
    assert machine_broken or "Jax plugin configuration error" not in truth["stderr"], _shown(truth)
    assert doc["jax_outcome"]["result"] == "ok"
    return doc, truth


def _pip_steps(item: dict) -> list[list[str]]:
    """The pip commands of a fix (a row's, a finding's, the outcome's), from its data, as scenarios.py steps (an
    install's arguments; `uninstall` and the names), after checking the line says them word for word."""
    from devctl.model.remedy import pip_command

    (remedy,) = [r for r in item["remedies"] if r["pip"]]
    said = item.get("hint") or item.get("fix") or ""
    steps = []
    for args in remedy["pip"]:
        assert pip_command(args) in said, (args, said)
        steps.append(args[1:] if args[0] == "install" else args)
    return steps


def _plugin_rows(doc: dict, word: str) -> list[dict]:
    return [b for b in doc["backends"] if b.get("plugin") and word in b["plugin"] and b["status"] != "ok"]


_PLUGIN_ERROR = "Jax plugin configuration error"
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): (.+)$", re.M)


def _logged_causes(stderr: str, module: str) -> list[str]:
    """Every exception message in the traceback JAX logged for `module`'s initialize(): its chained causes too."""
    marker = f"{_PLUGIN_ERROR}: Exception when calling {module}.initialize()"
    start = stderr.find(marker)
    if start < 0:
        return []
    block = stderr[start + len(marker):].split(_PLUGIN_ERROR, 1)[0]
    return [m.group(1).strip() for m in _EXCEPTION_LINE.finditer(block)]


def _doctor(python: str, env: dict[str, str], cwd: Path) -> list[dict]:
    doc = _json(_devctl(python, "doctor", "--json", env=env, cwd=cwd))
    validate_schema(doc, "doctor")
    return doc["findings"]


def _check(python: str, env: dict[str, str], cwd: Path, *only: str) -> dict[str, dict]:
    args = [a for name in only for a in ("--only", name)]
    doc = _json(_devctl(python, "check", *args, "--json", env=env, cwd=cwd))
    return {c["name"]: c for c in doc["checks"]}


def _assert_not_misled(text: str) -> None:
    for word in MISLEADING_WORDS:
        assert word not in text, f"{word!r} on a machine with no NVIDIA GPU: {text}"


# ---- jax[cuda12] / jax[cuda13] on a machine without a GPU -----------------------------------------------

CUDA_EXTRAS = ["cuda12-0.10.2", "cuda13-0.10.2", "py310-jax-0.6.2-cuda12", "py312-jax-0.12-cuda13"]


@pytest.mark.parametrize("name", CUDA_EXTRAS)
def test_cuda_extra_on_a_machine_without_gpu(name, tmp_path):
    python = _python(name)
    env = devctl_env()
    doc, truth = _predicted(python, env, "ok", tmp_path)
    (row,) = _plugin_rows(doc, "cuda")
    assert truth["broken_plugins"] == [row["plugin"]]
    assert row["code"] == no_nvidia_gpu().code == "DEVCTL_FR_CUDA_PLUGIN_WITHOUT_GPU", row
    silenced = "set JAX_PLATFORMS=cpu" in row["hint"]
    # The uninstall names the series installed here, not both.
    series = re.search(r"cuda1\d", name).group(0)
    other = "cuda13" if series == "cuda12" else "cuda12"
    assert series in row["hint"] and other not in row["hint"], row["hint"]
    _assert_not_misled(f"{row['hint']} {row['summary']}")
    # What JAX's log shows as the reason, chained causes included (CUPTI error 999, cuInit 303), is kept.
    causes = _logged_causes(truth["stderr"], row["plugin"])
    assert causes, _shown(truth)
    for cause in causes:
        assert cause in row["error"], f"JAX logged {cause!r}; devctl's error: {row['error']!r}"

    findings = _doctor(python, env, tmp_path)
    (finding,) = [f for f in findings if f["code"] == row["code"]]
    assert finding["fix"] == row["hint"]
    # JAX works on what this machine has (the CPU): a note, not a problem, and check passes (issue 21).
    assert finding["severity"] == "info" and not [f for f in findings if f["severity"] == "error"], findings
    checks = _check(python, env, tmp_path, "plugins", "backends")
    assert checks["backends"]["status"] == "pass" and checks["plugins"]["status"] == "pass", checks
    for f in findings:
        assert f["code"] not in MISLEADING, f
        _assert_not_misled(" ".join((f["title"], f["cause"], f["fix"] or "")))

    if silenced:
        # Apply the fix: JAX no longer logs the plugin error, and devctl no longer shows the row.
        fixed_doc, _ = _apply_env_fix(python, env, {"JAX_PLATFORMS": "cpu"}, tmp_path)
        assert not [b for b in fixed_doc["backends"] if b.get("plugin")], fixed_doc["backends"]
        return
    # A release whose plugin ignores JAX_PLATFORMS (jax-cuda12-plugin 0.6.2): devctl says so, JAX agrees, and the
    # uninstall it advises is what silences it.
    assert "ignores JAX_PLATFORMS" in row["hint"], row["hint"]
    _, still = _predicted(python, {**env, "JAX_PLATFORMS": "cpu"}, "ok", tmp_path)
    assert still["broken_plugins"] == [row["plugin"]], _shown(still)
    fixed = _python(name, _pip_steps(row), suffix="uninstalled")
    _apply_env_fix(fixed, env, {}, tmp_path)


@pytest.mark.parametrize("name", [*CUDA_EXTRAS[:2], "rocm7-0.10.2"])
def test_check_gives_the_advice_list_and_doctor_give(name, tmp_path):
    """One condition, one advice: `check`'s plugins check carries the row's code and fix."""
    python = _python(name)
    env = devctl_env()
    doc = _json(_devctl(python, "list", "--json", env=env, cwd=tmp_path))
    (row,) = _plugin_rows(doc, "cuda" if "cuda" in name else "rocm")
    (finding,) = [f for f in _doctor(python, env, tmp_path) if f["code"] == row["code"]]
    assert finding["fix"] == row["hint"]
    plugins = _check(python, env, tmp_path, "plugins")["plugins"]
    # JAX works on the CPU, all this machine has: the row passes, saying the plugin and its fix (issue 21's rule).
    assert plugins["status"] == "pass" and plugins["details"]["remedy"] == row["hint"], plugins
    assert row["code"] in json.dumps(plugins), f"`check` gives {row['hint']!r} without its code {row['code']}: {json.dumps(plugins)}"


def test_oldest_cuda_extra_without_gpu(tmp_path):
    """jax[cuda12]==0.4.36: its plugin registers without a GPU, and JAX skips CUDA without a word."""
    python = _python("jax-0.4.36-cuda12")
    env = devctl_env()
    doc, truth = _predicted(python, env, "ok", tmp_path)
    assert truth["broken_plugins"] == []
    rows = {b["platform"]: b for b in doc["backends"]}
    assert rows["cuda"]["status"] == "skipped" and rows["cuda"]["code"] is None, rows["cuda"]
    for f in _doctor(python, env, tmp_path):
        assert f["code"] not in MISLEADING, f
        _assert_not_misled(" ".join((f["title"], f["cause"], f["fix"] or "")))
    _apply_env_fix(python, env, {"JAX_PLATFORMS": "cpu"}, tmp_path)


# ---- the real CUDA PJRT library in PJRT_NAMES_AND_LIBRARY_PATHS ------------------------------------------


def _cuda_library() -> str:
    python = Path(_python("cuda12-0.10.2"))
    (library,) = python.parent.parent.glob("lib/python*/site-packages/jax_plugins/xla_cuda12/xla_cuda_plugin.so")
    return str(library)


PJRT_CASES = [
    # (id, venv (None: the tests' own jax), entry name, more env, what JAX does)
    # JAX skips a backend named cuda without a word where no /dev/nvidia* node exists: the library loads, nothing starts.
    ("entry-cuda", None, "cuda", {}, "ok"),
    # Named otherwise, its client starts and fails (No visible GPU devices): jax.devices() raises; JAX_PLATFORMS=cpu fixes it.
    ("entry-named-nvgpu", None, "nvgpu", {}, "raises"),
    # Beside jax[cuda12] the plugin's initialize() fails first (cuInit), so the entry registers cuda, and JAX skips it.
    ("entry-cuda-beside-cuda12", "cuda12-0.10.2", "cuda", {}, "ok"),
    # ... but under JAX_PLATFORMS=cpu the plugin registers cuda first, and the entry raises ALREADY_EXISTS on every call.
    ("entry-cuda-beside-cuda12-jax-platforms-cpu", "cuda12-0.10.2", "cuda", {"JAX_PLATFORMS": "cpu"}, "raises"),
]


@pytest.mark.parametrize("case", PJRT_CASES, ids=[c[0] for c in PJRT_CASES])
def test_real_cuda_library_in_pjrt_names_and_library_paths(case, tmp_path):
    _id, venv, name, extra, expect = case
    python = _python(venv) if venv else sys.executable
    env = devctl_env(**extra, **{PJRT_ENV: f"{name}{SEP}{_cuda_library()}"})
    doc, truth = _predicted(python, env, expect, tmp_path)
    rows = {b["platform"]: b for b in doc["backends"]}
    outcome = doc["jax_outcome"]
    if expect == "ok":
        # A backend JAX skips is not one that "fails to start, so jax.devices() raises".
        skipped = rows.get(name)
        assert skipped is None or skipped["status"] == "skipped" and skipped["code"] is None, skipped
        return
    assert outcome["code"] and outcome["fix"] and outcome["fix_env"], outcome
    if "JAX_PLATFORMS" in extra:
        # Every call raises, JAX_PLATFORMS=cpu or not: devctl says to drop the entry, not to set JAX_PLATFORMS.
        assert truth["second_call"] == truth["error"], _shown(truth)
        assert outcome["code"] == code_of("pjrt-entry-broken") and PJRT_ENV in outcome["fix_env"], outcome
        assert rows[name]["code"] == outcome["code"], rows[name]
    _apply_env_fix(python, env, outcome["fix_env"], tmp_path)


# ---- jax[tpu] without a TPU, the ROCm plugin without an AMD GPU ------------------------------------------


def test_tpu_extra_without_tpu(tmp_path):
    python = _python("tpu-0.10.2")
    env = devctl_env()
    doc, truth = _predicted(python, env, "ok", tmp_path)
    assert "tpu" in truth["backend_errors"], _shown(truth)  # real libtpu ran, and found no chip
    (tpu,) = [b for b in doc["backends"] if b["platform"] == "tpu"]
    assert tpu["status"] == "skipped" and tpu["code"] is None, tpu
    # Naming tpu makes it fail; devctl's fix (drop it) makes it work.
    named = {**env, "JAX_PLATFORMS": "tpu"}
    doc, _ = _predicted(python, named, "raises", tmp_path)
    outcome = doc["jax_outcome"]
    assert outcome["code"] == code_of("jax-platforms-unavailable") and outcome["fix_env"] is not None, outcome
    _apply_env_fix(python, named, outcome["fix_env"], tmp_path)


def test_rocm_plugin_without_amd_gpu(tmp_path):
    python = _python("rocm7-0.10.2")
    env = devctl_env()
    doc, truth = _predicted(python, env, "ok", tmp_path)
    (row,) = _plugin_rows(doc, "rocm")
    assert row["code"] == "DEVCTL_FR_ROCM_PLUGIN_WITHOUT_GPU", row
    for cause in _logged_causes(truth["stderr"], row["plugin"]) or ["<none logged>"]:
        assert cause in row["error"], f"JAX logged {cause!r}; devctl's error: {row['error']!r}"
    (finding,) = [f for f in _doctor(python, env, tmp_path) if f["code"] == row["code"]]
    assert finding["fix"] == row["hint"]
    # Whatever devctl advises must silence it. JAX_PLATFORMS=cpu does not (the ROCm plugin raises
    # before it reads it), so devctl must not offer it as the fix.
    _, under_cpu = _predicted(python, {**env, "JAX_PLATFORMS": "cpu"}, "ok", tmp_path)
    assert under_cpu["broken_plugins"] == [row["plugin"]], _shown(under_cpu)
    assert "set JAX_PLATFORMS=cpu" not in row["hint"], row["hint"]
    # Apply the fix devctl gives: pip uninstall, in a venv of its own.
    fixed = _python("rocm7-0.10.2", _pip_steps(row), suffix="uninstalled")
    doc, truth = _predicted(fixed, env, "ok", tmp_path)
    assert truth["broken_plugins"] == [] and not [b for b in doc["backends"] if b.get("plugin")], _shown(truth)


# ---- version skews -------------------------------------------------------------------------------------


def test_cuda_plugin_older_than_jaxlib(tmp_path):
    """jax/jaxlib 0.10.2 with jax-cuda12-plugin/pjrt 0.9.2 (--no-deps), on a machine with no GPU."""
    python = _python("skew-cuda12-plugin-0.9.2")
    env = devctl_env()
    doc, truth = _predicted(python, env, "ok", tmp_path)
    assert "is not compatible with the installed jaxlib version" in truth["stderr"], _shown(truth)
    (row,) = _plugin_rows(doc, "cuda")
    # The machine first: no GPU is why the plugin fails here; the skew is a finding of its own.
    assert row["code"] == no_nvidia_gpu().code, row
    findings = _doctor(python, env, tmp_path)
    skews = [f for f in findings if f["code"] == code_of("plugin-version-skew")]
    assert skews and "0.9.2" in " ".join(skews[0]["evidence"]) and "0.10.2" in skews[0]["fix"], findings
    versions = _check(python, env, tmp_path, "versions")["versions"]
    # JAX runs on the CPU, which is all this machine has: the skew is said with its fix, and fails nothing (issue 21).
    assert versions["status"] == "pass" and versions["details"]["remedy"] == skews[0]["fix"], versions
    assert skews[0]["severity"] == "info", skews
    _apply_env_fix(python, env, no_nvidia_gpu().fix_env, tmp_path)


def test_a_skewed_pjrt_under_strict_mode_is_one_cause_with_one_fix(tmp_path):
    """jax-cuda12-pjrt 0.9.2 under jaxlib 0.10.2 with ENABLE_PJRT_COMPATIBILITY=false: jaxlib refuses its library.
    It gave three findings and three fixes; the cause is the skew (strict mode only makes it refused), and the
    stack's fix cures it, said once. The machine's own cause (no GPU) stays a finding of its own."""
    python = _python("skew-cuda12-plugin-0.9.2")
    env = {**devctl_env(), "ENABLE_PJRT_COMPATIBILITY": "false"}
    _predicted(python, env, "ok", tmp_path)
    findings = _doctor(python, env, tmp_path)
    assert sorted(f["code"] for f in findings) == sorted([code_of("plugin-version-skew"), code_of("cuda-plugin-without-gpu")]), findings
    (skew,) = [f for f in findings if f["code"] == code_of("plugin-version-skew")]
    assert skew["fix"] == "pip install -U 'jax[cuda12]==0.10.2'" and "jaxlib" in " ".join(skew["evidence"])
    versions = _check(python, env, tmp_path, "versions")["versions"]
    assert versions["details"]["remedy"] == skew["fix"], versions
    fixed = _python("skew-cuda12-plugin-0.9.2", _pip_steps(skew))
    assert [f["code"] for f in _doctor(fixed, env, tmp_path)] == [code_of("cuda-plugin-without-gpu")]


def test_jaxlib_newer_than_jax(tmp_path):
    """jax 0.9.2 with jaxlib 0.10.2 (--no-deps): `import jax` raises, whatever JAX_PLATFORMS says."""
    python = _python("skew-jaxlib-newer")
    env = devctl_env()
    for extra in ({}, {"JAX_PLATFORMS": "cpu"}):
        doc, truth = _predicted(python, {**env, **extra}, "raises", tmp_path)
        outcome = doc["jax_outcome"]
        assert outcome["code"] == code_of("jax-jaxlib-skew") and outcome["fix_env"] is None, outcome
        assert "JAX_PLATFORMS" not in outcome["fix"], outcome
    findings = {f["code"]: f for f in _doctor(python, env, tmp_path)}
    assert findings[outcome["code"]]["fix"] == outcome["fix"], findings
    checks = _check(python, env, tmp_path, "versions", "backends")
    assert checks["backends"]["details"]["code"] == outcome["code"] and checks["backends"]["remediation"] == outcome["fix"]
    assert checks["versions"]["remediation"] == outcome["fix"], checks["versions"]
    # Apply the fix: the advised pip install, in a venv of its own.
    fixed = _python("skew-jaxlib-newer", _pip_steps(outcome))
    _predicted(fixed, env, "ok", tmp_path)


def test_jaxlib_missing_is_one_cause_with_one_fix(tmp_path):
    """jax without jaxlib: `import jax` raises ModuleNotFoundError. One finding, one fix, in list, check and
    doctor (it was two fixes, and a cause of versions that reject each other), and the fix makes JAX work."""
    python = _python("jaxlib-missing")
    env = devctl_env()
    doc, truth = _predicted(python, env, "raises", tmp_path)
    assert "jax requires jaxlib to be installed" in truth["error"], _shown(truth)
    outcome = doc["jax_outcome"]
    assert outcome["code"] == code_of("jaxlib-missing") and outcome["fix"] == "pip install -U 'jax==0.10.2' 'jaxlib==0.10.2'", outcome
    findings = _doctor(python, env, tmp_path)
    assert [f["code"] for f in findings if f["severity"] == "error"] == [outcome["code"]], findings
    assert {f["fix"] for f in findings if f["severity"] == "error"} == {outcome["fix"]}
    checks = _check(python, env, tmp_path, "versions", "backends")
    assert checks["versions"]["remediation"] == checks["backends"]["remediation"] == outcome["fix"], checks
    fixed = _python("jaxlib-missing", _pip_steps(outcome))
    _predicted(fixed, env, "ok", tmp_path)


@pytest.mark.parametrize("name", ["cuda12-plugin-without-pjrt", "cuda12-pjrt-without-plugin"])
def test_one_half_of_the_cuda_plugin_is_a_finding_and_its_fix_completes_it(name, tmp_path):
    """`pip check` flags it; JAX works on the CPU here (no GPU) and has no CUDA backend whichever half is missing."""
    python = _python(name)
    env = devctl_env()
    _predicted(python, env, "ok", tmp_path)
    (finding,) = [f for f in _doctor(python, env, tmp_path) if f["code"] == code_of("plugin-half-installed")]
    # No GPU here: JAX works on what this machine has, so a note (it would be a warning beside an unused GPU).
    assert finding["severity"] == "info" and finding["fix"] == "pip install -U 'jax[cuda12]==0.10.2'", finding
    if "plugin-without" in name:  # the plugin package requires its pjrt package; the reverse is not declared
        pip_check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
        assert pip_check.returncode != 0 and "jax-cuda12-pjrt" in pip_check.stdout.replace("_", "-").lower(), pip_check.stdout
    versions = _check(python, env, tmp_path, "versions")["versions"]
    assert versions["status"] == "pass" and versions["details"]["remedy"] == finding["fix"], versions
    fixed = _python(name, _pip_steps(finding))
    assert subprocess.run([fixed, "-m", "pip", "check"], capture_output=True, timeout=120).returncode == 0
    assert not [f for f in _doctor(fixed, env, tmp_path) if f["code"] == code_of("plugin-half-installed")]


# ---- the light scenarios' core on the oldest jax and on the newest jax on the newest Python -----------

CORE = [
    # (id, env, what JAX does)
    ("plain", {}, "ok"),
    ("jax-platforms-cpu", {"JAX_PLATFORMS": "cpu"}, "ok"),
    ("jax-platforms-cuda-no-gpu", {"JAX_PLATFORMS": "cuda"}, "raises"),
    ("jax-platforms-cpu-tpu", {"JAX_PLATFORMS": "cpu,tpu"}, "raises"),
    ("pjrt-missing-file", {PJRT_ENV: f"ghost{SEP}/nonexistent/libghost.so"}, "raises"),
    ("plugin-initialize-raises", {"_PLUGIN": "raises"}, "ok"),
    # Issue 21: a platform JAX skips where it goes on, a name JAX does not know, a flag XLA refuses.
    ("jax-platforms-cuda-cpu-no-gpu", {"JAX_PLATFORMS": "cuda,cpu"}, "ok"),
    ("jax-platforms-uppercase", {"JAX_PLATFORMS": "CPU"}, "raises"),
    ("xla-flags-bad-value", {"XLA_FLAGS": "--xla_force_host_platform_device_count=abc"}, "exits"),
]
RELEASES = ["jax-0.4.36", "py312-jax-0.12", "py310-jax-0.6.2-cuda12", "py312-jax-0.12-cuda13"]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("case", CORE, ids=[c[0] for c in CORE])
def test_core_scenarios_on_other_releases(release, case, tmp_path):
    _id, extra, expect = case
    python = _python(release)
    if expect == "exits" and release in ("jax-0.4.36", "py310-jax-0.6.2-cuda12"):
        expect = "crashes"  # their XLA aborts (SIGABRT) on a flag it refuses; 0.10 and newer exit with status 1
    # What this machine breaks whatever the environment says: the CUDA plugin of a CUDA release without a GPU.
    machine_broken = jax_truth(devctl_env(), python=python, timeout=120)["broken_plugins"] if "cuda" in release else []
    env = devctl_env(**{k: v for k, v in extra.items() if not k.startswith("_")})
    plugin = None
    if "_PLUGIN" in extra:
        plugin = write_plugin(tmp_path / "site", "oracle_plugin", extra["_PLUGIN"])
        env["PYTHONPATH"] = SEP.join((str(tmp_path / "site"), env["PYTHONPATH"]))
    doc, truth = _predicted(python, env, expect, tmp_path)
    outcome = doc["jax_outcome"]
    # One verdict: doctor's errors are exactly where JAX fails, with list's fix among them.
    errors = [f for f in _doctor(python, env, tmp_path) if f["severity"] == "error"]
    assert bool(errors) == (expect != "ok"), errors
    assert expect == "ok" or outcome["fix"] in [f["fix"] for f in errors], (outcome, errors)
    if plugin is not None:
        (row,) = _plugin_rows(doc, "oracle_plugin")
        assert row["code"] == code_of("plugin-broken") and "uninstall" in row["hint"], row
        shutil.rmtree(plugin)  # apply "uninstall it"
        _apply_env_fix(python, env, {}, tmp_path, machine_broken)
    if expect == "ok":
        return
    assert outcome["code"] and outcome["fix"] and outcome["fix_env"] is not None, outcome
    _apply_env_fix(python, env, outcome["fix_env"], tmp_path, machine_broken)


def test_jaxlib_0_12_cpu_client_shows_no_pjrt_c_api_version(tmp_path):
    """jaxlib 0.12 gives its own CPU client (no C API) pjrt_c_api_*_version attributes of 0.0: no version is shown."""
    python = _python("py312-jax-0.12")
    env = devctl_env(devices=1)
    table = _devctl(python, "list", env=env, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "PJRT C API 0.0" not in table.stdout and re.search(r"^cpu: 1 device\b", table.stdout, re.M), table.stdout
    doc = json.loads(_devctl(python, "list", "--json", env=env, cwd=tmp_path).stdout)
    (cpu,) = [b for b in doc["backends"] if b["platform"] == "cpu"]
    assert cpu["status"] == "ok" and cpu["pjrt_c_api_version"] is None, cpu
