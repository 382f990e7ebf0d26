"""Hardening, second round (issue 23): output that stays bounded, and damaged post-mortems in the user's own
directory.

Every scenario is the real thing: snapshot and post-mortem files written to a private directory, named after
running processes, and `devctl` run as a user runs it (a subprocess). What the user relies on:

- `memstats --json` of three 1.25 MB snapshots (1,024 devices and a long command line each, under the 2 MiB
  cap) printed 2,147,479,552 bytes of cut JSON and exited 0: a command line is now cut where it enters, the
  bytes read per refresh are bounded, and a document or stream record is written whole or is an error;
- a post-mortem whose timestamp is Infinity, NaN, 1e300 or -1e18, that nests 100,000 deep, asks for -5 bytes or
  belongs to another user is one `problem:` line, never a traceback, never a figure; the 100 read are the
  newest, whatever their names say.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import assert_usage_error, devctl_env, run_devctl, validate_schema

from devctl.discovery import publishers as publishers_module
from devctl.discovery.publishers import read_publishers
from devctl.discovery.snapshot_format import COMMAND_CHARS, readable_command
from devctl.model.publishers import SCHEMA

HOUR = 3600.0
MB = 1_000_000
POSTMORTEM = "devctl.memstats.postmortem/1"


# --- helpers ----------------------------------------------------------------


@pytest.fixture
def runtime_dir(tmp_path: Path) -> Path:
    d = tmp_path / "runtime"
    d.mkdir(mode=0o700)
    return d


def _sleepers(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(["sleep", "900"]) for _ in range(n)]


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


def snapshot(pid: int, *, devices: int = 1, command: list[str] | None = None) -> dict:
    """A valid, fresh devctl.publisher/1 document for the running process `pid`."""
    stats = {"bytes_in_use": 1000, "peak_bytes_in_use": 2000, "bytes_limit": 1 << 30, "pool_bytes": 1 << 29, "num_allocs": 5,
             "largest_alloc_size": 100, "bytes_reserved": 0, "peak_bytes_reserved": 0, "largest_free_block_bytes": 10}  # fmt: skip
    return {
        "schema": SCHEMA,
        "pid": pid,
        "process_create_time": psutil.Process(pid).create_time(),
        "command": command if command is not None else ["python", "train.py"],
        "hostname": socket.gethostname(),
        "timestamp": time.time(),
        "interval_s": HOUR,  # a slow test run must not see it go stale
        "jax_version": "0.4.36",
        "jaxlib_version": "0.4.36",
        "backend_initialized": True,
        "devices": [
            {"id": i, "platform": "cpu", "device_kind": "cpu", "process_index": 0, "live_bytes": 4096, "live_arrays": 1,
             "memory_stats": stats, "memory_stats_error": None}
            for i in range(devices)
        ],  # fmt: skip
        "largest_arrays": [{"shape": [4096], "dtype": "uint8", "nbytes": 4096, "local_bytes": 4096, "devices": [0]}],
        "snapshot_s": 0.01,
        "error": None,
    }


def big_snapshot(pid: int) -> bytes:
    """The issue's snapshot: 1,024 devices with allocator stats and a command line that fills it to 1.25 MB."""
    doc = snapshot(pid, devices=1024, command=["python", "train.py"])
    room = 1_250_000 - len(json.dumps(doc))
    doc["command"] += ["--flag=" + "x" * 3993] * (room // 4004)
    raw = json.dumps(doc).encode()
    assert 1_240_000 < len(raw) <= 1_250_000 < publishers_module.MAX_FILE_BYTES
    return raw


def put(directory: Path, name: str, content: dict | str | bytes, *, mtime: float | None = None) -> Path:
    path = directory / name
    if isinstance(content, dict):
        content = json.dumps(content)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def postmortem(pid: int, **fields) -> dict:
    """A valid post-mortem, as the job's publisher writes it."""
    doc = {
        "schema": POSTMORTEM,
        "pid": pid,
        "command": ["python", "oom.py"],
        "hostname": socket.gethostname(),
        "timestamp": time.time(),
        "error": "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 4398046511104 bytes.",
        "requested_bytes": 4398046511104,
        "requested_device": None,
        "requested_exact": True,
        "requested_scope": "allocation",
        "requested_memory": None,
        "free_bytes": None,
        "capacity_bytes": None,
        "devices": [{"device": "cpu:0", "memory_stats": None}],
        "total_arrays": 1,
        "total_bytes": 8192,
        "arrays": [{"nbytes": 8192, "shape": [2048], "dtype": "float32", "sharding": "SingleDeviceSharding(cpu:0)",
                    "memory_kind": "device", "devices": ["cpu:0"], "site": "oom.py:7 (main)"}],  # fmt: skip
        "sites": [{"site": "oom.py:7 (main)", "arrays": 1, "nbytes": 8192}],
    }
    doc.update(fields)
    return doc


def with_raw(doc: dict, field: str, raw: str) -> str:
    """`doc` as JSON text with one top-level value replaced by raw JSON text (what json.dumps will not write)."""
    marker = f"@@{field}@@"
    return json.dumps(dict(doc, **{field: marker})).replace(json.dumps(marker), raw)


def postmortems(runtime: Path, *args: str) -> subprocess.CompletedProcess:
    return run_devctl("memstats", "--postmortem", *args, env=devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime)), timeout=180)


