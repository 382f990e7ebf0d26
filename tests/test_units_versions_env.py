"""Version verdicts (devctl.discovery.versions) and environment-variable assessments
(devctl.discovery.envvars), given versions and environments as data.

tests/test_version_truth.py and tests/test_env_truth.py hold devctl's verdicts against real jaxlib and real
skewed installs; here are the rules' remaining branches, imported directly: no subprocess, no jax import.
The environment rules are jaxlib 0.10.2's (FALLBACK_RULES) so the words do not depend on the jaxlib installed.
"""

from __future__ import annotations

import pytest

from devctl.discovery import envvars
from devctl.discovery.envvars import FALLBACK_RULES, EnvFix, assess_env, env_vars
from devctl.discovery.versions import check_versions, plan_stack_fix, stack_fix
from devctl.model.env import PackageVersion
from devctl.model.plugins import PjrtApiVersion

ALLOC, FRAC, OLD_FRAC = envvars.ALLOCATOR, envvars.FRACTION, envvars.OLD_FRACTION
COLL = "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB"
ABORT = "XLA_PYTHON_CLIENT_ABORT_COLLECTIVES_ON_FAILURE"


def stack(jax: str | None = "0.10.2", jaxlib: str | None = "0.10.2", *more: PackageVersion) -> list[PackageVersion]:
    return [PackageVersion("jax", jax, "jax"), PackageVersion("jaxlib", jaxlib, "jaxlib"), *more]


# ---- check_versions ------------------------------------------------------------------------------------


def test_missing_jax_or_jaxlib_is_the_only_finding():
    (f,) = check_versions(stack(jax=None), "0.10.0", None)
    assert (f.severity, f.packages, f.message, f.remediation) == ("error", ["jax"], "jax is not installed", "pip install -U jax")
    (f,) = check_versions(stack("0.10.2", None, *cuda12("0.9.0")), "0.10.0", None)
    assert f.message == "jaxlib is not installed: `import jax` raises (jax requires jaxlib to be installed)"
    assert f.remediation == "pip install -U jax jaxlib"  # without the one fix computed
    assert len(check_versions(stack(jax=None, jaxlib=None), None, None)) == 2


def test_jaxlib_older_than_jax_s_minimum_in_jax_s_words():
    (f,) = check_versions(stack("0.10.2", "0.10.0"), "0.10.1", None)
    assert f.severity == "error" and f.message == "jaxlib is version 0.10.0, but this version of jax requires version >= 0.10.1."
    # Without the one fix computed, the remedy still moves both to jax's version, never one up and one down.
    assert f.remediation == "pip install -U 'jax==0.10.2' 'jaxlib==0.10.2'"


def test_versions_are_compared_as_jax_compares_them():
    """JAX compares the dotted numeric prefix: a post release or a dev build of the same numbers is the same."""
    assert check_versions(stack("0.10.2", "0.10.2.post1", *cuda12("0.10.2.dev20251101")), "0.10.0", None) == []
    (f,) = check_versions(stack("0.10.2", "0.10.10"), None, None)
    assert "jaxlib version 0.10.10 is newer than" in f.message  # 10 > 2, not "10" < "2"


def test_rocm_plugins_are_exempt_from_jaxlib_s_plugin_check():
    more = [PackageVersion("jax-rocm7-plugin", "0.9.2", "plugin"), PackageVersion("jax-rocm7-pjrt", "0.10.2", "pjrt")]
    assert check_versions(stack("0.10.2", "0.10.2", *more), None, None) == []


def cuda12(version: str) -> list[PackageVersion]:
    return [PackageVersion("jax-cuda12-plugin", version, "plugin"), PackageVersion("jax-cuda12-pjrt", version, "pjrt")]


