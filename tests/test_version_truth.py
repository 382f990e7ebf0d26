"""devctl's version verdicts against what JAX and jaxlib really do with a skewed stack.

Three things devctl must get right (issue 10):
- one fix for the whole stack: jax's own pins for its release (`pip install -U 'jax[cuda12]==X'`, X the
  installed jax), never "upgrade the plugin" beside "downgrade jaxlib";
- a PJRT library of another release is refused only where jaxlib's plugin check refuses it
  (xla/pjrt/pjrt_api.cc: compatibility mode, the default, takes any 0.x with x >= 29, older or newer
  than jaxlib's own; ENABLE_PJRT_COMPATIBILITY=false/0/anything unparsable asks for the exact version);
- jaxlib's own PJRT C API version is shown beside each plugin library's.

Light tests (always): the single-fix logic from version tuples and real jax metadata; the PJRT rule
against real jaxlib (the tests' venv) loading small PJRT libraries built with cc, each claiming a
version, through `xla_client.load_pjrt_plugin_dynamically` + `initialize_pjrt_plugin`, the way JAX
loads a plugin; jaxlib's own log line ("The framework PJRT API version is A.B.") is the oracle for
the version devctl reports.

Heavy tests (`-m heavy`): real skewed installs from the registry in cached venvs under
$DEVCTL_SCENARIO_CACHE (default /root/.cache/devctl-scenarios/<name>), made with `--no-deps`; real JAX
is run in each, devctl's `env`, `check`, `doctor` and `plugins` are compared with it, and devctl's one
fix is applied in a venv of its own: JAX must then import and start without a skew complaint.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import devctl_env, validate_schema

from devctl.discovery.versions import check_versions, plan_stack_fix
from devctl.model.env import PackageVersion
from devctl.model.plugins import FrameworkPjrt, PjrtApiVersion

PJRT_ENV = "PJRT_NAMES_AND_LIBRARY_PATHS"
COMPAT = "ENABLE_PJRT_COMPATIBILITY"
SEP = os.pathsep

# jax's Requires-Dist, from the released wheels' METADATA.
REQUIRES_0_6_2 = [
    "jaxlib<=0.6.2,>=0.6.2", "ml_dtypes>=0.5.0", "numpy>=1.26", "opt_einsum", "scipy>=1.12",
    'jaxlib==0.6.2; extra == "minimum-jaxlib"', 'jaxlib==0.6.1; extra == "ci"',
    'jaxlib<=0.6.2,>=0.6.2; extra == "tpu"', 'libtpu==0.0.17.*; extra == "tpu"', 'requests; extra == "tpu"',
    'jaxlib<=0.6.2,>=0.6.2; extra == "cuda"', 'jax-cuda12-plugin[with-cuda]<=0.6.2,>=0.6.2; extra == "cuda"',
    'jaxlib<=0.6.2,>=0.6.2; extra == "cuda12"', 'jax-cuda12-plugin[with-cuda]<=0.6.2,>=0.6.2; extra == "cuda12"',
    'jaxlib<=0.6.2,>=0.6.2; extra == "cuda12-local"', 'jax-cuda12-plugin<=0.6.2,>=0.6.2; extra == "cuda12-local"',
    'jaxlib<=0.6.2,>=0.6.2; extra == "rocm"', 'jax-rocm60-plugin<=0.6.2,>=0.6.2; extra == "rocm"',
    'kubernetes; extra == "k8s"', 'xprof; extra == "xprof"',
]  # fmt: skip
# jax 0.5.2 was released without a jaxlib 0.5.2: its extras pin jaxlib 0.5.1.
REQUIRES_0_5_2 = [
    "jaxlib<=0.5.2,>=0.5.1", "ml_dtypes>=0.4.0", "numpy>=1.25", 'numpy>=1.26.0; python_version >= "3.12"',
    'jaxlib==0.5.1; extra == "minimum-jaxlib"', 'jaxlib==0.5.0; extra == "ci"',
    'jaxlib<=0.5.2,>=0.5.1; extra == "tpu"', 'libtpu==0.0.10.*; extra == "tpu"', 'requests; extra == "tpu"',
    'jaxlib==0.5.1; extra == "cuda"', 'jax-cuda12-plugin[with_cuda]<=0.5.2,>=0.5.1; extra == "cuda"',
    'jaxlib==0.5.1; extra == "cuda12"', 'jax-cuda12-plugin[with_cuda]<=0.5.2,>=0.5.1; extra == "cuda12"',
    'jaxlib==0.5.1; extra == "cuda12-pip"', 'jax-cuda12-plugin[with_cuda]<=0.5.2,>=0.5.1; extra == "cuda12-pip"',
    'jaxlib==0.5.1; extra == "cuda12-local"', 'jax-cuda12-plugin==0.5.1; extra == "cuda12-local"',
    'jaxlib==0.5.1; extra == "rocm"', 'jax-rocm60-plugin<=0.5.2,>=0.5.1; extra == "rocm"',
]  # fmt: skip


def _packages(jax: str, **others: str) -> list[PackageVersion]:
    roles = {"jaxlib": "jaxlib", "libtpu": "libtpu"}
    out = [PackageVersion("jax", jax, "jax")]
    for key, version in others.items():
        name = key.replace("_", "-")
        out.append(PackageVersion(name, version, roles.get(name) or name.rsplit("-", 1)[-1]))
    return out


def _installed(packages: list[PackageVersion]) -> dict[str, str]:
    return {p.name: p.version for p in packages if p.name != "jax" and p.version}


# ---- the one fix, from version tuples -----------------------------------------------------------


def test_jaxlib_newer_and_plugin_older_get_one_fix_to_jax_s_release():
    """jax 0.6.2, jaxlib 0.7.0, CUDA plugin 0.6.0: not 'upgrade the plugin to 0.7.0' beside 'downgrade jaxlib'."""
    packages = _packages("0.6.2", jaxlib="0.7.0", jax_cuda12_plugin="0.6.0", jax_cuda12_pjrt="0.6.0")
    fix = plan_stack_fix("0.6.2", _installed(packages), REQUIRES_0_6_2)
    assert fix.command == "pip install -U 'jax[cuda12-local]==0.6.2'"
    assert {(c.name, c.installed, c.target) for c in fix.changes} == {
        ("jaxlib", "0.7.0", "0.6.2"), ("jax-cuda12-plugin", "0.6.0", "0.6.2"), ("jax-cuda12-pjrt", "0.6.0", "0.6.2"),
    }  # fmt: skip
    findings = check_versions(packages, "0.6.0", None, fix=fix)
    assert len(findings) == 3, findings
    assert {f.remediation for f in findings} == {fix.command}, "every skew has the same, single fix"
    assert "jaxlib version 0.7.0 is newer than and incompatible with jax version 0.6.2." in [f.message for f in findings]


def test_the_fix_brings_the_cuda_wheels_only_where_they_are_installed():
    installed = {"jaxlib": "0.6.2", "jax-cuda12-plugin": "0.6.0", "jax-cuda12-pjrt": "0.6.0"}
    assert plan_stack_fix("0.6.2", installed, REQUIRES_0_6_2, with_cuda=True).command == "pip install -U 'jax[cuda12]==0.6.2'"
    assert plan_stack_fix("0.6.2", installed, REQUIRES_0_6_2, with_cuda=False).command == "pip install -U 'jax[cuda12-local]==0.6.2'"


def test_without_a_plugin_the_fix_is_jax_and_jaxlib_as_list_advises():
    fix = plan_stack_fix("0.6.2", {"jaxlib": "0.7.0"}, REQUIRES_0_6_2)
    # Word for word what `devctl list` advises for the import error (devctl.checks.advice.jax_import).
    assert fix.command == "pip install -U 'jax==0.6.2' 'jaxlib==0.6.2'"
    assert [(c.name, c.target) for c in fix.changes] == [("jaxlib", "0.6.2")]


def test_the_fix_pins_the_jaxlib_jax_was_released_with():
    """jax 0.5.2 has no jaxlib 0.5.2: 'jaxlib==0.5.2' would not install; jax's own pins say 0.5.1."""
    assert plan_stack_fix("0.5.2", {"jaxlib": "0.6.0"}, REQUIRES_0_5_2).command == "pip install -U 'jax==0.5.2' 'jaxlib==0.5.1'"
    fix = plan_stack_fix("0.5.2", {"jaxlib": "0.6.0", "jax-cuda12-plugin": "0.4.38", "jax-cuda12-pjrt": "0.4.38"}, REQUIRES_0_5_2)
    assert fix.command == "pip install -U 'jax[cuda12-local]==0.5.2'"
    assert {c.name: c.target for c in fix.changes} == {"jaxlib": "0.5.1", "jax-cuda12-plugin": "0.5.1", "jax-cuda12-pjrt": "0.5.1"}


