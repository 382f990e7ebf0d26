"""The exporter's busy-ness series (issue 25): NVIDIA GPM per GPU and per MIG instance, and libtpu's runtime
metrics per TPU chip under the process that holds it, rendered and read back with prometheus_client's parser.

GPM is faked on the real pynvml module (test_gpm.FakeGpm: the H200 figures of a bf16 matmul loop), the TPU
host is a fake host tree whose processes hold /dev/accelN, and their metrics services are fake
RuntimeMetricService servers in this process (tests/tpu_metrics_fake.py), one of which stalls. The collector
runs in-process: the fakes are monkeypatched, and a probe child would add nothing here.
"""

from __future__ import annotations

import time

import pytest
from gpm_fake import FakeGpm
from hosttrees import tpu_v4_host
from test_gpm import MIB

from devctl.model.exporter import METRICS, Collection

GIB = 1 << 30
RESERVED = {"job", "instance", "host", "exported_job", "exported_instance"}
GPM_SERIES = {m.name for m in METRICS if m.source == "gpm"}
TPU_SERIES = {m.name for m in METRICS if m.source == "tpu_runtime"}


def exposition(collection: Collection) -> dict[str, list[tuple[dict, float]]]:
    """The collection as the exporter serves it, parsed back: name -> [(labels, value)]."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from devctl.render.prometheus import families

    class Once:
        def describe(self):
            return []

        def collect(self):
            yield from families(collection)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Once())
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(metrics: dict, name: str, /, **labels: str) -> float | None:
    found = [v for lb, v in metrics.get(name, []) if labels.items() <= lb.items()]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def ratios_in_range(metrics: dict) -> None:
    for name, samples in metrics.items():
        if name.endswith("_ratio"):
            assert all(0.0 <= v <= 1.0 for _, v in samples), (name, samples)


# ---- NVIDIA GPM ------------------------------------------------------------------------------------------


@pytest.fixture
def gpm(monkeypatch):
    """FakeGpm's three GPUs (an H200 with GPM, an A100 without, an H100 in MIG mode), each with a name and bus id."""
    fake = FakeGpm(monkeypatch, mig=True)
    pynvml = fake.pynvml
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: f"GPU-{h}" if not h.startswith("mig") else f"MIG-{h}")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", lambda h: {"h0": "NVIDIA H200", "h1": "NVIDIA A100-SXM4-80GB", "h2": "NVIDIA H100 80GB HBM3"}[h])
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPciInfo", lambda h: type("Pci", (), {"busId": f"00000000:{18 + int(h[1:]):02X}:00.0"})())
    return fake


def _gpm_collection(exporter) -> Collection:
    samples, _, error = _timed_gpm(exporter)
    assert error is None, error
    return Collection(samples=samples)


def _timed_gpm(exporter):
    from devctl.collect.exporter import _timed

    return _timed(exporter._gpm)


