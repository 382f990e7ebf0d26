"""`devctl memstats` end to end: a real publishing JAX job, watch mode, faults, Ctrl-C, bad input."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from conftest import (
    assert_usage_error,
    devctl_env,
    run_devctl,
    run_json,
    validate_schema,
)
from hosttrees import tpu_v5e_host

from devctl.model.devices import DeviceRef
from devctl.model.memstats import MemDevice

MIB = 1 << 20
START_TIMEOUT_S = 180.0  # JAX start-up on a loaded two-core machine


def foreground(argv: list[str]) -> list[str]:
    """`argv` run with SIGINT at its default, as a terminal's foreground job has it.

    A test run started in the background of a non-interactive shell (`pytest &`
    in a script, as when two runs share a machine) has SIGINT ignored; children
    inherit that, Python then installs no KeyboardInterrupt handler (and devctl,
    like every Unix program, keeps an ignored SIGINT ignored), so a test that
    sends SIGINT waits for an exit that never comes. The shim resets it and
    execs `argv` in the same process (same pid).
    """
    shim = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", shim, *argv]


def readline(proc: subprocess.Popen, timeout: float, what: str) -> str:
    """The next line `proc` prints, waited for at most `timeout` s; the failure names the process."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not box or not box[0]:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"{what} (pid {proc.pid}) printed no line in {timeout} s (exit {proc.returncode}); stderr:\n{err}")
    return box[0]


def signal_state(pid: int) -> str:
    """What /proc says of a process's signals: names the culprit when SIGINT did nothing."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return ", ".join(line.strip() for line in f if line.startswith(("State", "SigIgn", "SigBlk")))
    except OSError as e:
        return f"no /proc entry: {e}"


@pytest.fixture
def runtime_dir(tmp_path):
    d = tmp_path / "runtime"
    d.mkdir(mode=0o700)
    return d


@pytest.fixture
def publisher(tmp_path, runtime_dir):
    """A real JAX job on 4 CPU devices holding known arrays and publishing every 0.2 s."""
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            import jax, jax.numpy as jnp
            import devctl.publish
            devs = jax.devices()
            a = jax.device_put(jnp.zeros(3 * (1 << 20), jnp.uint8), devs[1])   # 3 MiB on device 1
            b = jax.device_put(jnp.zeros(1 << 20, jnp.uint8), devs[2])         # 1 MiB on device 2
            devctl.publish.publish(interval=0.2)
            print("ready", flush=True)
            time.sleep(120)
            """
        )
    )
    env = devctl_env(devices=4, DEVCTL_RUNTIME_DIR=str(runtime_dir))
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    assert readline(proc, START_TIMEOUT_S, "the publishing job").strip() == "ready"
    deadline = time.time() + 30
    while not list(runtime_dir.glob(f"{proc.pid}.json")) and time.time() < deadline:
        time.sleep(0.1)
    yield proc, env
    proc.kill()
    proc.wait()


def _publisher_rows(doc: dict, pid: int) -> dict[str, dict]:
    return {p["device"]: p for p in doc["processes"] if p["source"] == "publisher" and p["pid"] == pid}


def test_memstats_reports_a_publishing_jobs_bytes_per_device(publisher):
    proc, env = publisher
    doc = run_json("memstats", env=env)
    validate_schema(doc, "memstats")
    rows = _publisher_rows(doc, proc.pid)
    assert rows["cpu:1"]["used_bytes"] == 3 * MIB
    assert rows["cpu:2"]["used_bytes"] == 1 * MIB
    assert rows["cpu:0"]["used_bytes"] == 0
    assert "job.py" in rows["cpu:1"]["command"]
    assert [p["pid"] for p in doc["publishers"]] == [proc.pid]
    assert {d["key"] for d in doc["devices"] if d["source"] == "jax"} == {"cpu:0", "cpu:1", "cpu:2", "cpu:3"}
    assert doc["headroom"]["min_bytes"] is None and "CPU" in doc["headroom"]["reason"]


def test_device_filter_keeps_one_device(publisher):
    proc, env = publisher
    doc = run_json("memstats", "--device", "1", env=env)
    assert [d["key"] for d in doc["devices"]] == ["cpu:1"]
    assert set(_publisher_rows(doc, proc.pid)) == {"cpu:1"}