@pytest.mark.parametrize("half", ["plugin", "pjrt"])
def test_one_half_of_a_plugin_is_a_finding_with_the_one_fix(half):
    """`pip check` flags jax-cuda12-plugin without jax-cuda12-pjrt (and the reverse): JAX has no CUDA backend."""
    packages = stack("0.10.2", "0.10.2", PackageVersion(f"jax-cuda12-{half}", "0.10.2", half))
    fix = stack_fix(packages, requires=REQUIRES, with_cuda=True)
    missing = "pjrt" if half == "plugin" else "plugin"
    assert fix is not None and fix.command == "pip install -U 'jax[cuda12]==0.10.2'"
    assert [(c.name, c.installed) for c in fix.changes] == [(f"jax-cuda12-{missing}", None)]
    (f,) = check_versions(packages, None, None, fix=fix)
    assert f.severity == "warning" and f.packages == [f"jax-cuda12-{half}", f"jax-cuda12-{missing}"] and f.remediation == fix.command
    assert f"jax-cuda12-{half} 0.10.2 is installed without jax-cuda12-{missing}" in f.message


def test_a_package_without_a_version_is_not_judged():
    assert check_versions(stack("0.10.2", "0.10.2", PackageVersion("jax-cuda12-plugin", None, "plugin")), None, None) == []


@pytest.mark.parametrize(
    "installed,pin,expected",
    [("0.0.17", "0.0.17.*", None), ("0.0.17.1", "0.0.17.*", None), ("0.0.15", "0.0.17.*", "warning"), ("0.0.21", "0.0.21", None)],
)
def test_libtpu_against_jax_s_pin(installed, pin, expected):
    findings = check_versions(stack("0.10.2", "0.10.2", PackageVersion("libtpu", installed, "libtpu")), None, pin)
    assert [f.severity for f in findings] == ([expected] if expected else [])
    if expected:
        assert findings[0].message == f"libtpu {installed} is installed, but jax 0.10.2 pins libtpu=={pin}."


def test_a_libtpu_whose_library_jaxlib_refuses_is_an_error_with_jaxlib_s_words():
    jaxlib = PackageVersion("jaxlib", "0.10.2", "jaxlib", pjrt_api_version=PjrtApiVersion(0, 67))
    tpu = PackageVersion("libtpu", "0.0.9", "libtpu", PjrtApiVersion(0, 20), "Plugin PJRT API version 0.20 is older than the minimum supported version 0.29", False)
    (f,) = check_versions([PackageVersion("jax", "0.10.2", "jax"), jaxlib, tpu], None, "0.0.21")
    assert f.severity == "error"
    assert f.message.endswith(
        "pins libtpu==0.0.21; jaxlib 0.10.2 (PJRT C API 0.67) refuses its library (PJRT C API 0.20): "
        "Plugin PJRT API version 0.20 is older than the minimum supported version 0.29."
    )


def test_a_pjrt_package_whose_verdict_is_unknown_says_so():
    pjrt = PackageVersion("jax-cuda12-pjrt", "0.9.2", "pjrt", None, None, None)
    (f,) = check_versions(stack("0.10.2", "0.10.2", pjrt, PackageVersion("jax-cuda12-plugin", "0.10.2", "plugin")), None, None)
    assert f.severity == "warning"
    assert "whether jaxlib accepts its library is unknown (its PJRT C API version was not read)" in f.message


def test_every_skew_shares_the_one_fix_given():
    from devctl.model.env import StackFix

    fix = StackFix("pip install -U 'jax[cuda12]==0.10.2'", "0.10.2", ["cuda12"])
    more = [PackageVersion("jax-cuda12-plugin", "0.9.2", "plugin"), PackageVersion("jax-cuda12-pjrt", "0.9.2", "pjrt")]
    findings = check_versions(stack("0.10.2", "0.11.0", *more), "0.10.0", None, fix=fix)
    assert len(findings) == 3 and {f.remediation for f in findings} == {fix.command}


# ---- the one fix ------------------------------------------------------------------------------------------

REQUIRES = [
    "jaxlib<=0.10.2,>=0.10.2",
    'jaxlib<=0.10.2,>=0.10.2; extra == "cuda12"', 'jax-cuda12-plugin[with-cuda]<=0.10.2,>=0.10.2; extra == "cuda12"',
    'jaxlib<=0.10.2,>=0.10.2; extra == "cuda12-local"', 'jax-cuda12-plugin<=0.10.2,>=0.10.2; extra == "cuda12-local"',
    'jaxlib<=0.10.2,>=0.10.2; extra == "tpu"', 'libtpu==0.0.21.*; extra == "tpu"',
    'not a requirement !!', 'requests; extra == "tpu"',
]  # fmt: skip


