"""`--distributed`: real JAX clusters of 2 and 3 processes on 127.0.0.1 (gloo CPU collectives, forced CPU devices).

Each JAX process costs 1-2 s of CPU to start, so the end-to-end tests are
few and each checks several things; the logic around them (flag validation,
findings, headroom, JAX's barrier message, the gather) is tested in-process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, assert_usage_error, devctl_env, run_devctl, validate_schema

from devctl.errors import UsageError

# Success paths never wait for a timeout, so a generous one only matters on a slow machine.
OK_TIMEOUT = "20"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(command: str, index: int, n: int, port: int, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    argv = [
        sys.executable, "-m", "devctl", command, "--distributed", "--coordinator", f"127.0.0.1:{port}",
        "--num-processes", str(n), "--process-id", str(index), *extra,
    ]  # fmt: skip
    return subprocess.Popen(argv, env=env or devctl_env(devices=2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs: list[subprocess.Popen], timeout: float = 120) -> list[tuple[int, str, str]]:
    """(exit code, stdout, stderr) of each; a process still running after `timeout` fails the test, it is not waited for."""
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"a devctl process hung: {p.args}")
        out.append((p.returncode, stdout, stderr))
    return out


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# ---------------------------------------------------------------- real clusters


def test_two_processes_full_inventory_on_process_0_only():
    port = free_port()
    procs = [start("list", i, 2, port, "--json", "--timeout", OK_TIMEOUT) for i in range(2)]
    (rc0, out0, err0), (rc1, out1, err1) = finish(procs)
    assert rc0 == 0, err0
    assert rc1 == 0, err1
    assert out1 == "" and err1 == ""  # only process 0 prints
    doc = json.loads(out0)
    validate_schema(doc, "list.distributed")
    for report in doc["reports"]:
        validate_schema(report, "list")
    assert doc["num_processes"] == 2 and doc["coordinator"] == f"127.0.0.1:{port}"
    assert [p["process_index"] for p in doc["processes"]] == [0, 1]
    assert all(p["device_count"] == 2 and p["device_kinds"] == ["cpu"] for p in doc["processes"])
    # gloo makes the CPU backend multi-process: every process sees all 4 devices, and owns 2.
    assert all(p["global_device_count"] == 4 and p["notes"] == [] for p in doc["processes"])
    by_process = {i: [d for d in doc["devices"] if d["process_index"] == i] for i in (0, 1)}
    assert all(len(devs) == 2 for devs in by_process.values())
    assert all(d["jax_process_index"] == d["process_index"] for d in doc["devices"])
    assert len({d["id"] for d in doc["devices"]}) == 4  # JAX's global ids: no device listed twice
    assert doc["findings"] == []
    assert doc["headroom"]["min_bytes"] is None and "allocator" in doc["headroom"]["reason"]


def test_memstats_cluster_json_on_process_0_and_table_with_all_print():
    port = free_port()
    p0 = start("memstats", 0, 2, port, "--json", "--timeout", OK_TIMEOUT)
    p1 = start("memstats", 1, 2, port, "--all-print", "--timeout", OK_TIMEOUT)
    (rc0, out0, err0), (rc1, out1, err1) = finish([p0, p1])
    assert rc0 == 0 and rc1 == 0, err0 + err1
    doc = json.loads(out0)
    validate_schema(doc, "memstats.distributed")
    for report in doc["reports"]:
        validate_schema(report, "memstats")
    jax_devices = [d for d in doc["devices"] if d["id"] is not None]
    assert sorted(d["process_index"] for d in jax_devices) == [0, 0, 1, 1]
    assert "cluster: 2 process(es)" in out1 and "hosts" in out1 and "smallest memory headroom" in out1
    assert "\x1b[" not in out1


def _fake_dist(site: Path, name: str, version: str) -> None:
    """Package metadata of another version, found before the real one: what pip shows on a host that differs."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_three_processes_one_with_another_jaxlib_is_named(tmp_path):
    _fake_dist(tmp_path / "site", "jaxlib", "0.0.1")
    odd_env = devctl_env(devices=2, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT)]))
    port = free_port()
    procs = [start("list", i, 3, port, "--json", "--timeout", OK_TIMEOUT, env=odd_env if i == 2 else None) for i in range(3)]
    results = finish(procs)
    assert [r[0] for r in results] == [0, 0, 0], [r[2] for r in results]
    doc = json.loads(results[0][1])
    validate_schema(doc, "list.distributed")
    assert [p["jaxlib_version"] for p in doc["processes"]][2] == "0.0.1"
    (finding,) = [f for f in doc["findings"] if f["field"] == "jaxlib_version"]
    assert finding["code"] == "version-mismatch" and finding["processes"] == [2]
    assert finding["values"] == ["0.0.1"] and finding["majority_value"] == doc["processes"][0]["jaxlib_version"]
    assert "process 2 (" in finding["message"] and "0.0.1" in finding["message"]
    assert [f for f in doc["findings"] if f["field"] != "jaxlib_version"] == []