def test_gpm_series_per_gpu_and_mig_instance_and_each_scrape_covers_the_time_since_the_last(gpm):
    from devctl.collect.exporter import Exporter
    from devctl.discovery import gpm as gpm_module
    from devctl.discovery.nvml import nvml_session

    exporter = Exporter()
    exporter._session.enter_context(nvml_session())  # what start() does for a serving exporter
    first = exposition(_gpm_collection(exporter))
    ratios_in_range(first)
    assert set(first) == GPM_SERIES - {"devctl_gpu_nvlink_transmit_bytes_per_second", "devctl_gpu_nvlink_receive_bytes_per_second"}
    h200 = {"gpu": "0", "uuid": "GPU-h0", "pci_bus_id": "0000:12:00.0", "name": "NVIDIA H200"}
    assert value(first, "devctl_gpu_sm_active_ratio", **h200) == pytest.approx(0.643)
    assert value(first, "devctl_gpu_sm_occupancy_ratio", **h200) == pytest.approx(0.0951)
    assert value(first, "devctl_gpu_tensor_active_ratio", **h200) == pytest.approx(0.6305)
    assert value(first, "devctl_gpu_dram_active_ratio", **h200) == pytest.approx(0.1253)
    assert value(first, "devctl_gpu_gr_engine_active_ratio", **h200) == pytest.approx(0.6981)
    assert value(first, "devctl_gpu_pcie_transmit_bytes_per_second", **h200) == 2 * MIB
    assert value(first, "devctl_gpu_pcie_receive_bytes_per_second", **h200) == 3 * MIB
    # The first scrape has nothing to start from: a one-shot window.
    assert value(first, "devctl_gpu_busy_window_seconds", **h200) == pytest.approx(gpm_module.ONE_SHOT_WINDOW_S, abs=0.15)
    # The A100 has no GPM: no GPM series (its NVML utilization is the nvml source's devctl_gpu_utilization_ratio).
    assert not any(lb["gpu"] == "1" for samples in first.values() for lb, _ in samples)
    # The MIG GPU: one series per GPU instance, none for the whole GPU (GPM samples it per instance), one window.
    tensor_h100 = {lb.get("gpu_instance"): v for lb, v in first["devctl_gpu_tensor_active_ratio"] if lb["gpu"] == "2"}
    assert tensor_h100 == {"1": pytest.approx(0.6305), "2": pytest.approx(0.2938)}
    assert value(first, "devctl_gpu_dram_active_ratio", gpu="2", gpu_instance="2") == pytest.approx(0.5529)
    assert value(first, "devctl_gpu_busy_window_seconds", gpu="2") == pytest.approx(gpm_module.ONE_SHOT_WINDOW_S, abs=0.15)
    labels = {k for samples in first.values() for lb, _ in samples for k in lb}
    assert labels <= {"gpu", "uuid", "pci_bus_id", "name", "gpu_instance"} and not labels & (RESERVED | {"pid", "program"})

    # Later scrapes take one sample per GPU and measure from the previous scrape's: no waiting, the whole interval.
    taken = gpm.taken
    time.sleep(0.4)
    started = time.monotonic()
    second = exposition(_gpm_collection(exporter))
    assert time.monotonic() - started < 0.3  # no window waited for (the first scrape waited 0.2 s)
    assert gpm.taken - taken == 3  # the H200 and the two MIG instances, once each
    assert value(second, "devctl_gpu_busy_window_seconds", **h200) >= 0.4
    assert value(second, "devctl_gpu_tensor_active_ratio", **h200) == pytest.approx(0.6305)
    assert len(gpm.alive) == 3  # the samples the next scrape starts from
    exporter.close()
    assert gpm.alive == {} and gpm.calls["init"] == gpm.calls["shutdown"]


def test_once_takes_a_one_shot_window_and_keeps_nothing(gpm):
    from devctl.collect.exporter import Exporter

    exporter = Exporter(keep_busy=False)
    for _ in range(2):
        metrics = exposition(_gpm_collection(exporter))
        assert value(metrics, "devctl_gpu_busy_window_seconds", gpu="0") == pytest.approx(0.2, abs=0.15)
        assert gpm.alive == {}
    exporter.close()


def test_gpm_failing_is_the_gpm_sources_failure_and_no_driver_is_quiet(gpm, monkeypatch):
    from devctl.collect.exporter import Exporter

    pynvml = gpm.pynvml

    def init():
        raise pynvml.NVMLError_DriverNotLoaded()

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    assert _timed_gpm(Exporter())[::2] == ([], None)  # a host without the driver: no GPU, not a failure

    def no_permission():
        raise pynvml.NVMLError_NoPermission()

    monkeypatch.setattr(pynvml, "nvmlInit", no_permission)
    samples, _, error = _timed_gpm(Exporter())
    assert samples == [] and "no permission" in error


