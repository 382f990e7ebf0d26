"""doctor speaks with one voice: a backend's line in "What JAX will use" gives the cause and the fix of the finding
that explains that backend, never advice of its own that the findings contradict (issue 20).

The machines are data, built as doctor gets them: the probe child's events (the words JAX and its plugins
print), replayed through the probe's own prediction and list's assembly, beside discovery's reports. The
first case is reference/h200-observations.md §6: `JAX_PLATFORMS=cuda CUDA_VISIBLE_DEVICES=` on an H200,
where the findings said to unset CUDA_VISIBLE_DEVICES while the line of the CUDA plugin said to reinstall it.
`assert_one_voice` is also what tests/test_doctor.py and tests/test_one_advice.py apply to real doctor runs.
"""

from __future__ import annotations

import time
from dataclasses import asdict

import pytest

from devctl.checks.diagnosis import diagnose, explanations
from devctl.checks.scene import Scene
from devctl.collect.doctor import overview
from devctl.collect.list_ import assemble_inventory
from devctl.model.doctor import DoctorFinding
from devctl.model.env import EnvFinding, EnvironmentReport, PackageChange, PackageVersion, StackFix
from devctl.model.hardware import (
    AmdReport,
    HostInfo,
    MachineFacts,
    NvidiaGpu,
    NvmlReport,
    PciFunction,
    TpuLockfile,
    TpuReport,
)
from devctl.model.list_ import BackendInfo, DeviceInfo, Hardware
from devctl.probe.backends import BackendsProbe
from devctl.probe.prediction import predict

JAX = "0.10.2"
BUS = "0000:19:00.0"
DRIVER = "580.95.05"
# What jax_plugins.xla_cuda13.initialize() raises when CUDA sees no device: its version check counts the GPUs
# (cuda_device_count, so cuInit) before it registers the plugin. JAX's words, from a real log of this failure.
NO_DEVICE = "RuntimeError: jaxlib/cuda/versions_helpers.cc:113: operation cuInit(0) failed: CUDA_ERROR_NO_DEVICE"
NOT_READY = "RuntimeError: jaxlib/cuda/versions_helpers.cc:113: operation cuInit(0) failed: CUDA_ERROR_SYSTEM_NOT_READY"
NO_LIBCUDA = "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"
UNKNOWN_CUDA = "Backend 'cuda' is not in the list of known backends: ['cpu', 'tpu']."  # JAX's, when no plugin registered cuda
NO_LIBTPU = "INTERNAL: Failed to open libtpu.so: libtpu.so: cannot open shared object file: No such file or directory"
# The variables the advice reads from the environment: each case sets its own, and nothing else leaks in.
_VARS = ("JAX_PLATFORMS", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "PJRT_NAMES_AND_LIBRARY_PATHS", "TPU_LIBRARY_PATH",
         "TPU_WORKER_HOSTNAMES", "XLA_PYTHON_CLIENT_PREALLOCATE", "LD_LIBRARY_PATH", "JAX_BACKEND_TARGET")  # fmt: skip


# ---- the machine, as discovery reports it ------------------------------------------------------------------


def _hardware(gpus: int = 1, nodes: bool = True, nvml: bool = True) -> Hardware:
    """An HGX H200 host (or a CPU-only one with gpus=0); nvml=False: libnvidia-ml is not there (a container without the runtime)."""
    bus = [f"0000:{0x19 + 0x10 * i:02x}:00.0" for i in range(gpus)]
    h200 = tuple(
        NvidiaGpu(i, "NVIDIA H200", f"GPU-8f0c2a4e-1b7d-4c3a-9e21-5d6f7a8b9c{i:02d}", b, 150_754_820_096, 0, 150_754_820_096,
                  (9, 0), 5, 5, 5, 16, 16, 74.5, 700.0, 31)
        for i, b in enumerate(bus)
    )  # fmt: skip
    report = (
        NvmlReport("ok", None, DRIVER, 13000, "13.0", h200) if nvml and gpus
        else NvmlReport("unavailable", "libnvidia-ml.so.1 not found", None, None, None, ())
    )  # fmt: skip
    device_nodes = ["/dev/nvidiactl", "/dev/nvidia-uvm"] + [f"/dev/nvidia{i}" for i in range(gpus)] if nodes and gpus else []
    return Hardware(
        nvidia=report,
        nvidia_device_nodes=device_nodes,
        nvidia_pci=[PciFunction(b, "0x10de", "0x2335", "0x030200", "nvidia", 0) for b in bus],
        tpu=TpuReport((), 0, (), TpuLockfile("/tmp/libtpu_lockfile", False, "absent", (), None, None), {}, 0),
        amd=AmdReport((), False, False, 0),
    )


