"""libtpu's runtime metrics per TPU process (issue 25), against fake RuntimeMetricService servers built from the
same generated code as devctl's client: several processes each with its own port and chips, a port nobody
serves, a server that sleeps past devctl's timeout, NOT_FOUND and UNAVAILABLE, the old and the new way libtpu
numbers devices, and 2-core v2/v3 chips. The chips' holders come from a fake host tree; the servers are
real child processes whose environment carries TPU_RUNTIME_METRICS_PORTS, or servers in this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("grpc")

from conftest import ROOT, devctl_env, run_devctl, run_json, validate_schema  # noqa: E402
from hosttrees import tpu_v2v3_host, tpu_v4_host  # noqa: E402
from tpu_metrics_fake import FakeMetrics, free_port  # noqa: E402

from devctl.collect.tpu_runtime import runtime_metrics  # noqa: E402
from devctl.discovery import tpu, tpu_runtime  # noqa: E402
from devctl.hostroot import HostRoot  # noqa: E402

GIB = 1 << 30
FAKE = str(Path(__file__).with_name("tpu_metrics_fake.py"))


@pytest.fixture
def servers():
    """Start fake servers in this process; all stopped at the end."""
    started: list[FakeMetrics] = []

    def start(spec: dict) -> FakeMetrics:
        fake = FakeMetrics(spec)
        fake.start()
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()


@pytest.fixture
def runtime_dir(tmp_path):
    d = tmp_path / "runtime"
    d.mkdir(mode=0o700)
    return d


@pytest.fixture
def jobs():
    """Start fake TPU jobs: real child processes, each serving on the port its environment names."""
    children: list[subprocess.Popen] = []

    def start(spec: dict, env_extra: dict[str, str] | None = None) -> tuple[subprocess.Popen, int]:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH")) if p))
        env.update(env_extra or {})
        child = subprocess.Popen([sys.executable, FAKE, json.dumps(spec)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        children.append(child)
        line = child.stdout.readline()
        assert line.strip().isdigit(), f"fake job {child.pid} printed {line!r}"
        return child, int(line)

    yield start
    for child in children:
        child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _hold(host, pid: int, accels: list[int], environ: dict[str, str] | bytes | None) -> None:
    """A process in the host tree holding /dev/accelN open, with the environment it was started with."""
    host.process(pid, ["python3", f"train_{pid}.py"], fds={3 + i: f"/dev/accel{n}" for i, n in enumerate(accels)})
    if isinstance(environ, dict):
        environ = b"".join(f"{k}={v}".encode() + b"\0" for k, v in environ.items())
    if environ is not None:
        host.file(f"/proc/{pid}/environ").write_bytes(environ)


# --- where a process serves -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env,port,source",
    [
        ({}, 8431, "default"),
        ({"TPU_RUNTIME_METRICS_PORTS": "9001"}, 9001, "TPU_RUNTIME_METRICS_PORTS"),
        # Four processes on one host: each takes the port at its own place in TPU_PROCESS_ADDRESSES.
        (
            {"TPU_RUNTIME_METRICS_PORTS": "8431,8432,8433,8434", "TPU_PROCESS_ADDRESSES": "localhost:8476,localhost:8477,localhost:8478,localhost:8479", "TPU_PROCESS_PORT": "8478"},
            8433,
            "TPU_RUNTIME_METRICS_PORTS",
        ),
        ({"LIBTPU_INIT_ARGS": "--xla_tpu_use_enhanced_launch_barrier=true --runtime_metric_service_port=9100", "TPU_RUNTIME_METRICS_PORTS": "9001"}, 9100, "LIBTPU_INIT_ARGS"),
        ({"TPU_RUNTIME_METRICS_PORTS": "bogus,99999"}, 8431, "default"),
        ({"TPU_PROCESS_ADDRESSES": "local"}, None, "TPU_PROCESS_ADDRESSES"),
    ],
)
def test_port_from_environ(env, port, source):
    found = tpu_runtime.port_from_environ(42, env)
    assert (found.port, found.source) == (port, source)


def test_several_ports_and_no_place_asks_the_first_and_says_so():
    found = tpu_runtime.port_from_environ(42, {"TPU_RUNTIME_METRICS_PORTS": "8431,8432"})
    assert found.port == 8431 and "asked the first" in found.note


def test_port_read_from_a_real_process_environment():
    port = free_port()
    code = "import sys; print('up', flush=True); sys.stdin.read()"
    env = dict(os.environ, TPU_RUNTIME_METRICS_PORTS=str(port))
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        # Popen returns when exec has begun, before the kernel has laid out the new environment: wait until it runs.
        assert child.stdout.readline() == "up\n"
        found = tpu_runtime.metrics_port(HostRoot("/"), child.pid)
        assert (found.port, found.source) == (port, "TPU_RUNTIME_METRICS_PORTS")
    finally:
        child.stdin.close()
        child.wait(timeout=10)


def test_unreadable_or_linked_environ_falls_back_to_the_default(tmp_path):
    host = tpu_v4_host(tmp_path, chips=1)
    _hold(host, 500, [0], None)
    host.symlink("/proc/500/environ", "/etc/hostname")  # never followed
    assert tpu_runtime.metrics_port(host.root, 500).source == "default"
    assert tpu_runtime.process_environ(host.root, 500) is None


def test_environ_read_is_capped(tmp_path):
    host = tpu_v4_host(tmp_path, chips=1)
    _hold(host, 500, [0], {"A": "x" * (2 << 20), "TPU_RUNTIME_METRICS_PORTS": "9001"})
    env = tpu_runtime.process_environ(host.root, 500)
    assert env is not None and "TPU_RUNTIME_METRICS_PORTS" not in env  # past the cap: not read


_TCP_HEAD = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def _tcp_listen(host, pid: int, ports_inodes: list[tuple[int, int]]) -> None:
    """The pid's network namespace's /proc/<pid>/net/tcp: these ports in LISTEN, by socket inode."""
    rows = [f"   {i}: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 {inode} 1 0000000000000000 100 0 0 10 0\n" for i, (port, inode) in enumerate(ports_inodes)]
    host.file(f"/proc/{pid}/net/tcp", _TCP_HEAD + "".join(rows))


def test_the_port_a_real_process_listens_on_wins_over_a_guess(jobs):
    """A real job whose environment lists several ports and nothing saying which is its own: the one its own
    socket listens on (its fds, its /proc/<pid>/net/tcp), not the first."""
    other, own = free_port(), free_port()
    child, port = jobs({"hbm_used": [1]}, {"TPU_RUNTIME_METRICS_PORTS": f"{other},{own}", "FAKE_BIND": str(own)})
    assert port == own and own in tpu_runtime.listening_ports(HostRoot("/"), child.pid)
    found = tpu_runtime.metrics_port(HostRoot("/"), child.pid)
    assert (found.port, found.listening, found.note) == (own, True, None)


def test_listening_decides_among_several_ports(tmp_path):
    host = tpu_v4_host(tmp_path, chips=1)
    _hold(host, 500, [0], {"TPU_RUNTIME_METRICS_PORTS": "8431,8432,8433"})
    host.symlink("/proc/500/fd/9", "socket:[4242]")
    _tcp_listen(host, 500, [(8431, 1111), (8432, 4242)])  # 8431 is another process's socket
    found = tpu_runtime.metrics_port(host.root, 500)
    assert (found.port, found.listening, found.note) == (8432, True, None)


def test_a_process_not_listening_on_its_port_is_not_asked(tmp_path):
    """Whoever answers on 8431 is another process: its figures must not appear under this pid."""
    host = tpu_v4_host(tmp_path, chips=2)
    _hold(host, 500, [0], {})
    host.symlink("/proc/500/fd/9", "socket:[4242]")
    _tcp_listen(host, 500, [(8431, 1111), (9999, 4242)])
    found = runtime_metrics(host.root, tpu.tpu_info(host.root, environ={}), timeout_s=5)
    (source,) = found.sources
    assert (source.status, source.port_verified, source.port) == ("absent", False, 8431)
    assert not found.chips and found.problems == [] and "does not listen on localhost:8431" in found.notes[0]


# --- asking -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["old", "new"])
def test_both_device_numberings(servers, layout):
    fake = servers({"hbm_used": [5 * GIB, 7 * GIB], "hbm_total": [16 * GIB, 16 * GIB], "duty": [12.5, 80.0], "layout": layout})
    answer = tpu_runtime.ask_ports([fake.port], timeout_s=10)[fake.port]
    assert answer.status == "ok", answer.reason
    assert answer.readings[tpu_runtime.HBM_USED] == [(0, 5 * GIB), (1, 7 * GIB)]
    assert answer.readings[tpu_runtime.DUTY_CYCLE] == [(0, 12.5), (1, 80.0)]
    assert tpu_runtime.HBM_UTILIZATION in answer.unsupported  # NOT_FOUND: an older libtpu
    assert fake.requests and all(skip for _, skip in fake.requests)  # every request skips node aggregation


def test_nobody_listening_is_absent(servers):
    port = free_port()
    answer = tpu_runtime.ask_ports([port], timeout_s=5)[port]
    assert answer.status == "absent" and f"localhost:{port}" in answer.reason


@pytest.mark.parametrize("code,status", [("UNAVAILABLE", "absent"), ("PERMISSION_DENIED", "error")])
def test_failing_server(servers, code, status):
    fake = servers({"hbm_used": [1], "code": code})
    answer = tpu_runtime.ask_ports([fake.port], timeout_s=5)[fake.port]
    assert answer.status == status
    if status == "error":
        assert "PERMISSION_DENIED" in answer.reason


def test_every_metric_not_found_is_an_error_that_says_so(servers):
    fake = servers({})
    answer = tpu_runtime.ask_ports([fake.port], timeout_s=5)[fake.port]
    assert answer.status == "error" and "serves none of" in answer.reason


def test_stalled_server_costs_the_timeout_and_is_named(servers):
    stalled = servers({"hbm_used": [1], "sleep_s": 30})
    fine = servers({"hbm_used": [1], "hbm_total": [2], "duty": [3.0]})
    answers = tpu_runtime.ask_ports([stalled.port, fine.port], timeout_s=0.5)
    assert answers[stalled.port].status == "stalled" and f"localhost:{stalled.port}" in answers[stalled.port].reason
    assert answers[fine.port].status == "ok"


def test_a_port_that_accepts_and_never_speaks_costs_the_timeout():
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        answer = tpu_runtime.ask_ports([port], timeout_s=0.5)[port]
    assert answer.status == "stalled" and f"localhost:{port}" in answer.reason


def test_two_core_chips_sum_their_cores():
    answer = tpu_runtime.PortAnswer(
        8431, "ok",
        readings={
            tpu_runtime.HBM_USED: [(0, 1 * GIB), (1, 2 * GIB), (2, 3 * GIB), (3, 4 * GIB)],
            tpu_runtime.HBM_TOTAL: [(i, 8 * GIB) for i in range(4)],
            tpu_runtime.DUTY_CYCLE: [(0, 50.0), (1, 70.0)],  # per chip
        },
    )  # fmt: skip
    figures, note = tpu_runtime.attribute(answer, [2, 3], cores_per_chip=2)
    assert note is None
    assert [(f.chip, f.hbm_used_bytes, f.hbm_total_bytes, f.duty_cycle_percent, f.cores) for f in figures] == [
        (2, 3 * GIB, 16 * GIB, 50.0, 2),
        (3, 7 * GIB, 16 * GIB, 70.0, 2),
    ]


def test_counts_that_fit_no_chip_are_not_attributed():
    answer = tpu_runtime.PortAnswer(8431, "ok", readings={tpu_runtime.HBM_USED: [(0, 1), (1, 2), (2, 3)]})
    figures, note = tpu_runtime.attribute(answer, [0, 1], cores_per_chip=1)
    assert all(f.hbm_used_bytes is None for f in figures) and "not attributed" in note


# --- memstats: who holds which chip, and what each chip holds ------------------------------------------------


def test_v2v3_host_each_chip_under_its_process(tmp_path, jobs):
    host = tpu_v2v3_host(tmp_path, "v3", chips=2)
    a, port_a = jobs({"hbm_used": [1 * GIB, 2 * GIB], "hbm_total": [16 * GIB, 16 * GIB], "duty": [40.0]}, {"TPU_RUNTIME_METRICS_PORTS": str(free_port())})
    b, port_b = jobs({"hbm_used": [3 * GIB, 4 * GIB], "hbm_total": [16 * GIB, 16 * GIB], "duty": [90.0, 70.0], "layout": "new"}, {"TPU_RUNTIME_METRICS_PORTS": str(free_port())})
    for child, accel in ((a, 0), (b, 1)):
        _hold(host, child.pid, [accel], Path(f"/proc/{child.pid}/environ").read_bytes())  # the child's own environment
    found = runtime_metrics(host.root, tpu.tpu_info(host.root, environ={}), timeout_s=10)
    assert found.problems == [], found.problems
    chip0, chip1 = found.chips["tpu-chip:0"], found.chips["tpu-chip:1"]
    assert (chip0.pid, chip0.port, chip0.hbm_used_bytes, chip0.hbm_total_bytes, chip0.duty_cycle_percent, chip0.cores) == (a.pid, port_a, 3 * GIB, 32 * GIB, 40.0, 2)
    assert (chip1.pid, chip1.port, chip1.hbm_used_bytes, chip1.duty_cycle_percent) == (b.pid, port_b, 7 * GIB, 80.0)


def test_without_grpc_one_line_says_to_install_the_extra(tmp_path, monkeypatch):
    host = tpu_v4_host(tmp_path, chips=2)
    _hold(host, 500, [0], {})
    _hold(host, 501, [1], {})
    monkeypatch.setitem(sys.modules, "grpc", None)
    found = runtime_metrics(host.root, tpu.tpu_info(host.root, environ={}))
    assert found.notes == [tpu_runtime.INSTALL_HINT] and found.problems == [] and not found.chips
    assert {s.status for s in found.sources} == {"no-grpc"}


def test_memstats_three_processes_a_silent_one_and_a_stalled_one(tmp_path, jobs, runtime_dir):
    """The issue's acceptance: three TPU jobs, each its own port and chips, no publish() in any; a fourth with
    nothing listening (a quiet note) and a fifth whose server stalls (a problem naming it, and devctl returns)."""
    host = tpu_v4_host(tmp_path, chips=8)
    specs = [
        ([0, 1], {"hbm_used": [10 * GIB, 11 * GIB], "hbm_total": [32 * GIB, 32 * GIB], "duty": [55.0, 65.0], "hbm_util": [20.0, 30.0]}),
        ([2], {"hbm_used": [3 * GIB], "hbm_total": [32 * GIB], "duty": [5.0], "layout": "new", "first_ordinal": 2}),
        ([3, 4], {"hbm_used": [7 * GIB, 8 * GIB], "hbm_total": [32 * GIB, 32 * GIB], "duty": [99.0, 98.0]}),
    ]
    started = []
    for accels, spec in specs:
        child, port = jobs(spec, {"TPU_RUNTIME_METRICS_PORTS": str(free_port())})
        _hold(host, child.pid, accels, Path(f"/proc/{child.pid}/environ").read_bytes())
        started.append((child.pid, port, accels))
    silent_port = free_port()
    _hold(host, 91, [5], {"TPU_RUNTIME_METRICS_PORTS": str(silent_port)})
    stalled, stalled_port = jobs({"hbm_used": [1], "sleep_s": 120}, {"TPU_RUNTIME_METRICS_PORTS": str(free_port())})
    _hold(host, stalled.pid, [6], Path(f"/proc/{stalled.pid}/environ").read_bytes())

    env = devctl_env(devices=1, DEVCTL_RUNTIME_DIR=str(runtime_dir))
    doc = run_json("memstats", "--host-root", str(host.path), env=env, timeout=300)
    validate_schema(doc, "memstats")
    chips = {d["key"]: d for d in doc["devices"] if d["source"] == "tpu-pci"}
    for pid, port, accels in started:
        for n in accels:
            runtime = chips[f"tpu-chip:{n}"]["runtime"]
            assert runtime["pid"] == pid and runtime["port"] == port, runtime
    assert chips["tpu-chip:1"]["runtime"]["hbm_used_bytes"] == 11 * GIB and chips["tpu-chip:1"]["runtime"]["duty_cycle_percent"] == 65.0
    assert chips["tpu-chip:1"]["runtime"]["hbm_utilization_percent"] == 30.0
    assert chips["tpu-chip:2"]["runtime"]["hbm_used_bytes"] == 3 * GIB and chips["tpu-chip:2"]["runtime"]["hbm_utilization_percent"] is None
    assert chips["tpu-chip:4"]["runtime"]["hbm_total_bytes"] == 32 * GIB
    for n in (5, 6, 7):
        assert chips[f"tpu-chip:{n}"]["runtime"] is None
    used = {(p["pid"], p["device"]): p["used_bytes"] for p in doc["processes"] if p["source"] == "tpu"}
    assert used[(started[2][0], "tpu-chip:3")] == 7 * GIB and used[(91, "tpu-chip:5")] is None
    status = {s["pid"]: s["status"] for s in doc["tpu_runtime"]}
    assert status == {started[0][0]: "ok", started[1][0]: "ok", started[2][0]: "ok", 91: "absent", stalled.pid: "stalled"}
    assert any(f"localhost:{silent_port}" in n for n in doc["notes"]) and not any(f"localhost:{silent_port}" in p for p in doc["problems"])
    assert any(f"pid {stalled.pid}" in p and f"localhost:{stalled_port}" in p and "did not answer" in p for p in doc["problems"])

    table = run_devctl("memstats", "--host-root", str(host.path), env=env, timeout=300)
    assert table.returncode == 0, table.stderr
    assert "duty" in table.stdout and "11.0 GiB libtpu" in table.stdout and "65%" in table.stdout
    assert "did not answer" in table.stdout


# --- libtpu.sdk's TensorCore utilization, in a child ----------------------------------------------------------

_FAKE_SDK = '''
import json, os, signal, stat, sys, time
MODE = {mode!r}

class _Metric:
    def data(self):
        if MODE == "hang":
            time.sleep(600)
        if MODE == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if MODE == "raise":
            raise RuntimeError("no TPU here")
        # What devctl must have set: no metadata-server retries, and logs in a private directory.
        logs = os.environ["TPU_LOG_DIR"]
        assert os.environ["TPU_SKIP_MDS_QUERY"] == "1" and stat.S_IMODE(os.stat(logs).st_mode) == 0o700
        open(os.path.join(logs, "tpu_driver.INFO"), "w").write("log")
        open(os.environ["FAKE_SDK_REPORT"], "w").write(logs)
        return {data!r}

def get_metric(name):
    assert name == "tensorcore_util", name
    return _Metric()
'''


def _fake_libtpu(tmp_path: Path, mode: str, data=()) -> Path:
    """A `libtpu` package whose SDK answers, hangs, crashes or raises: a real package on a real path."""
    base = tmp_path / f"sdk-{mode}"
    (base / "libtpu" / "sdk").mkdir(parents=True)
    (base / "libtpu" / "__init__.py").write_text("")
    (base / "libtpu" / "sdk" / "__init__.py").write_text("")
    (base / "libtpu" / "sdk" / "tpumonitoring.py").write_text(_FAKE_SDK.format(mode=mode, data=list(data)))
    return base


@pytest.mark.parametrize(
    "mode,data,status",
    [("ok", ["10.00", "20.00", "30.00", "40.00"], "ok"), ("ok", [], "no-data"), ("raise", [], "error"), ("segfault", [], "crashed"), ("hang", [], "timeout")],
)
def test_sdk_child(tmp_path, monkeypatch, mode, data, status):
    from devctl.probe import tpu_sdk

    report = tmp_path / "report"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(_fake_libtpu(tmp_path, mode, data)), str(ROOT)]))
    monkeypatch.setenv("FAKE_SDK_REPORT", str(report))
    monkeypatch.syspath_prepend(str(tmp_path / f"sdk-{mode}"))  # so that libtpu is found, never imported, here
    answer = tpu_sdk.ask_tensorcore_util(timeout_s=5 if mode == "hang" else 60)
    assert answer.status == status, answer
    if status == "ok":
        assert answer.values == [10.0, 20.0, 30.0, 40.0]
        assert not Path(report.read_text()).exists()  # the private log directory is gone
    if status == "crashed":
        assert "SIGSEGV" in answer.reason
    assert "libtpu" not in sys.modules


def test_tensorcore_util_goes_to_chips_with_figures(tmp_path, servers):
    from devctl.collect.tpu_runtime import with_tensorcore_util
    from devctl.probe.tpu_sdk import SdkAnswer

    host = tpu_v2v3_host(tmp_path, "v2", chips=2)
    fake = servers({"hbm_used": [1, 2, 3, 4], "hbm_total": [8, 8, 8, 8], "duty": [50.0, 60.0]})
    _hold(host, 500, [0, 1], {"TPU_RUNTIME_METRICS_PORTS": str(fake.port)})
    report = tpu.tpu_info(host.root, environ={})
    found = runtime_metrics(host.root, report, timeout_s=10)
    with_tensorcore_util(found, SdkAnswer("ok", [10.0, 30.0, 50.0, 70.0]), report)  # per core: 2 per chip
    assert [found.chips[f"tpu-chip:{n}"].tensorcore_utilization_percent for n in (0, 1)] == [20.0, 60.0]
    with_tensorcore_util(found, SdkAnswer("timeout", reason="libtpu.sdk did not answer in 15 s"), report)
    assert found.problems == ["TensorCore utilization: libtpu.sdk did not answer in 15 s"]


@pytest.mark.heavy
def test_real_libtpu_sdk_off_a_tpu_vm_answers_quietly_and_leaves_nothing(tmp_path):
    """The real SDK (jax[tpu]'s libtpu, from the scenarios' cached venv) on a host with no TPU daemon: a
    no-data answer within the timeout, no metadata-server retries, no lockfile or logs left in /tmp."""
    from test_libtpu_real import TPU_PYTHON, _private_tmp_prefix

    prefix = _private_tmp_prefix()
    if not TPU_PYTHON.exists() or prefix is None:
        pytest.skip("needs the cached jax[tpu] venv (tests/test_libtpu_real.py says how to build it) and a private /tmp")
    code = "import json, os; from devctl.probe.tpu_sdk import ask_tensorcore_util as a; r = a(); print(json.dumps([r.status, r.reason, sorted(os.listdir('/tmp'))]))"
    proc = subprocess.run([*prefix, str(TPU_PYTHON), "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120)
    status, reason, left = json.loads(proc.stdout.strip().splitlines()[-1])
    assert status == "no-data", (reason, proc.stderr[-2000:])
    assert left == [], left