def test_the_collection_names_the_gpm_source_and_the_nvml_utilization_says_what_it_is(gpm):
    from devctl.collect.exporter import Exporter

    out = Exporter(keep_busy=False).collect(timeout_s=10)
    assert out.sources["gpm"].success, out.sources["gpm"]
    assert {s.name for s in out.samples} >= {"devctl_gpu_sm_active_ratio", "devctl_gpu_busy_window_seconds"}
    (utilization,) = [m for m in METRICS if m.name == "devctl_gpu_utilization_ratio"]
    assert "a kernel ran" in utilization.help and "devctl_gpu_sm_active_ratio" in utilization.help


# ---- TPU runtime metrics ---------------------------------------------------------------------------------

@pytest.fixture
def servers():
    pytest.importorskip("grpc")  # the `tpu-metrics` extra; the GPM tests above run without it
    from tpu_metrics_fake import FakeMetrics

    started: list = []

    def start(spec: dict):
        fake = FakeMetrics(spec)
        fake.start()
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()


def _hold(host, pid: int, accels: list[int], port: int) -> None:
    host.process(pid, ["python3", f"train_{pid}.py", "--token=secret"], fds={3 + i: f"/dev/accel{n}" for i, n in enumerate(accels)})
    host.file(f"/proc/{pid}/environ").write_bytes(f"TPU_RUNTIME_METRICS_PORTS={port}\0".encode())


def _tpu_host(tmp_path, servers, *, stall: bool):
    host = tpu_v4_host(tmp_path, chips=4)
    a = servers({"hbm_used": [10 * GIB, 11 * GIB], "hbm_total": [32 * GIB, 32 * GIB], "duty": [55.0, 65.0], "hbm_util": [20.0, 30.0]})
    b = servers({"hbm_used": [3 * GIB], "hbm_total": [32 * GIB], "duty": [5.0], "layout": "new", "first_ordinal": 2})
    _hold(host, 500, [0, 1], a.port)
    _hold(host, 501, [2], b.port)
    if stall:
        stalled = servers({"hbm_used": [1], "hbm_total": [2], "duty": [3.0], "sleep_s": 8})
        _hold(host, 502, [3], stalled.port)
        return host, stalled.port
    from tpu_metrics_fake import free_port

    _hold(host, 503, [3], free_port())  # nothing listens there: a process not yet in libtpu
    return host, None


@pytest.mark.parametrize("per_process", [False, True])
def test_tpu_series_per_chip_under_its_holder_and_a_stalled_server_costs_at_most_the_timeout(tmp_path, servers, per_process):
    from devctl.collect.exporter import Exporter

    host, stalled_port = _tpu_host(tmp_path, servers, stall=True)
    exporter = Exporter(host_root=str(host.path), per_process=per_process)
    timeout_s = 1.5
    started = time.monotonic()
    out = exporter.collect(timeout_s=timeout_s)
    assert time.monotonic() - started < timeout_s + 0.5
    result = out.sources["tpu_runtime"]
    assert result.success is False and result.duration_s <= timeout_s
    assert "pid 502" in result.error and f"localhost:{stalled_port}" in result.error
    assert out.sources["tpu"].success
    metrics = exposition(out)
    ratios_in_range(metrics)
    success = {lb["source"]: v for lb, v in metrics["devctl_collect_success"]}
    assert success["tpu_runtime"] == 0.0 and success["tpu"] == 1.0
    # The processes that answered keep their chips' series; the stalled one's chip has none (absent, not zero).
    who = {"pid": "500"} if per_process else {}
    chip1 = {"chip": "1", "version": "v4", "program": "train_500.py", **who}
    assert value(metrics, "devctl_tpu_hbm_used_bytes", **chip1) == 11 * GIB
    assert value(metrics, "devctl_tpu_hbm_total_bytes", **chip1) == 32 * GIB
    assert value(metrics, "devctl_tpu_duty_cycle_ratio", **chip1) == pytest.approx(0.65)
    assert value(metrics, "devctl_tpu_hbm_bandwidth_utilization_ratio", **chip1) == pytest.approx(0.30)
    chip2 = {"chip": "2", "program": "train_501.py"}
    assert value(metrics, "devctl_tpu_duty_cycle_ratio", **chip2) == pytest.approx(0.05)
    assert value(metrics, "devctl_tpu_hbm_bandwidth_utilization_ratio", **chip2) is None  # an older libtpu's service
    assert not any(lb["chip"] == "3" for name in TPU_SERIES for lb, _ in metrics.get(name, []))
    assert "devctl_tpu_tensorcore_utilization_ratio" not in metrics  # no libtpu beside devctl here
    labels = {k for name in TPU_SERIES for lb, _ in metrics.get(name, []) for k in lb}
    assert labels == {"chip", "version", "program", *(("pid",) if per_process else ())}, labels
    assert not labels & RESERVED and "secret" not in str(metrics)