def test_device_grammar_normalises_and_combines(runtime_dir):
    # The grammar of bench transfer --device: N or platform:N, leading zeros and case ignored, comma lists, all.
    env = devctl_env(devices=4, DEVCTL_RUNTIME_DIR=str(runtime_dir))
    doc = run_json("memstats", "--device", "01,CPU:2", "--device", "cpu:1", env=env)
    assert [d["key"] for d in doc["devices"]] == ["cpu:1", "cpu:2"]
    doc = run_json("memstats", "--device", "all", env=env)
    assert [d["key"] for d in doc["devices"]] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]


def _mem_device(key: str, platform: str) -> MemDevice:
    return MemDevice(key, "jax", platform, None, "kind", None, None, None, None, None, None, None, None, None)


@pytest.mark.parametrize(
    "wanted, key, platform, accelerators, expected",
    [
        (DeviceRef(1), "cpu:1", "cpu", False, True),
        (DeviceRef(1), "cpu:1", "cpu", True, False),  # a bare id is the accelerator's where there is one
        (DeviceRef(1), "gpu:1", "gpu", True, True),
        (DeviceRef(1), "tpu-chip:1", "tpu", False, False),  # never a chip JAX does not use
        (DeviceRef(1, "cpu"), "cpu:1", "cpu", True, True),
        (DeviceRef(1, "cuda"), "gpu:1", "gpu", True, True),  # JAX calls a CUDA device's platform gpu
        (DeviceRef(1, "gpu"), "cuda:1", "cuda", True, True),
        (DeviceRef(1, "rocm"), "cuda:1", "cuda", True, False),
        (DeviceRef(1, "cuda"), "cpu:1", "cpu", False, False),
        (DeviceRef(0, "tpu-chip"), "tpu-chip:0", "tpu", False, True),
        (DeviceRef(3, "nvml"), "nvml:3", "nvidia", True, True),
        (DeviceRef(3, "nvml"), "gpu:3", "gpu", True, False),
    ],
)
def test_device_matching(wanted, key, platform, accelerators, expected):
    from devctl.collect.memstats import _matches_one

    assert _matches_one(_mem_device(key, platform), wanted, accelerators) is expected


def test_table_shows_the_publisher(publisher):
    proc, env = publisher
    out = run_devctl("memstats", env=env)
    assert out.returncode == 0, out.stderr
    assert str(proc.pid) in out.stdout and "3.0 MiB" in out.stdout


