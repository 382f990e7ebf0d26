"""What holds a job's memory, asked of real JAX jobs on forced CPU devices: `memstats --pid PID --top N` (the
arrays, their bytes and the lines of the job that created them, grouped by line; --pprof), and the post-mortem a
job leaves when a real RESOURCE_EXHAUSTED ends it, read by `memstats --postmortem` and doctor after it died."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import assert_usage_error, devctl_env, run_devctl, validate_schema
from jobs import PublishingJob
from test_monitor import _snapshot_doc, _write

MIB = 1 << 20

# Lines the tests name: each array is created on a known line of this file (JOB_LINES below).
JOB = r"""
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import devctl.publish

def init_params():
    return [jnp.ones((256, 1024), jnp.float32) for _ in range(3)]

def init_opt(params):
    return [jnp.zeros_like(p) for p in params]

params = init_params()
opt = init_opt(params)
big = jax.device_put(np.zeros(8 << 20, np.uint8), jax.devices()[1])
spread = jax.device_put(np.zeros(4 << 20, np.uint8), NamedSharding(Mesh(np.array(jax.devices()), ("x",)), P("x")))
np.asarray(spread)  # a host fetch: per-shard objects that jax.live_arrays() lists beside their parent
pub = devctl.publish.publish(interval=0.2)
print(json.dumps({"ready": time.time()}), flush=True)
if sys.argv[1:] == ["oom"]:
    time.sleep(0.5)
    jnp.zeros((1 << 42,), jnp.uint8)
try:
    time.sleep(600)
except KeyboardInterrupt:
    sys.exit(0)