def postmortems_json(runtime: Path, *args: str) -> dict:
    proc = postmortems(runtime, "--json", *args)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    validate_schema(doc, "memstats.postmortems")
    return doc


def problem_lines(stdout: str, name: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("problem:") and f"/{name}:" in line]


# --- bounded output: three 1.25 MB snapshots ------------------------------------------------------


@pytest.fixture(scope="module")
def three_big_jobs(tmp_path_factory):
    """Three running processes, each with the issue's 1.25 MB snapshot of 1,024 devices and a long command line."""
    directory = tmp_path_factory.mktemp("big") / "runtime"
    directory.mkdir(mode=0o700)
    jobs = _sleepers(3)
    for job in jobs:
        put(directory, f"{job.pid}.json", big_snapshot(job.pid))
    yield directory, jobs
    _stop(jobs)


def test_memstats_json_of_three_big_snapshots_is_valid_and_bounded(three_big_jobs):
    directory, jobs = three_big_jobs
    proc = run_devctl("memstats", "--json", env=devctl_env(1, DEVCTL_RUNTIME_DIR=str(directory)), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    # Was 2,147,479,552 bytes of cut JSON (the command line on every one of 3,072 rows): now the size of the
    # devices the jobs published, with each command line cut to what a person reads.
    assert len(proc.stdout) < 8 * MB, len(proc.stdout)
    doc = json.loads(proc.stdout)
    validate_schema(doc, "memstats")
    assert sorted(p["pid"] for p in doc["publishers"]) == sorted(j.pid for j in jobs)
    assert len([p for p in doc["processes"] if p["source"] == "publisher"]) == 3 * 1024
    for pub in doc["publishers"]:
        line = " ".join(pub["command"])
        assert line.startswith("python train.py --flag=xxx") and line.endswith("…") and len(line) <= COMMAND_CHARS
    for row in doc["processes"]:
        assert len(row["command"]) <= COMMAND_CHARS
    assert doc["problems"] == []


def test_memstats_watch_json_of_three_big_snapshots_gives_whole_lines(three_big_jobs):
    directory, jobs = three_big_jobs
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(directory))
    proc = run_devctl("memstats", "--watch", "--count", "2", "--interval", "0.1", "--json", env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and proc.stdout.endswith("\n")
    for line in lines:
        assert len(line) < 8 * MB
        sample = json.loads(line)  # every line whole: the first was cut at byte 2**31 - 4096
        assert len(sample["publishers"]) == 3


@pytest.mark.parametrize("args", [("--json",), ("--watch", "--count", "2", "--interval", "0.1", "--json"), ("--csv",)])
def test_a_failed_write_is_an_error_never_exit_0(runtime_dir, args):
    job = _sleepers(1)
    try:
        put(runtime_dir, f"{job[0].pid}.json", snapshot(job[0].pid, devices=64))
        with open("/dev/full", "w") as full:
            proc = subprocess.run(
                [sys.executable, "-m", "devctl", "memstats", *args],
                env=devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime_dir)), stdout=full, stderr=subprocess.PIPE, text=True, timeout=180,
            )  # fmt: skip
    finally:
        _stop(job)
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("devctl: error: cannot write") and "No space left on device" in line and "incomplete" in line