def _host() -> HostInfo:
    return HostInfo("h200-node-3", "Intel(R) Xeon(R) Platinum 8480+", 16, 16, 16, 128 << 30, 120 << 30, 0, 0, 64 << 30, 64 << 30,
                    (0,), "always", True, "Ubuntu 22.04.5 LTS", "5.15.0-131-generic", "3.11.7", "/home/alice/.venv/bin/python")  # fmt: skip


def _environment(cuda: str | None = JAX, findings: tuple[EnvFinding, ...] = (), fix: StackFix | None = None) -> EnvironmentReport:
    packages = [PackageVersion("jax", JAX, "jax"), PackageVersion("jaxlib", JAX, "jaxlib")]
    if cuda:
        packages += [PackageVersion("jax-cuda13-plugin", cuda, "plugin"), PackageVersion("jax-cuda13-pjrt", cuda, "pjrt")]
    return EnvironmentReport(
        "devctl.env/1", "0.1.0", 1764000000.0, "h200-node-3", "3.11.7", "/home/alice/.venv/bin/python", "Linux-5.15.0-131-generic-x86_64",
        packages, [], DRIVER, "13.0", list(findings), [], [], stack_fix=fix,
    )  # fmt: skip


def _facts(nvswitches: tuple[str, ...] = ()) -> MachineFacts:
    return MachineFacts(nvswitches, None, {}, DRIVER, (DRIVER,), {})


# ---- the probe child's events, as JAX and its plugins word them ---------------------------------------------


def _plugin(error: str) -> dict:
    return {"event": "plugin", "name": "xla_cuda13", "module": "jax_plugins.xla_cuda13", "status": "failed",
            "error": f"jax_plugins.xla_cuda13.initialize() raised {error}", "init_s": 0.412}  # fmt: skip


def _backend(platform: str, message: str | None = None, exception: str = "RuntimeError", quiet: bool = False) -> dict:
    if message is None:
        device = {"id": 0, "platform": "cpu", "device_kind": "cpu", "process_index": 0}
        return {"event": "backend", "platform": platform, "status": "ok", "devices": [device], "fail_quietly": quiet,
                "platform_version": "cpu", "runtime_type": "pjrt", "init_s": 0.04}  # fmt: skip
    return {"event": "backend", "platform": platform, "status": "failed", "error": f"{exception}: {message}", "message": message,
            "devices": [], "fail_quietly": quiet, "init_s": 0.01}  # fmt: skip


def _scene(monkeypatch, events: list[dict], environ: dict[str, str], hw: Hardware, env: EnvironmentReport | None = None,
           facts: MachineFacts | None = None) -> Scene:  # fmt: skip
    """The Scene doctor assembles: the probe's rows and JAX's predicted outcome, list's advice on each row, discovery."""
    for name in _VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)  # list's advice reads the environment, as in the CLI
    named = environ.get("JAX_PLATFORMS")
    if named:  # JAX's order: as listed, and every one must start
        platforms = named.split(",")
        order = [[p, len(platforms) - i, False, True] for i, p in enumerate(platforms)]
    else:  # every factory JAX registered itself (cpu, tpu): a CUDA plugin whose initialize() raised registered none
        order = [["cpu", 0, False, True], ["tpu", 300, True, True]]
    rows, raw = {}, {}
    for e in events:
        info = BackendInfo.from_event(e) if e["event"] == "backend" else BackendInfo.from_plugin_event(e)
        rows[info.platform], raw[info.platform] = info, e
    outcome = predict({"order": order, "jax_platforms": named}, None, rows, raw, limited=False)
    devices = [DeviceInfo.from_event(d) for e in events for d in e.get("devices", [])]
    probe = BackendsProbe(list(rows.values()), devices, JAX, JAX, outcome.default_backend, outcome)
    inv = assemble_inventory(probe, hw, [], _host(), time.monotonic())
    return Scene(inv=inv, env=env or _environment(), facts=facts or _facts(), nvml=None, checks={}, environ=environ)


def _doctor(scene: Scene) -> tuple[list[DoctorFinding], dict[str, str]]:
    """The findings, and each backend's line of "What JAX will use" by its platform."""
    findings = diagnose(scene)
    lines = overview(scene, findings).jax_will_use
    return findings, {b.platform: _line(lines, b.platform) for b in scene.inv.backends if _line(lines, b.platform)}