"""
LINE = {name: i for i, text in enumerate(JOB.splitlines(), 1) for name, needle in (
    ("params", "return [jnp.ones"), ("opt", "return [jnp.zeros_like"), ("big", "big = jax.device_put"),
    ("spread", "spread = jax.device_put"), ("oom", "jnp.zeros((1 << 42,)"),
) if needle in text}  # fmt: skip
TOTAL = 3 * MIB + 3 * MIB + 8 * MIB + 4 * MIB


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    return tmp_path / "runtime"


def site(name: str, function: str) -> str:
    return f"job.py:{LINE[name]} ({function})"


def test_top_names_the_largest_arrays_with_the_lines_that_created_them(tmp_path, runtime):
    job = PublishingJob(tmp_path, runtime, JOB)
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    try:
        proc = run_devctl("memstats", "--pid", str(job.pid), "--top", "3", "--json", env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        validate_schema(doc, "memstats.top")
        # Every array once: the spread array's per-shard objects (made by the host fetch) are not more arrays.
        assert (doc["pid"], doc["total_arrays"], doc["total_bytes"]) == (job.pid, 8, TOTAL)
        big, spread, first_param = doc["arrays"]
        assert (big["nbytes"], big["shape"], big["dtype"], big["devices"]) == (8 * MIB, [8 * MIB], "uint8", ["cpu:1"])
        assert big["site"] == site("big", "<module>") and big["memory_kind"] == "device"
        assert (spread["nbytes"], spread["devices"]) == (4 * MIB, ["cpu:0", "cpu:1", "cpu:2", "cpu:3"])
        assert spread["site"] == site("spread", "<module>") and "NamedSharding" in spread["sharding"]
        assert (first_param["nbytes"], first_param["shape"], first_param["dtype"]) == (MIB, [256, 1024], "float32")
        by_site = {s["site"]: (s["arrays"], s["nbytes"]) for s in doc["sites"]}
        assert by_site == {
            site("big", "<module>"): (1, 8 * MIB),
            site("spread", "<module>"): (1, 4 * MIB),
            site("params", "init_params.<locals>.<listcomp>" if sys.version_info < (3, 12) else "init_params"): (3, 3 * MIB),
            site("opt", "init_opt.<locals>.<listcomp>" if sys.version_info < (3, 12) else "init_opt"): (3, 3 * MIB),
        }, by_site
        # The table says the same, and the answer file is not left behind.
        table = run_devctl("memstats", "--pid", str(job.pid), "--top", "2", env=env, cwd=tmp_path)
        assert table.returncode == 0, table.stderr
        assert f"job {job.pid} (" in table.stdout and "8 live arrays, 18.0 MiB" in table.stdout
        assert site("big", "<module>") in table.stdout and "by the line that created them" in table.stdout
        assert f" ({8 * MIB},) " in table.stdout, table.stdout  # a 1-D shape as Python prints it, not "8388608"
        assert not list(runtime.glob("*.top*")), list(runtime.iterdir())
        # --pprof: the job's own device memory profile, gzipped protobuf as pprof reads it.
        profile = tmp_path / "job.pprof"
        proc = run_devctl("memstats", "--pid", str(job.pid), "--pprof", str(profile), env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert profile.read_bytes()[:2] == b"\x1f\x8b" and profile.stat().st_size > 100
    finally:
        job.stop()


def test_a_real_out_of_memory_leaves_a_postmortem_naming_the_request_and_the_holders(tmp_path, runtime):
    job = PublishingJob(tmp_path, runtime, JOB, "oom")
    _, err = job.proc.communicate(timeout=120)
    # The job's own error is unchanged: its exit, its exception and message.
    assert job.proc.returncode == 1 and "RESOURCE_EXHAUSTED: Out of memory allocating 4398046511104 bytes" in err, err
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    doc = json.loads(run_devctl("memstats", "--postmortem", "--pid", str(job.pid), "--json", env=env).stdout)
    validate_schema(doc, "memstats.postmortems")
    (pm,) = doc["postmortems"]
    assert pm["pid"] == job.pid and pm["requested_bytes"] == 4398046511104 and "RESOURCE_EXHAUSTED" in pm["error"]
    # The CPU's message gives the byte count and names no device.
    assert (pm["requested_exact"], pm["requested_device"], pm["requested_scope"]) == (True, None, "allocation")
    assert {d["device"] for d in pm["devices"]} == {f"cpu:{i}" for i in range(4)}
    assert pm["total_bytes"] >= TOTAL and pm["arrays"][0]["nbytes"] == 8 * MIB
    assert pm["arrays"][0]["site"] == site("big", "<module>")
    proc = run_devctl("memstats", "--postmortem", env=env)
    assert proc.returncode == 0 and f"job {job.pid} (" in proc.stdout and "asking for 4.0 TiB\n" in proc.stdout, proc.stdout
    doctor = json.loads(run_devctl("doctor", "--json", env=env, timeout=300).stdout)
    assert any(f"job {job.pid} " in line and "RESOURCE_EXHAUSTED" in line for line in doctor["overview"]["sees"]), doctor["overview"]


def test_a_shape_reads_as_python_prints_it():
    from devctl.render.holders import shape_text

    assert [shape_text(s) for s in ((16777216,), (), (2, 3), [256, 1024])] == ["(16777216,)", "()", "(2, 3)", "(256, 1024)"]


def test_counts_read_right_in_one_and_many(capsys):
    """`1 live array` and `the largest`, not `1 live arrays` and `the 1 largest`."""
    from devctl.model.holders import HeldArray, SiteTotal, TopReport
    from devctl.render.holders import render_top
    from devctl.units import counted

    assert [counted(n, "live array") for n in (0, 1, 2)] == ["0 live arrays", "1 live array", "2 live arrays"]
    assert counted(1, "process", "processes") == "1 process" and counted(3, "process", "processes") == "3 processes"
    one = HeldArray(nbytes=64 * MIB, shape=(16777216,), dtype="float32", sharding="SingleDeviceSharding", memory_kind="device",
                    devices=("cpu:0",), site="job.py:5 (<module>)")  # fmt: skip
    report = TopReport(schema="devctl.memstats.top/1", pid=7, command=("python", "job.py"), hostname="h", timestamp=0.0,
                       total_arrays=1, total_bytes=64 * MIB, arrays=(one,), sites=(SiteTotal("job.py:5 (<module>)", 1, 64 * MIB),))  # fmt: skip
    render_top(report)
    out = capsys.readouterr().out
    assert out.startswith("job 7 (job.py) on h: 1 live array, 64.0 MiB\nthe largest\n"), out
    assert "(16777216,)" in out


def test_a_job_has_one_name_in_every_view(tmp_path, runtime):
    """A `python -c` job is `python -c` in memstats' table, --top's header, its post-mortem line and doctor's (the
    job answered sys.argv, `-c`, and was `(-c)` there); --json keeps the whole command line."""
    import posixpath

    program = f"{posixpath.basename(sys.executable)} -c"
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    job = PublishingJob(tmp_path, runtime, JOB, inline=True)
    try:
        table = run_devctl("memstats", env=env, cwd=tmp_path)
        assert table.returncode == 0, table.stderr
        rows = [line for line in table.stdout.splitlines() if line.lstrip().startswith(f"{job.pid} ")]
        assert rows and all(line.rstrip().endswith(f"  {program}") for line in rows), table.stdout
        top = run_devctl("memstats", "--pid", str(job.pid), "--top", "1", env=env, cwd=tmp_path)
        assert top.stdout.startswith(f"job {job.pid} ({program}) on "), top.stdout
        doc = json.loads(run_devctl("memstats", "--pid", str(job.pid), "--top", "1", "--json", env=env, cwd=tmp_path).stdout)
        assert doc["command"][:2] == [sys.executable, "-c"] and "devctl.publish" in doc["command"][2], doc["command"]
    finally:
        job.stop()
    job = PublishingJob(tmp_path, runtime, JOB, "oom", inline=True)
    job.proc.communicate(timeout=120)
    proc = run_devctl("memstats", "--postmortem", env=env)
    assert f"job {job.pid} ({program}) ran out of memory at " in proc.stdout, proc.stdout
    doctor = json.loads(run_devctl("doctor", "--json", env=env, timeout=300).stdout)
    assert any(f"job {job.pid} ({program}) died" in line for line in doctor["overview"]["sees"]), doctor["overview"]


def test_a_postmortem_of_an_older_devctl_is_read_with_its_request(runtime):
    """The H200's (reference/h200-observations.md section 5) as devctl 3e600fb wrote it, which did not read the
    request: the reader reads it from the error. (What it held is the file's: the 4 TiB array was counted then.)"""
    error = ("JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4.00TiB with allocator GPU_0_bfc on device 0. "
             "[executable_name='jit_broadcast_in_dim'] [tf-allocator-allocation-error='']")  # fmt: skip
    arrays = [
        {"nbytes": 1 << 42, "shape": [1 << 42], "dtype": "uint8", "sharding": "SingleDeviceSharding(device=CudaDevice(id=0), memory_kind=device)",
         "memory_kind": "device", "devices": ["gpu:0"], "site": "oom.py:6 (<module>)"},
        {"nbytes": 8 * MIB, "shape": [2, 1024, 1024], "dtype": "float32", "sharding": "SingleDeviceSharding(device=CudaDevice(id=0), memory_kind=device)",
         "memory_kind": "device", "devices": ["gpu:0"], "site": "oom.py:4 (holder)"},
    ]  # fmt: skip
    stats = {"bytes_in_use": 8 * MIB, "bytes_limit": 112583507968, "peak_bytes_in_use": 8 * MIB}
    old = {
        "schema": "devctl.memstats.postmortem/1", "pid": 2392, "command": ["python3", "oom.py"], "hostname": "h200", "timestamp": time.time(),
        "error": error, "requested_bytes": None, "requested_device": None, "devices": [{"device": "gpu:0", "memory_stats": stats}],
        "total_arrays": 2, "total_bytes": (1 << 42) + 8 * MIB, "arrays": arrays,
        "sites": [{"site": "oom.py:6 (<module>)", "arrays": 1, "nbytes": 1 << 42}, {"site": "oom.py:4 (holder)", "arrays": 1, "nbytes": 8 * MIB}],
    }  # fmt: skip
    _write(runtime, "2392-1795593000.postmortem.json", old)
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    doc = json.loads(run_devctl("memstats", "--postmortem", "--json", env=env).stdout)
    validate_schema(doc, "memstats.postmortems")
    (pm,) = doc["postmortems"]
    assert (pm["requested_bytes"], pm["requested_device"], pm["requested_exact"]) == (4398046511104, "gpu:0", False)
    proc = run_devctl("memstats", "--postmortem", env=env)
    assert proc.returncode == 0 and "asking for 4.0 TiB on gpu:0" in proc.stdout, proc.stdout


# A job whose asynchronous computation fails, as a GPU's out-of-memory output does: the array object exists from
# dispatch (jax.live_arrays() lists it), its buffer never holds a value. On CPU a host callback that raises does it.
ERRORED = r"""
import json, threading, time
import jax, jax.numpy as jnp
from devctl.publish.holders import held

def fail(x):
    raise ValueError("the callback failed")

gate = threading.Event()

def wait(x):
    gate.wait(20)
    return x

@jax.jit
def slow(a):  # busy for long enough that what uses its output is dispatched before it is ready: asynchronously
    for _ in range(8):
        a = jnp.tanh(a @ a)
    return a.sum()

def through(callback):
    shape = jax.ShapeDtypeStruct((1 << 20,), jnp.float32)  # 4 MiB
    return jax.jit(lambda s: jax.pure_callback(callback, shape, jnp.broadcast_to(s, shape.shape)))

waiting, failing = through(wait), through(fail)
slow(jnp.zeros((512, 512), jnp.float32)).block_until_ready()  # compiled first: each dispatch below is immediate
for f in (waiting, failing):
    f.lower(jax.ShapeDtypeStruct((), jnp.float32)).compile()
holder = jnp.ones((2 << 20,), jnp.float32)  # 8 MiB: what the job really holds
start = jnp.full((512, 512), 1 / 512, jnp.float32)
facts = {}
# An array whose computation has not finished: held() answers without waiting for it.
pending = waiting(slow(start))
facts["pending_ready"] = pending.is_ready()
facts["held_pending"] = held(5)
# Still not ready when held() returned: it did not wait for the computation (which waits on the gate).
facts["still_pending"] = not pending.is_ready()
gate.set()
pending.block_until_ready()
del pending
# An array whose computation failed after its dispatch.
failed = failing(slow(start))
deadline = time.monotonic() + 60
while not failed.is_ready() and time.monotonic() < deadline:
    time.sleep(0.01)
facts["listed"] = any(x is failed for x in jax.live_arrays())
facts["deleted"] = failed.is_deleted()
try:
    failed.block_until_ready()
    facts["raises"] = None
except Exception as e:
    facts["raises"] = type(e).__name__
del start
facts["held"] = held(5)
print(json.dumps(facts), flush=True)
"""


def test_an_array_whose_computation_failed_holds_nothing_and_one_in_flight_does_not_block(tmp_path):
    script = tmp_path / "errored.py"
    script.write_text(ERRORED)
    proc = subprocess.run([sys.executable, str(script)], env=devctl_env(1), cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout.splitlines()[-1])
    # In flight: answered at once (not after the 20 s the callback waits), and counted: its buffers are reserved.
    assert facts["pending_ready"] is False and facts["still_pending"] is True, facts
    assert facts["held_pending"]["total_bytes"] == 8 * MIB + 4 * MIB + 1 * MIB, facts["held_pending"]
    # The failed one is a real object of the job that jax lists, not deleted, whose value raises...
    assert (facts["listed"], facts["deleted"], facts["raises"]) == (True, False, "JaxRuntimeError"), facts
    # ...and it holds nothing: the job holds its 8 MiB holder only.
    held = facts["held"]
    assert (held["total_arrays"], held["total_bytes"]) == (1, 8 * MIB), held
    assert held["arrays"][0]["site"] == f"errored.py:{ERRORED_LINE} (<module>)", held


ERRORED_LINE = next(i for i, text in enumerate(ERRORED.splitlines(), 1) if text.startswith("holder = "))


def test_bad_requests_are_one_line_exit_2(tmp_path, runtime):
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    assert_usage_error(run_devctl("memstats", "--top", "5", env=env), "--top needs --pid")
    assert_usage_error(run_devctl("memstats", "--pid", "1", "--top", "0", env=env), "--top must be a whole number")
    assert_usage_error(run_devctl("memstats", "--pid", "abc", "--top", "3", env=env), "--pid must be a process id")
    assert_usage_error(run_devctl("memstats", "--pid", "1", "--top", "3", "--watch", env=env), "--watch is not supported with --top")
    assert_usage_error(run_devctl("memstats", "--postmortem", "--top", "3", env=env), "--postmortem")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        assert_usage_error(run_devctl("memstats", "--pid", str(sleeper.pid), "--top", "3", env=env), f"--pid {sleeper.pid} is not a publishing job")
        # A snapshot whose job never answers (written by hand, for a process that is no publisher): a bounded wait.
        created = psutil.Process(sleeper.pid).create_time()
        _write(runtime, f"{sleeper.pid}.json", _snapshot_doc(sleeper.pid, timestamp=time.time() + 30, create_time=created))
        started = time.monotonic()
        proc = run_devctl("memstats", "--pid", str(sleeper.pid), "--top", "3", "--timeout", "2", env=env)
        assert_usage_error(proc, f"job {sleeper.pid} did not answer within 2 s")
        assert time.monotonic() - started < 30 and not list(runtime.glob("*.top-request*"))  # the request withdrawn
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_damaged_postmortem_is_a_problem_line_never_removed(runtime):
    bad = _write(runtime, "4242-1700000000.postmortem.json", '{"schema": "devctl.memstats.postmortem/1", "pid": "x"}')
    proc = run_devctl("memstats", "--postmortem", env=devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime)))
    assert proc.returncode == 0, proc.stderr
    assert "problem:" in proc.stdout and "4242-1700000000.postmortem.json" in proc.stdout and "Traceback" not in proc.stderr
    assert bad.exists()