def test_a_process_that_never_joins_is_named_by_the_others():
    port = free_port()
    procs = [start("list", i, 3, port, "--timeout", "5") for i in (0, 1)]  # process 2 never starts
    for rc, out, err in finish(procs, timeout=60):
        assert rc == 1 and out == ""
        line = one_error_line(err)
        assert "1 of 3 processes never joined" in line and "missing process id 2" in line, line


def test_without_process_0_the_coordinator_is_named():
    (rc, out, err), = finish([start("list", 1, 2, free_port(), "--timeout", "3")], timeout=60)
    assert rc == 1 and out == ""
    line = one_error_line(err)
    assert "process 1" in line and "coordinator (process 0)" in line and "127.0.0.1:" in line, line


def _plugin_that_waits_to_be_killed(site: Path, marker: Path) -> None:
    """A jax plugin whose initialize() records its pid and waits: it runs after joining, so killing it kills a member."""
    pkg = site / "jax_plugins" / "waits_to_be_killed"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "import os, time\n"
        "def initialize():\n"
        f"    with open({str(marker)!r} + '.tmp', 'w') as f:\n"
        "        f.write(str(os.getpid()))\n"
        f"    os.rename({str(marker)!r} + '.tmp', {str(marker)!r})\n"
        "    while True:\n"
        "        time.sleep(1)\n"
    )


def test_a_process_killed_after_joining_is_named_and_nobody_hangs(tmp_path):
    marker = tmp_path / "joined.pid"
    _plugin_that_waits_to_be_killed(tmp_path / "site", marker)
    victim_env = devctl_env(devices=2, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT)]))
    port = free_port()
    procs = [start("list", i, 3, port, "--json", "--timeout", "10", env=victim_env if i == 1 else None) for i in range(3)]
    deadline = time.monotonic() + 90
    while not marker.exists():
        assert time.monotonic() < deadline and procs[1].poll() is None, "process 1 never joined"
        time.sleep(0.1)
    os.kill(int(marker.read_text()), signal.SIGKILL)  # the probe child of process 1: the member of the cluster
    (rc0, out0, err0), (rc1, _, err1), (rc2, out2, err2) = finish(procs, timeout=90)
    assert rc0 == 1 and out0 == ""
    assert "process 1 of 3 stopped (died or was killed)" in one_error_line(err0)
    assert rc1 == 1 and "SIGKILL" in one_error_line(err1)
    assert rc2 == 1 and out2 == "" and "process 1 of 3 stopped" in one_error_line(err2)


_GATHER_SCRIPT = """
import json, socket, sys
from devctl.collect.distributed import gather_reports
from devctl.model.distributed import ClusterParams
params = ClusterParams(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
report = lambda: {"process": int(sys.argv[3]), "checks": [{"name": "devices", "status": "pass"}]}
print(json.dumps(gather_reports(report, params, timeout_s=20)))
"""


def test_gather_reports_is_the_engine_for_any_command():
    # What `devctl check --distributed` runs on: any JSON-able report, made while the child joins.
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _GATHER_SCRIPT, f"127.0.0.1:{port}", "2", str(i)],
            env=devctl_env(devices=1), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(2)
    ]  # fmt: skip
    (rc0, out0, err0), (rc1, out1, err1) = finish(procs)
    assert rc0 == 0 and rc1 == 0, err0 + err1
    assert json.loads(out0) == [{"process": i, "checks": [{"name": "devices", "status": "pass"}]} for i in (0, 1)]
    assert json.loads(out1) is None


