"""`devctl exporter` end to end: a real publishing JAX job on forced CPU devices, the exposition parsed with
prometheus_client's own parser, a real HTTP server, signals, bad input, and a real Prometheus server scraping it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT, assert_usage_error, devctl_env, run_devctl
from jobs import PublishingJob

from devctl.model.exporter import METRICS, SOURCES, exported_names

MIB = 1 << 20

# A job with 3 MiB on device 1 and 1 MiB spread over its 4 devices: 3.25 MiB live on device 1, in 2 arrays.
JOB = r"""
import json, sys, time
import numpy as np
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import devctl.publish

devs = jax.devices()
one = jax.device_put(np.zeros(3 << 20, np.uint8), devs[1])
spread = jax.device_put(np.zeros(1 << 20, np.uint8), NamedSharding(Mesh(np.array(devs), ("x",)), P("x")))
pub = devctl.publish.publish(interval=0.2)
print(json.dumps({"ready": time.time()}), flush=True)
try:
    time.sleep(600)
except KeyboardInterrupt:
    sys.exit(0)
"""
ON_DEVICE_1 = 3 * MIB + MIB // 4


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    return tmp_path / "runtime"


@pytest.fixture
def job(tmp_path: Path, runtime: Path):
    j = PublishingJob(tmp_path, runtime, JOB)
    try:
        yield j
    finally:
        j.stop()


def parse(text: str) -> dict[str, list]:
    """name -> [(labels, value)], read with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def job_value(metrics: dict, name: str, pid: int, device: str) -> float | None:
    return next((v for labels, v in metrics.get(name, []) if labels.get("pid") == str(pid) and labels.get("device") == device), None)


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_once_exports_the_jobs_own_allocator_view_and_every_source(job, runtime):
    proc = run_devctl("exporter", "--once", env=devctl_env(4, DEVCTL_RUNTIME_DIR=str(runtime)), timeout=180)
    assert proc.returncode == 0, proc.stderr
    metrics = parse(proc.stdout)
    pid = job.proc.pid
    assert job_value(metrics, "devctl_job_live_array_bytes", pid, "cpu:1") == ON_DEVICE_1
    assert job_value(metrics, "devctl_job_live_arrays", pid, "cpu:1") == 2
    assert job_value(metrics, "devctl_job_live_array_bytes", pid, "cpu:0") == MIB // 4
    labels = next(lb for lb, _ in metrics["devctl_job_live_array_bytes"] if lb["pid"] == str(pid))
    assert labels["platform"] == "cpu" and labels["process_index"] == "0" and "job.py" in labels["job"]
    # Every source answered (NVML too: no driver here is no GPU, not a failure), and says how long it took.
    success = {lb["source"]: v for lb, v in metrics["devctl_collect_success"]}
    assert success == {source: 1.0 for source in SOURCES}, success
    assert {lb["source"] for lb, _ in metrics["devctl_collect_duration_seconds"]} == set(SOURCES)
    (info_labels, _), = metrics["devctl_info"]
    assert info_labels["devctl"] and info_labels["jax"] and info_labels["jaxlib"]
    assert metrics["devctl_host_memory_total_bytes"][0][1] > 0
    # Every family is declared with its HELP and TYPE even when this host has no series for it (no GPU).
    assert all(f"# TYPE {m.name.removesuffix('_total') if m.kind == 'counter' else m.name}" in proc.stdout for m in METRICS if m.kind != "info")