def test_watch_json_yields_one_parseable_line_per_sample(runtime_dir):
    env = devctl_env(devices=2, DEVCTL_RUNTIME_DIR=str(runtime_dir))
    proc = run_devctl("memstats", "--watch", "--count", "3", "--interval", "0.1", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3
    docs = [json.loads(line) for line in lines]
    for doc in docs:
        validate_schema(doc, "memstats")
    assert docs[0]["timestamp"] < docs[1]["timestamp"] < docs[2]["timestamp"]


def test_watch_plain_prints_one_table_per_sample(runtime_dir):
    env = devctl_env(devices=1, DEVCTL_RUNTIME_DIR=str(runtime_dir))
    proc = run_devctl("memstats", "--watch", "--count", "2", "--interval", "0.1", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("headroom:") == 2


def test_watch_survives_a_corrupt_snapshot_and_a_publisher_that_exits(publisher, runtime_dir):
    proc, env = publisher
    (runtime_dir / "999999.json").write_text('{"schema": "devctl.publisher/1", "pid": ')  # half-written
    watch = subprocess.Popen(
        [sys.executable, "-m", "devctl", "memstats", "--watch", "--count", "8", "--interval", "0.5", "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    first = json.loads(readline(watch, START_TIMEOUT_S, "devctl memstats --watch"))
    assert any("999999.json" in p for p in first["problems"])
    assert proc.pid in [p["pid"] for p in first["publishers"]]
    proc.kill()  # the job dies without cleaning up
    proc.wait()
    rest = [json.loads(line) for line in watch.stdout]
    assert watch.wait(timeout=60) == 0, watch.stderr.read()
    assert len(rest) == 7
    assert proc.pid not in [p["pid"] for p in rest[-1]["publishers"]]
    assert not (runtime_dir / f"{proc.pid}.json").exists()  # stale: removed
    # The job's going is said once, in the sample where it went: a person watching sees why its row vanished.
    said = [p for doc in rest for p in doc["problems"] if p.startswith(f"job {proc.pid} ")]
    assert len(said) == 1 and said[0].endswith(" exited"), [doc["problems"] for doc in rest]


def test_watch_piped_says_when_each_sample_was_taken_and_that_a_job_exited(publisher):
    proc, env = publisher
    watch = subprocess.Popen(
        [sys.executable, "-m", "devctl", "memstats", "--watch", "--count", "6", "--interval", "0.5"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    first = readline(watch, START_TIMEOUT_S, "devctl memstats --watch")
    assert re.fullmatch(r"sample 1 at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n", first), first
    proc.kill()
    proc.wait()
    out, err = watch.communicate(timeout=60)
    assert watch.returncode == 0, err
    stamps = re.findall(r"^sample (\d+) at ", first + out, re.M)
    assert stamps == ["1", "2", "3", "4", "5", "6"]
    assert len(re.findall(rf"^problem: job {proc.pid} \(.*job\.py.*\) exited$", out, re.M)) == 1, out


def test_watch_csv_is_one_log_under_one_header(runtime_dir):
    env = devctl_env(devices=2, DEVCTL_RUNTIME_DIR=str(runtime_dir))
    proc = run_devctl("memstats", "--watch", "--count", "3", "--interval", "0.1", "--csv", env=env)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.reader(io.StringIO(proc.stdout)))
    header, data = rows[0], rows[1:]
    assert header[:3] == ["timestamp", "hostname", "device"]
    assert [r[2] for r in data] == ["cpu:0", "cpu:1"] * 3  # two devices, three samples, one header
    times = sorted({float(r[0]) for r in data})
    assert len(times) == 3
    assert all(int(r[header.index("bytes_limit")] or 0) >= 0 for r in data)


def test_sigint_ends_watch_with_130_and_no_traceback(runtime_dir):
    env = devctl_env(devices=1, DEVCTL_RUNTIME_DIR=str(runtime_dir))
    watch = subprocess.Popen(
        foreground([sys.executable, "-m", "devctl", "memstats", "--watch", "--interval", "0.2", "--json"]),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    json.loads(readline(watch, START_TIMEOUT_S, "devctl memstats --watch"))  # running: the watch loop has begun
    watch.send_signal(signal.SIGINT)
    try:
        _, err = watch.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        state = signal_state(watch.pid)
        watch.kill()
        watch.communicate()
        raise AssertionError(f"devctl memstats --watch (pid {watch.pid}) still running 30 s after SIGINT ({state})") from None
    assert watch.returncode == 130, err
    assert "Traceback" not in err


def test_tpu_chips_show_hbm_and_holder(tmp_path, runtime_dir):
    host = tpu_v5e_host(tmp_path, chips=2)
    host.process(777, ["python3", "train.py"], fds={3: "/dev/vfio/5"})
    env = devctl_env(devices=1, DEVCTL_RUNTIME_DIR=str(runtime_dir))
    doc = run_json("memstats", "--host-root", str(host.path), env=env)
    chips = {d["key"]: d for d in doc["devices"] if d["source"] == "tpu-pci"}
    assert chips["tpu-chip:0"]["hbm_bytes"] == 16 << 30
    assert chips["tpu-chip:0"]["holders"][0]["pid"] == 777
    assert chips["tpu-chip:1"]["holders"] == []
    assert any(p["source"] == "tpu" and p["pid"] == 777 for p in doc["processes"])


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--interval", "0"], "--interval"),
        (["--interval", "-1"], "--interval"),
        (["--interval", "86400"], "--interval"),
        (["--interval", "fast"], "fast"),
        (["--count", "0"], "--count"),
        (["--count", "-2"], "--count"),
        (["--device", "gpu0"], "gpu0"),
        (["--device", "7"], "'7'"),
        # Empty is never "every device": a script whose variable came out empty must hear of it.
        (["--device", ""], "--device is empty"),
        (["--device", "0,"], "--device '0,' has an empty entry"),
        (["--device", " , "], "--device is empty"),
        (["--device", "cpu:-7"], "'cpu:-7'"),
        (["--device", ":1"], "':1' is not a device id"),
        (["--device", "warp:1"], "'warp:1' names no platform"),
        # A platform this machine's device 0 is not on names no device, as an id it lacks does.
        (["--device", "cuda:0"], "'cuda:0' matches no device"),
        # Given without --watch, --interval would be ignored: the user expected a live view.
        (["--interval", "0.5"], "--interval needs --watch"),
        (["--interval", "fast", "--watch"], "fast"),
        (["--distributed", "--interval", "2"], "--interval is not supported with --distributed"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle, runtime_dir):
    env = devctl_env(devices=2, DEVCTL_RUNTIME_DIR=str(runtime_dir))
    assert_usage_error(run_devctl("memstats", *args, env=env), needle)


def test_snapshot_directory_open_to_others_is_refused(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o755)
    env = devctl_env(devices=1, DEVCTL_RUNTIME_DIR=str(d))
    assert_usage_error(run_devctl("memstats", env=env), str(d))


def test_snapshot_directory_of_another_user_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    env = devctl_env(devices=1, DEVCTL_RUNTIME_DIR=str(d))
    assert_usage_error(run_devctl("memstats", env=env), "65534")


@pytest.mark.gpu
def test_gpu_driver_view_and_allocator_limit():
    doc = run_json("memstats", env=devctl_env())
    gpus = [d for d in doc["devices"] if d["platform"] in ("cuda", "gpu")]
    assert gpus, "no CUDA device in memstats"
    assert all(d["driver"] and d["driver"]["total_bytes"] > 0 for d in gpus)
    assert all(d["bytes_limit"] and d["bytes_limit"] > 0 for d in gpus)
    assert doc["headroom"]["min_bytes"] is not None


_HOLDER = "import sys, jax.numpy as jnp; jnp.ones(10).block_until_ready(); print('ready', flush=True); sys.stdin.readline()"
# Tries to allocate the given numbers of bytes in turn, in one new process with JAX's defaults; prints what worked.
_TRY = """
import json, sys
import jax.numpy as jnp
got = {}
for n in map(int, sys.argv[1:]):
    try:
        x = jnp.zeros((n,), jnp.uint8)
        x.block_until_ready()
        del x
        got[n] = True
    except Exception as e:
        got[n] = "RESOURCE_EXHAUSTED" in str(e) and "oom"
print(json.dumps(got))
"""


@pytest.mark.gpu
def test_a_gpu_another_process_holds_is_usable_as_far_as_the_driver_has_memory_free():
    """reference/h200-observations.md section 4: another process held 106 GiB of the 140 GiB; bytes_limit still said
    104.9 GiB while a second process got about 30 GiB. Here a first process preallocates JAX's default share; what
    memstats calls usable must be the driver's free, a new process must get most of it, and not 2 GiB more."""
    env = devctl_env(1)
    env.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)
    env.pop("XLA_PYTHON_CLIENT_MEM_FRACTION", None)
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        doc = run_json("memstats", env=env)
        gpu = next(d for d in doc["devices"] if d["platform"] in ("cuda", "gpu"))
        free = gpu["driver"]["free_bytes"]
        assert gpu["usable_bound"] == "driver" and gpu["usable_bytes"] == free < gpu["bytes_limit"], gpu
        assert gpu["in_use_source"] == "driver" and gpu["in_use_bytes"] == gpu["driver"]["used_bytes"]
        assert doc["headroom"]["bound"] == "driver" and doc["headroom"]["min_bytes"] == free
        most, more = int(free * 0.8), free + (2 << 30)
        tried = subprocess.run([sys.executable, "-c", _TRY, str(most), str(more)], env=env, capture_output=True, text=True, timeout=300)
        got = json.loads(tried.stdout.strip().splitlines()[-1])
        assert got == {str(most): True, str(more): "oom"}, tried.stderr[-2000:]
    finally:
        holder.stdin.close()
        holder.wait(60)