def test_one_command_covers_cuda_and_tpu_together():
    installed = {"jaxlib": "0.6.2", "jax-cuda12-pjrt": "0.6.0", "libtpu": "0.0.15"}
    fix = plan_stack_fix("0.6.2", installed, REQUIRES_0_6_2)
    assert fix.command == "pip install -U 'jax[cuda12-local,tpu]==0.6.2'"
    assert {c.name: (c.installed, c.target) for c in fix.changes} == {
        "jax-cuda12-pjrt": ("0.6.0", "0.6.2"), "jax-cuda12-plugin": (None, "0.6.2"), "libtpu": ("0.0.15", "0.0.17.*"),
    }  # fmt: skip


def test_a_consistent_stack_changes_nothing():
    installed = {"jaxlib": "0.6.2", "jax-cuda12-plugin": "0.6.2", "jax-cuda12-pjrt": "0.6.2", "libtpu": "0.0.17"}
    assert plan_stack_fix("0.6.2", installed, REQUIRES_0_6_2).changes == []
    packages = _packages("0.6.2", jaxlib="0.6.2", jax_cuda12_plugin="0.6.2", jax_cuda12_pjrt="0.6.2")
    assert check_versions(packages, "0.6.0", "0.0.17.*") == []


# ---- the PJRT rule, from version tuples ------------------------------------------------------------