def test_tpu_runtime_with_a_silent_process_is_quiet(tmp_path, servers):
    from devctl.collect.exporter import Exporter

    host, _ = _tpu_host(tmp_path, servers, stall=False)
    out = Exporter(host_root=str(host.path)).collect(timeout_s=5)
    assert out.sources["tpu_runtime"].success, out.sources["tpu_runtime"]
    metrics = exposition(out)
    assert {lb["chip"] for lb, _ in metrics["devctl_tpu_hbm_used_bytes"]} == {"0", "1", "2"}
    assert value(metrics, "devctl_tpu_duty_cycle_ratio", chip="0") == pytest.approx(0.55)


def test_a_collection_scans_the_tpu_chips_and_their_holders_once(tmp_path, servers, monkeypatch):
    """The tpu and tpu_runtime sources both need who holds each chip (a walk of every process's fds): one walk a
    scrape, shared, and a fresh one the next scrape."""
    from devctl.discovery import tpu

    host, _ = _tpu_host(tmp_path, servers, stall=False)
    real, scans = tpu.tpu_info, []
    monkeypatch.setattr(tpu, "tpu_info", lambda *a, **k: scans.append(1) or real(*a, **k))
    from devctl.collect.exporter import Exporter

    exporter = Exporter(host_root=str(host.path))
    for scrape in (1, 2):
        out = exporter.collect(timeout_s=5)
        assert out.sources["tpu"].success and out.sources["tpu_runtime"].success, out.sources
        assert {lb["chip"] for lb, _ in exposition(out)["devctl_tpu_hbm_used_bytes"]} == {"0", "1", "2"}
        assert len(scans) == scrape


def test_tpu_runtime_is_bounded_by_the_scrape_whatever_the_server(tmp_path, servers, monkeypatch):
    """Even a metrics read that never returns (here: the whole of it stuck) costs the scrape its timeout only."""
    from devctl.collect import tpu_runtime
    from devctl.collect.exporter import Exporter

    host, _ = _tpu_host(tmp_path, servers, stall=False)
    monkeypatch.setattr(tpu_runtime, "runtime_metrics", lambda *a, **k: time.sleep(5))
    started = time.monotonic()
    out = Exporter(host_root=str(host.path)).collect(timeout_s=0.5)
    assert time.monotonic() - started < 1.5
    assert out.sources["tpu_runtime"].success is False and "no answer within 0.5 s" in out.sources["tpu_runtime"].error


def test_tensorcore_utilization_from_the_sdk_where_it_answered(tmp_path, servers, monkeypatch):
    from devctl.collect.exporter import Exporter
    from devctl.probe import tpu_sdk

    host, _ = _tpu_host(tmp_path, servers, stall=False)
    monkeypatch.setattr(tpu_sdk, "libtpu_installed", lambda: True)
    monkeypatch.setattr(tpu_sdk, "ask_tensorcore_util", lambda: tpu_sdk.SdkAnswer("ok", [40.0, 50.0, 60.0, 70.0]))
    out = Exporter(host_root=str(host.path)).collect(timeout_s=5)
    metrics = exposition(out)
    assert value(metrics, "devctl_tpu_tensorcore_utilization_ratio", chip="1") == pytest.approx(0.5)
    assert value(metrics, "devctl_tpu_tensorcore_utilization_ratio", chip="3") is None  # its process served nothing