def test_no_cluster_to_detect_is_a_usage_error():
    env = devctl_env(devices=1)
    for name in ("JAX_COORDINATOR_ADDRESS", "SLURM_JOB_ID", "OMPI_MCA_orte_hnp_uri", "KUBERNETES_SERVICE_HOST"):
        env.pop(name, None)
    proc = run_devctl("list", "--distributed", "--timeout", "5", env=env, timeout=60)
    assert_usage_error(proc, "--coordinator HOST:PORT")


# ---------------------------------------------------------------- flags (no JAX started)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--coordinator", "localhost"], "HOST:PORT"),
        (["--coordinator", "localhost:99999"], "65535"),
        (["--coordinator", "localhost:http"], "'http'"),
        (["--num-processes", "0"], "--num-processes must be a whole number of at least 1"),
        (["--num-processes", "2", "--process-id", "2"], "--process-id 2 is out of range for --num-processes 2"),
        (["--process-id", "-1"], "--process-id"),
        # ASCII digits, and few: '²' passes str.isdigit() but not int(), and int() of 5000 digits raises.
        (["--num-processes", "²"], "'²'"),
        (["--process-id", "9" * 5000], "--process-id"),
        (["--coordinator", "h:²"], "65535"),
        (["--coordinator", "h:" + "9" * 5000], "65535"),
    ],
)
def test_bad_cluster_flags_are_named(args, needle):
    from devctl.cli.cluster import cluster_params

    values = dict(zip(args[::2], args[1::2]))
    with pytest.raises(UsageError, match=".") as e:
        cluster_params(values.get("--coordinator"), values.get("--num-processes"), values.get("--process-id"))
    assert needle in str(e.value)


def test_bad_cluster_flags_exit_2_with_one_line():
    assert_usage_error(run_devctl("list", "--distributed", "--coordinator", "h:1", "--num-processes", "2", "--process-id", "5"), "--process-id 5")
    assert_usage_error(run_devctl("memstats", "--process-id", "0"), "--process-id needs --distributed")
    assert_usage_error(run_devctl("memstats", "--distributed", "--watch"), "--watch is not supported with --distributed")
    # An empty value was given: it is bad input, not an absent flag.
    assert_usage_error(run_devctl("list", "--coordinator", ""), "--coordinator needs --distributed")
    # The same five options, parsed by the same code, in every command that takes them.
    assert_usage_error(run_devctl("check", "--all-print"), "--all-print needs --distributed")
    assert_usage_error(run_devctl("check", "--distributed", "--num-processes", "x"), "--num-processes must be a whole number")


def test_cluster_options_are_declared_once_for_every_command():
    import typer.main

    from devctl.cli.app import register
    from devctl.cli.cluster import OPTIONS

    group = typer.main.get_command(register())
    for name in ("list", "memstats", "check"):
        options = [p.name for p in group.commands[name].params]
        assert options[-len(OPTIONS) :] == list(OPTIONS), (name, options)


def test_cluster_params_accept_what_jax_accepts():
    from devctl.cli.cluster import cluster_params

    p = cluster_params("[fe80::1]:8476", "4", "3")
    assert (p.coordinator, p.num_processes, p.process_id, p.explicit) == ("[fe80::1]:8476", 4, 3, True)
    assert not cluster_params(None, None, None).explicit  # all left to JAX's auto-detection


# ---------------------------------------------------------------- logic, in-process


def test_jax_registration_barrier_message_is_parsed():
    from devctl.probe.distributed_failures import parse_register_barrier

    log = (
        "F1120 client.h:80] Terminating process because the JAX distributed service detected fatal errors. "
        "absl::Status: DEADLINE_EXCEEDED: Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0. "
        "This usually happens because a task triggered the barrier too early or too slowly.\n"
        "# of tasks that reached the barrier: 61/64.\n"
        "The first task at the barrier: 0. Some timed out task names:\n"
        "/job:jax_worker/replica:0/task:7\n"
        "/job:jax_worker/replica:0/task:12\n"
        "\n\nRPC: /xla.coordination.CoordinationService/RegisterTask\n"
    )
    assert parse_register_barrier(log) == ([7, 12], 61, 64)
    assert parse_register_barrier("nothing like it") is None