V = PjrtApiVersion
COMPATIBLE = FrameworkPjrt("0.10.2", V(0, 112), True, 29, True, None)
STRICT = FrameworkPjrt("0.10.2", V(0, 112), False, 29, True, "false")


@pytest.mark.parametrize(
    "framework, plugin, accepted, words",
    [
        (COMPATIBLE, V(0, 112), True, "accepted"),
        (COMPATIBLE, V(0, 100), True, "accepted"),  # an older release's plugin
        (COMPATIBLE, V(0, 500), True, "accepted"),  # newer than jaxlib: no upper bound
        (COMPATIBLE, V(0, 29), True, "accepted"),
        (COMPATIBLE, V(0, 28), False, "Plugin PJRT API version 0.28 is older than the minimum supported version 0.29"),
        (COMPATIBLE, V(1, 112), False, "Mismatched PJRT plugin PJRT API major version (1) and framework PJRT API major version 0)."),
        (STRICT, V(0, 112), True, "accepted"),
        (STRICT, V(0, 100), False, "Mismatched PJRT plugin PJRT API version (0.100) and framework PJRT API version 0.112)."),
    ],
)
def test_pjrt_rule_is_xla_s(framework, plugin, accepted, words):
    verdict = framework.verdict(plugin)
    assert verdict.accepted is accepted and words in verdict.reason, verdict
    assert verdict.refused_by_setting is (framework is STRICT and not accepted)


def test_an_accepted_pjrt_skew_is_a_warning_and_predicts_no_crash():
    lib = dict(pjrt_api_version=V(0, 100), pjrt_accepted=True, pjrt_check=COMPATIBLE.verdict(V(0, 100)).reason)
    packages = [
        PackageVersion("jax", "0.10.2", "jax"),
        PackageVersion("jaxlib", "0.10.2", "jaxlib", pjrt_api_version=V(0, 112)),
        PackageVersion("jax-cuda12-pjrt", "0.9.2", "pjrt", **lib),
        PackageVersion("jax-cuda12-plugin", "0.10.2", "plugin"),
    ]
    (finding,) = check_versions(packages, "0.10.1", None, framework=COMPATIBLE)
    assert finding.severity == "warning", finding
    assert "crash" not in finding.message and "mismatch" not in finding.message.lower(), finding.message
    assert "0.100" in finding.message and "0.112" in finding.message, "jaxlib's PJRT version beside the library's"
    refused = STRICT.verdict(V(0, 100))
    packages[2] = PackageVersion("jax-cuda12-pjrt", "0.9.2", "pjrt", V(0, 100), refused.reason, False)
    (finding,) = check_versions(packages, "0.10.1", None, framework=STRICT)
    assert finding.severity == "error" and refused.reason in finding.message, finding


def test_a_jaxlib_without_the_plugin_check_is_not_said_to_ignore_the_plugin():
    packages = _packages("0.4.36", jaxlib="0.4.36", jax_cuda12_plugin="0.4.35", jax_cuda12_pjrt="0.4.36")
    (finding,) = check_versions(packages, "0.4.36", None, plugin_check=False)
    assert finding.severity == "warning" and "will not be used" not in finding.message, finding
    (finding,) = check_versions(packages, "0.4.36", None, plugin_check=True)
    assert finding.severity == "error" and finding.message.startswith("JAX plugin jax_cuda12_plugin version 0.4.35"), finding