GROWING = r"""
import json, sys, time
import jax, jax.numpy as jnp
import devctl.publish

steady = [jnp.ones((1024,), jnp.float32) for _ in range(4)]
kept = []
devctl.publish.publish(interval=0.1)
print(json.dumps({"ready": time.time()}), flush=True)
try:
    while True:
        if sys.argv[1] == "leak":
            kept.append(jnp.ones((64, 1024), jnp.float32))
        else:
            scratch = jnp.ones((64, 1024), jnp.float32)  # a step's temporary: freed on the next turn
        time.sleep(0.15)
except KeyboardInterrupt:
    sys.exit(0)
"""
GROWING_LINE = next(i for i, text in enumerate(GROWING.splitlines(), 1) if "kept.append" in text)


def test_leak_watch_names_a_growing_job_and_its_line_and_not_a_steady_one(tmp_path, runtime):
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    jobs = {mode: PublishingJob(tmp_path, runtime, GROWING, mode, name="grow.py", devices=1) for mode in ("leak", "steady")}
    try:
        proc = run_devctl("memstats", "--watch", "--interval", "0.3", "--count", "16", "--leak-samples", "6", "--json",
                          env=env, cwd=tmp_path, timeout=240)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        docs = [json.loads(line) for line in proc.stdout.splitlines()]
        validate_schema(docs[-1], "memstats")
        flagged = {leak["pid"]: leak for doc in docs for leak in doc["leaks"]}
        assert jobs["steady"].pid not in flagged
        leak = flagged[jobs["leak"].pid]
        assert leak["arrays_to"] > leak["arrays_from"] and leak["bytes_to"] > leak["bytes_from"] and leak["samples"] == 6
        sites = [g["site"] for g in leak["growing_sites"]]
        assert sites and sites[0] == f"grow.py:{GROWING_LINE} (<module>)", leak
        assert leak["growing_sites"][0]["nbytes"] % (64 * 1024 * 4) == 0
        assert not docs[0]["leaks"]  # nothing is said before K samples show it
        text = run_devctl("memstats", "--watch", "--interval", "0.3", "--count", "8", "--leak-samples", "4", env=env, cwd=tmp_path, timeout=240)
        assert f"job {jobs['leak'].pid} (" in text.stdout and "may leak" in text.stdout, text.stdout
    finally:
        for job in jobs.values():
            job.stop()
    assert_usage_error(run_devctl("memstats", "--leak-samples", "5", env=env), "--leak-samples needs --watch")
    assert_usage_error(run_devctl("memstats", "--watch", "--leak-samples", "1", env=env), "--leak-samples must be 0")