def test_a_record_past_the_limit_is_refused_whole(monkeypatch, capsys):
    import importlib

    from devctl.errors import DevctlError

    emit = importlib.import_module("devctl.render.emit")  # devctl.render.emit is also the name of its function

    monkeypatch.setattr(emit, "MAX_RECORD_BYTES", 1000)
    with pytest.raises(DevctlError, match="more than the 1,000 devctl writes as one record; nothing was written"):
        emit.emit_json_line({"command": "x" * 2000})
    emit.emit_json_line({"command": "x" * 10})
    assert capsys.readouterr().out == '{"command":"xxxxxxxxxx"}\n'


def test_the_bytes_read_in_one_refresh_are_bounded(runtime_dir, monkeypatch):
    jobs = _sleepers(4)
    try:
        sizes = [len(put(runtime_dir, f"{job.pid}.json", snapshot(job.pid, devices=16)).read_bytes()) for job in jobs]
        monkeypatch.setattr(publishers_module, "MAX_READ_BYTES", sizes[0] * 2 + 10)
        report = read_publishers(str(runtime_dir))
    finally:
        _stop(jobs)
    first = sorted(job.pid for job in jobs)
    assert [p.pid for p in report.publishers] == first[:2]
    (problem,) = report.problems
    assert problem.path == str(runtime_dir)
    assert f"2 snapshot files not read (pids {first[2]}, {first[3]})" in problem.reason and "bounded" in problem.reason


def test_a_long_command_line_is_cut_where_it_enters(runtime_dir):
    job = _sleepers(1)
    try:
        # 5,000 words (more than the 1,024 the reader used to refuse outright) and control characters.
        command = ["python", "\x1b[2Jtrain.py", *[f"--arg{i}=v" for i in range(5000)]]
        put(runtime_dir, f"{job[0].pid}.json", snapshot(job[0].pid, command=command))
        (snap,) = read_publishers(str(runtime_dir)).publishers
    finally:
        _stop(job)
    line = " ".join(snap.command)
    assert line.startswith("python \\x1b[2Jtrain.py --arg0=v --arg1=v") and line.endswith("…")
    assert len(line) <= COMMAND_CHARS


@pytest.mark.parametrize(
    "words",
    [["python", "train.py"], ["x" * 1_000_000], ["a"] * 10_000, ["x" * 252, "y"], ["x" * 253, "yy"], ["\x07" * 400], [], [""] * 300],
)
def test_a_command_line_is_never_longer_than_a_person_reads(words):
    shown = readable_command(words, "command")
    line = " ".join(shown)
    assert len(line) <= COMMAND_CHARS and line.isprintable()
    if len(" ".join(words)) <= COMMAND_CHARS and all(w.isprintable() for w in words):
        assert list(shown) == words  # short enough: as it was
    else:
        assert line.endswith("…")


def test_a_runtime_dir_that_is_a_regular_file_says_so(tmp_path):
    plain = tmp_path / "notes.txt"
    plain.write_text("mine")
    proc = run_devctl("memstats", "--postmortem", env=devctl_env(1, DEVCTL_RUNTIME_DIR=str(plain)))
    assert_usage_error(proc, str(plain), "not a directory (a regular file)")
    assert "not a regular file" not in proc.stderr
    assert plain.read_text() == "mine"


# --- damaged post-mortems --------------------------------------------------------------------------


@pytest.mark.parametrize("timestamp", ["Infinity", "NaN", "-Infinity", "1e300", "-1e18", "1e400", "-1"])
def test_a_postmortem_whose_time_is_not_a_time_is_one_problem_line(runtime_dir, timestamp):
    put(runtime_dir, "4100-1.postmortem.json", postmortem(4100))
    bad = put(runtime_dir, "4200-1.postmortem.json", with_raw(postmortem(4200), "timestamp", timestamp))

    proc = postmortems(runtime_dir)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = problem_lines(proc.stdout, bad.name)
    assert "timestamp" in line or "not a number JSON allows" in line or "out of range" in line, line
    assert "job 4100 (oom.py) ran out of memory" in proc.stdout
    doc = postmortems_json(runtime_dir)
    assert [p["pid"] for p in doc["postmortems"]] == [4100]
    assert bad.exists()  # damaged is not provably ours: never removed