# ---- the PJRT rule against real jaxlib: small PJRT libraries built with cc -------------------------

_FAKE_PJRT = r"""
#include <stddef.h>
typedef struct { size_t struct_size; void* extension_start; int major; int minor; } Version;
typedef struct {
  size_t struct_size; void* extension_start; Version version;
  void* error_destroy; void* error_message; void* error_getcode;
  void* (*plugin_initialize)(void*);
  void* plugin_attributes;
} Api;
static void* initialize(void* args) { (void)args; return NULL; }  /* a no-op: jaxlib may call it when it accepts */
static const Api api = {sizeof(Api), NULL, {sizeof(Version), NULL, MAJOR, MINOR}, NULL, NULL, NULL, initialize, NULL};
const Api* GetPjrtApi(void) { return &api; }
"""

# jaxlib loading plugin libraries the way JAX does (xla_bridge.register_plugin -> make_pjrt_c_api_client),
# with its C++ log on: "The PJRT plugin has PJRT API version X.Y. The framework PJRT API version is A.B."
_JAXLIB_LOADS = r"""
import json, sys
from jaxlib import xla_client
out = {}
for name, path in json.loads(sys.argv[1]).items():
    xla_client.load_pjrt_plugin_dynamically(name, path)
    try:
        xla_client.initialize_pjrt_plugin(name)
        out[name] = {"accepted": True}
    except Exception as e:
        out[name] = {"accepted": False, "error": str(e)}
    print("--- devctl-test: " + name, file=sys.stderr, flush=True)
print(json.dumps(out))
"""
_LOGGED = re.compile(r"The PJRT plugin has PJRT API version (\d+)\.(\d+)\. The framework PJRT API version is (\d+)\.(\d+)\.")