def _summary(i: int, **over):
    from devctl.model.distributed import ProcessSummary

    base = dict(
        process_index=i, hostname=f"host-{i}", device_count=4, device_kinds=["TPU v5 lite"], default_platform="tpu",
        jax_version="0.10.2", jaxlib_version="0.10.2", libtpu_version="0.0.40", plugin_versions={},
        driver_version=None, global_device_count=16, notes=[],
    )  # fmt: skip
    base.update(over)
    return ProcessSummary(**base)


def test_findings_name_the_odd_hosts_and_say_when_there_is_no_majority():
    from devctl.collect.distributed import consistency_findings

    procs = [_summary(0), _summary(1, device_count=3), _summary(2), _summary(3, libtpu_version="0.0.39")]
    by_field = {f.field: f for f in consistency_findings(procs)}
    assert set(by_field) == {"device_count", "libtpu_version"}
    assert by_field["device_count"].processes == [1] and by_field["device_count"].majority_value == 4
    assert by_field["device_count"].message.startswith("process 1 (host-1) has device count 3; the other 3 processes have 4")
    assert by_field["libtpu_version"].hostnames == ["host-3"]

    split = consistency_findings([_summary(0), _summary(1, jax_version="0.9.0")])
    assert split[0].majority_value is None and split[0].processes == [0, 1]
    assert "no majority" in split[0].message and "host-0" in split[0].message and "host-1" in split[0].message


def test_headroom_is_the_least_usable_memory_over_every_device_of_every_process():
    from devctl.collect.distributed import cluster_headroom
    from devctl.model.distributed import LIST_SCHEMA, ClusterDevice

    def dev(i, key, limit, usable):
        return ClusterDevice(i, f"host-{i}", key, "tpu", 0, "TPU", i, limit, None, usable, {})

    devices = [dev(0, "tpu:0", 100, 90), dev(1, "tpu:4", 100, 30), dev(1, "tpu:5", 100, 80)]
    h = cluster_headroom(LIST_SCHEMA, [], [_summary(0), _summary(1)], devices)
    assert (h.min_bytes, h.process_index, h.hostname, h.where, h.third_of_min_bytes) == (30, 1, "host-1", "tpu:4", 10)


class _FakeClient:
    """The key-value store of JAX's distributed client, in memory, with peers that report or go silent."""

    def __init__(self, reports: dict[int, dict], alive: set[int]):
        self.kv = {f"devctl/report/{i}": json.dumps(r) for i, r in reports.items()}
        self.alive, self.beats = alive, 0

    def blocking_key_value_get(self, key, timeout_ms):
        if key in self.kv:
            return self.kv[key]
        time.sleep(min(timeout_ms, 50) / 1000)
        raise RuntimeError("DEADLINE_EXCEEDED")

    def key_value_dir_get(self, prefix):
        self.beats += 1  # live peers' counters move between reads; dead ones do not
        return [(f"devctl/alive/{i}", str(self.beats if i in self.alive else 1)) for i in range(3)]


def test_gather_names_a_dead_peer_quickly_and_keeps_the_others():
    from devctl.probe.distributed_child import _gather
    from devctl.probe.distributed_liveness import Liveness

    client = _FakeClient({0: {"a": 0}, 2: {"a": 2}}, alive={0, 2})
    liveness = Liveness(client, me=0, n=3, stale_s=0.2)
    reports, dead = _gather(client, 3, timeout_s=30, liveness=liveness)
    assert reports == [{"a": 0}, None, {"a": 2}] and dead == [1]


def test_the_join_is_bounded_through_the_runtime_this_jax_calls():
    # devctl bounds JAX's join by wrapping the module jax._src.distributed calls; this fails when jax moves it.
    from jax._src import distributed as jd

    from devctl.probe.distributed_runtime import BoundedRuntime, bound_joining

    name = next(n for n in ("_jax", "xla_extension") if hasattr(jd, n))
    original = getattr(jd, name)
    try:
        bound_joining(jd, 5, time.monotonic() + 5)
        wrapped = getattr(jd, name)
        assert isinstance(wrapped, BoundedRuntime)
        assert wrapped.get_distributed_runtime_client.__func__ is BoundedRuntime.get_distributed_runtime_client
        assert callable(wrapped.DistributedRuntimeClient)  # everything else still reaches jaxlib
    finally:
        setattr(jd, name, original)