def test_served_scrapes_are_fresh_negotiate_openmetrics_and_sigterm_closes_the_socket(job, runtime, tmp_path):
    port = free_port()
    env = devctl_env(4, DEVCTL_RUNTIME_DIR=str(runtime))
    server = subprocess.Popen([sys.executable, "-m", "devctl", "exporter", "--listen", f"127.0.0.1:{port}"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"

    def scrape(accept: str | None = None) -> tuple[str, str] | None:
        request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.headers["Content-Type"], response.read().decode("utf-8")
        except OSError:
            return None

    try:
        content_type, text = wait_for(scrape, 180, "the exporter to serve")
        assert content_type.startswith("text/plain; version=0.0.4")
        assert job_value(parse(text), "devctl_job_live_array_bytes", job.proc.pid, "cpu:1") == ON_DEVICE_1
        content_type, text = scrape("application/openmetrics-text; version=1.0.0")
        assert content_type.startswith("application/openmetrics-text") and text.rstrip().endswith("# EOF")
        # The job exits: the next scrapes no longer have it (its publisher removes its snapshot on a clean exit).
        job.stop()
        wait_for(lambda: job_value(parse(scrape()[1]), "devctl_job_live_array_bytes", job.proc.pid, "cpu:1") is None, 30, "the job to go")
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
        assert server.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()


def test_a_port_in_use_and_bad_flags_are_one_line_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_devctl("exporter", "--listen", f"127.0.0.1:{port}", env=devctl_env(1), timeout=60)
        assert_usage_error(proc, f"127.0.0.1:{port}", "in use")
    for args, needles in (
        (["--listen", "9479"], ["HOST:PORT"]),
        (["--listen", "::1:9479"], ["brackets"]),
        (["--listen", "127.0.0.1:70000"], ["HOST:PORT"]),
        (["--interval", "5"], ["--interval needs --textfile"]),
        (["--textfile", str(tmp_path / "m.prom"), "--interval", "0"], ["--interval must be between 1"]),
        (["--textfile", str(tmp_path / "m.prom"), "--listen", "127.0.0.1:9479"], ["not both"]),
        (["--textfile", str(tmp_path / "missing" / "m.prom")], ["--textfile", "missing"]),
        (["--once", "--listen", "127.0.0.1:9479"], ["--once"]),
    ):
        assert_usage_error(run_devctl("exporter", *args, env=devctl_env(1)), *needles)


def test_textfile_is_replaced_whole_every_interval(job, runtime, tmp_path):
    target = tmp_path / "devctl.prom"
    env = devctl_env(4, DEVCTL_RUNTIME_DIR=str(runtime))
    writer = subprocess.Popen([sys.executable, "-m", "devctl", "exporter", "--textfile", str(target), "--interval", "1"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_for(target.exists, 180, "the textfile")
        first = target.stat().st_mtime_ns
        wait_for(lambda: target.stat().st_mtime_ns != first, 30, "a second write")
        assert job_value(parse(target.read_text()), "devctl_job_live_array_bytes", job.proc.pid, "cpu:1") == ON_DEVICE_1
        assert not [p for p in tmp_path.iterdir() if p.name != target.name and p.name.startswith(target.name)]  # no temp left
    finally:
        writer.send_signal(signal.SIGTERM)
        _, err = writer.communicate(timeout=30)
    assert writer.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err


def test_a_source_that_hangs_is_reported_and_never_blocks_the_others():
    from devctl.collect.exporter import Exporter

    exporter = Exporter()
    exporter._tpu = lambda: time.sleep(3) or []  # a TPU sysfs read stuck in the kernel, say
    started = time.monotonic()
    out = exporter.collect(timeout_s=0.5)
    assert time.monotonic() - started < 2.5
    assert out.sources["tpu"].success is False and "no answer within 0.5 s" in out.sources["tpu"].error
    assert out.sources["host"].success is True and any(s.name == "devctl_host_memory_total_bytes" for s in out.samples)
    again = exporter.collect(timeout_s=0.5)  # the first call still runs: not started twice
    assert again.sources["tpu"].error == "still running since an earlier scrape"


def test_every_dashboard_query_names_a_metric_the_exporter_exports():
    dashboard = json.loads((ROOT / "devctl" / "dashboards" / "grafana.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    named = {name for e in exprs for name in re.findall(r"\bdevctl_[a-z_]+", e)}
    assert named and named <= exported_names(), named - exported_names()
    # ... and every metric the exporter has appears on the dashboard, but the opt-in per-process one.
    assert exported_names() - named <= {"devctl_gpu_process_memory_used_bytes", "devctl_job_snapshot_age_seconds", "devctl_device_memory_limit_bytes"}


PROMETHEUS = shutil.which("prometheus")


@pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary (.ci/run installs the distribution's package; apt-get install prometheus)")
def test_a_real_prometheus_scrapes_the_jobs_bytes(job, runtime, tmp_path):
    port, prom_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: devctl\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    env = devctl_env(4, DEVCTL_RUNTIME_DIR=str(runtime))
    exporter = subprocess.Popen([sys.executable, "-m", "devctl", "exporter", "--listen", f"127.0.0.1:{port}"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    prometheus = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    query = f'devctl_job_live_array_bytes{{pid="{job.proc.pid}",device="cpu:1"}}'
    api = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": query})

    def answered() -> float | None:
        try:
            with urllib.request.urlopen(api, timeout=5) as response:
                result = json.loads(response.read())["data"]["result"]
        except (OSError, ValueError, KeyError):
            return None
        return float(result[0]["value"][1]) if result else None

    try:
        assert wait_for(answered, 240, "Prometheus to have the job's bytes") == ON_DEVICE_1
    finally:
        for p in (prometheus, exporter):
            p.terminate()
            try:
                p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
    assert "Traceback" not in (exporter.stderr.read() if exporter.stderr and not exporter.stderr.closed else "")


def test_exporter_help_imports_nothing_heavy():
    code = (
        "import sys, runpy; sys.argv = ['devctl', 'exporter', '--help']\n"
        "try:\n    runpy.run_module('devctl', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('jax', 'jaxlib', 'numpy', 'pynvml', 'prometheus_client') if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, **devctl_env(1)}, capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in proc.stdout, proc.stdout + proc.stderr
