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


def job_value(metrics: dict, name: str, device: str, **match: str) -> float | None:
    """The series of `name` on `device` whose labels include `match` (default: the job's program, job.py)."""
    match = match or {"program": "job.py"}
    found = [v for labels, v in metrics.get(name, []) if labels.get("device") == device and match.items() <= labels.items()]
    assert len(found) <= 1, found
    return found[0] if found else None


def promtool_clean(text: str) -> None:
    """promtool's own lint of an exposition (names, units, label names), where the binary is installed."""
    promtool = shutil.which("promtool")
    if promtool is not None:
        check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr


# Labels Prometheus sets itself (`job`, `instance`), a duplicate of instance, and the per-process ones.
RESERVED = {"job", "instance", "host", "exported_job", "exported_instance"}


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


def test_once_exports_the_jobs_own_allocator_view_and_every_source(job, runtime, tmp_path):
    # A second process of the same program: by default one series per program and device, the two summed.
    (tmp_path / "second").mkdir()
    second = PublishingJob(tmp_path / "second", runtime, JOB)
    try:
        proc = run_devctl("exporter", "--once", env=devctl_env(4, DEVCTL_RUNTIME_DIR=str(runtime)), timeout=180)
    finally:
        second.stop()
    assert proc.returncode == 0, proc.stderr
    metrics = parse(proc.stdout)
    promtool_clean(proc.stdout)
    assert job_value(metrics, "devctl_job_live_array_bytes", "cpu:1") == 2 * ON_DEVICE_1
    assert job_value(metrics, "devctl_job_live_arrays", "cpu:1") == 4
    assert job_value(metrics, "devctl_job_live_array_bytes", "cpu:0") == 2 * (MIB // 4)
    (labels, processes), = metrics["devctl_job_processes"]
    assert labels == {"program": "job.py"} and processes == 2
    labels = next(lb for lb, _ in metrics["devctl_job_live_array_bytes"] if lb["device"] == "cpu:1")
    assert labels == {"program": "job.py", "process_index": "0", "device": "cpu:1", "platform": "cpu", "device_kind": "cpu"}
    # No label Prometheus reserves or sets, no pid, no command line (its path, its arguments) in any series.
    every = {k for samples in metrics.values() for lb, _ in samples for k in lb}
    assert not every & (RESERVED | {"pid", "command", "container_id"}), every
    assert str(tmp_path) not in proc.stdout and f'"{job.proc.pid}"' not in proc.stdout and "(pid " not in proc.stdout
    # Every source answered (NVML too: no driver here is no GPU, not a failure), and says how long it took.
    success = {lb["source"]: v for lb, v in metrics["devctl_collect_success"]}
    assert success == {source: 1.0 for source in SOURCES}, success
    assert {lb["source"] for lb, _ in metrics["devctl_collect_duration_seconds"]} == set(SOURCES)
    (info_labels, _), = metrics["devctl_info"]
    assert info_labels["devctl"] and info_labels["jax"] and info_labels["jaxlib"]
    assert metrics["devctl_host_memory_total_bytes"][0][1] > 0
    # Every family is declared with its HELP and TYPE even when this host has no series for it (no GPU).
    assert all(f"# TYPE {m.name.removesuffix('_total') if m.kind == 'counter' else m.name}" in proc.stdout for m in METRICS if m.kind != "info")


def test_per_process_command_label_and_the_pod_from_a_kubernetes_cgroup(job, runtime, tmp_path):
    """--per-process: a pid label; --command-label: the full command line; and the pod a job runs in, read from its
    /proc/<pid>/cgroup and environ (here a --host-root tree: the job's own command line beside a kubepods cgroup
    and a pod's environment), as a job in a pod looks to an exporter beside it."""
    pid = job.proc.pid
    host = tmp_path / "host"
    proc_dir = host / "proc" / str(pid)
    proc_dir.mkdir(parents=True)
    (proc_dir / "cmdline").write_bytes(Path(f"/proc/{pid}/cmdline").read_bytes())
    (proc_dir / "cgroup").write_text(f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice/cri-containerd-{CONTAINER_ID}.scope\n")
    (proc_dir / "environ").write_bytes(b"PATH=/usr/bin\0KUBERNETES_SERVICE_HOST=10.0.0.1\0HOSTNAME=trainer-7d9f-abcde\0POD_NAMESPACE=ml\0")
    env = devctl_env(4, DEVCTL_RUNTIME_DIR=str(runtime))
    proc = run_devctl("exporter", "--once", "--per-process", "--command-label", "--host-root", str(host), env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    metrics = parse(proc.stdout)
    promtool_clean(proc.stdout)
    labels = next(lb for lb, _ in metrics["devctl_job_live_array_bytes"] if lb["device"] == "cpu:1")
    assert labels["pid"] == str(pid) and labels["program"] == "job.py"
    assert labels["command"] == f"{sys.executable} {job.script}"
    assert (labels["pod"], labels["namespace"], labels["pod_uid"]) == ("trainer-7d9f-abcde", "ml", POD_UID)
    assert labels["container_id"] == f"containerd://{CONTAINER_ID}" and "container" not in labels  # no name without CONTAINER_NAME
    assert job_value(metrics, "devctl_job_live_array_bytes", "cpu:1", pid=str(pid)) == ON_DEVICE_1
    assert all("(" not in lb["where"] or "(pid " in lb["where"] for lb, _ in metrics.get("devctl_headroom_bytes", []))
    every = {k for samples in metrics.values() for lb, _ in samples for k in lb}
    assert not every & RESERVED, every
    # Seen from the node (a DaemonSet with hostPID): at the job's own pid runs another process, and the job is the
    # process whose innermost pid (NSpid) is the snapshot's: its pod is still found.
    node_pid = proc_dir.parent / "4000000"
    proc_dir.rename(node_pid)
    (node_pid / "status").write_text(f"Name:\tpython\nNSpid:\t4000000\t{pid}\n")
    proc_dir.mkdir()
    (proc_dir / "cmdline").write_bytes(b"/usr/bin/sleep\x00600\x00")
    proc = run_devctl("exporter", "--once", "--host-root", str(host), env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    labels = next(lb for lb, _ in parse(proc.stdout)["devctl_job_live_array_bytes"] if lb["device"] == "cpu:1")
    assert labels == {"program": "job.py", "pod": "trainer-7d9f-abcde", "namespace": "ml", "pod_uid": POD_UID,
                      "process_index": "0", "device": "cpu:1", "platform": "cpu", "device_kind": "cpu"}  # fmt: skip


POD_UID = "5e3c1d2a-7b4f-4c1e-9a8d-0f6b2c3d4e5f"
CONTAINER_ID = "0123456789abcdef" * 4


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
        assert job_value(parse(text), "devctl_job_live_array_bytes", "cpu:1") == ON_DEVICE_1
        content_type, text = scrape("application/openmetrics-text; version=1.0.0")
        assert content_type.startswith("application/openmetrics-text") and text.rstrip().endswith("# EOF")
        # The job exits: the next scrapes no longer have it (its publisher removes its snapshot on a clean exit).
        job.stop()
        wait_for(lambda: job_value(parse(scrape()[1]), "devctl_job_live_array_bytes", "cpu:1") is None, 30, "the job to go")
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
        assert job_value(parse(target.read_text()), "devctl_job_live_array_bytes", "cpu:1") == ON_DEVICE_1
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
    # Legends name labels the series carry by default: never Prometheus' job, a pid or a command line.
    legends = {name for p in dashboard["panels"] for t in p["targets"] for name in re.findall(r"{{(\w+)}}", t.get("legendFormat", ""))}
    labels = {label for m in METRICS for label in m.labels} | {"instance"}
    assert legends <= labels - {"job", "pid", "command", "container_id"}, legends
    assert exported_names() - named <= {"devctl_gpu_process_memory_used_bytes", "devctl_job_snapshot_age_seconds", "devctl_job_processes",
                                        "devctl_device_memory_limit_bytes"}


PROMETHEUS = shutil.which("prometheus")


@pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary (.ci/run installs the distribution's package; apt-get install prometheus)")
def test_a_real_prometheus_scrapes_the_jobs_bytes(job, runtime, tmp_path):
    port, prom_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: devctl\n    honor_labels: false\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    env = devctl_env(4, DEVCTL_RUNTIME_DIR=str(runtime))
    exporter = subprocess.Popen([sys.executable, "-m", "devctl", "exporter", "--listen", f"127.0.0.1:{port}"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    prometheus = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    query = 'devctl_job_live_array_bytes{program="job.py",device="cpu:1"}'
    api = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": query})

    def answered() -> dict | None:
        try:
            with urllib.request.urlopen(api, timeout=5) as response:
                result = json.loads(response.read())["data"]["result"]
        except (OSError, ValueError, KeyError):
            return None
        return result[0] if result else None

    try:
        series = wait_for(answered, 240, "Prometheus to have the job's bytes")
        assert float(series["value"][1]) == ON_DEVICE_1
        # The series keep their labels beside Prometheus' own: its scrape job and instance, nothing renamed.
        assert series["metric"] == {"__name__": "devctl_job_live_array_bytes", "job": "devctl", "instance": f"127.0.0.1:{port}",
                                    "program": "job.py", "process_index": "0", "device": "cpu:1", "platform": "cpu", "device_kind": "cpu"}
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


# ---- labels: the program, the pod, the sum by program (no JAX, no subprocess) ----------------------------------


@pytest.mark.parametrize(
    "argv, program",
    [
        (["/usr/bin/python3", "train.py", "--wandb-key=secret"], "train.py"),
        (["python", "/home/me/runs/2024-06-01/train.py"], "train.py"),
        (["/venv/bin/python3.12", "-u", "-W", "ignore", "-X", "dev", "-m", "mypkg.train", "--token", "t"], "python3.12 -m mypkg.train"),
        (["python", "-Wignore", "-um", "pkg.main"], "python -m pkg.main"),
        (["python3", "-c", "import os; os.system('curl -H token:secret ...')"], "python3 -c"),
        (["python", "-"], "python -"),
        (["python"], "python"),
        (["/venv/bin/python", "/venv/bin/torchrun", "--nproc-per-node=8", "train.py"], "torchrun"),  # a console script
        (["uwsgi", "--ini", "/etc/app.ini"], "uwsgi"),  # an embedding executable
        (["python", "-m", "$(rm -rf /)"], "python -m ?"),
        (["python", "job\x1b[2J.py"], "job\\x1b[2J.py"),
        ([], "?"),
        (["-c", "import jax"], "python -c"),  # sys.argv, as jobs of an older devctl answer --top
        ("/venv/bin/python3 -u train.py --lr 3e-4", "train.py"),  # a command line already joined (memstats' rows)
    ],
)
def test_the_program_label_is_a_base_name_never_an_argument(argv, program):
    from devctl.text import program_name

    assert program_name(argv) == program


V1 = """12:memory:/kubepods/burstable/pod5e3c1d2a-7b4f-4c1e-9a8d-0f6b2c3d4e5f/%s
11:cpu,cpuacct:/kubepods/burstable/pod5e3c1d2a-7b4f-4c1e-9a8d-0f6b2c3d4e5f/%s
1:name=systemd:/kubepods/burstable/pod5e3c1d2a-7b4f-4c1e-9a8d-0f6b2c3d4e5f/%s
""" % ((CONTAINER_ID,) * 3)


@pytest.mark.parametrize(
    "text, expected",
    [
        (V1, (POD_UID, CONTAINER_ID)),  # cgroup v1, cgroupfs driver (runtime not named)
        (f"0::/kubepods/besteffort/pod{POD_UID}/{CONTAINER_ID}\n", (POD_UID, CONTAINER_ID)),  # v2, cgroupfs (k3s)
        (f"0::/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/cri-containerd-{CONTAINER_ID}.scope\n",
         (POD_UID, f"containerd://{CONTAINER_ID}")),  # v2, systemd, containerd, Guaranteed QoS  # fmt: skip
        (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice/crio-{CONTAINER_ID}.scope\n",
         (POD_UID, f"cri-o://{CONTAINER_ID}")),  # fmt: skip
        (f"0::/kubepods/burstable/pod{'ab' * 16}/docker-{CONTAINER_ID}.scope\n", ("ab" * 16, f"docker://{CONTAINER_ID}")),  # a static pod's hash
        (f"0::/kubepods/burstable/pod{POD_UID}\n", (POD_UID, "")),  # the pod's own cgroup, no container
        ("0::/\n", ("", "")),  # inside a container's cgroup namespace: nothing to see
        (f"0::/system.slice/docker-{CONTAINER_ID}.scope\n", ("", "")),  # a container, not Kubernetes
        ("0::/user.slice/user-1000.slice/session-2.scope\n", ("", "")),
        ("garbage without colons\n\x00\n", ("", "")),
    ],
)
def test_the_pod_uid_and_container_id_from_a_cgroup_file(text, expected):
    from devctl.discovery.kubernetes import parse_cgroup

    assert parse_cgroup(text) == expected


def test_the_pod_from_real_proc_files_read_only_as_files_and_only_for_its_process(tmp_path):
    """process_pod reads <root>/proc/<pid>/{cmdline,cgroup,environ}: real files here, as a host root holds them."""
    from devctl.discovery.kubernetes import ENVIRON_CAP, NO_POD, PodRef, process_pod
    from devctl.hostroot import HostRoot

    proc_dir = tmp_path / "proc" / "4242"
    proc_dir.mkdir(parents=True)
    (proc_dir / "cmdline").write_bytes(b"python\x00train.py\x00--lr\x000.1\x00")
    (proc_dir / "cgroup").write_text(f"0::/kubepods/burstable/pod{POD_UID}/{CONTAINER_ID}\n")
    environ = b"KUBERNETES_SERVICE_HOST=10.0.0.1\0HOSTNAME=trainer-0\0POD_NAME=trainer-0\0POD_NAMESPACE=ml\0CONTAINER_NAME=main\0SECRET=x\0"
    (proc_dir / "environ").write_bytes(environ)
    root = HostRoot(str(tmp_path))
    argv = ("python", "train.py", "--lr", "0.1")
    want = PodRef("trainer-0", "ml", "main", POD_UID, CONTAINER_ID)
    assert process_pod(root, 4242, argv=argv) == want
    assert process_pod(root, 4242, argv=("python", "other.py")) == NO_POD  # another process at that pid
    assert process_pod(root, 4343, argv=argv) == NO_POD  # no such process
    # Names that are not Kubernetes names never become labels; HOSTNAME (the pod's name) stands in for POD_NAME.
    (proc_dir / "environ").write_bytes(b"HOSTNAME=trainer-1\0POD_NAMESPACE=ML Team\0CONTAINER_NAME=a\x1b]0;x\0")
    assert process_pod(root, 4242) == PodRef("trainer-1", "", "", POD_UID, CONTAINER_ID)
    # An environment larger than the cap: its first variables, the one cut in half dropped.
    (proc_dir / "environ").write_bytes(b"POD_NAME=first\0" + b"X=" + b"y" * ENVIRON_CAP + b"\0POD_NAMESPACE=late\0")
    assert process_pod(root, 4242) == PodRef("first", "", "", POD_UID, CONTAINER_ID)
    # Not Kubernetes (no kubepods cgroup, no KUBERNETES_SERVICE_HOST): no pod, whatever HOSTNAME says.
    (proc_dir / "cgroup").write_text("0::/user.slice\n")
    (proc_dir / "environ").write_bytes(b"HOSTNAME=laptop\0POD_NAME=x\0")
    assert process_pod(root, 4242) == NO_POD
    # A link where a /proc file is read is not followed (a planted tree), nor is a FIFO opened.
    secret = tmp_path / "secret"
    secret.write_bytes(b"KUBERNETES_SERVICE_HOST=1\0POD_NAME=leaked\0")
    (proc_dir / "environ").unlink()
    (proc_dir / "environ").symlink_to(secret)
    (proc_dir / "cgroup").write_text(f"0::/kubepods/burstable/pod{POD_UID}/{CONTAINER_ID}\n")
    assert process_pod(root, 4242, hostname="from-the-snapshot") == PodRef("from-the-snapshot", "", "", POD_UID, CONTAINER_ID)
    (tmp_path / "proc" / "4343").symlink_to(proc_dir)  # a planted pid directory
    assert process_pod(root, 4343) == NO_POD
    (proc_dir / "cgroup").unlink()
    os.mkfifo(proc_dir / "cgroup")
    assert process_pod(root, 4242) == NO_POD


def test_a_publisher_is_found_by_its_innermost_pid_and_command_line(tmp_path):
    """A job in a pod publishes its own pid namespace's pid (7); from the node it is pid 4100, and pid 7 there is
    something else. Two candidates with one command line are left unsaid rather than guessed."""
    from devctl.discovery.kubernetes import PublisherPids
    from devctl.hostroot import HostRoot

    def process(pid: int, argv: bytes, nspid: str) -> None:
        d = tmp_path / "proc" / str(pid)
        d.mkdir(parents=True)
        (d / "cmdline").write_bytes(argv)
        (d / "status").write_text(f"Name:\tx\nNSpid:\t{nspid}\n")

    process(7, b"/sbin/agetty\x00tty1\x00", "7")
    process(4100, b"python\x00train.py\x00", "4100\t7")
    process(4200, b"python\x00eval.py\x00", "4200\t7")
    pids = PublisherPids(HostRoot(str(tmp_path)))
    assert pids.find(7, ("python", "train.py")) == 4100
    assert pids.find(7, ("python", "eval.py")) == 4200
    assert pids.find(7, ("/sbin/agetty", "tty1")) == 7  # where the snapshot's pid is the process itself
    assert pids.find(8, ("python", "train.py")) is None
    process(4300, b"python\x00train.py\x00", "4300\t7")  # a second pod's job, same pid, same command line
    (tmp_path / "proc" / "4100" / "cmdline").write_bytes(b"python\x00other.py\x00")  # the one known is gone
    pids.new_collection()
    assert pids.find(7, ("python", "train.py")) == 4300
    (tmp_path / "proc" / "4100" / "cmdline").write_bytes(b"python\x00train.py\x00")
    (tmp_path / "proc" / "4300" / "cmdline").write_bytes(b"python\x00x.py\x00")
    pids.new_collection()
    assert pids.find(7, ("python", "train.py")) == 4100
    process(4400, b"python\x00train.py\x00", "4400\t7")
    pids.new_collection()
    pids._known.clear()
    assert pids.find(7, ("python", "train.py")) is None


def test_process_series_are_summed_by_program_unless_per_process():
    from devctl.collect.exporter import _by_program, _headroom
    from devctl.model.exporter import Sample

    def job(pid: int, program: str, name: str, value: float) -> Sample:
        return Sample(name, {"program": program, "pid": str(pid), "container_id": f"c{pid}", "device": "gpu:0"}, value)

    samples = [
        Sample("devctl_host_memory_total_bytes", {}, 1.0),
        job(1, "train.py", "devctl_job_memory_in_use_bytes", 10.0),
        job(2, "train.py", "devctl_job_memory_in_use_bytes", 20.0),
        job(1, "train.py", "devctl_job_memory_largest_free_block_bytes", 5.0),
        job(2, "train.py", "devctl_job_memory_largest_free_block_bytes", 7.0),
        job(3, "eval.py", "devctl_job_memory_in_use_bytes", 4.0),
    ]
    out = [(s.name, s.labels, s.value) for s in _by_program(samples)]
    assert out == [
        ("devctl_host_memory_total_bytes", {}, 1.0),
        ("devctl_job_memory_in_use_bytes", {"program": "train.py", "device": "gpu:0"}, 30.0),
        ("devctl_job_memory_largest_free_block_bytes", {"program": "train.py", "device": "gpu:0"}, 7.0),
        ("devctl_job_memory_in_use_bytes", {"program": "eval.py", "device": "gpu:0"}, 4.0),
    ]
    # The headroom is still each process's (limit less peak), said by program, or by pid with --per-process.
    stats = [job(1, "train.py", "devctl_job_memory_limit_bytes", 100.0), job(1, "train.py", "devctl_job_memory_peak_bytes", 60.0),
             job(2, "train.py", "devctl_job_memory_limit_bytes", 100.0), job(2, "train.py", "devctl_job_memory_peak_bytes", 90.0)]  # fmt: skip
    ((where, least),) = [(s.labels["where"], s.value) for s in _headroom(stats)]
    assert (where, least) == ("gpu:0 (train.py)", 10.0)
    assert _headroom(stats, per_process=True)[0].labels == {"where": "gpu:0 (pid 2)"}


def test_nvmls_per_process_series_name_the_program_and_pod_of_a_host_pid(tmp_path, monkeypatch):
    """NVML's processes (host pids) as --per-process exports them: program and pod from the pid's /proc entries
    (a host root here), the command line only with --command-label, a pid not visible here as program "?"."""
    import contextlib

    from devctl.collect.exporter import Exporter
    from devctl.discovery import nvml
    from devctl.model.hardware import GpuProcess, NvidiaGpu, NvmlHealth, NvmlReport

    d = tmp_path / "proc" / "5000"
    d.mkdir(parents=True)
    (d / "cgroup").write_text(f"0::/kubepods/burstable/pod{POD_UID}/{CONTAINER_ID}\n")
    (d / "environ").write_bytes(b"KUBERNETES_SERVICE_HOST=10.0.0.1\0POD_NAME=trainer-0\0")
    gpu = NvidiaGpu(0, "NVIDIA H200", "GPU-1", "0000:18:00.0", 1 << 37, 1 << 30, (1 << 37) - (1 << 30), (9, 0),
                    None, None, None, None, None, None, None, None)  # fmt: skip
    running = (
        GpuProcess(0, "GPU-1", 5000, 1 << 30, "compute", "me", "/usr/bin/python3 -u train.py --token=secret", True),
        GpuProcess(0, "GPU-1", 6000, 1 << 20, "compute", None, None, False),
    )
    monkeypatch.setattr(nvml, "nvml_session", contextlib.nullcontext)
    monkeypatch.setattr(nvml, "nvml_report", lambda processes=False: NvmlReport("ok", None, "570.1", 12080, "12.8", (gpu,), processes=running if processes else ()))
    monkeypatch.setattr(nvml, "nvml_health", lambda root: NvmlHealth("unavailable", "test", ()))
    monkeypatch.setattr(nvml, "utilization", lambda: {})

    def series(**flags) -> list[dict]:
        samples = Exporter(host_root=str(tmp_path), **flags)._nvml()
        return [s.labels for s in samples if s.name == "devctl_gpu_process_memory_used_bytes"]

    assert series() == []  # per process only with --per-process
    first, hidden = series(per_process=True)
    assert first == {"gpu": "0", "uuid": "GPU-1", "pci_bus_id": "0000:18:00.0", "name": "NVIDIA H200", "device": "", "program": "train.py",
                     "pod": "trainer-0", "namespace": "", "container": "", "pod_uid": POD_UID, "container_id": CONTAINER_ID, "pid": "5000"}  # fmt: skip
    assert hidden["program"] == "?" and hidden["pid"] == "6000" and "pod" not in hidden
    first, _ = series(per_process=True, command_label=True)
    assert first["command"] == "/usr/bin/python3 -u train.py --token=secret"