def test_joining_waits_for_the_coordinator_to_open_its_port():
    # A gRPC client that finds the port closed backs off a second or more; devctl connects only once it is open.
    import threading

    from devctl.probe.distributed_runtime import wait_until_listening

    port = free_port()
    assert wait_until_listening(f"127.0.0.1:{port}", 0.2) is False  # nobody there: gives up at its deadline
    assert wait_until_listening("no-port-here", 30) is False  # JAX's own connect reports a malformed address

    opened = threading.Event()

    def coordinator_starts_late() -> None:
        time.sleep(0.3)
        with socket.create_server(("127.0.0.1", port)) as server:
            opened.set()
            server.settimeout(30)
            server.accept()[0].close()

    thread = threading.Thread(target=coordinator_starts_late)
    thread.start()
    try:
        assert wait_until_listening(f"127.0.0.1:{port}", 30) is True
        assert opened.is_set()
    finally:
        thread.join(timeout=30)


def test_missing_message_separates_dead_from_silent():
    from devctl.model.distributed import Joined
    from devctl.probe.distributed_failures import missing_message

    text = missing_message([1, 4], [4], Joined(0, 8, "h:1"), 10)
    assert "process 4 of 8 stopped (died or was killed)" in text
    assert "process 1 of 8 joined the cluster but sent no report within 10 s" in text


def test_a_backend_without_multi_process_support_is_reported_not_fatal():
    from devctl.collect.distributed import consistency_findings, process_summary
    from devctl.model.distributed import Joined

    # What a CPU backend without cross-process collectives looks like on process 1 of 2:
    # only its own devices, numbered as if it were alone.
    local_probe = {
        "default_platform": "cpu",
        "backends": [{"platform": "cpu", "status": "ok", "process_index": 0, "global_device_count": 2,
                      "devices": [{"id": i, "device_kind": "cpu", "process_index": 0} for i in (0, 1)]}],
    }  # fmt: skip

    class Probe:
        jax_version = jaxlib_version = "0.10.2"

    summary = process_summary(Joined(1, 2, "h:1"), "host-1", Probe(), local_probe, [], None)
    assert summary.device_count == 2 and summary.global_device_count == 2
    assert summary.notes and "no multi-process support" in summary.notes[0]
    (finding,) = [f for f in consistency_findings([_summary(0), _summary(1, notes=summary.notes)]) if f.code == "not-multi-process"]
    assert finding.processes == [1] and "gloo" in finding.hint


def test_check_distributed_one_report_with_each_host_named_and_exit_1_when_one_fails(tmp_path):
    # Only process 1 has an allocator jaxlib rejects: its env check fails, and with it the cluster.
    port = free_port()
    junit = tmp_path / "cluster.xml"
    common = ("--json", "--timeout", OK_TIMEOUT, "--only", "versions,env,devices")
    p0 = start("check", 0, 2, port, *common, "--junit-xml", str(junit))
    p1 = start("check", 1, 2, port, *common, env=devctl_env(devices=2, XLA_PYTHON_CLIENT_ALLOCATOR="bogus"))
    (rc0, out0, err0), (rc1, out1, err1) = finish([p0, p1])
    assert rc1 == 0 and out1 == "", err1  # only process 0 speaks for the cluster
    assert rc0 == 1, err0
    doc = json.loads(out0)
    validate_schema(doc, "check")
    names = [c["name"] for c in doc["checks"]]
    assert len(names) == 6 and all(" process " in n for n in names)
    failed = [c for c in doc["checks"] if c["status"] == "fail"]
    assert failed and all(c["details"]["process_index"] == 1 and c["details"]["check"] == "env" for c in failed)
    import xml.etree.ElementTree as ET

    cases = ET.parse(junit).getroot().iter("testcase")
    failing = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failing == [failed[0]["name"]] and "process 1" in failing[0]


def test_check_distributed_table_says_host_and_process_on_every_row():
    port = free_port()
    common = ("--timeout", OK_TIMEOUT, "--only", "versions,devices")
    (rc0, out0, err0), (rc1, _, err1) = finish([start("check", i, 2, port, *common) for i in range(2)])
    assert rc0 == 0 and rc1 == 0, (err0, err1)
    header, *rows = [line.split() for line in out0.splitlines() if line.split() and line.split()[0] in ("check", "versions", "devices")]
    assert header[:4] == ["check", "host", "process", "status"], out0
    host = socket.gethostname()
    assert sorted((r[0], r[1], r[2]) for r in rows) == sorted((c, host, str(i)) for c in ("versions", "devices") for i in (0, 1)), out0