def test_a_plugin_family_jax_has_no_extra_for_is_named_package_by_package():
    """jax's release has no ROCm 7 extra: the command pins the installed ROCm packages to jaxlib's release."""
    fix = plan_stack_fix("0.10.2", {"jaxlib": "0.10.2", "jax-rocm7-plugin": "0.9.2", "jax-rocm7-pjrt": "0.9.2"}, REQUIRES)
    assert fix.command == "pip install -U 'jax==0.10.2' 'jaxlib==0.10.2' 'jax-rocm7-pjrt==0.10.2' 'jax-rocm7-plugin==0.10.2'"
    assert fix.extras == [] and [(c.name, c.installed, c.target) for c in fix.changes] == [
        ("jax-rocm7-pjrt", "0.9.2", "0.10.2"), ("jax-rocm7-plugin", "0.9.2", "0.10.2")
    ]  # fmt: skip


def test_the_fix_summary_lists_each_change_jaxlib_first():
    fix = plan_stack_fix("0.10.2", {"jaxlib": "0.11.0", "jax-cuda12-pjrt": "0.9.2"}, REQUIRES, with_cuda=True)
    assert fix.command == "pip install -U 'jax[cuda12]==0.10.2'" and fix.extras == ["cuda12"]
    assert fix.summary == (
        "puts the stack at jax 0.10.2's own release: jaxlib 0.11.0 -> 0.10.2, "
        "jax-cuda12-pjrt 0.9.2 -> 0.10.2, jax-cuda12-plugin (not installed) -> 0.10.2"
    )


def test_names_are_normalised_as_pip_does():
    fix = plan_stack_fix("0.10.2", {"JAX_CUDA12.Plugin": "0.9.2", "jax_cuda12-PJRT": "0.9.2", "jaxlib": "0.10.2"}, REQUIRES)
    assert [(c.name, c.installed) for c in fix.changes] == [("jax-cuda12-pjrt", "0.9.2"), ("jax-cuda12-plugin", "0.9.2")]
    assert fix.command == "pip install -U 'jax[cuda12-local]==0.10.2'"


def test_no_fix_without_jax():
    assert stack_fix([PackageVersion("jax", None, "jax"), PackageVersion("jaxlib", "0.10.2", "jaxlib")], requires=REQUIRES, with_cuda=False) is None


def test_stack_fix_reads_only_the_stack_s_packages():
    packages = stack("0.10.2", "0.10.2", PackageVersion("numpy", "2.3.0", "other"), PackageVersion("libtpu", "0.0.15", "libtpu"))
    fix = stack_fix(packages, requires=REQUIRES, with_cuda=False)
    assert fix.command == "pip install -U 'jax[tpu]==0.10.2'"
    assert [(c.name, c.target) for c in fix.changes] == [("libtpu", "0.0.21.*")]


# ---- environment variables ---------------------------------------------------------------------------


@pytest.fixture
def rules(monkeypatch):
    """jaxlib 0.10.2's rules, whatever jaxlib this venv has (the real ones are tested in test_env_truth.py)."""
    monkeypatch.setattr(envvars, "jaxlib_rules", lambda: FALLBACK_RULES)


def one(environ: dict[str, str]):
    found = assess_env(environ)
    assert len(found) == 1, found
    return found[0]


def test_only_variables_that_touch_jax_are_listed(rules):
    environ = {"PATH": "/usr/bin", "HOME": "/root", "XLA_FLAGS": "--xla_dump_to=/tmp/x", "JAX_SOMETHING_NEW": "1", "TPU_NEW": "x"}
    names = [a.name for a in assess_env(environ)]
    assert names == ["JAX_SOMETHING_NEW", "TPU_NEW", "XLA_FLAGS"]  # sorted
    new = next(a for a in assess_env(environ) if a.name == "JAX_SOMETHING_NEW")
    assert new.meaning == "" and new.problem is None  # shown, not judged