def test_the_dashboard_plots_the_busy_series():
    import json

    from conftest import ROOT

    dashboard = json.loads((ROOT / "devctl" / "dashboards" / "grafana.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for name in ("devctl_gpu_sm_active_ratio", "devctl_gpu_tensor_active_ratio", "devctl_gpu_dram_active_ratio",
                 "devctl_tpu_hbm_used_bytes", "devctl_tpu_duty_cycle_ratio"):  # fmt: skip
        assert name in exprs, name
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_once_end_to_end_on_a_tpu_host_with_a_stalled_server(tmp_path, servers):
    """`devctl exporter --once` as a user runs it, on a fake TPU host tree whose holders' metrics servers are
    real gRPC servers on localhost: the answering chips' series, and the stalled one costs the scrape its timeout."""
    from conftest import devctl_env, run_devctl

    host, stalled_port = _tpu_host(tmp_path, servers, stall=True)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    proc = run_devctl("exporter", "--once", "--timeout", "1.5", "--host-root", str(host.path),
                      env=devctl_env(devices=1, DEVCTL_RUNTIME_DIR=str(runtime)), timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    from prometheus_client.parser import text_string_to_metric_families

    metrics: dict[str, list] = {}
    for family in text_string_to_metric_families(proc.stdout):
        for s in family.samples:
            metrics.setdefault(s.name, []).append((s.labels, s.value))
    ratios_in_range(metrics)
    success = {lb["source"]: v for lb, v in metrics["devctl_collect_success"]}
    assert success["tpu_runtime"] == 0.0 and success["tpu"] == 1.0 and success["gpm"] == 1.0  # no GPU here: quiet
    duration = {lb["source"]: v for lb, v in metrics["devctl_collect_duration_seconds"]}
    assert duration["tpu_runtime"] <= 1.5
    assert value(metrics, "devctl_tpu_hbm_used_bytes", chip="0", program="train_500.py") == 10 * GIB
    assert value(metrics, "devctl_tpu_duty_cycle_ratio", chip="2", program="train_501.py") == pytest.approx(0.05)
    assert not any(lb["chip"] == "3" for name in TPU_SERIES for lb, _ in metrics.get(name, []))
    assert "pid" not in {k for name in TPU_SERIES for lb, _ in metrics.get(name, []) for k in lb}


# ---- a real GPU ------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_a_real_matmul_loop_shows_in_the_tensor_series_over_the_scrape_interval(tmp_path):
    """Under a bf16 matmul loop, the exporter's second scrape covers the interval since the first and says the
    tensor cores were busy (an H200 said 63% in memstats); a GPU without GPM is skipped."""
    import subprocess
    import sys

    from conftest import devctl_env
    from test_gpm import MATMUL_LOOP

    from devctl.collect.exporter import Exporter
    from devctl.discovery.nvml import nvml_session

    script = tmp_path / "loop.py"
    script.write_text(MATMUL_LOOP)
    env = devctl_env(devices=1, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    env.pop("XLA_FLAGS", None)
    job = subprocess.Popen([sys.executable, str(script), "60"], env=env, stdout=subprocess.PIPE, text=True)
    exporter = Exporter(keep_busy=True)
    exporter._session.enter_context(nvml_session())
    try:
        assert job.stdout.readline().strip() == "ready"
        exporter.collect(timeout_s=10)
        time.sleep(2.0)
        out = exporter.collect(timeout_s=10)
        assert out.sources["gpm"].success, out.sources["gpm"]
        metrics = exposition(out)
        if "devctl_gpu_tensor_active_ratio" not in metrics:
            pytest.skip("no GPM on this GPU")
        ratios_in_range(metrics)
        windows = [v for _, v in metrics["devctl_gpu_busy_window_seconds"]]
        assert windows and all(1.9 <= w <= 5.0 for w in windows), windows
        best = max(v for _, v in metrics["devctl_gpu_tensor_active_ratio"])
        assert best > 0.30, metrics["devctl_gpu_tensor_active_ratio"]
    finally:
        exporter.close()
        job.kill()
        job.wait()