def jaxlib_loads(python: str, libraries: dict[str, str], env: dict[str, str]) -> dict[str, dict]:
    """What real jaxlib's plugin check does with each library: accepted or its error, and the versions it logged."""
    env = {**env, "TF_CPP_MIN_LOG_LEVEL": "0"}
    proc = subprocess.run([python, "-c", _JAXLIB_LOADS, json.dumps(libraries)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, block in zip(libraries, re.split(r"--- devctl-test: \S+\n", proc.stderr)):
        m = _LOGGED.search(block)  # jaxlib 0.4.x does not log it
        out[name]["plugin"] = f"{m.group(1)}.{m.group(2)}" if m else None
        out[name]["framework"] = f"{m.group(3)}.{m.group(4)}" if m else None
    return out


def _version(v: dict | None) -> str | None:
    return f"{v['major']}.{v['minor']}" if v else None


def _plugins_json(python: str, env: dict[str, str]) -> dict[str, dict]:
    proc = subprocess.run([python, "-m", "devctl", "plugins", "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    validate_schema(doc, "plugins")
    return {p["name"]: p for p in doc["plugins"]}


def _agree(devctl_rows: dict[str, dict], jaxlib: dict[str, dict]) -> None:
    for name, truth in jaxlib.items():
        row = devctl_rows[name]
        shown = f"{name}: devctl {json.dumps({k: row[k] for k in ('pjrt_api_version', 'framework_pjrt_api_version', 'pjrt_accepted', 'pjrt_check')})}; jaxlib {truth}"
        if truth["plugin"] is not None:
            assert _version(row["pjrt_api_version"]) == truth["plugin"], shown
            assert _version(row["framework_pjrt_api_version"]) == truth["framework"], shown
        assert row["pjrt_accepted"] is truth["accepted"], shown
        if not truth["accepted"]:
            assert row["pjrt_check"] and row["pjrt_check"] in truth["error"], shown  # jaxlib's own words


@pytest.fixture(scope="module")
def framework_minor() -> int:
    """jaxlib's own PJRT minor, as jaxlib logs it (not as devctl measures it)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        lib = _build(Path(d), 0, 29)
        truth = jaxlib_loads(sys.executable, {"probe": str(lib)}, devctl_env())
    assert truth["probe"]["framework"], "the tests' jaxlib logged no PJRT version line"
    return int(truth["probe"]["framework"].split(".")[1])


def _build(out_dir: Path, major: int, minor: int) -> Path:
    from pjrt_fixtures import find_c_compiler

    compiler = find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build test PJRT libraries")
    source = out_dir / "claims_version.c"
    source.write_text(_FAKE_PJRT)
    lib = out_dir / f"libclaims_{major}_{minor}.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O0", f"-DMAJOR={major}", f"-DMINOR={minor}", "-o", str(lib), str(source)], check=True)
    return lib


@pytest.fixture(scope="module")
def claiming_libraries(tmp_path_factory, framework_minor) -> dict[str, str]:
    """Libraries claiming the versions that matter: below the minimum, the minimum, older, jaxlib's own, newer, major 1."""
    out_dir = tmp_path_factory.mktemp("claims")
    claims = {"v0_28": (0, 28), "v0_29": (0, 29), "v0_54": (0, 54), "own": (0, framework_minor), "v0_500": (0, 500), "v1": (1, framework_minor)}
    return {name: str(_build(out_dir, *v)) for name, v in claims.items()}


@pytest.mark.parametrize("setting", [None, "true", "1", "false", "0", "off", ""], ids=lambda s: f"{COMPAT}={s!r}")
def test_devctl_judges_pjrt_versions_as_jaxlib_does(claiming_libraries, setting):
    env = devctl_env()
    env.pop(COMPAT, None)
    if setting is not None:
        env[COMPAT] = setting
    truth = jaxlib_loads(sys.executable, claiming_libraries, env)
    env[PJRT_ENV] = ",".join(f"{name}{SEP}{path}" for name, path in claiming_libraries.items())
    _agree(_plugins_json(sys.executable, env), truth)


def test_strict_mode_refusal_is_fixed_by_the_setting_devctl_names(claiming_libraries):
    """ENABLE_PJRT_COMPATIBILITY=false refuses an older library that the default takes: devctl blames the
    setting, and unsetting it (what devctl says) makes jaxlib accept the library."""
    libs = {k: claiming_libraries[k] for k in ("v0_54",)}
    env = {**devctl_env(), COMPAT: "false", PJRT_ENV: f"v0_54{SEP}{libs['v0_54']}"}
    assert jaxlib_loads(sys.executable, libs, env)["v0_54"]["accepted"] is False
    proc = subprocess.run([sys.executable, "-m", "devctl", "check", "--only", "plugins", "--json"], env=env, capture_output=True, text=True, timeout=300)
    doc = json.loads(proc.stdout)
    validate_schema(doc, "check")
    (check,) = doc["checks"]
    assert check["status"] == "fail" and proc.returncode == 1, check
    assert check["remediation"].startswith(f"unset {COMPAT}"), check
    del env[COMPAT]
    assert jaxlib_loads(sys.executable, libs, env)["v0_54"]["accepted"] is True
    assert _plugins_json(sys.executable, env)["v0_54"]["pjrt_accepted"] is True


def test_env_shows_jaxlib_s_own_pjrt_version(framework_minor):
    proc = subprocess.run([sys.executable, "-m", "devctl", "env", "--json"], env=devctl_env(), capture_output=True, text=True, timeout=300)
    doc = json.loads(proc.stdout)
    validate_schema(doc, "env")
    (jaxlib,) = [p for p in doc["packages"] if p["name"] == "jaxlib"]
    assert jaxlib["pjrt_api_version"] == {"major": 0, "minor": framework_minor}
    assert doc["framework_pjrt"]["pjrt_api_version"] == jaxlib["pjrt_api_version"]
    assert doc["framework_pjrt"]["compatibility"] is True and doc["framework_pjrt"]["minimum_minor"] == 29
    text = subprocess.run([sys.executable, "-m", "devctl", "env"], env=devctl_env(), capture_output=True, text=True, timeout=300).stdout
    assert f"PJRT C API 0.{framework_minor}" in text


# ---- heavy: real skewed installs from the registry --------------------------------------------------

VT_JAXLIB_NEWER = ("vt-jax0.6.2-jaxlib0.7.0-cuda12-0.6.0", [["jax==0.6.2"], ["--no-deps", "jaxlib==0.7.0", "jax-cuda12-plugin==0.6.0", "jax-cuda12-pjrt==0.6.0"]])
VT_PLUGIN_OLDER = ("vt-cuda12-local-0.10.2-plugin-0.9.2", [["jax[cuda12-local]==0.10.2"], ["--no-deps", "jax-cuda12-plugin==0.9.2", "jax-cuda12-pjrt==0.9.2"]])
VT_PJRT_OLDER = ("vt-cuda12-local-0.10.2-pjrt-0.9.2", [["jax[cuda12-local]==0.10.2"], ["--no-deps", "jax-cuda12-pjrt==0.9.2"]])
VT_CONSISTENT = ("vt-cuda12-local-0.10.2", [["jax[cuda12-local]==0.10.2"]])
SKEW_WORDS = ("is not compatible with the installed jaxlib version", "is newer than and incompatible with jax version", "but this version of jax requires version")


def _venv(name: str, steps: list[list[str]], interpreter: str = "python3.11") -> str:
    """The interpreter of the cached venv `name`: devctl's runtime dependencies, then `steps` (one pip install
    each), built once under $DEVCTL_SCENARIO_CACHE by tests/scenarios.py and rebuilt only when the steps change."""
    import scenarios

    try:
        python = scenarios.scenario_python(name, steps, interpreter)
    except scenarios.ScenarioBuildError as e:
        pytest.skip(f"the venv {name} cannot be built here: {e}")
    if python is None:
        pytest.skip(f"the venv {name} is not built yet and the package registry cannot be reached")
    return str(python)


def _run(python: str, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([python, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def _devctl_json(python: str, *args: str, env: dict[str, str], cwd: Path, schema: str) -> tuple[dict, int]:
    proc = _run(python, "-m", "devctl", *args, "--json", env=env, cwd=cwd)
    assert proc.stdout.strip(), f"exit {proc.returncode}; stderr:\n{proc.stderr[-3000:]}"
    doc = json.loads(proc.stdout)
    validate_schema(doc, schema)
    return doc, proc.returncode


_JAX_STARTS = r"""
import json, warnings
warnings.simplefilter("always")
try:
    import jax
    devices = jax.devices()
except Exception as e:
    print(json.dumps({"result": "raises", "error": f"{type(e).__name__}: {e}"}))
else:
    print(json.dumps({"result": "ok", "devices": [d.platform for d in devices]}))
"""


def jax_starts(python: str, env: dict[str, str], cwd: Path) -> dict:
    """Real JAX: `import jax; jax.devices()`, every warning shown; its stderr kept."""
    proc = _run(python, "-c", _JAX_STARTS, env=env, cwd=cwd)
    lines = proc.stdout.strip().splitlines()
    truth = json.loads(lines[-1]) if lines else {"result": "crashes", "returncode": proc.returncode}
    truth["stderr"] = proc.stderr
    return truth


def _library(python: str, cwd: Path) -> str:
    # Found, not imported: the plugin's __init__ imports jax, which a skewed jaxlib makes raise.
    code = "import importlib.util, os; s = importlib.util.find_spec('jax_plugins.xla_cuda12'); print(os.path.join(s.submodule_search_locations[0], 'xla_cuda_plugin.so'))"
    proc = _run(python, "-c", code, env=devctl_env(), cwd=cwd)
    path = proc.stdout.strip()
    assert path and Path(path).exists(), proc.stderr[-2000:]
    return path


def _fix_step(command: str) -> list[str]:
    """devctl's `pip install ...` as a pip step."""
    assert command.startswith("pip install "), command
    return shlex.split(command[len("pip install ") :])


def _stack_findings(doc: dict) -> list[dict]:
    fix = doc["stack_fix"]
    return [f for f in doc["findings"] if fix and f["remediation"] == fix["command"]]


def _apply_and_check(name: str, steps: list[list[str]], command: str, tmp_path: Path) -> str:
    """Apply devctl's one fix in a venv of its own: JAX imports and starts with no skew complaint, devctl sees
    nothing left to fix, and every package of the stack is at jax's release."""
    fixed = _venv(f"{name}-fixed", steps + [_fix_step(command)])
    env = devctl_env()
    truth = jax_starts(fixed, env, tmp_path)
    assert truth["result"] == "ok", truth
    for words in SKEW_WORDS:
        assert words not in truth["stderr"], f"JAX still complains after the fix: {words!r}\n{truth['stderr'][-3000:]}"
    doc, _ = _devctl_json(fixed, "env", env=env, cwd=tmp_path, schema="env")
    assert doc["stack_fix"] is None and not [f for f in doc["findings"] if f["packages"][0].startswith(("jax", "libtpu"))], doc["findings"]
    versions = {p["name"]: p["version"] for p in doc["packages"] if p["role"] in ("jax", "jaxlib", "plugin", "pjrt")}
    assert len(set(versions.values())) == 1, versions
    return fixed


heavy = pytest.mark.heavy  # needs packages from the registry in a cached venv: run with -m heavy


@heavy
def test_jaxlib_newer_than_jax_with_an_older_plugin(tmp_path):
    """jax 0.6.2 + jaxlib 0.7.0 + jax-cuda12-plugin/pjrt 0.6.0: one fix, jax[cuda12-local]==0.6.2, and it works."""
    name, steps = VT_JAXLIB_NEWER
    python = _venv(name, steps)
    env = devctl_env()
    truth = jax_starts(python, env, tmp_path)
    assert truth["result"] == "raises" and "jaxlib version 0.7.0 is newer than and incompatible with jax version 0.6.2" in truth["error"], truth

    doc, _ = _devctl_json(python, "env", env=env, cwd=tmp_path, schema="env")
    fix = doc["stack_fix"]
    assert fix["command"] == "pip install -U 'jax[cuda12-local]==0.6.2'", fix
    assert {(c["name"], c["installed"], c["target"]) for c in fix["changes"]} == {
        ("jaxlib", "0.7.0", "0.6.2"), ("jax-cuda12-plugin", "0.6.0", "0.6.2"), ("jax-cuda12-pjrt", "0.6.0", "0.6.2"),
    }  # fmt: skip
    # One fix for the whole stack: no finding advises anything else, nothing moves two ways.
    assert {f["remediation"] for f in doc["findings"]} == {fix["command"]}, doc["findings"]
    messages = [f["message"] for f in doc["findings"]]
    assert any(m in truth["error"] for m in messages), f"devctl's words are not JAX's: {messages} vs {truth['error']}"
    (pjrt,) = [p for p in doc["packages"] if p["name"] == "jax-cuda12-pjrt"]
    (jaxlib,) = [p for p in doc["packages"] if p["name"] == "jaxlib"]

    # jaxlib 0.7.0 itself loading the 0.6.0 library: it accepts it; devctl's versions are those jaxlib logs.
    library = _library(python, tmp_path)
    real = jaxlib_loads(python, {"cuda_060": library}, env)["cuda_060"]
    assert real["accepted"] is True and pjrt["pjrt_accepted"] is True, (real, pjrt)
    assert (_version(pjrt["pjrt_api_version"]), _version(jaxlib["pjrt_api_version"])) == (real["plugin"], real["framework"])
    (pjrt_finding,) = [f for f in doc["findings"] if f["packages"][0] == "jax-cuda12-pjrt"]
    assert pjrt_finding["severity"] == "warning" and "crash" not in pjrt_finding["message"], pjrt_finding

    check, code = _devctl_json(python, "check", "--only", "versions", env=env, cwd=tmp_path, schema="check")
    (versions,) = check["checks"]
    assert code == 1 and versions["status"] == "fail" and versions["remediation"] == fix["command"], versions

    fixed = _apply_and_check(name, steps, fix["command"], tmp_path)
    assert _plugins_json(fixed, env)["xla_cuda12"]["pjrt_accepted"] is True

    doctor, _ = _devctl_json(python, "doctor", env=env, cwd=tmp_path, schema="doctor")
    skew = [f for f in doctor["findings"] if f["id"] in ("jax-jaxlib-skew", "plugin-version-skew")]
    assert len(skew) == 1, skew  # one finding for the stack
    assert any("jax_cuda12_plugin version 0.6.0" in e for e in skew[0]["evidence"]), skew
    assert skew[0]["fix"] == fix["command"], skew  # one advice: doctor's, check's and list's are the same
    listed, code = _devctl_json(python, "list", env=env, cwd=tmp_path, schema="list")
    assert code == 1 and fix["command"] in json.dumps(listed), listed


@heavy
def test_plugin_older_than_jaxlib(tmp_path):
    """jax/jaxlib 0.10.2 + jax-cuda12-plugin/pjrt 0.9.2: JAX ignores the plugin's kernels (its warning, word for
    word) but accepts the PJRT library; only ENABLE_PJRT_COMPATIBILITY=false makes jaxlib refuse it."""
    name, steps = VT_PLUGIN_OLDER
    python = _venv(name, steps)
    env = devctl_env()
    truth = jax_starts(python, env, tmp_path)
    assert truth["result"] == "ok", truth
    doc, _ = _devctl_json(python, "env", env=env, cwd=tmp_path, schema="env")
    fix = doc["stack_fix"]
    assert fix["command"] == "pip install -U 'jax[cuda12-local]==0.10.2'", fix
    (plugin,) = [f for f in doc["findings"] if f["packages"][0] == "jax-cuda12-plugin"]
    assert plugin["severity"] == "error" and plugin["message"] in truth["stderr"], (plugin, truth["stderr"][-2000:])
    (pjrt,) = [f for f in doc["findings"] if f["packages"][0] == "jax-cuda12-pjrt"]
    assert pjrt["severity"] == "warning" and "accepts" in pjrt["message"], pjrt

    library = _library(python, tmp_path)
    for setting in (None, "false"):
        run_env = {k: v for k, v in env.items() if k != COMPAT} | ({COMPAT: setting} if setting else {})
        real = jaxlib_loads(python, {"cuda_092": library}, run_env)
        rows = _plugins_json(python, {**run_env, PJRT_ENV: f"cuda_092{SEP}{library}"})
        _agree(rows, real)
        assert real["cuda_092"]["accepted"] is (setting is None), real
        env_doc, _ = _devctl_json(python, "env", env=run_env, cwd=tmp_path, schema="env")
        (pjrt,) = [f for f in env_doc["findings"] if f["packages"][0] == "jax-cuda12-pjrt"]
        if setting:
            assert pjrt["severity"] == "error" and rows["cuda_092"]["pjrt_check"] in pjrt["message"], pjrt
            assert rows["cuda_092"]["pjrt_refused_by_setting"] is True

    fixed = _apply_and_check(name, steps, fix["command"], tmp_path)
    # The fixed stack speaks jaxlib's exact version: even strict mode takes it.
    strict = {**env, COMPAT: "false"}
    new_library = _library(fixed, tmp_path)
    real = jaxlib_loads(fixed, {"cuda": new_library}, strict)
    _agree(_plugins_json(fixed, {**strict, PJRT_ENV: f"cuda{SEP}{new_library}"}), real)
    assert real["cuda"]["accepted"] is True


@heavy
def test_pjrt_package_older_than_jaxlib_is_a_warning(tmp_path):
    """Only jax-cuda12-pjrt at 0.9.2: JAX says nothing and accepts the library, so devctl warns and fails nothing."""
    name, steps = VT_PJRT_OLDER
    python = _venv(name, steps)
    env = devctl_env()
    truth = jax_starts(python, env, tmp_path)
    assert truth["result"] == "ok" and not any(w in truth["stderr"] for w in SKEW_WORDS), truth
    assert jaxlib_loads(python, {"cuda": _library(python, tmp_path)}, env)["cuda"]["accepted"] is True
    check, _ = _devctl_json(python, "check", "--only", "versions", env=env, cwd=tmp_path, schema="check")
    (versions,) = check["checks"]
    # JAX works on the CPU, all this machine has: said with its fix, failing nothing (issue 21's one rule).
    assert versions["status"] == "pass", versions
    doc, _ = _devctl_json(python, "env", env=env, cwd=tmp_path, schema="env")
    assert [f["severity"] for f in doc["findings"]] == ["warning"], doc["findings"]
    assert versions["details"]["remedy"] == doc["stack_fix"]["command"] == "pip install -U 'jax[cuda12-local]==0.10.2'"
    _apply_and_check(name, steps, doc["stack_fix"]["command"], tmp_path)


@heavy
def test_pjrt_rule_across_jaxlib_releases(tmp_path):
    """Every CUDA PJRT library above (0.6.0, 0.9.2, 0.10.2) loaded by jaxlib 0.4.36, 0.7.0, 0.10.2 and 0.12 (older and
    newer both ways), in both modes: devctl's verdict is jaxlib's."""
    import scenarios

    venvs = {n: _venv(n, s) for n, s in (VT_JAXLIB_NEWER, VT_PLUGIN_OLDER, VT_CONSISTENT)}
    libraries = {f"lib_{i}": _library(p, tmp_path) for i, p in enumerate(venvs.values())}
    for name in ("jax-0.4.36", "py312-jax-0.12"):  # the oldest jax devctl supports, the newest (CPU venvs of test_oracle_heavy)
        venvs[name] = _venv(name, scenarios.VENVS[name].steps, scenarios.VENVS[name].python)
    seen = set()
    for python in venvs.values():
        for setting in (None, "false"):
            env = {k: v for k, v in devctl_env().items() if k != COMPAT} | ({COMPAT: setting} if setting else {})
            real = jaxlib_loads(python, libraries, env)
            _agree(_plugins_json(python, {**env, PJRT_ENV: ",".join(f"{n}{SEP}{p}" for n, p in libraries.items())}), real)
            seen |= {(r["framework"], r["plugin"], r["accepted"]) for r in real.values()}
    assert any(not ok for *_, ok in seen) and any(ok and fw != lib for fw, lib, ok in seen), seen