@pytest.mark.parametrize(
    "value,meaning,problem",
    [
        ("cuda,tpu", "only cuda, tpu; cuda is the default, and every listed platform must initialize or JAX raises", None),
        ("", "empty: JAX chooses backends by priority", None),
        ("cpu,cdua", None, "unknown platform name(s) cdua: JAX will fail to start them"),
    ],
)
def test_jax_platforms(rules, value, meaning, problem):
    a = one({"JAX_PLATFORMS": value})
    assert a.problem == problem
    if meaning:
        assert a.meaning == meaning
    if problem:
        assert a.severity == "error" and a.remedy == "list only installed platforms (devctl list shows them), or unset JAX_PLATFORMS"


@pytest.mark.parametrize(
    "value,meaning",
    [("", "hides every GPU from CUDA"), ("-1", "hides every GPU from CUDA"), ("2,3", "CUDA sees only GPU(s) 2,3, renumbered from 0")],
)
def test_cuda_visible_devices(rules, value, meaning):
    a = one({"CUDA_VISIBLE_DEVICES": value})
    assert a.meaning == meaning and a.problem is None


def test_variables_jax_never_reads_are_warnings_with_the_alternative(rules):
    for name, hint in (("JAX_NUM_PROCESSES", "--num-processes"), ("JAX_PROCESS_ID", "--process-id"), ("JAX_CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")):
        a = one({name: "4"})
        assert a.severity == "warning" and hint in a.problem + (a.remedy or ""), a
    assert one({"JAX_NUM_PROCESSES": "4"}).remedy == "fix or unset JAX_NUM_PROCESSES"


def test_tpu_library_path(rules, tmp_path):
    lib = tmp_path / "libtpu.so"
    missing = one({"TPU_LIBRARY_PATH": str(lib)})
    assert missing.severity == "warning" and missing.problem == f"{lib} does not exist; JAX warns and falls back to the libtpu package"
    assert "pip install -U 'jax[tpu]'" in missing.remedy
    lib.write_bytes(b"\x7fELF")
    assert one({"TPU_LIBRARY_PATH": str(lib)}).problem is None


@pytest.mark.parametrize("value,on", [("false", False), ("False", False), ("0", False), ("true", True), ("no", True), ("", True)])
def test_preallocate_is_off_only_for_jaxlib_s_three_words(rules, value, on):
    a = one({"XLA_PYTHON_CLIENT_PREALLOCATE": value})
    assert a.meaning.startswith("GPU preallocation on") is on and a.problem is None


@pytest.mark.parametrize("value", ["bfc", "BFC", "platform", "cuda_async", "vmm", "default"])
def test_allocators_jaxlib_accepts(rules, value):
    a = one({ALLOC: value})
    assert a.problem is None and a.meaning != "unsupported"


@pytest.mark.parametrize("value,what", [("address", "'address' is not an allocator name"), ("", "empty, which jaxlib reads as an allocator name")])
def test_allocators_jaxlib_refuses(rules, value, what):
    a = one({ALLOC: value})
    assert a.severity == "error" and a.problem.startswith(f"{what}: must be one of default, platform, bfc, cuda_async, vmm (per jaxlib 0.10.2")
    assert a.fix == EnvFix(unset=(ALLOC,))


@pytest.mark.parametrize(
    "value,meaning,problem",
    [
        ("0.5", "JAX's GPU memory pool: 50% of each GPU's memory", None),
        (".9", "JAX's GPU memory pool: 90% of each GPU's memory", None),
        ("1", "JAX's GPU memory pool: 100% of each GPU's memory", None),
        ("1.5", "fraction 1.5", "1.5 is outside (0, 1]: more than the GPU has, meaningful only with unified memory (TF_FORCE_UNIFIED_MEMORY=1)"),
        ("0", "fraction 0", "0 is outside (0, 1]: it leaves JAX's allocator no GPU memory"),
        ("", "empty: JAX ignores it", None),
    ],
)
def test_memory_fraction(rules, value, meaning, problem):
    a = one({FRAC: value})
    assert (a.meaning, a.problem) == (meaning, problem)
    assert a.severity == ("warning" if problem else None) and a.fix is None  # no value is right for every job