# ---------------------------------------------------------------- clusters started wrongly: the culprit named on every process


def test_processes_given_different_num_processes_all_exit_2_naming_the_odd_one():
    port = free_port()
    p0 = start("list", 0, 2, port, "--timeout", OK_TIMEOUT)
    p1 = start("list", 1, 3, port, "--timeout", OK_TIMEOUT)  # JAX lets it join: its id is below process 0's count
    results = finish([p0, p1], timeout=90)
    lines = [one_error_line(err) for _, _, err in results]
    assert [rc for rc, _, _ in results] == [2, 2], lines
    assert lines[0] == lines[1]  # every process says the same
    assert "process 0 (" in lines[0] and "has 2 (--num-processes)" in lines[0], lines[0]
    assert "process 1 (" in lines[0] and "has 3 (--num-processes)" in lines[0], lines[0]
    assert "give every process the same --num-processes" in lines[0]


def test_a_process_id_beyond_process_0s_count_is_named_there():
    port = free_port()
    p0 = start("list", 0, 2, port, "--timeout", "3")
    p2 = start("list", 2, 3, port, "--timeout", "3")  # JAX refuses it: process 0 counts only 0 and 1
    (rc0, _, err0), (rc2, _, err2) = finish([p0, p2], timeout=60)
    assert rc2 == 2 and "is not part of the coordinator's cluster" in one_error_line(err2), err2
    assert "--num-processes 3" in err2 and "give every process the same --num-processes" in err2
    assert rc0 == 1 and "missing process id 1" in one_error_line(err0), err0


def test_a_duplicated_process_id_is_named_not_just_reported_missing():
    # Process 2 is not missing: its id was given to a second process 1.
    port = free_port()
    p0 = start("list", 0, 3, port, "--timeout", "4")
    ones = [start("list", 1, 3, port, "--timeout", "4") for _ in range(2)]
    (rc0, _, err0), *rest = finish([p0, *ones], timeout=60)
    assert rc0 == 2, err0
    line0 = one_error_line(err0)
    assert "missing process id 2" in line0 and "two processes registered with the same process id" in line0, line0
    by_rc = {rc: one_error_line(err) for rc, _, err in rest}
    assert sorted(by_rc) == [1, 2], by_rc
    # The one JAX dropped for the other says so itself; the other only knows who never came.
    assert "another process joined the cluster as process 1" in by_rc[2] and "--process-id" in by_rc[2], by_rc[2]
    assert "missing process id 2" in by_rc[1], by_rc[1]


def test_a_second_process_with_a_running_members_id_is_named_by_the_members(tmp_path):
    from test_hostile_processes import write_hanging_plugin

    marker = tmp_path / "joined.pid"
    write_hanging_plugin(tmp_path / "site", "holds_process_0", "sleeps", marker)  # keeps the cluster running after it formed
    env0 = devctl_env(devices=2, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT)]))
    port = free_port()
    p0 = start("list", 0, 2, port, "--timeout", OK_TIMEOUT, env=env0)
    p1 = start("list", 1, 2, port, "--timeout", OK_TIMEOUT)
    deadline = time.monotonic() + 90
    while not marker.exists():  # the plugin runs after joining: both processes are in the cluster
        assert time.monotonic() < deadline and p0.poll() is None, "the cluster never formed"
        time.sleep(0.1)
    late = start("list", 1, 2, port, "--timeout", "5")
    (rc0, _, err0), (rc1, _, err1), (rc_late, _, err_late) = finish([p0, p1, late], timeout=90)
    for rc, err in ((rc0, err0), (rc1, err1)):
        line = one_error_line(err)
        assert rc == 2 and "two processes were given --process-id 1" in line, line
    assert rc_late == 1 and one_error_line(err_late)


