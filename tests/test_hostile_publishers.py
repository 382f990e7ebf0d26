"""The publisher snapshot directory under attack: planted links, FIFOs, foreign files, damaged and hostile snapshots, zombies.

Every test builds the real thing (a symlink on disk, a FIFO, a file owned by
another uid, a process that exited and was not reaped) and checks what the
user relies on: devctl deletes nothing it did not write, follows no link it
did not expect, opens nothing but regular files, prints nothing a snapshot's
author could use to drive the terminal, and one bad file costs one problem
line while everything else is still shown.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import psutil
import pytest
from conftest import assert_usage_error, devctl_env, run_devctl, validate_schema

from devctl.discovery.publishers import read_publishers
from devctl.discovery.snapshot_format import MAX_DEVICES, nesting_too_deep
from devctl.errors import InputRejected
from devctl.model.publishers import SCHEMA

START_TIMEOUT_S = 180.0  # JAX start-up on a loaded two-core machine
HOUR = 3600.0
TERMINAL_CONTROLS = ("\x1b", "\x07", "\r", "\x9b", "\u202e", "\u2028")


# --- helpers ----------------------------------------------------------------


@pytest.fixture
def runtime_dir(tmp_path: Path) -> Path:
    d = tmp_path / "runtime"
    d.mkdir(mode=0o700)
    return d


@pytest.fixture
def live():
    """Start real processes that snapshots can name (a snapshot of a dead pid is stale); reaped afterwards."""
    procs: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(["sleep", "600"])
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def snapshot(pid: int, **fields) -> dict:
    """A valid, fresh devctl.publisher/1 document for the running process `pid` (fresh for an hour)."""
    doc = {
        "schema": SCHEMA,
        "pid": pid,
        "process_create_time": psutil.Process(pid).create_time(),
        "command": ["python", "train.py"],
        "hostname": socket.gethostname(),
        "timestamp": time.time(),
        "interval_s": HOUR,  # a slow test run must not see it go stale
        "devices": [
            {"id": 0, "platform": "cpu", "device_kind": "cpu", "process_index": 0, "live_bytes": 4096, "live_arrays": 1,
             "memory_stats": None, "memory_stats_error": None},
        ],  # fmt: skip
        "largest_arrays": [{"shape": [4096], "dtype": "uint8", "nbytes": 4096, "local_bytes": 4096, "devices": [0]}],
        "error": None,
    }
    doc.update(fields)
    return doc


def put(directory: Path, name: str, content: dict | str | bytes, *, age_s: float = 0.0) -> Path:
    path = directory / name
    if isinstance(content, dict):
        content = json.dumps(content)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    if age_s:
        os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def memstats(runtime: Path | None, *args: str, **env: str) -> subprocess.CompletedProcess:
    extra = {"DEVCTL_RUNTIME_DIR": str(runtime)} if runtime is not None else {}
    return run_devctl("memstats", *args, env=devctl_env(1, **extra, **env), timeout=180)


def memstats_json(runtime: Path, *args: str) -> dict:
    proc = memstats(runtime, "--json", *args)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    validate_schema(doc, "memstats")
    return doc


def problems_about(doc: dict, name: str) -> list[str]:
    return [p for p in doc["problems"] if f"/{name}:" in p]


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file() and not p.is_symlink()}


# --- the directory: planted links and directories that hold other things ---


def _victim(tmp_path: Path) -> Path:
    """A directory of the user's own results, with files that look like snapshots by name and are old."""
    victim = tmp_path / "results"
    victim.mkdir(mode=0o700)
    put(victim, "17.json", "epoch,loss\n1,0.9\n", age_s=HOUR)
    put(victim, "42.json", {"schema": "wandb.run/2", "pid": 42}, age_s=HOUR)
    put(victim, "43.json", {"schema": SCHEMA, "pid": 43, "note": "half a snapshot"}, age_s=HOUR)
    return victim


def test_runtime_dir_that_is_a_symlink_is_refused_and_nothing_behind_it_is_touched(tmp_path):
    victim = _victim(tmp_path)
    before = files(victim)
    link = tmp_path / "devctl-1000"
    link.symlink_to(victim)

    proc = memstats(link)
    assert_usage_error(proc, str(link), "symbolic link")
    with pytest.raises(InputRejected, match="symbolic link"):
        read_publishers(str(link))
    assert files(victim) == before