def test_doctor_survives_postmortems_whose_time_is_not_a_time(runtime_dir):
    put(runtime_dir, "4100-1.postmortem.json", postmortem(4100))
    for i, timestamp in enumerate(["Infinity", "NaN", "1e300", "-1e18"]):
        put(runtime_dir, f"{4201 + i}-1.postmortem.json", with_raw(postmortem(4201 + i), "timestamp", timestamp))
    proc = run_devctl("doctor", env=devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime_dir)), timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.strip() == "", proc.stderr
    assert "Out of memory: job 4100 (oom.py) died of RESOURCE_EXHAUSTED" in proc.stdout
    for pid in (4201, 4202, 4203, 4204):
        assert f"job {pid}" not in proc.stdout


@pytest.mark.parametrize(
    "name,content,needle",
    [
        ("100,000 deep", "[" * 100_000 + "]" * 100_000, "nested deeper than"),
        ("100,000 deep in a field", with_raw(postmortem(4200), "devices", "[" * 100_000 + "]" * 100_000), "nested deeper than"),
        ("100,000 unclosed", '{"schema": "devctl.memstats.postmortem/1", "arrays": ' + "[" * 100_000, "nested deeper than"),
        ("a 5000-digit size", with_raw(postmortem(4200), "total_bytes", "9" * 5000), "an integer of 5000 digits"),
        ("a size past 2**63", postmortem(4200, total_bytes=1 << 64), "total_bytes is 18446744073709551616, out of range"),
        ("a float count", postmortem(4200, total_arrays=1.5), "total_arrays is 1.5, not an integer"),
        ("a command of numbers", postmortem(4200, command=[1, 2]), "command[0] is 1, not a string"),
        ("an error that is an object", postmortem(4200, error={"a": 1}), "error is an object, not a string"),
        ("a negative shape", postmortem(4200, arrays=[dict(postmortem(1)["arrays"][0], shape=[-1])]), "arrays[0].shape[0] is -1"),
        ("a site of no arrays", postmortem(4200, sites=[{"site": "x.py:1", "arrays": 0, "nbytes": 0}]), "sites[0].arrays is 0"),
        ("a negative statistic", postmortem(4200, devices=[{"device": "gpu:0", "memory_stats": {"bytes_in_use": -7}}]),
         "devices[0].memory_stats.bytes_in_use is -7"),
        ("an unknown scope", postmortem(4200, requested_scope="galaxy"), "requested_scope is 'galaxy'"),
        ("another pid than its name", postmortem(4300), "file name says pid 4200 but the post-mortem says 4300"),
        ("not UTF-8", b'{"schema": "devctl.memstats.postmortem/1", "error": "\xff\xfe"}', "not valid JSON"),
        ("another schema", postmortem(4200, schema="devctl.memstats.postmortem/9"), "expected 'devctl.memstats.postmortem/1'"),
    ],
)  # fmt: skip
def test_a_damaged_postmortem_is_one_problem_line_and_the_rest_is_shown(runtime_dir, name, content, needle):
    put(runtime_dir, "4100-1.postmortem.json", postmortem(4100))
    bad = put(runtime_dir, "4200-1.postmortem.json", content)

    proc = postmortems(runtime_dir)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = problem_lines(proc.stdout, bad.name)
    assert needle in line, line
    assert len(line) < 600
    assert "job 4100 (oom.py) ran out of memory" in proc.stdout
    assert bad.exists()


@pytest.mark.parametrize("field", ["requested_bytes", "free_bytes", "capacity_bytes"])
def test_a_negative_size_is_never_shown_as_asked_for(runtime_dir, field):
    bad = put(runtime_dir, "4200-1.postmortem.json", postmortem(4200, **{field: -5}))
    proc = postmortems(runtime_dir)
    assert proc.returncode == 0, proc.stderr
    assert "-5 B" not in proc.stdout and "asking for -" not in proc.stdout
    (line,) = problem_lines(proc.stdout, bad.name)
    assert f"{field} is -5, out of range" in line


