"""devctl.checks.advice rule by rule, given model objects: which advice a backend row or a failing
jax.devices() gets, in what words, and with which environment change.

tests/test_advice.py feeds the machine's evidence (device nodes, NVML, PCI, KFD) for the CUDA and ROCm
plugin rows; tests/test_oracle.py proves the fixes against real JAX. These cover the remaining branches:
each is a condition a user meets, and each asserts the code (what `list`, `check` and `doctor` share) and
the fix a user would copy.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from devctl.checks.advice import (
    PJRT_ENV,
    code_of,
    env_entries,
    finding_of,
    for_outcome,
    for_row,
    nodes_without_driver,
    nvidia_evidence,
)
from devctl.model.list_ import BackendInfo, BackendStatus, JaxOutcome

F, C, T, S, OK = BackendStatus.FAILED, BackendStatus.CRASHED, BackendStatus.TIMEOUT, BackendStatus.SKIPPED, BackendStatus.OK


def hw(nodes=(), pci=(), gpus=(), nvml_status=None, nvml_reason="libnvidia-ml.so.1 not found", chips=(), amd=()):
    nvml = SimpleNamespace(status=nvml_status or ("ok" if gpus else "unavailable"), reason=None if gpus else nvml_reason, gpus=tuple(gpus))
    return SimpleNamespace(nvidia=nvml, nvidia_device_nodes=list(nodes), nvidia_pci=list(pci),
                           tpu=SimpleNamespace(chips=list(chips)), amd=SimpleNamespace(gpus=list(amd)))  # fmt: skip


TPU_HOST = hw(chips=[SimpleNamespace(index=0)])


def entry(tmp_path, name: str, exists: bool = True) -> str:
    path = tmp_path / f"lib{name}.so"
    if exists:
        path.write_bytes(b"\x7fELF")
    return f"{name}{os.pathsep}{path}"


# ---- codes ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("finding", ["cuda-plugin-without-gpu", "pjrt-entry-broken", "jax-jaxlib-skew", "backend-failed"])
def test_codes_and_findings_are_inverse(finding):
    code = code_of(finding)
    assert code.startswith("DEVCTL_FR_") and code == code.upper() and "-" not in code
    assert finding_of(code) == finding


# ---- the machine's evidence ------------------------------------------------------------------------------


def test_nvidia_evidence_prefers_what_is_most_certain():
    assert nvidia_evidence(hw()) is None
    assert nvidia_evidence(hw(gpus=[1, 2], pci=[1], nodes=["/dev/nvidia0"])) == "NVML sees 2 GPU(s)"
    assert nvidia_evidence(hw(pci=[1, 2, 3], nodes=["/dev/nvidia0"])) == "3 NVIDIA GPU(s) on the PCI bus"
    nodes = ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm"]
    assert nvidia_evidence(hw(nodes=nodes)) == "device nodes /dev/nvidiactl, /dev/nvidia0, /dev/nvidia1"


def test_nodes_without_driver_needs_both_the_nodes_and_the_missing_library():
    assert nodes_without_driver(hw(nodes=["/dev/nvidiactl"]))
    assert not nodes_without_driver(hw(nodes=["/dev/nvidia-uvm"]))  # not a GPU node
    assert not nodes_without_driver(hw())  # no nodes
    assert not nodes_without_driver(hw(nodes=["/dev/nvidia0"], nvml_reason="not read under --host-root"))
    assert not nodes_without_driver(hw(nodes=["/dev/nvidia0"], gpus=[1]))  # the driver answers


def test_env_entries_are_split_as_jax_splits_them():
    value = f"a{os.pathsep}/x/liba.so,b{os.pathsep}/y/libb.so,,junk"
    assert env_entries({PJRT_ENV: value}) == ["a", "b"]
    assert env_entries({}) == [] and env_entries({PJRT_ENV: ""}) == []


# ---- one backend row ---------------------------------------------------------------------------------------


def test_rows_that_need_no_advice():
    assert for_row(BackendInfo("cpu", OK), hw(), environ={}) is None
    # No TPU here: JAX skips the backend quietly, and so does devctl.
    assert for_row(BackendInfo("tpu", S, "no TPU chip"), hw(), environ={}) is None
    # A skipped backend on a machine that has the hardware is not a failure either.
    assert for_row(BackendInfo("tpu", S, "skipped"), TPU_HOST, environ={}) is None


def test_cuda_plugin_where_the_driver_is_not_mounted():
    row = BackendInfo("xla_cuda12", F, "cuInit failed", plugin="jax_plugins.xla_cuda12")
    advice = for_row(row, hw(nodes=["/dev/nvidiactl", "/dev/nvidia0"]), environ={})
    assert advice.code == code_of("nvidia-driver-not-mounted")
    assert "--gpus all" in advice.fix and advice.fix_env is None  # no environment variable mounts a driver


@pytest.mark.parametrize(
    "status,verb",
    [(F, "fails to load; JAX logs the error and goes on without it"), (C, "kills every JAX program"), (T, "hangs every JAX program")],
)
def test_a_broken_plugin_on_a_machine_that_has_its_hardware(status, verb):
    row = BackendInfo("xla_cuda12", status, "boom", plugin="jax_plugins.xla_cuda12")
    advice = for_row(row, hw(gpus=[SimpleNamespace(index=0)]), environ={})
    assert advice.code == code_of("plugin-broken") and verb in advice.summary
    assert advice.fix_env is None  # JAX imports every plugin it finds: JAX_PLATFORMS is no fix
    if status is F:
        assert advice.fix.startswith("reinstall it at jaxlib's version, or uninstall it")
    else:
        assert advice.fix.startswith("uninstall it") and "JAX_PLATFORMS does not help" in advice.fix


def test_a_failing_pjrt_entry_is_dropped_keeping_the_entries_that_exist(tmp_path):
    good, gone = entry(tmp_path, "good"), entry(tmp_path, "gone", exists=False)
    bad = entry(tmp_path, "bad")
    environ = {PJRT_ENV: ",".join([good, bad, gone])}
    row = BackendInfo("bad", F, "INVALID_ARGUMENT: Failed to open libbad.so", plugin="bad", source="env")
    advice = for_row(row, hw(), environ=environ)
    assert advice.code == code_of("pjrt-entry-broken")
    # JAX stops at the first entry that fails: the broken one goes, and so does every entry whose file is missing.
    assert advice.fix_env == {PJRT_ENV: good}
    assert advice.fix == f"fix its path, or drop it: export {PJRT_ENV}={good}"
    assert "raises" in advice.summary and "even with JAX_PLATFORMS=cpu" in advice.summary
    crashed = for_row(BackendInfo("bad", C, "SIGSEGV", plugin="bad", source="env"), hw(), environ=environ)
    assert "dies" in crashed.summary and crashed.fix_env == {PJRT_ENV: good}


def test_a_pjrt_entry_comes_before_the_machine_s_evidence(tmp_path):
    """A CUDA library named by the variable on a machine without a GPU: the entry is what breaks every program."""
    environ = {PJRT_ENV: entry(tmp_path, "cuda")}
    row = BackendInfo("cuda", F, "No visible GPU devices", plugin="cuda", source="env")
    advice = for_row(row, hw(), environ=environ)
    assert advice.code == code_of("pjrt-entry-broken") and advice.fix_env == {PJRT_ENV: None}
    assert advice.fix.endswith(f"unset {PJRT_ENV}")


def test_an_entry_whose_client_fails_to_start(tmp_path):
    """Its library loaded (no plugin row), its backend did not: drop it or skip it with JAX_PLATFORMS."""
    environ = {PJRT_ENV: ",".join([entry(tmp_path, "nvgpu"), entry(tmp_path, "other")])}
    row = BackendInfo("nvgpu", F, "FAILED_PRECONDITION: No visible GPU devices.")
    advice = for_row(row, hw(), environ=environ)
    assert advice.code == code_of("backend-failed")
    # Each way the line offers is a remedy of its own, in the line's order.
    assert [r.env for r in advice.remedies] == [{PJRT_ENV: entry(tmp_path, "other")}, {"JAX_PLATFORMS": "cpu"}]
    assert f"export {PJRT_ENV}={entry(tmp_path, 'other')}" in advice.fix
    assert "jax.devices() raises for every program" in advice.summary


def test_a_backend_that_hangs_points_at_what_may_hold_it():
    advice = for_row(BackendInfo("tpu", T), TPU_HOST, environ={})
    assert advice.code == code_of("backend-failed") and "hangs" in advice.summary
    assert "devctl memstats" in advice.fix and advice.fix_env is None


def test_tpu_rows():
    # JAX_PLATFORMS=tpu on a machine without TPU chips: only that makes the tpu backend fail here.
    advice = for_row(BackendInfo("tpu", F, "Unable to initialize backend 'tpu'"), hw(), environ={"JAX_PLATFORMS": "tpu"})
    assert advice.code == code_of("jax-platforms-unavailable") and advice.fix_env == {"JAX_PLATFORMS": None}
    assert advice.fix == "unset JAX_PLATFORMS, so JAX picks the best backend that starts"
    # Chips present, libtpu absent.
    advice = for_row(BackendInfo("tpu", F, "libtpu.so: cannot open shared object file"), TPU_HOST, environ={})
    assert advice.code == code_of("libtpu-missing") and advice.fix == "pip install -U 'jax[tpu]'"


@pytest.mark.parametrize(
    "quietly,environ,quiet",
    [(True, {}, True), (True, {"JAX_PLATFORMS": "cpu,rocm"}, False), (False, {}, False)],
)
def test_a_built_in_backend_that_fails(quietly, environ, quiet):
    """JAX ignores a quietly failing backend unless JAX_PLATFORMS names platforms; then it raises."""
    row = BackendInfo("rocm", F, "No ROCm devices", fail_quietly=quietly)
    advice = for_row(row, hw(amd=[SimpleNamespace(node=1)]), environ=environ)
    assert advice.code == code_of("backend-failed")
    assert ("JAX ignores it" in advice.summary) is quiet
    assert advice.fix_env == (None if quiet else {"JAX_PLATFORMS": "cpu"})


# ---- `import jax` itself -----------------------------------------------------------------------------------


def test_jaxlib_older_than_jax_gets_the_versions_check_s_one_fix():
    from devctl.discovery.versions import installed_packages, stack_fix

    error = "RuntimeError: jaxlib is version 0.4.30, but this version of jax requires version >= 0.4.36."
    advice = for_row(BackendInfo("jax", F, error), hw(), environ={"JAX_PLATFORMS": "cpu"})
    assert advice.code == code_of("jax-jaxlib-skew") and advice.fix_env is None
    assert advice.summary.startswith("jaxlib 0.4.30 is older than jax needs (0.4.36)")
    assert advice.fix == stack_fix(installed_packages()).command


def test_jaxlib_newer_than_another_jax_pins_that_jax():
    """The error names a jax other than this one (another host's, under --distributed): pin the one named."""
    error = "RuntimeError: jaxlib version 0.99.0 is newer than and incompatible with jax version 0.98.1. Please update"
    advice = for_row(BackendInfo("jax", F, error), hw(), environ={})
    assert advice.fix == "pip install -U 'jax==0.98.1' 'jaxlib==0.98.1'"


@pytest.mark.parametrize("status,verb", [(F, "raises"), (C, "dies")])
def test_import_jax_failing_otherwise(status, verb):
    advice = for_row(BackendInfo("jax", status, "ImportError: numpy.core.multiarray failed to import"), hw(), environ={})
    assert advice.code == code_of("backend-failed") and f"`import jax` {verb}" in advice.summary
    assert "--force-reinstall jax jaxlib" in advice.fix and advice.fix_env is None


# ---- jax.devices() as a whole -------------------------------------------------------------------------------


def test_no_advice_when_jax_devices_works():
    assert for_outcome(JaxOutcome("ok", default_backend="cpu", device_count=4), [], hw(), environ={}) is None
    assert for_outcome(JaxOutcome("unknown", reason="probe timed out"), [], hw(), environ={}) is None


def test_jax_platforms_keeps_only_the_platforms_that_start():
    rows = [BackendInfo("cpu", OK), BackendInfo("tpu", F, "no TPU")]
    outcome = JaxOutcome("raises", error="RuntimeError: Unable to initialize backend 'tpu'", culprit="tpu")
    advice = for_outcome(outcome, rows, hw(), environ={"JAX_PLATFORMS": "cpu,tpu"})
    assert advice.code == code_of("jax-platforms-unavailable")
    assert advice.summary == "JAX_PLATFORMS='cpu,tpu': tpu does not start here (tpu: failed: no TPU), so jax.devices() raises"
    assert advice.fix == "export JAX_PLATFORMS=cpu" and advice.fix_env == {"JAX_PLATFORMS": "cpu"}


@pytest.mark.parametrize(
    "value, says, fixed",
    [
        ("CPU", "'CPU': JAX's platform names are lower case ('cpu')", "cpu"),
        (" cpu", "' cpu' has spaces around it, which JAX keeps", "cpu"),
        ("cpu,", "an empty name (a comma too many)", "cpu"),
        ("cpu, tpu", "' tpu' has spaces around it", "cpu"),
        ("gpu", "gpu (to JAX: cuda, rocm, oneapi) does not start here (cuda: no installed plugin provides it; rocm: no installed plugin", None),
        ("foo,cpu", "foo does not start here (foo: no installed plugin provides it)", "cpu"),
    ],
)
def test_jax_platforms_says_what_is_wrong_with_each_entry_and_keeps_what_starts(value, says, fixed):
    """As JAX splits it: on commas, nothing stripped, case kept; "gpu" is cuda, rocm and oneapi to JAX."""
    from devctl.checks.advice import jax_platforms

    unknown = "RuntimeError: Backend '{}' is not in the list of known backends: ['cpu', 'tpu']."
    rows = [BackendInfo("cpu", OK)] + [BackendInfo(e, F, unknown.format(e)) for e in value.split(",") if e not in ("cpu", "gpu")]
    advice = jax_platforms({"JAX_PLATFORMS": value}, rows)
    assert says in advice.summary and advice.fix_env == {"JAX_PLATFORMS": fixed}
    assert "uninstall" not in advice.fix  # nothing named here is installed: nothing to uninstall
    assert jax_platforms({"JAX_PLATFORMS": ""}, rows) is None  # empty is unset to JAX


def test_a_failing_entry_blamed_by_name_gets_the_entry_s_advice(tmp_path):
    environ = {PJRT_ENV: entry(tmp_path, "ghost", exists=False), "JAX_PLATFORMS": "cpu"}
    outcome = JaxOutcome("raises", error="RuntimeError: Unable to initialize backend 'ghost'", culprit=PJRT_ENV)
    advice = for_outcome(outcome, [BackendInfo("cpu", OK)], hw(), environ=environ)
    assert advice.code == code_of("pjrt-entry-broken") and advice.fix_env == {PJRT_ENV: None}


def test_a_culprit_row_gets_its_own_advice():
    row = BackendInfo("xla_cuda12", C, "SIGSEGV", plugin="jax_plugins.xla_cuda12")
    outcome = JaxOutcome("crashes", error="killed by SIGSEGV", culprit="xla_cuda12")
    assert for_outcome(outcome, [row], hw(gpus=[SimpleNamespace(index=0)]), environ={}) == for_row(row, hw(gpus=[SimpleNamespace(index=0)]), environ={})


def test_an_unexplained_failure_says_what_jax_said():
    outcome = JaxOutcome("hangs", error="no answer in 30 s", culprit=None)
    advice = for_outcome(outcome, [], hw(), environ={})
    assert advice.code == code_of("backend-failed") and advice.summary == "jax.devices() hangs: no answer in 30 s"


# ---- the fix as data ----------------------------------------------------------------------------------------


def _advices(tmp_path) -> dict[str, object]:
    """One advice of each kind whose fix is commands, as a user meets them."""
    from devctl.checks.advice import jax_platforms, xla_flags

    missing = {PJRT_ENV: ",".join([entry(tmp_path, "ghost", exists=False), entry(tmp_path, "other")])}
    two = {PJRT_ENV: ",".join([entry(tmp_path, "nvgpu"), entry(tmp_path, "other")])}
    flags = {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=abc"}
    return {
        "cuda-plugin-without-gpu": for_row(BackendInfo("cuda", F, "no GPU", plugin="jax_plugins.xla_cuda12"), hw()),
        "rocm-plugin-without-gpu": for_row(BackendInfo("rocm", F, "no GPU", plugin="jax_plugins.xla_rocm7"), hw()),
        "hidden": for_row(BackendInfo("cuda", F, "no GPU", plugin="jax_plugins.xla_cuda12"), hw(nodes=["/dev/nvidia0"], pci=[1]), {"CUDA_VISIBLE_DEVICES": "-1"}),
        "pjrt-entry-broken": for_row(BackendInfo("ghost", F, "not found", plugin="ghost"), hw(), missing),
        "backend-failed-entry": for_row(BackendInfo("nvgpu", F, "FAILED_PRECONDITION: No visible GPU devices."), hw(), two),
        "jax-jaxlib-skew": for_row(BackendInfo("jax", F, "RuntimeError: jaxlib is version 0.4.1, but this version of jax requires version >= 0.10.2."), hw()),
        "libtpu-missing": for_row(BackendInfo("tpu", F, "libtpu not found"), TPU_HOST),
        "xla-flags-invalid": xla_flags("Couldn't interpret value abc for flag xla_force_host_platform_device_count.", flags),
        "jax-platforms-unavailable": jax_platforms({"JAX_PLATFORMS": "cuda,cpu,"}, [BackendInfo("cpu", OK, device_count=1)]),
    }


def test_every_command_a_fix_offers_is_said_word_for_word_from_its_data(tmp_path):
    """Programs act on `remedies`, people copy the line: the line is written from the data, so they never part."""
    import shlex

    from devctl.model.remedy import pip_command

    for name, advice in _advices(tmp_path).items():
        assert advice is not None and advice.remedies, name
        for remedy in advice.remedies:
            assert remedy.env or remedy.pip, (name, remedy)
            for args in remedy.pip:
                assert pip_command(args) in advice.fix, (name, pip_command(args), advice.fix)
                assert shlex.split(pip_command(args)) == ["pip", *args]  # what a shell runs is the data
            for k, v in remedy.env.items():
                said = f"unset {k}" if v is None else (f"{k}={v}", f"{k}={shlex.quote(v)}")
                assert any(s in advice.fix for s in ([said] if isinstance(said, str) else said)), (name, k, v, advice.fix)


def test_a_fix_with_two_ways_gives_both_and_only_named_packages_are_uninstalled(tmp_path):
    advices = _advices(tmp_path)
    cuda = advices["cuda-plugin-without-gpu"]
    assert [r.env for r in cuda.remedies if r.env] == [{"JAX_PLATFORMS": "cpu"}]
    (uninstall,) = [p for r in cuda.remedies for p in r.pip]
    assert uninstall[0] == "uninstall" and all(n.startswith("jax-cuda12-") for n in uninstall[1:]), uninstall
    # JAX_PLATFORMS does not silence the ROCm plugin: its one way is the uninstall.
    assert [r.pip[0][0] for r in advices["rocm-plugin-without-gpu"].remedies] == ["uninstall"]
    assert advices["xla-flags-invalid"].remedies[0].env == {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}
    assert advices["jax-platforms-unavailable"].remedies[0].env == {"JAX_PLATFORMS": "cpu"}
    assert advices["libtpu-missing"].remedies[0].pip == [["install", "-U", "jax[tpu]"]]