def test_the_coordinator_on_a_name_that_resolves_to_loopback_says_so():
    host = socket.gethostname()
    resolved = {i[4][0] for i in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    if host == "localhost" or not all(a.startswith("127.") or a == "::1" for a in resolved):
        pytest.skip(f"{host} resolves to {resolved} here, not to loopback only")
    # What Debian's /etc/hosts does (127.0.1.1): other hosts could never reach process 0; the error says why.
    port = free_port()
    argv = [sys.executable, "-m", "devctl", "list", "--distributed", "--coordinator", f"{host}:{port}", "--num-processes", "2",
            "--process-id", "0", "--timeout", "2"]  # fmt: skip
    proc = subprocess.run(argv, env=devctl_env(devices=1), capture_output=True, text=True, timeout=60)
    line = one_error_line(proc.stderr)
    assert proc.returncode == 1 and "missing process id 1" in line, line
    assert "listened only on loopback" in line and "JAX_COORDINATOR_BIND_ADDRESS" in line, line


def test_a_process_killed_mid_gather_fails_every_process_and_leaves_no_child(tmp_path):
    # Process 2's checks hang in a plugin while its cluster child waits for its report; then its devctl is SIGKILLed.
    from test_hostile_processes import (
        alive,
        descendants_of,
        kill_all,
        tcp_sockets,
        write_hanging_plugin,
    )

    marker = tmp_path / "plugin.pid"
    write_hanging_plugin(tmp_path / "site", "stuck", "sleeps", marker)
    # Process 2's own temporary directory is left behind by the SIGKILL (the next run sweeps it): keep it out of /tmp.
    env2 = devctl_env(devices=2, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT)]), TMPDIR=str(tmp_path))
    port = free_port()
    common = ("--timeout", "10", "--only", "devices")
    procs = [start("check", i, 3, port, *common, env=env2 if i == 2 else None) for i in range(3)]
    deadline = time.monotonic() + 90
    # Every process's client is connected to the coordinator (the kernel's table) and process 2 sits in its plugin.
    while not (marker.exists() and len(tcp_sockets(port, state="01", remote=True)) >= 3):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "the cluster never formed"
        time.sleep(0.1)
    time.sleep(1)  # registering after connecting takes one round trip
    children = descendants_of(procs[2].pid)
    try:
        assert len(children) >= 2  # its cluster child and its backend probe child (in the plugin)
        os.kill(procs[2].pid, signal.SIGKILL)
        (rc0, out0, err0), (rc1, out1, err1), (rc2, _, _) = finish(procs, timeout=90)
        assert rc2 == -signal.SIGKILL
        for rc, out, err in ((rc0, out0, err0), (rc1, out1, err1)):
            line = one_error_line(err)
            assert rc == 1 and out == "", line  # process 1 too: a scheduler reads every process's exit code
            assert "process 2 of 3 stopped (died or was killed) during the gather" in line, line
        assert [c for c in children if alive(c)] == []
    finally:
        kill_all(procs, children)


# ---------------------------------------------------------------- more logic, in-process


def test_count_mismatch_names_each_process_against_process_0():
    from devctl.probe.distributed_failures import count_mismatch

    same = {i: {"num_processes": 3, "hostname": f"h{i}", "given": True} for i in range(3)}
    assert count_mismatch(same) is None
    odd = {**same, 2: {"num_processes": 4, "hostname": "h2", "given": False}}
    text = count_mismatch(odd)
    assert "process 0 (h0), the coordinator, has 3 (--num-processes)" in text
    assert "process 2 (h2) has 4 (auto-detected)" in text and "process 1" not in text


def test_the_bind_address_is_the_coordinators_unless_the_user_chose_one():
    from devctl.probe.distributed_runtime import bind_address

    assert bind_address("[::]:8476", "127.0.0.1:8476", {}) == "127.0.0.1:8476"
    assert bind_address("[::]:8476", "10.0.0.5:8476", {"JAX_COORDINATOR_BIND_ADDRESS": "[::]:8476"}) == "[::]:8476"
    assert bind_address("[::]:8476", None, {}) == "[::]:8476"  # nothing known to bind to: JAX's own choice


# ---------------------------------------------------------------- a slow host named: a real process, really slowed


CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu controller


def _can_cap_cpu() -> bool:
    return (CPU_CGROUPS / "cpu.cfs_quota_us").exists() and os.access(CPU_CGROUPS, os.W_OK)


