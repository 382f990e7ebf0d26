"""devctl.publish.publish() in real JAX processes, and the reader that `devctl memstats` calls.

Publishers run as subprocesses on CPU JAX with 4 forced devices and arrays of
known sizes; the reader must find exactly those bytes per device. Stale,
corrupt and unsafe snapshot files are built by hand or by killing publishers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import psutil
import pytest
from conftest import devctl_env

from devctl.discovery import publishers as reader
from devctl.discovery.publishers import read_publishers
from devctl.errors import InputRejected
from devctl.model.publishers import SCHEMA

MIB = 1 << 20
START_TIMEOUT_S = 180.0  # JAX start-up on a loaded two-core machine

PUBLISHER_SCRIPT = r"""
import json, os, sys, threading, time
import numpy as np
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import devctl.publish

mode = sys.argv[1]
devs = jax.devices()
# numpy sources, so no temporary array lands on device 0 on the way.
one = jax.device_put(np.zeros(1 << 20, np.uint8), devs[1])
mesh = Mesh(np.array(devs), ("x",))
spread = jax.device_put(np.zeros(4 << 20, np.uint8), NamedSharding(mesh, P("x")))
replicated = jax.device_put(np.zeros(64 << 10, np.uint8), NamedSharding(mesh, P()))
# Per-shard arrays that a host fetch creates: jax.live_arrays() lists them
# beside their parents, and they must not be counted twice.
np.asarray(spread)
[s.data for s in replicated.addressable_shards]
pub = devctl.publish.publish(interval=0.2)
again = devctl.publish.publish(interval=0.2)
threads = [t.name for t in threading.enumerate()].count(devctl.publish.THREAD_NAME)
try:  # before "ready": a SIGINT sent any time after it is a clean exit
    print(json.dumps({"ready": time.time(), "same": pub is again, "threads": threads, "path": pub.path}), flush=True)
    if mode == "exit-now":
        while not os.path.exists(pub.path):
            time.sleep(0.05)
        time.sleep(0.5)  # at least one snapshot taken after the arrays exist
        os._exit(0)  # no atexit: the snapshot file is left behind
    time.sleep(600)
except KeyboardInterrupt:
    sys.exit(0)  # a clean exit: atexit removes the snapshot
"""

UNINITIALIZED_SCRIPT = r"""
import json, os, time
import devctl.publish
pub = devctl.publish.publish(interval=0.1)
while not os.path.exists(pub.path):
    time.sleep(0.05)
time.sleep(0.3)
from jax._src import xla_bridge
print(json.dumps({"initialized": xla_bridge.backends_are_initialized(), "doc": json.load(open(pub.path))}), flush=True)
"""


# --- helpers ----------------------------------------------------------------


def foreground(argv: list[str]) -> list[str]:
    """`argv` run with SIGINT at its default, as a terminal's foreground job has it.

    A test run started in the background of a non-interactive shell (`pytest &`
    in a script, as when two runs share a machine) has SIGINT ignored; children
    inherit that, Python then installs no KeyboardInterrupt handler, and a test
    that sends SIGINT waits for an exit that never comes. The shim resets it and
    execs `argv` in the same process (same pid).
    """
    shim = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", shim, *argv]


class Publisher:
    """A publisher subprocess and the first line it printed."""

    def __init__(self, tmp_path: Path, runtime_dir: Path, mode: str = "sleep") -> None:
        script = tmp_path / "publisher.py"
        script.write_text(PUBLISHER_SCRIPT)
        self.script = str(script)
        env = devctl_env(4, DEVCTL_RUNTIME_DIR=str(runtime_dir))
        self.proc = subprocess.Popen(
            foreground([sys.executable, self.script, mode]),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.info = json.loads(_readline(self.proc, START_TIMEOUT_S))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


def _readline(proc: subprocess.Popen, timeout: float) -> str:
    box: list[str] = []
    t = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    if not box or not box[0]:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"publisher printed nothing (exit {proc.returncode}); stderr:\n{err}")
    return box[0]


def _signal_state(pid: int) -> str:
    """What /proc says of a process's signals: names the culprit when SIGINT did nothing."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return ", ".join(line.strip() for line in f if line.startswith(("State", "SigIgn", "SigBlk")))
    except OSError as e:
        return f"no /proc entry: {e}"