def test_distributed_top_gathers_every_processs_jobs_on_process_0(tmp_path):
    """Two processes of a cluster on 127.0.0.1, each seeing one publishing job (its own snapshot directory, as two
    hosts have): process 0 lists both jobs' arrays, largest first, with the process each came from, and sums
    their lines."""
    from test_distributed import finish, free_port

    dirs = [tmp_path / "host0", tmp_path / "host1"]
    jobs = [PublishingJob(tmp_path, d, JOB) for d in dirs]
    try:
        port = free_port()
        procs = []
        for index, d in enumerate(dirs):
            argv = [sys.executable, "-m", "devctl", "memstats", "--distributed", "--coordinator", f"127.0.0.1:{port}",
                    "--num-processes", "2", "--process-id", str(index), "--top", "4", "--json", "--timeout", "30"]  # fmt: skip
            procs.append(subprocess.Popen(argv, env=devctl_env(2, DEVCTL_RUNTIME_DIR=str(d)), cwd=tmp_path,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))  # fmt: skip
        (rc0, out0, err0), (rc1, out1, err1) = finish(procs, timeout=240)
    finally:
        for job in jobs:
            job.stop()
    assert rc0 == 0 and rc1 == 0 and out1 == "", (err0, err1)
    doc = json.loads(out0)
    validate_schema(doc, "memstats.top.distributed")
    assert [[t["pid"] for t in p["tops"]] for p in doc["processes"]] == [[jobs[0].pid], [jobs[1].pid]]
    assert doc["total_bytes"] == 2 * TOTAL and doc["total_arrays"] == 16
    biggest = doc["arrays"][:2]  # each job's 8 MiB array, from both processes
    assert {(a["process_index"], a["pid"], a["array"]["nbytes"]) for a in biggest} == {(0, jobs[0].pid, 8 * MIB), (1, jobs[1].pid, 8 * MIB)}
    sites = {s["site"]: s for s in doc["sites"]}
    assert sites[site("big", "<module>")] == {"site": site("big", "<module>"), "jobs": 2, "arrays": 2, "nbytes": 16 * MIB}