def test_a_memory_fraction_that_is_not_a_number_is_an_error_with_its_unset(rules):
    a = one({FRAC: "75%"})
    assert a.severity == "error" and a.problem.startswith("'75%' is not a number (jaxlib reads it with float())")
    assert a.fix == EnvFix(unset=(FRAC,))


def test_the_deprecated_fraction_is_renamed_keeping_the_value(rules):
    a = one({OLD_FRAC: "0.6"})
    assert a.severity == "warning" and a.problem == f"deprecated: use {FRAC}"
    assert a.fix == EnvFix(set={FRAC: "0.6"}, unset=(OLD_FRAC,))
    assert a.remedy == f"rename it, keeping the value: export {FRAC}=0.6; unset {OLD_FRAC}"
    assert one({OLD_FRAC: "2"}).problem.startswith(f"deprecated: use {FRAC}; 2 is outside (0, 1]")
    garbled = one({OLD_FRAC: "abc"})
    assert garbled.severity == "error" and garbled.remedy.startswith(f"unset {OLD_FRAC}; to cap JAX's GPU memory set {FRAC}")


def test_both_fraction_names_is_an_error_on_the_deprecated_one(rules):
    found = {a.name: a for a in assess_env({FRAC: "0.5", OLD_FRAC: "0.6"})}
    assert found[FRAC].problem is None
    old = found[OLD_FRAC]
    assert old.severity == "error" and old.fix == EnvFix(unset=(OLD_FRAC,)) and old.remedy == f"unset {OLD_FRAC} ({FRAC}=0.5 stays)"
    # An empty new name is not "set": jaxlib reads the deprecated one alone.
    assert {a.name: a.severity for a in assess_env({FRAC: "", OLD_FRAC: "0.6"})} == {FRAC: None, OLD_FRAC: "warning"}


@pytest.mark.parametrize("value,fixed", [("true", "1"), ("Yes", "1"), (" off ", "0"), ("FALSE", "0")])
def test_a_word_for_a_zero_one_flag_is_fixed_with_the_digit(rules, value, fixed):
    a = one({ABORT: value})
    assert a.severity == "error" and a.fix == EnvFix(set={ABORT: fixed}) and a.remedy == f"export {ABORT}={fixed}"


def test_zero_one_flags(rules):
    assert one({ABORT: "1"}).meaning == "collectives abort when a peer process fails"
    assert one({ABORT: "0"}).meaning == "off (collectives abort when a peer process fails when 1)"
    maybe = one({ABORT: "maybe"})
    assert maybe.severity == "error" and maybe.fix == EnvFix(unset=(ABORT,))
    # Unlike the sizes, jaxlib does not skip an empty flag: int('') raises.
    assert one({ABORT: ""}).severity == "error"


def test_collective_memory(rules):
    assert one({COLL: "512"}).meaning == "512 MiB of GPU memory reserved for collectives"
    neg = one({COLL: "-1"})
    assert neg.severity == "warning" and neg.problem == "-1 is negative: no memory can be reserved" and neg.fix == EnvFix(unset=(COLL,))
    assert one({COLL: "1.5"}).severity == "error"  # int('1.5') raises
    assert one({COLL: ""}).problem is None


def test_env_fix_applies_and_prints_as_a_shell_line():
    fix = EnvFix(set={"XLA_FLAGS": "--a=1 --b='x'"}, unset=("JAX_PLATFORMS",))
    assert fix.apply({"JAX_PLATFORMS": "cpu", "HOME": "/root"}) == {"HOME": "/root", "XLA_FLAGS": "--a=1 --b='x'"}
    assert fix.shell() == "export XLA_FLAGS='--a=1 --b='\"'\"'x'\"'\"''; unset JAX_PLATFORMS"
    assert fix.to_json() == {"set": {"XLA_FLAGS": "--a=1 --b='x'"}, "unset": ["JAX_PLATFORMS"]}


def test_env_vars_are_the_model_rows_of_the_assessments(rules):
    environ = {ALLOC: "garbage", "JAX_PLATFORMS": "cpu"}
    rows = env_vars(environ)
    assert [(r.name, r.value, r.problem is not None) for r in rows] == [("JAX_PLATFORMS", "cpu", False), (ALLOC, "garbage", True)]