def test_default_dir_planted_as_a_symlink_is_a_problem_line_and_nothing_is_removed(tmp_path, monkeypatch):
    # What another user can do: create the default name first, as a link into the victim's files.
    victim = _victim(tmp_path)
    before = files(victim)
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    (xdg / "devctl").symlink_to(victim)
    env = devctl_env(1, XDG_RUNTIME_DIR=str(xdg))
    env.pop("DEVCTL_RUNTIME_DIR", None)

    proc = run_devctl("memstats", "--json", env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    refused = [p for p in doc["problems"] if p.startswith(f"{xdg / 'devctl'}: refusing to read snapshots")]
    assert len(refused) == 1 and "symbolic link" in refused[0], doc["problems"]
    assert files(victim) == before


def test_own_directory_holding_other_files_keeps_every_one(tmp_path):
    # DEVCTL_RUNTIME_DIR pointed at a real directory of the user's: reading it must cost nothing.
    victim = _victim(tmp_path)
    put(victim, ".17.json.abcdefgh.tmp", "not a snapshot, named like a temp file", age_s=HOUR)
    before = files(victim)

    doc = memstats_json(victim)
    assert files(victim) == before
    for name in ("17.json", "42.json", "43.json"):
        assert len(problems_about(doc, name)) == 1, doc["problems"]
    assert "wandb.run/2" in problems_about(doc, "42.json")[0]
    assert doc["publishers"] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_snapshot_owned_by_another_user_is_reported_not_read_and_not_removed(runtime_dir):
    dead = subprocess.Popen(["true"])
    dead.wait()
    doc = dict(snapshot(os.getpid()), pid=dead.pid, process_create_time=None)
    theirs = put(runtime_dir, f"{dead.pid}.json", doc, age_s=HOUR)
    os.chown(theirs, 65534, 65534)

    report = read_publishers(str(runtime_dir))
    assert theirs.exists()
    assert report.removed_stale == ()
    (problem,) = report.problems
    assert "owned by uid 65534" in problem.reason


# --- the publisher: a planted directory link, a name already taken ----------


@pytest.fixture
def in_process_publisher():
    import devctl.publish

    yield devctl.publish
    devctl.publish.stop()


def _wait_for_ticks(pub, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while pub._ticks < n:
        assert time.monotonic() < deadline, f"publisher thread made {pub._ticks} turns in {timeout} s, expected {n}"
        time.sleep(0.02)


def test_publish_into_a_symlinked_directory_warns_and_writes_nothing(tmp_path, in_process_publisher):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "devctl-link"
    link.symlink_to(target)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pub = in_process_publisher.publish(interval=0.05, directory=str(link))
        _wait_for_ticks(pub, 5)
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and str(link) in msgs[0] and "symbolic link" in msgs[0], msgs
    assert list(target.iterdir()) == []
    assert pub.snapshots_written == 0


@pytest.mark.parametrize("what", ["a user's file", "a FIFO", "a symlink"])
def test_publish_never_replaces_or_removes_a_file_it_did_not_write(tmp_path, runtime_dir, in_process_publisher, what):
    mine = runtime_dir / f"{os.getpid()}.json"
    precious = tmp_path / "precious.txt"
    precious.write_text("results of a week of training\n")
    if what == "a user's file":
        mine.write_text("results of a week of training\n")
    elif what == "a FIFO":
        os.mkfifo(mine)
    else:
        mine.symlink_to(precious)
    before = os.lstat(mine)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pub = in_process_publisher.publish(interval=0.05, directory=str(runtime_dir))
        _wait_for_ticks(pub, 5)  # a FIFO would have hung the thread before its first turn ended
    in_process_publisher.stop()

    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "not a devctl snapshot" in msgs[0], msgs
    after = os.lstat(mine)  # still there after stop(): never removed
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert precious.read_text() == "results of a week of training\n"
    if what == "a user's file":
        assert mine.read_text() == "results of a week of training\n"


def _wait_for_writes(pub, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while pub.snapshots_written < n:
        assert time.monotonic() < deadline, f"{pub.snapshots_written} snapshots written in {timeout} s, expected {n}"
        time.sleep(0.02)


def test_publisher_removes_its_own_file_and_never_one_that_took_its_place(runtime_dir, in_process_publisher):
    pub = in_process_publisher.publish(interval=0.05, directory=str(runtime_dir))
    path = Path(pub.path)
    _wait_for_writes(pub, 1)
    in_process_publisher.stop()
    assert not path.exists()  # its own file: removed

    pub = in_process_publisher.publish(interval=0.05, directory=str(runtime_dir))
    _wait_for_writes(pub, 1)
    # The user puts a file of their own at that name, as an editor saves: a new file renamed over it.
    put(runtime_dir, "incoming.txt", "the user's file now\n")
    os.replace(runtime_dir / "incoming.txt", path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _wait_for_ticks(pub, pub._ticks + 3)
    in_process_publisher.stop()
    assert path.read_text() == "the user's file now\n"  # neither overwritten nor removed
    assert any("not a devctl snapshot" in str(w.message) for w in caught)


# --- inside the directory: links and FIFOs named like snapshots --------------


def test_symlink_named_like_a_snapshot_is_never_followed(tmp_path, runtime_dir, live):
    # If the link were followed, a fresh snapshot of a live job would appear: it must not.
    job = live()
    secret = put(tmp_path, "secret.json", snapshot(job.pid, command=["SECRET-CONTENT"]))
    (runtime_dir / f"{job.pid}.json").symlink_to(secret)
    shadow = runtime_dir / "1.json"
    shadow.symlink_to("/etc/shadow")

    proc = memstats(runtime_dir, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["publishers"] == []
    assert "SECRET-CONTENT" not in proc.stdout
    for name in (f"{job.pid}.json", "1.json"):
        (problem,) = problems_about(doc, name)
        assert "symbolic link" in problem and "not followed" in problem
    if os.access("/etc/shadow", os.R_OK):
        first = Path("/etc/shadow").read_text().split(":")[0]
        assert f"{first}:" not in "".join(doc["problems"])
    assert secret.exists() and shadow.is_symlink()  # nothing removed


def test_fifo_named_like_a_snapshot_does_not_hang_memstats_or_watch(runtime_dir, live):
    job = live()
    put(runtime_dir, f"{job.pid}.json", snapshot(job.pid))
    fifo = runtime_dir / "123.json"
    os.mkfifo(fifo)
    os.mkfifo(runtime_dir / ".124.json.abcdefgh.tmp")

    doc = memstats_json(runtime_dir)  # bounded: run_devctl's timeout fails the test rather than hanging it
    assert [p["pid"] for p in doc["publishers"]] == [job.pid]
    (problem,) = problems_about(doc, "123.json")
    assert "FIFO" in problem

    proc = memstats(runtime_dir, "--watch", "--count", "2", "--interval", "0.1", "--json")
    assert proc.returncode == 0, proc.stderr
    samples = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(samples) == 2
    for sample in samples:
        assert [p["pid"] for p in sample["publishers"]] == [job.pid]
        assert problems_about(sample, "123.json")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # not removed either


# --- what a snapshot says: nothing reaches the terminal raw ----------------------


def test_control_characters_in_a_snapshot_never_reach_the_terminal(runtime_dir, live):
    job = live()
    put(
        runtime_dir,
        f"{job.pid}.json",
        snapshot(
            job.pid,
            command=["python", "train\x1b[2J.py", "\x1b[2J\x1b]0;owned\x07", "--x\nproblem: forged line", "\u202eevil", "\x9b31m"],
            error="boom\r\nnote: forged note",
            devices=[
                {"id": 0, "platform": "cpu", "device_kind": "cpu\x1b[31m", "process_index": 0, "live_bytes": 4096,
                 "live_arrays": 1, "memory_stats": {"bytes\x1b_in_use": 1}, "memory_stats_error": None},
            ],  # fmt: skip
        ),
    )
    put(runtime_dir, "4000001.json", {"schema": "\x1b[31mred\x1b[0m"})  # lands in a problem line

    for args in ((), ("--watch", "--count", "1")):
        proc = memstats(runtime_dir, *args)
        assert proc.returncode == 0, proc.stderr
        for control in TERMINAL_CONTROLS:
            assert control not in proc.stdout, (control, proc.stdout)
        lines = proc.stdout.splitlines()
        assert not any(line.startswith(("problem: forged", "note: forged")) for line in lines)
        assert "train\\x1b[2J.py" in proc.stdout  # the job's program, shown escaped: the user sees what the job wrote
        assert sum(line.startswith("problem:") and "4000001.json" in line for line in lines) == 1

    doc = memstats_json(runtime_dir)
    (pub,) = doc["publishers"]
    assert pub["command"][2] == "\\x1b[2J\\x1b]0;owned\\x07"
    assert pub["command"][3] == "--x\\x0aproblem: forged line"
    assert pub["error"] == "boom\\x0d\\x0anote: forged note"


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("live_bytes", -5, "devices[0].live_bytes is -5"),
        ("live_bytes", 1 << 63, "devices[0].live_bytes is 9223372036854775808"),
        ("live_bytes", 1e3, "devices[0].live_bytes is 1000.0, not an integer"),
        ("live_arrays", "many", "devices[0].live_arrays is 'many'"),
        ("id", -7, "devices[0].id is -7"),
        ("platform", "cpu:0", "devices[0].platform is 'cpu:0', not a platform name"),
        ("memory_stats", {"bytes_in_use": 1 << 64}, "devices[0].memory_stats.bytes_in_use is 18446744073709551616"),
        ("memory_stats", {"bytes_in_use": -9}, "devices[0].memory_stats.bytes_in_use is -9"),
        ("shape", [-1], "largest_arrays[0].shape[0] is -1"),
        ("nbytes", 1 << 70, "largest_arrays[0].nbytes is 1180591620717411303424, out of range"),
        ("timestamp", float("nan"), "NaN is not a number JSON allows"),
        ("interval_s", float("inf"), "Infinity is not a number JSON allows"),
        ("interval_s", -1, "interval_s is -1.0, not a positive number"),
        ("pid", 1 << 40, "pid is 1099511627776, out of range"),
    ],
)
def test_absurd_values_make_the_snapshot_invalid_not_figures(runtime_dir, live, field, value, needle):
    job = live()
    doc = snapshot(job.pid)
    if field in ("shape", "nbytes"):
        doc["largest_arrays"][0][field] = value
    elif field in ("timestamp", "interval_s", "pid"):
        doc[field] = value
    else:
        doc["devices"][0][field] = value
    path = put(runtime_dir, f"{job.pid}.json", doc)

    report = read_publishers(str(runtime_dir))
    assert report.publishers == ()
    (problem,) = report.problems
    assert needle in problem.reason, problem.reason
    assert path.exists()  # invalid is not provably ours: never removed


def test_an_invalid_figure_never_reaches_the_table(runtime_dir, live):
    job = live()
    doc = snapshot(job.pid)
    doc["devices"][0]["live_bytes"] = -5
    doc["devices"][0]["id"] = -7
    put(runtime_dir, f"{job.pid}.json", doc)
    proc = memstats(runtime_dir)
    assert proc.returncode == 0, proc.stderr
    assert "cpu:-7" not in proc.stdout and "-5 B" not in proc.stdout
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("problem:") and f"{job.pid}.json" in line]
    assert "not a valid snapshot" in line


# --- damaged snapshots: one problem line, everything else still shown --------


def _doc_text(pid: int, **replace: str) -> str:
    """A valid snapshot's JSON text with some values replaced by raw JSON text (what json.dumps cannot write)."""
    doc = snapshot(pid)
    markers = {key: f"@@{key}@@" for key in replace}
    for key, marker in markers.items():
        if key == "shape":
            doc["largest_arrays"][0]["shape"] = marker
        elif key == "live_bytes":
            doc["devices"][0]["live_bytes"] = marker
        else:
            doc[key] = marker
    text = json.dumps(doc)
    for key, marker in markers.items():
        text = text.replace(json.dumps(marker), replace[key])
    return text


DAMAGED = {
    "a 200,000-deep array": lambda pid: _doc_text(pid, devices="[" * 200_000 + "]" * 200_000),
    "200,000 unclosed brackets": lambda pid: '{"schema": "devctl.publisher/1", "devices": ' + "[" * 200_000,
    "a 200,000-deep object": lambda pid: _doc_text(pid, error='{"a":' * 200_000 + "1" + "}" * 200_000),
    "Infinity as the timestamp": lambda pid: _doc_text(pid, timestamp="Infinity"),
    "a 5000-digit integer": lambda pid: _doc_text(pid, live_bytes="9" * 5000),
    "a shape of [Infinity]": lambda pid: _doc_text(pid, shape="[Infinity]"),
    "1e400": lambda pid: _doc_text(pid, timestamp="1e400"),
    "bytes that are not UTF-8": lambda pid: _doc_text(pid).encode()[:-1] + b"\xff\xfe}",
    "20,000 devices": lambda pid: _doc_text(pid, devices=json.dumps(snapshot(pid)["devices"] * 20_000)),
}


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_one_damaged_snapshot_is_one_problem_and_the_other_jobs_stay_listed(runtime_dir, live, damage):
    good, bad = live(), live()
    put(runtime_dir, f"{good.pid}.json", snapshot(good.pid))
    content = DAMAGED[damage](bad.pid)
    damaged = put(runtime_dir, f"{bad.pid}.json", content)

    report = read_publishers(str(runtime_dir))
    assert [p.pid for p in report.publishers] == [good.pid]
    (problem,) = report.problems
    assert problem.path == str(damaged)
    assert "\n" not in problem.reason and len(problem.reason) < 300
    assert damaged.exists()


def test_damaged_snapshots_under_watch_cost_one_line_each_and_hide_no_device(runtime_dir, live):
    good, deep, infinite = live(), live(), live()
    put(runtime_dir, f"{good.pid}.json", snapshot(good.pid))
    put(runtime_dir, f"{deep.pid}.json", DAMAGED["a 200,000-deep array"](deep.pid))
    put(runtime_dir, f"{infinite.pid}.json", DAMAGED["a shape of [Infinity]"](infinite.pid))

    proc = memstats(runtime_dir, "--watch", "--count", "2", "--interval", "0.1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    samples = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(samples) == 2
    for sample in samples:
        validate_schema(sample, "memstats")
        assert [p["pid"] for p in sample["publishers"]] == [good.pid]
        assert [d["key"] for d in sample["devices"] if d["source"] == "jax"] == ["cpu:0"]
        assert len(problems_about(sample, f"{deep.pid}.json")) == 1
        assert len(problems_about(sample, f"{infinite.pid}.json")) == 1


def test_largest_snapshot_allowed_is_still_listed(runtime_dir, live):
    job = live()
    devices = [dict(snapshot(job.pid)["devices"][0], id=i) for i in range(MAX_DEVICES)]
    put(runtime_dir, f"{job.pid}.json", snapshot(job.pid, devices=devices))
    (snap,) = read_publishers(str(runtime_dir)).publishers
    assert len(snap.devices) == MAX_DEVICES


def test_brackets_inside_strings_are_not_nesting(runtime_dir, live):
    # A command line may hold any number of brackets (python -c "x[0][1]..."): it is text, not depth.
    job = live()
    command = ["python", "-c", "[" * 5000 + "{" * 5000 + '\\"[' * 100]
    put(runtime_dir, f"{job.pid}.json", snapshot(job.pid, command=command))
    (snap,) = read_publishers(str(runtime_dir)).publishers
    assert snap.command[2].startswith("[[[[")
    assert not nesting_too_deep(json.dumps({"a": [[[{"b": "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"}]]]}).encode())
    assert nesting_too_deep(b'{"a": ' + b"[" * 17 + b"]" * 17 + b"}")


# --- exited jobs not yet reaped: zombies -------------------------------------


def _wait_until_zombie(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"pid {proc.pid} is {psutil.Process(proc.pid).status()} after {timeout} s, not a zombie"
        time.sleep(0.05)


def test_hand_written_snapshot_of_a_zombie_is_stale_and_removed(runtime_dir):
    child = subprocess.Popen(["sleep", "0.2"])
    try:
        doc = snapshot(child.pid)  # create_time read while it runs
        path = put(runtime_dir, f"{child.pid}.json", doc)
        _wait_until_zombie(child)  # exited; we, its parent, have not waited
        report = read_publishers(str(runtime_dir))
        assert report.publishers == ()
        assert report.removed_stale == (child.pid,)
        assert not path.exists()
    finally:
        child.wait()


ZOMBIE_JOB = r"""
import os, sys, time
import jax, jax.numpy as jnp
import devctl.publish
x = jnp.zeros(1024)
pub = devctl.publish.publish(interval=0.1)
while not os.path.exists(pub.path):
    time.sleep(0.02)
print(pub.path, flush=True)
os._exit(0)  # exits at once, file left behind; the parent (the test) does not wait
"""


def _readline(proc: subprocess.Popen, timeout: float) -> str:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not box or not box[0]:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"publishing job (pid {proc.pid}) printed nothing in {timeout} s (exit {proc.returncode}); stderr:\n{err}")
    return box[0]


def test_real_publisher_that_exited_but_is_not_reaped_is_not_listed(tmp_path, runtime_dir):
    script = tmp_path / "job.py"
    script.write_text(ZOMBIE_JOB)
    job = subprocess.Popen(
        [sys.executable, str(script)],
        env=devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime_dir)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        path = Path(_readline(job, START_TIMEOUT_S).strip())
        _wait_until_zombie(job)
        assert path.exists(), job.stderr.read()

        doc = memstats_json(runtime_dir)
        assert job.pid not in [p["pid"] for p in doc["publishers"]]
        assert not any(p["source"] == "publisher" and p["pid"] == job.pid for p in doc["processes"])
        assert not path.exists()  # its own snapshot, its process gone: removed
    finally:
        job.kill()
        job.wait()
        job.stdout.close()
        job.stderr.close()