class CpuCap:
    """Moves every process under a process (its benchmark children) into a cgroup capped at `share` of one CPU, as
    an oversubscribed host would run them: the kernel stops their threads for the rest of each 10 ms period."""

    def __init__(self, pid: int, share: float):
        import threading

        self.pid = pid
        self.group = CPU_CGROUPS / f"devctl-test-{os.getpid()}-{pid}"
        self.group.mkdir()
        (self.group / "cpu.cfs_period_us").write_text("10000")
        (self.group / "cpu.cfs_quota_us").write_text(str(round(share * 10000)))
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        moved: set[int] = set()
        while not self.done.wait(0.05):
            try:
                children = psutil.Process(self.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                return
            for child in children:
                if child.pid not in moved:
                    try:
                        (self.group / "cgroup.procs").write_text(str(child.pid))  # its threads follow it
                        moved.add(child.pid)
                    except OSError:
                        pass  # gone already

    def __enter__(self) -> CpuCap:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()
        self.group.rmdir()  # empty: every process in it has exited


@pytest.mark.skipif(not _can_cap_cpu(), reason="needs cgroup v1's cpu controller, writable (root), to slow a process for real")
def test_check_stragglers_names_the_process_that_is_really_slowed():
    """Both processes run on one CPU; process 1's children (its benchmarks among them) are capped at a fifth of it:
    its devices copy and multiply at a fraction of process 0's speed, and the cluster row names process 1 (each
    process alone sees two equal devices and no straggler of its own)."""
    cpu = min(os.sched_getaffinity(0))
    port = free_port()
    common = ("--json", "--timeout", "60", "--only", "stragglers", "--stragglers")
    procs = []
    for index in (0, 1):
        argv = [
            sys.executable, "-m", "devctl", "check", "--distributed", "--coordinator", f"127.0.0.1:{port}",
            "--num-processes", "2", "--process-id", str(index), *common,
        ]  # fmt: skip
        procs.append(subprocess.Popen(
            argv, env=devctl_env(devices=2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),  # inherited by its benchmark children
        ))  # fmt: skip
    with CpuCap(procs[1].pid, share=0.2):
        (rc0, out0, err0), (rc1, out1, err1) = finish(procs, timeout=240)
    assert rc0 == 1 and rc1 == 0 and out1 == "", (out0, err0, err1)
    doc = json.loads(out0)
    validate_schema(doc, "check")
    rows = {c["name"]: c for c in doc["checks"]}
    host = socket.gethostname()
    across = rows["stragglers [cluster]"]
    assert across["status"] == "fail", across
    assert f"{host} process 1 " in across["message"] and f"{host} process 0 " not in across["message"], across["message"]
    for metric in ("memory", "matmul"):
        found = across["details"][metric]
        assert found["stragglers"] == [f"{host} process 1"], (metric, found)
        # The cluster's figure for each process is the median of its own devices' figures, as its own row says them.
        for index in (0, 1):
            figures = rows[f"stragglers [{host} process {index}]"]["details"][metric]["figures"]
            assert sorted(figures) == ["cpu:0", "cpu:1"]
            assert found["by_process"][f"{host} process {index}"] == pytest.approx(sum(figures.values()) / 2)


def test_host_stragglers_compare_each_processs_device_median_with_the_others():
    from devctl.checks.cluster import host_stragglers

    def report(host: str, copy: dict[str, float | None]) -> dict:
        details = {"memory": {"metric": "copy", "unit": "GB/s", "figures": copy, "median": None}}
        return {"hostname": host, "checks": [{"name": "stragglers", "status": "pass", "message": "-", "details": details}]}

    fast = {"cuda:0": 3000.0, "cuda:1": 3010.0}
    reports = [report("a", fast), report("b", {"cuda:0": 2000.0, "cuda:1": 2100.0, "cuda:2": None}), report("c", fast)]
    row = host_stragglers(reports)
    assert row is not None and row.name == "stragglers [cluster]" and row.status.value == "fail"
    assert row.message.startswith("slow process(es), each its devices' median: copy b process 1 2050 GB/s, 32% below the median 3005 GB/s")
    assert row.details["memory"]["by_process"] == {"a process 0": 3005.0, "b process 1": 2050.0, "c process 2": 3005.0}
    calm = host_stragglers([report("a", fast), report("b", {"cuda:0": 2900.0})])
    assert calm is not None and calm.status.value == "pass" and "no slow process among 2" in calm.message
    assert host_stragglers([report("a", fast)]) is None  # one process: no peer to compare with