def _line(lines: list[str], platform: str) -> str:
    return next((line for line in lines if line.startswith(f"{platform}: ")), "")


def assert_one_voice(findings: list[DoctorFinding] | list[dict], lines: list[str]) -> None:
    """Every backend a finding explains has its line, and the line gives the explaining finding's title, code and
    fix word for word; a finding that names a cause outranks one that only says the backend fails."""
    found = [f if isinstance(f, DoctorFinding) else DoctorFinding(**f) for f in findings]
    explained = explanations(found)
    for platform, f in explained.items():
        line = _line(lines, platform)
        assert line, f"no line for {platform}, which {f.code} explains: {lines}"
        assert line.endswith(f", {f.title} [{f.code}]: {f.fix}"), (line, asdict(f))
        rivals = [g for g in found if platform in g.backends and g is not f]
        assert f.id not in ("plugin-broken", "backend-failed", "jax-platforms-unavailable") or all(
            g.id in ("plugin-broken", "backend-failed", "jax-platforms-unavailable") for g in rivals
        ), (platform, f.id, [g.id for g in rivals])


# ---- the H200 case (h200-observations.md §6) ---------------------------------------------------------------


@pytest.mark.parametrize("hidden", ["", "-1"])
def test_h200_gpus_hidden_the_plugin_line_says_what_the_finding_says(monkeypatch, hidden):
    events = [_plugin(NO_DEVICE), _backend("cuda", UNKNOWN_CUDA)]
    scene = _scene(monkeypatch, events, {"JAX_PLATFORMS": "cuda", "CUDA_VISIBLE_DEVICES": hidden}, _hardware())
    findings, lines = _doctor(scene)
    by_id = {f.id: f for f in findings}
    assert {"no-visible-gpu", "jax-platforms-unavailable"} <= set(by_id), list(by_id)
    hidden_gpus = by_id["no-visible-gpu"]
    assert hidden_gpus.fix.startswith("unset CUDA_VISIBLE_DEVICES") and set(hidden_gpus.backends) == {"xla_cuda13", "cuda"}
    # The plugin is fine, the GPU is hidden: its line gives the finding's cause and fix, not "reinstall or uninstall".
    for platform in ("xla_cuda13", "cuda"):
        line = lines[platform]
        assert "CUDA_VISIBLE_DEVICES" in line and "DEVCTL_FR_NO_VISIBLE_GPU" in line, line
        assert "reinstall" not in line and "uninstall" not in line and "drop cuda from JAX_PLATFORMS" not in line, line
        assert line.endswith(hidden_gpus.fix)
    assert_one_voice(findings, list(lines.values()))


def test_gpus_hidden_without_jax_platforms_jax_falls_back_and_says_why(monkeypatch):
    events = [_plugin(NO_DEVICE), _backend("cpu"), _backend("tpu", NO_LIBTPU, "JaxRuntimeError", quiet=True)]
    scene = _scene(monkeypatch, events, {"CUDA_VISIBLE_DEVICES": ""}, _hardware(gpus=8))
    findings, lines = _doctor(scene)
    assert scene.inv.default_platform == "cpu" and "cpu" not in lines  # the default backend is said once, above
    assert "DEVCTL_FR_NO_VISIBLE_GPU" in lines["xla_cuda13"] and "unset CUDA_VISIBLE_DEVICES" in lines["xla_cuda13"]
    assert lines["tpu"] == "tpu: no TPU chip on this machine; JAX ignores this backend"  # nothing explains it: its own words
    assert_one_voice(findings, list(lines.values()))


# ---- every rule that explains a backend's failure -----------------------------------------------------------


def _skew() -> EnvironmentReport:
    fix = StackFix("pip install -U 'jax[cuda13]==0.10.2'", JAX, ["cuda13"],
                   [PackageChange("jax-cuda13-pjrt", "0.9.2", JAX), PackageChange("jax-cuda13-plugin", "0.9.2", JAX)])  # fmt: skip
    skew = EnvFinding("error", ["jax-cuda13-plugin", "jaxlib"],
                      "JAX plugin jax_cuda13_plugin version 0.9.2 is installed, but it is not compatible with the installed jaxlib "
                      "version 0.10.2, so it will not be used.", fix.command)  # fmt: skip
    return _environment(cuda="0.9.2", findings=(skew,), fix=fix)