def _wait_for_snapshot(directory: Path, pid: int, after: float, timeout: float = 60.0):
    """The first snapshot of `pid` taken after `after` (unix seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # remove_stale=False: a publisher that lags under load must not lose its file to us.
        report = read_publishers(str(directory), remove_stale=False)
        for snap in report.publishers:
            if snap.pid == pid and snap.timestamp > after:
                return snap, report
        time.sleep(0.1)
    raise AssertionError(f"no fresh snapshot from pid {pid} in {directory}: {sorted(os.listdir(directory))}")


def _wait_for_ticks(pub, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while pub._ticks < n:
        assert time.monotonic() < deadline, f"publisher thread made {pub._ticks} turns in {timeout} s, expected {n}"
        time.sleep(0.02)


def _snapshot_doc(pid: int, *, timestamp: float, interval_s: float = 1.0, create_time: float | None = None) -> dict:
    return {
        "schema": SCHEMA,
        "pid": pid,
        "process_create_time": create_time,
        "command": ["python", "hand-written.py"],
        "hostname": os.uname().nodename,
        "timestamp": timestamp,
        "interval_s": interval_s,
        "devices": [
            {
                "id": 0,
                "platform": "cpu",
                "device_kind": "cpu",
                "process_index": 0,
                "live_bytes": 10,
                "live_arrays": 1,
                "memory_stats": {"bytes_in_use": 10, "bytes_limit": -1},
            }
        ],
        "largest_arrays": [{"shape": [10], "dtype": "uint8", "nbytes": 10, "local_bytes": 10, "devices": [0]}],
        "error": None,
    }


def _write(directory: Path, name: str, content: str | dict) -> Path:
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def runtime_dir(tmp_path: Path) -> Path:
    return tmp_path / "runtime"


@pytest.fixture
def in_process_publisher():
    """Stops any publisher a test started in this process."""
    import devctl.publish

    yield devctl.publish
    devctl.publish.stop()


# --- a real publisher -------------------------------------------------------


def test_publisher_reports_exact_live_bytes_per_device(tmp_path, runtime_dir):
    pub = Publisher(tmp_path, runtime_dir)
    try:
        assert pub.info["same"] is True  # a second publish() returns the running publisher
        assert pub.info["threads"] == 1  # ... and starts no second thread
        snap, report = _wait_for_snapshot(runtime_dir, pub.pid, pub.info["ready"])

        assert report.directory == str(runtime_dir)
        assert report.problems == ()
        by_id = {d.id: d for d in snap.devices}
        assert sorted(by_id) == [0, 1, 2, 3]
        # 4 MiB split over four devices, 64 KiB replicated on each, and 1 MiB on device 1.
        rep = 64 << 10
        expected = {0: MIB + rep, 1: 2 * MIB + rep, 2: MIB + rep, 3: MIB + rep}
        assert {i: d.live_bytes for i, d in by_id.items()} == expected
        assert {i: d.live_arrays for i, d in by_id.items()} == {0: 2, 1: 3, 2: 2, 3: 2}
        assert all(d.platform == "cpu" and d.memory_stats is None for d in snap.devices)  # CPU has no allocator stats

        largest = snap.largest_arrays
        assert [(a.shape, a.dtype, a.nbytes, a.devices) for a in largest] == [
            ((4 * MIB,), "uint8", 4 * MIB, (0, 1, 2, 3)),
            ((MIB,), "uint8", MIB, (1,)),
            ((64 << 10,), "uint8", 64 << 10, (0, 1, 2, 3)),
        ]
        assert largest[2].local_bytes == 4 * (64 << 10)  # a replica on each device
        assert snap.interval_s == 0.2
        assert pub.script in snap.command
        assert snap.error is None
        assert snap.process_create_time == pytest.approx(psutil.Process(pub.pid).create_time(), abs=1.0)
        assert snap.jax_version and snap.jaxlib_version

        # Private: the directory and the file are the user's alone.
        assert runtime_dir.stat().st_mode & 0o777 == 0o700
        assert Path(pub.info["path"]).stat().st_mode & 0o777 == 0o600

        # A clean exit removes the snapshot.
        pub.proc.send_signal(signal.SIGINT)
        try:
            code = pub.proc.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"publisher {pub.pid} still running 60 s after SIGINT ({_signal_state(pub.pid)})") from None
        assert code == 0, pub.proc.stderr.read()
        assert not Path(pub.info["path"]).exists()
    finally:
        pub.close()


@pytest.mark.parametrize("death", ["os._exit", "SIGKILL"])
def test_snapshot_of_dead_process_is_stale_and_removed(tmp_path, runtime_dir, death):
    pub = Publisher(tmp_path, runtime_dir, mode="exit-now" if death == "os._exit" else "sleep")
    try:
        path = Path(pub.info["path"])
        if death == "SIGKILL":
            _wait_for_snapshot(runtime_dir, pub.pid, pub.info["ready"])
            pub.proc.kill()
        pub.proc.wait(60)
        assert path.exists(), "an unclean exit leaves the snapshot behind"

        report = read_publishers(str(runtime_dir))
        assert pub.pid not in [p.pid for p in report.publishers]
        assert report.removed_stale == (pub.pid,)
        assert not path.exists()
        assert report.problems == ()
    finally:
        pub.close()


def test_publisher_never_initializes_backends_itself(tmp_path, runtime_dir):
    # A program that calls publish() before jax.distributed.initialize() must
    # still be able to call it: the thread waits for the program to start JAX.
    script = tmp_path / "early.py"
    script.write_text(UNINITIALIZED_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script)],
        env=devctl_env(4, DEVCTL_RUNTIME_DIR=str(runtime_dir)),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["initialized"] is False
    assert out["doc"]["backend_initialized"] is False
    assert out["doc"]["devices"] == []
    assert out["doc"]["error"] is None


# --- stale, reused and corrupt snapshots ------------------------------------


def test_old_timestamp_is_stale_and_removed(runtime_dir):
    me = os.getpid()
    created = psutil.Process().create_time()
    path = _write(runtime_dir, f"{me}.json", _snapshot_doc(me, timestamp=time.time() - 10, create_time=created))

    report = read_publishers(str(runtime_dir))
    assert report.publishers == ()
    assert report.removed_stale == (me,)
    assert not path.exists()


def test_fresh_hand_written_snapshot_is_listed(runtime_dir):
    me = os.getpid()
    now = time.time()
    _write(runtime_dir, f"{me}.json", _snapshot_doc(me, timestamp=now - 1, create_time=psutil.Process().create_time()))

    report = read_publishers(str(runtime_dir), now=now)
    (snap,) = report.publishers
    assert snap.pid == me
    assert snap.age_s == pytest.approx(1.0)
    assert snap.devices[0].memory_stats == {"bytes_in_use": 10, "bytes_limit": None}  # -1 means unknown
    # Three intervals is the limit; just past it is stale.
    assert read_publishers(str(runtime_dir), now=now + 1.9, remove_stale=False).publishers
    later = read_publishers(str(runtime_dir), now=now + 2.1, remove_stale=False)
    assert later.publishers == () and later.removed_stale == ()
    assert (runtime_dir / f"{me}.json").exists()


def test_sub_second_intervals_are_stale_after_three_seconds(runtime_dir):
    me = os.getpid()
    now = time.time()
    _write(runtime_dir, f"{me}.json", _snapshot_doc(me, timestamp=now, interval_s=0.1))
    # A fast publisher delayed by a busy machine must not flicker out of the list.
    assert read_publishers(str(runtime_dir), now=now + 2.9, remove_stale=False).publishers
    assert read_publishers(str(runtime_dir), now=now + 3.1, remove_stale=False).publishers == ()


def test_reused_pid_is_stale(runtime_dir):
    # Our pid, but a start time from before we started: the writer was another process.
    me = os.getpid()
    path = _write(
        runtime_dir,
        f"{me}.json",
        _snapshot_doc(me, timestamp=time.time(), create_time=psutil.Process().create_time() - 1000),
    )
    report = read_publishers(str(runtime_dir))
    assert report.publishers == ()
    assert report.removed_stale == (me,)
    assert not path.exists()


def test_corrupt_files_are_problems_never_removed_and_others_still_listed(runtime_dir):
    me = os.getpid()
    good = _write(runtime_dir, f"{me}.json", _snapshot_doc(me, timestamp=time.time()))
    half = _write(runtime_dir, "4000001.json", json.dumps(_snapshot_doc(4000001, timestamp=time.time()))[:57])
    other = _write(runtime_dir, "4000002.json", {"schema": "someone.else/3", "pid": 4000002})
    wrong = _write(runtime_dir, "4000003.json", {**_snapshot_doc(4000003, timestamp=time.time()), "devices": "gpu"})
    old = _write(runtime_dir, "4000004.json", "{not json")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    _write(runtime_dir, "notes.txt", "ignored")

    report = read_publishers(str(runtime_dir))
    assert [p.pid for p in report.publishers] == [me]
    problems = {Path(p.path).name: p.reason for p in report.problems}
    assert set(problems) == {half.name, other.name, wrong.name, old.name}
    assert problems[half.name].startswith("not valid JSON")
    assert "someone.else/3" in problems[other.name]
    assert "devices" in problems[wrong.name]
    assert all("\n" not in r for r in problems.values())
    # Nothing proves devctl wrote a damaged file, however old: it is reported, never removed.
    assert half.exists() and other.exists() and wrong.exists() and good.exists() and old.exists()
    assert problems[old.name].startswith("not valid JSON")
    assert report.removed_stale == ()
    again = read_publishers(str(runtime_dir))
    assert {Path(p.path).name for p in again.problems} == {half.name, other.name, wrong.name, old.name}


def test_left_over_temp_file_of_dead_publisher_is_removed(runtime_dir):
    dead = _dead_pid()
    half = json.dumps(_snapshot_doc(dead, timestamp=time.time()), separators=(",", ":"))[:80]
    tmp = _write(runtime_dir, f".{dead}.json.k3x9_q2a.tmp", half)  # as safefs.write_atomic names it
    old_style = _write(runtime_dir, f".{dead}.json.tmp", half)
    mine = _write(runtime_dir, f".{os.getpid()}.json.k3x9_q2a.tmp", half)
    not_ours = _write(runtime_dir, f".{dead}.json.abcdefgh.tmp", "the user's own notes")
    report = read_publishers(str(runtime_dir))
    assert report.publishers == () and report.problems == ()
    assert not tmp.exists() and not old_style.exists()
    assert mine.exists()  # a live writer may be about to rename it
    assert not_ours.exists()  # named like a temp file, but not what devctl writes


def test_missing_directory_is_an_empty_report(tmp_path):
    report = read_publishers(str(tmp_path / "nobody-published"))
    assert report.publishers == () and report.problems == () and report.removed_stale == ()


# --- unsafe directories ---------------------------------------------------------


def test_reader_refuses_directory_open_to_others(runtime_dir):
    runtime_dir.mkdir()
    runtime_dir.chmod(0o755)
    with pytest.raises(InputRejected) as err:
        read_publishers(str(runtime_dir))
    assert str(err.value) == (
        f"refusing to read snapshots from {runtime_dir}: mode 0755 lets other users read it; expected 0700"
    )
    runtime_dir.chmod(0o777)
    with pytest.raises(InputRejected, match="mode 0777 lets other users read and write it"):
        read_publishers(str(runtime_dir))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown to another user")
def test_reader_refuses_directory_of_another_user(runtime_dir):
    runtime_dir.mkdir(mode=0o700)
    os.chown(runtime_dir, 65534, 65534)
    with pytest.raises(InputRejected) as err:
        read_publishers(str(runtime_dir))
    assert str(err.value) == f"refusing to read snapshots from {runtime_dir}: owned by uid 65534, not 0"


def test_env_variable_chooses_the_directory(runtime_dir, monkeypatch):
    runtime_dir.mkdir(mode=0o755)
    monkeypatch.setenv("DEVCTL_RUNTIME_DIR", str(runtime_dir))
    with pytest.raises(InputRejected, match=str(runtime_dir)):
        read_publishers()


def test_default_directory_prefers_own_xdg_runtime_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("DEVCTL_RUNTIME_DIR", raising=False)
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    assert reader.resolve_directory() == str(xdg / "devctl")
    if os.geteuid() == 0:
        os.chown(xdg, 65534, 65534)  # not ours: fall back to /dev/shm or the temp dir
        assert reader.resolve_directory() != str(xdg / "devctl")
        assert reader.resolve_directory().endswith(f"devctl-{os.geteuid()}")


def test_publisher_refuses_unsafe_directory_with_one_warning(runtime_dir, in_process_publisher):
    runtime_dir.mkdir()
    runtime_dir.chmod(0o755)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pub = in_process_publisher.publish(interval=0.05, directory=str(runtime_dir))
        _wait_for_ticks(pub, 5)  # the thread keeps checking and must not warn again
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert msgs == [f"devctl.publish: not publishing snapshots to {runtime_dir}: mode 0755 lets other users read it; expected 0700"]
    assert os.listdir(runtime_dir) == []
    assert pub.running and pub.snapshots_written == 0


# --- the publisher never hurts its host program -----------------------------


class _FakeDevice:
    def __init__(self, id: int, stats) -> None:
        self.id, self.platform, self.device_kind, self.process_index = id, "fake", "Fake Accelerator", 0
        self._stats = stats

    def memory_stats(self):
        if isinstance(self._stats, Exception):
            raise self._stats
        return self._stats


def test_memory_stats_failures_are_recorded_not_raised(runtime_dir, in_process_publisher, monkeypatch):
    import jax

    fake = [
        _FakeDevice(0, RuntimeError("INTERNAL: allocator stats exploded\nsecond line")),
        _FakeDevice(1, {"bytes_in_use": 5, "peak_bytes_in_use": 7, "bytes_limit": -1, "largest_free_block_bytes": -1}),
    ]
    monkeypatch.setattr(jax, "local_devices", lambda *a, **k: fake)

    doc = in_process_publisher.snapshot()
    dev0, dev1 = doc["devices"]
    assert dev0["memory_stats"] is None
    assert dev0["memory_stats_error"] == "RuntimeError: INTERNAL: allocator stats exploded"
    assert dev1["memory_stats"] == {
        "bytes_in_use": 5,
        "peak_bytes_in_use": 7,
        "bytes_limit": None,
        "largest_free_block_bytes": None,
    }
    json.dumps(doc)  # plain JSON

    # Through the thread and the reader too.
    pub = in_process_publisher.publish(interval=0.05, directory=str(runtime_dir))
    snap, _ = _wait_for_snapshot(runtime_dir, os.getpid(), 0)
    assert snap.devices[0].memory_stats_error.startswith("RuntimeError")
    assert snap.devices[1].memory_stats == dev1["memory_stats"]
    assert pub.running


def test_any_failure_in_the_loop_lands_in_the_next_snapshot(runtime_dir, in_process_publisher, monkeypatch):
    import jax

    jax.devices()  # the program has started JAX

    def broken():
        raise RuntimeError("live_arrays is having a bad day")

    monkeypatch.setattr(jax, "live_arrays", broken)
    pub = in_process_publisher.publish(interval=0.05, directory=str(runtime_dir))
    snap, _ = _wait_for_snapshot(runtime_dir, os.getpid(), 0)
    assert snap.error == "reading devices failed: RuntimeError: live_arrays is having a bad day"
    assert pub.running

    monkeypatch.undo()  # the fault clears: the next snapshots are whole again
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        snap, _ = _wait_for_snapshot(runtime_dir, os.getpid(), time.time())
        if snap.error is None:
            break
    assert snap.error is None and snap.devices


def test_second_publish_updates_and_stop_removes_file(runtime_dir, in_process_publisher):
    pub = in_process_publisher.publish(interval=5.0, directory=str(runtime_dir))
    again = in_process_publisher.publish(interval=0.05, directory=str(runtime_dir), top_k=1)
    assert again is pub and pub.interval == 0.05 and pub.top_k == 1
    assert [t.name for t in threading.enumerate()].count(in_process_publisher.THREAD_NAME) == 1
    _wait_for_snapshot(runtime_dir, os.getpid(), time.time())  # the new interval applies at once
    in_process_publisher.stop()
    assert not pub.running
    assert not Path(pub.path).exists()
    assert in_process_publisher.current() is None


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_bad_interval_is_rejected_in_the_caller(bad, in_process_publisher):
    with pytest.raises(ValueError, match="interval must be a positive number of seconds"):
        in_process_publisher.publish(interval=bad)


def test_imports_stay_light():
    code = (
        "import sys, devctl.publish, devctl.discovery.publishers\n"
        "heavy = [m for m in ('jax', 'jaxlib', 'numpy') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=devctl_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_snapshots_create_no_array_objects(in_process_publisher):
    # Asking an array for its shards or buffer pointer creates Python array
    # objects that jax.live_arrays() then lists: the publisher must not
    # change what the program itself sees.
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    dev = jax.devices()[0]
    mesh = Mesh(np.array([dev]), ("x",))
    keep = [jax.device_put(np.zeros((i + 1, 8), np.float32), dev) for i in range(5)]
    keep += [jax.device_put(np.zeros((16, i + 1), np.int8), NamedSharding(mesh, P("x"))) for i in range(5)]
    before = {id(a) for a in jax.live_arrays()}
    for _ in range(3):
        doc = in_process_publisher.snapshot(top_k=3)
    assert {id(a) for a in jax.live_arrays()} == before
    mine = sum((i + 1) * 8 * 4 + 16 * (i + 1) for i in range(5))
    assert doc["devices"][0]["live_bytes"] >= mine
    assert [a["nbytes"] for a in doc["largest_arrays"]] == sorted((a.nbytes for a in jax.live_arrays()), reverse=True)[:3]
    del keep