@pytest.mark.parametrize(
    "error",
    [
        "RESOURCE_EXHAUSTED: Out of memory allocating -5 bytes",
        "RESOURCE_EXHAUSTED: Out of memory allocating " + "9" * 5000 + " bytes",
        "RESOURCE_EXHAUSTED: Out of memory allocating 99999999999999999999999 bytes",
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.5B.",
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 9999999999999.99EiB.",
    ],
)
def test_an_older_postmortems_request_is_read_again_only_when_it_is_a_size(runtime_dir, error):
    # A post-mortem of an older devctl has no requested_exact: the request is read again from its error.
    old = postmortem(4200, error=error)
    for key in ("requested_bytes", "requested_device", "requested_exact", "requested_scope", "requested_memory", "free_bytes", "capacity_bytes"):
        del old[key]
    put(runtime_dir, "4200-1.postmortem.json", old)
    doc = postmortems_json(runtime_dir)
    (pm,) = doc["postmortems"]
    assert pm["requested_bytes"] is None or 0 <= pm["requested_bytes"] < 1 << 63
    proc = postmortems(runtime_dir)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert "asking for -" not in proc.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_a_postmortem_another_user_owns_is_refused_as_a_snapshot_is(runtime_dir):
    put(runtime_dir, "4100-1.postmortem.json", postmortem(4100))
    theirs = put(runtime_dir, "4200-1.postmortem.json", postmortem(4200, command=["python", "not-yours.py"]))
    os.chown(theirs, 65534, 65534)

    proc = postmortems(runtime_dir)
    assert proc.returncode == 0, proc.stderr
    (line,) = problem_lines(proc.stdout, theirs.name)
    assert f"owned by uid 65534, not {os.geteuid()}: not read" in line
    assert "not-yours.py" not in proc.stdout
    doc = postmortems_json(runtime_dir)
    assert [p["pid"] for p in doc["postmortems"]] == [4100]
    assert theirs.exists()


def test_links_and_fifos_named_like_postmortems_are_never_opened(runtime_dir, tmp_path):
    outside = put(tmp_path, "elsewhere.json", postmortem(4300))
    (runtime_dir / "4300-1.postmortem.json").symlink_to(outside)
    os.mkfifo(runtime_dir / "4400-1.postmortem.json")
    (runtime_dir / "4500-1.postmortem.json").mkdir()
    put(runtime_dir, "4100-1.postmortem.json", postmortem(4100))

    proc = postmortems(runtime_dir)
    assert proc.returncode == 0, proc.stderr
    assert "a symbolic link: not followed" in problem_lines(proc.stdout, "4300-1.postmortem.json")[0]
    assert "not a regular file (a FIFO)" in problem_lines(proc.stdout, "4400-1.postmortem.json")[0]
    assert "not a regular file (a directory)" in problem_lines(proc.stdout, "4500-1.postmortem.json")[0]
    assert "job 4100" in proc.stdout and "job 4300" not in proc.stdout


def test_the_postmortems_read_are_the_newest_whatever_their_names(runtime_dir):
    # 101 files: pid 1000 the newest, pid 1100 the oldest. By name, newest first, "1100-..." comes first and the
    # newest of all, "1000-...", was the one left out.
    now = time.time()
    for i in range(101):
        when = now - 60 * i
        put(runtime_dir, f"{1000 + i}-{int(when)}.postmortem.json", postmortem(1000 + i, timestamp=when), mtime=when)
    doc = postmortems_json(runtime_dir)
    pids = [p["pid"] for p in doc["postmortems"]]
    assert pids == list(range(1000, 1100))  # the 100 newest, newest first; 1100 (the oldest) left out
    assert doc["problems"] == []


def test_a_long_postmortem_is_cut_where_it_enters(runtime_dir):
    long = postmortem(
        4200,
        command=["python", "x" * 100_000],
        error="RESOURCE_EXHAUSTED: \x1b[2J" + "e" * 200_000,
        hostname="h" * 10_000,
        arrays=[dict(postmortem(1)["arrays"][0], site="s" * 100_000, sharding="d" * 100_000)],
    )
    put(runtime_dir, "4200-1.postmortem.json", long)
    (pm,) = postmortems_json(runtime_dir)["postmortems"]
    assert len(" ".join(pm["command"])) <= COMMAND_CHARS
    assert len(pm["error"]) <= 1000 and "\x1b" not in pm["error"] and pm["error"].endswith("…")
    assert len(pm["hostname"]) <= 255 and len(pm["arrays"][0]["site"]) <= 500 and len(pm["arrays"][0]["sharding"]) <= 300
    proc = postmortems(runtime_dir)
    assert proc.returncode == 0 and "\x1b" not in proc.stdout