# name -> (events, environment variables, hardware, software, machine facts), the explaining finding of each row
CASES = {
    "gpus hidden, JAX_PLATFORMS=cuda": (
        lambda: ([_plugin(NO_DEVICE), _backend("cuda", UNKNOWN_CUDA)], {"JAX_PLATFORMS": "cuda", "CUDA_VISIBLE_DEVICES": ""}, _hardware(),
                 None, None),
        {"xla_cuda13": "no-visible-gpu", "cuda": "no-visible-gpu"},
    ),
    "container started without GPUs": (
        lambda: ([_plugin(NO_LIBCUDA), _backend("cpu")], {}, _hardware(gpus=8, nodes=False, nvml=False), None, None),
        {"xla_cuda13": "no-visible-gpu"},
    ),
    "CUDA plugin on a machine without NVIDIA GPU": (
        lambda: ([_plugin(NO_LIBCUDA), _backend("cpu")], {}, _hardware(gpus=0), None, None),
        {"xla_cuda13": "cuda-plugin-without-gpu"},
    ),
    "JAX_PLATFORMS=cuda, no CUDA plugin": (
        lambda: ([_backend("cuda", UNKNOWN_CUDA)], {"JAX_PLATFORMS": "cuda"}, _hardware(), _environment(cuda=None), None),
        {"cuda": "cuda-plugin-missing"},
    ),
    "NVSwitch without fabric manager": (
        lambda: ([_plugin(NOT_READY), _backend("cpu")], {}, _hardware(gpus=8), None, _facts(nvswitches=("0000:05:00.0",))),
        {"xla_cuda13": "fabric-manager-missing"},
    ),
    "plugin a release behind jaxlib": (
        lambda: ([_plugin("ImportError: cannot import name 'cuda_plugin_extension' from 'jax_cuda13_plugin'"), _backend("cpu")], {},
                 _hardware(), _skew(), None),
        {"xla_cuda13": "plugin-version-skew"},
    ),
    "JAX_PLATFORMS names tpu on a CPU host": (
        lambda: ([_backend("cpu"), _backend("tpu", NO_LIBTPU, "JaxRuntimeError")], {"JAX_PLATFORMS": "cpu,tpu"}, _hardware(gpus=0),
                 _environment(cuda=None), None),
        {"tpu": "jax-platforms-unavailable"},
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_each_backend_line_gives_the_fix_of_the_finding_that_explains_it(monkeypatch, name):
    build, expected = CASES[name]
    events, environ, hw, env, facts = build()
    findings, lines = _doctor(_scene(monkeypatch, events, environ, hw, env, facts))
    by_id = {f.id: f for f in findings}
    for platform, finding in expected.items():
        f = by_id[finding]
        assert platform in f.backends, (finding, f.backends)
        assert lines[platform].endswith(f"[{f.code}]: {f.fix}"), (lines[platform], f.fix)
    assert_one_voice(findings, list(lines.values()))


def test_a_backend_no_finding_explains_keeps_its_own_advice(monkeypatch):
    scene = _scene(monkeypatch, [_backend("cpu")], {}, _hardware(gpus=0), _environment(cuda=None))
    findings = diagnose(scene)
    assert explanations(findings) == {}
    unexplained = DoctorFinding("plugin-broken", None, "a JAX plugin fails to load", "error", ["x"], "c", "f", code="DEVCTL_FR_PLUGIN_BROKEN")
    assert explanations([unexplained]) == {}  # a finding that names no backend explains none


@pytest.mark.parametrize("gpus", [0, 1])
def test_a_hidden_gpu_is_said_only_where_there_is_a_gpu(monkeypatch, gpus):
    """Evidence first: the CUDA plugin's initialize() says CUDA_ERROR_NO_DEVICE wherever there is no GPU at all;
    that is a CUDA plugin without a GPU (JAX runs on the CPU: info), never GPUs hidden by CUDA_VISIBLE_DEVICES."""
    from devctl.checks.rules_software import known_messages

    events = [_plugin(NO_DEVICE), _backend("cpu"), _backend("tpu", NO_LIBTPU, "JaxRuntimeError", quiet=True)]
    scene = _scene(monkeypatch, events, {}, _hardware(gpus=gpus))
    findings, lines = _doctor(scene)
    by_id = {f.id: f for f in findings}
    if gpus == 0:
        assert "no-visible-gpu" not in by_id and by_id["cuda-plugin-without-gpu"].severity == "info", by_id
    # Whatever the row path says, the words alone never name hidden GPUs without one (a plugin's own error text).
    monkeypatch.setattr(scene, "errors", lambda: [("plugin xla_cuda13", NO_DEVICE, ["plugins"], ["xla_cuda13"])])
    assert [d.id for d in known_messages(scene)] == ([] if gpus == 0 else ["no-visible-gpu"])