_CUDA_OOM_JOB = r"""
import json, sys
import jax, jax.numpy as jnp
import devctl.publish

holder = jnp.ones((2, 1024, 1024), jnp.float32)
holder.block_until_ready()
devctl.publish.publish(interval=0.2)
print(json.dumps({"platform": jax.devices()[0].platform}), flush=True)
jnp.zeros((1 << 42,), jnp.uint8).block_until_ready()
"""


@pytest.mark.gpu
def test_a_cuda_out_of_memory_names_the_request_and_device_and_not_the_array_that_never_was(tmp_path, runtime):
    """On the GPU, dispatch is asynchronous: the 4 TiB array object exists before its allocation fails, and
    jax.live_arrays() lists it (reference/h200-observations.md section 5). The post-mortem must say what was asked,
    on which device, and hold only the 8 MiB that existed."""
    job = PublishingJob(tmp_path, runtime, _CUDA_OOM_JOB, devices=1)
    _, err = job.proc.communicate(timeout=300)
    assert job.first["platform"] == "gpu", job.first
    assert job.proc.returncode == 1 and "RESOURCE_EXHAUSTED" in err, err
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    doc = json.loads(run_devctl("memstats", "--postmortem", "--pid", str(job.pid), "--json", env=env).stdout)
    validate_schema(doc, "memstats.postmortems")
    (pm,) = doc["postmortems"]
    assert pm["requested_bytes"] == 4398046511104 and pm["requested_device"] == "gpu:0", pm["error"]
    assert pm["arrays"][0]["nbytes"] == 8 * MIB and pm["total_bytes"] < 9 * MIB, pm["arrays"]
    proc = run_devctl("memstats", "--postmortem", "--pid", str(job.pid), env=env)
    assert "asking for 4.0 TiB on gpu:0" in proc.stdout, proc.stdout
