"""The `--top` request/answer protocol under attack and accident, with real publishing jobs and real files
(issue 23): the job answers a request at most once and removes it whatever happened (a damaged answer path, a
write that fails, numbers that are not numbers), costs nothing per tick for what another process left; readers
each have their own files, so twenty at once are all answered; orphans are swept by the next reader and by the
publisher, and nothing else is touched; a damaged answer is one line and exit 2."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from conftest import assert_usage_error, devctl_env, run_devctl, validate_schema
from jobs import PublishingJob
from test_monitor import _dead_pid, _readline, _snapshot_doc, _write

from devctl.discovery import holders as protocol

# A job that publishes every 0.1 s and says, on SIGUSR1, what its --top side did (devctl.publish.holders.TopRequests).
JOB = r"""
import json, resource, signal, sys, time
import jax, jax.numpy as jnp
import devctl.publish

count = int(sys.argv[1]) if len(sys.argv) > 1 else 8
arrays = [jnp.full((64,), i, jnp.float32) for i in range(count)]
if "small-files" in sys.argv:  # a disk that fills: a write past 64 KiB fails (EFBIG), as a full /dev/shm does (ENOSPC)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
pub = devctl.publish.publish(interval=0.1)

def stats(*_):
    r = pub._requests
    print(json.dumps({"taken": r.taken, "answered": r.answered, "computed": r.computed, "ticks": pub._ticks}), flush=True)

signal.signal(signal.SIGUSR1, stats)
print(json.dumps({"ready": time.time()}), flush=True)
try:
    while True:
        time.sleep(600)
except KeyboardInterrupt:
    sys.exit(0)
"""


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    path = tmp_path / "runtime"
    path.mkdir(mode=0o700)
    return path


def counters(job: PublishingJob) -> dict:
    job.proc.send_signal(signal.SIGUSR1)
    return json.loads(_readline(job.proc, 60))


def wait_ticks(job: PublishingJob, n: int) -> dict:
    """The job's counters once its publisher has made `n` more turns."""
    start = counters(job)["ticks"]
    deadline = time.monotonic() + 120
    while True:
        now = counters(job)
        if now["ticks"] >= start + n or time.monotonic() > deadline:
            return now
        time.sleep(0.1)


def token(reader: int | None = None, host: str | None = None) -> str:
    return f"{reader or os.getpid()}-{host or protocol.host_tag()}-{secrets.token_hex(8)}"


def top_files(runtime: Path) -> list[str]:
    return sorted(p.name for p in runtime.iterdir() if ".top" in p.name)


def finish(job: PublishingJob) -> str:
    """Stop the job (SIGINT: a clean exit); its stderr, which must hold no traceback."""
    if job.proc.poll() is None:
        job.proc.send_signal(signal.SIGINT)
    try:
        _, err = job.proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.proc.kill()
        _, err = job.proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    return err


def test_twenty_concurrent_readers_are_all_answered_and_leave_nothing(tmp_path, runtime):
    job = PublishingJob(tmp_path, runtime, JOB)
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    try:
        argv = [sys.executable, "-m", "devctl", "memstats", "--pid", str(job.pid), "--top", "1", "--json", "--timeout", "60"]
        readers = [subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(20)]
        results = [(r.wait(timeout=300), *r.communicate()) for r in readers]
        for rc, out, err in results:
            assert rc == 0, err
            doc = json.loads(out)
            validate_schema(doc, "memstats.top")
            assert doc["pid"] == job.pid and doc["total_arrays"] == 8 and len(doc["arrays"]) == 1
        done = counters(job)
        # Each reader asked once and was answered once; the arrays were looked at once per tick, not per reader.
        assert done["taken"] == done["answered"] == 20 and done["computed"] <= 20, done
        assert top_files(runtime) == []  # every reader removed its answer; the job took every request
    finally:
        job.stop()


def test_a_planted_directory_at_the_answer_path_costs_one_attempt_and_no_computation(tmp_path, runtime):
    job = PublishingJob(tmp_path, runtime, JOB)
    try:
        tok = token()
        planted = runtime / f"{job.pid}.top.{tok}.json"
        planted.mkdir()
        request = _write(runtime, f"{job.pid}.top-request.{tok}", {"n": 5, "pprof": False, "token": tok})
        after = wait_ticks(job, 10)
        # Taken once (removed), refused before the arrays were looked at, and not taken again in ten more ticks.
        assert not request.exists() and planted.is_dir()
        assert (after["taken"], after["answered"], after["computed"]) == (1, 0, 0), after
        # The job is unharmed: it answers a real reader, and took nothing else.
        env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
        proc = run_devctl("memstats", "--pid", str(job.pid), "--top", "2", "--json", "--timeout", "60", env=env, cwd=tmp_path)
        assert proc.returncode == 0 and json.loads(proc.stdout)["pid"] == job.pid, proc.stderr
        after = wait_ticks(job, 10)
        assert (after["taken"], after["answered"], after["computed"]) == (2, 1, 1), after
        finish(job)
    finally:
        job.stop()


def test_a_write_that_fails_is_tried_once_and_said_to_the_reader(tmp_path, runtime):
    """A full disk when the answer is written (here: a file size limit, EFBIG, as a full /dev/shm gives ENOSPC)."""
    job = PublishingJob(tmp_path, runtime, JOB, "600", "small-files")
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    try:
        proc = run_devctl("memstats", "--pid", str(job.pid), "--top", "1000", "--timeout", "60", env=env, cwd=tmp_path)
        assert_usage_error(proc, f"job {job.pid} could not answer: the --top request", "failed")
        after = wait_ticks(job, 10)
        assert (after["taken"], after["answered"], after["computed"]) == (1, 0, 1), after
        assert top_files(runtime) == []  # no request left to retry, no temp file, no half answer
        # A smaller answer fits: the job is unharmed and answers.
        small = run_devctl("memstats", "--pid", str(job.pid), "--top", "2", "--json", env=env, cwd=tmp_path)
        assert small.returncode == 0 and json.loads(small.stdout)["total_arrays"] == 600, small.stderr
    finally:
        job.stop()


BAD_REQUESTS = {
    "infinity": b'{"n": Infinity, "pprof": false}',
    "1e400": b'{"n": 1e400, "pprof": false}',
    "nan": b'{"n": NaN}',
    "negative": b'{"n": -3}',
    "zero": b'{"n": 0}',
    "huge": b'{"n": ' + b"9" * 3000 + b"}",
    "fraction": b'{"n": 2.5}',
    "string": b'{"n": "5"}',
    "bool": b'{"n": true}',
    "pprof-not-bool": b'{"n": 1, "pprof": "yes"}',
    "nested": b"[" * 3000 + b"]" * 3000,
    "not-json": b"\xff\xfe garbage",
    "array": b"[1, 2]",
    "oversized": b'{"n": 1, "pad": "' + b"x" * 8000 + b'"}',
    "empty": b"",
}


def test_requests_whose_numbers_are_not_numbers_are_removed_once_and_never_computed(tmp_path, runtime):
    job = PublishingJob(tmp_path, runtime, JOB)
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    try:
        paths = []
        for raw in BAD_REQUESTS.values():
            path = runtime / f"{job.pid}.top-request.{token()}"
            path.write_bytes(raw)
            paths.append(path)
        after = wait_ticks(job, 10)
        assert [p.name for p in paths if p.exists()] == []
        assert (after["taken"], after["answered"], after["computed"]) == (len(BAD_REQUESTS), 0, 0), after
        # Still the same job: it answers a real reader.
        proc = run_devctl("memstats", "--pid", str(job.pid), "--top", "2", "--json", env=env, cwd=tmp_path)
        assert proc.returncode == 0 and json.loads(proc.stdout)["pid"] == job.pid, proc.stderr
        finish(job)
    finally:
        job.stop()


def test_a_fifo_or_directory_at_request_paths_blocks_neither_the_job_nor_readers(tmp_path, runtime):
    job = PublishingJob(tmp_path, runtime, JOB)
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    try:
        fifos = [runtime / f"{job.pid}.top-request", runtime / f"{job.pid}.top-request.{token()}"]
        for path in fifos:
            os.mkfifo(path, 0o600)
        directory = runtime / f"{job.pid}.top-request.{token()}"
        directory.mkdir()
        link = runtime / f"{job.pid}.top-request.{token()}"
        link.symlink_to(fifos[0])
        before = counters(job)
        proc = run_devctl("memstats", "--pid", str(job.pid), "--top", "2", "--json", "--timeout", "60", env=env, cwd=tmp_path)
        assert proc.returncode == 0 and json.loads(proc.stdout)["pid"] == job.pid, proc.stderr
        after = wait_ticks(job, 10)
        # Only the reader's request was taken; the others were looked at once and left as they are.
        assert after["taken"] - before["taken"] == 1 and after["ticks"] > before["ticks"], (before, after)
        assert all(p.is_fifo() for p in fifos) and directory.is_dir() and link.is_symlink()
    finally:
        job.stop()


def test_a_stale_oversized_answer_of_an_older_devctl_does_not_fail_top(tmp_path, runtime):
    job = PublishingJob(tmp_path, runtime, JOB)
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    try:
        (runtime / f"{job.pid}.top.json").write_bytes(b" " * (protocol.ANSWER_MAX_BYTES + 1))
        proc = run_devctl("memstats", "--pid", str(job.pid), "--top", "2", "--json", "--timeout", "60", env=env, cwd=tmp_path)
        assert proc.returncode == 0 and json.loads(proc.stdout)["pid"] == job.pid, proc.stderr
    finally:
        job.stop()
    assert not (runtime / f"{job.pid}.top.json").exists()  # the job removes an older devctl's files of its pid at stop


class FakeJob:
    """A process that is no publisher (sleep), with a snapshot written by hand and rewritten every 0.1 s, and a
    thread that plays the job's side of --top as `answer(directory, request_name)` says (None: never takes it)."""

    def __init__(self, runtime: Path, answer=None, *, grow: bool = False) -> None:
        self.proc = subprocess.Popen(["sleep", "300"])
        self.pid = self.proc.pid
        self.runtime, self.answer, self.grow = runtime, answer, grow
        self.published = 0
        self.created = psutil.Process(self.pid).create_time()
        self.stopping = threading.Event()
        self._publish()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _publish(self) -> None:
        doc = _snapshot_doc(self.pid, timestamp=time.time(), interval_s=0.1, create_time=self.created)
        if self.grow:  # a leak: one more array every publish
            self.published += 1
            doc["devices"][0].update(live_arrays=self.published, live_bytes=1000 * self.published)
        tmp = self.runtime / f".{self.pid}.json.fake.tmp"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.runtime / f"{self.pid}.json")

    def _run(self) -> None:
        while not self.stopping.wait(0.1):
            self._publish()
            if self.answer is None:
                continue
            for name in os.listdir(self.runtime):
                m = protocol.REQUEST_NAME.match(name)
                if m and int(m.group(1)) == self.pid:
                    os.unlink(self.runtime / name)
                    self.answer(self.runtime, m.group(2))

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.proc.kill()
        self.proc.wait()


def _answer_whole(path: Path, data: bytes) -> None:
    """Written as the job writes its answers, whole (a temporary file renamed): the damage is in the content, not
    in a reader catching a half-written file."""
    tmp = path.with_name(f".{path.name}.fake.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def test_an_answer_of_200000_nested_brackets_is_one_line_exit_2(runtime):
    def answer(directory: Path, tok: str) -> None:
        _answer_whole(directory / f"{fake.pid}.top.{tok}.json", b"[" * 200_000 + b"]" * 200_000)

    fake = FakeJob(runtime, answer)
    try:
        proc = run_devctl("memstats", "--pid", str(fake.pid), "--top", "3", "--timeout", "30", env=devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime)))
        assert_usage_error(proc, "is damaged: nested deeper than")
        assert "RecursionError" not in proc.stderr
    finally:
        fake.stop()


@pytest.mark.parametrize(
    "damage, said",
    [
        (b'{"schema": "devctl.memstats.top/1", "token": "TOKEN", "pid": PID, "timestamp": Infinity}', "not valid JSON (Infinity is not a number)"),
        (b'{"schema": "devctl.memstats.top/1", "token": "TOKEN", "pid": PID, "timestamp": 1e400}', "not a finite number"),
        (b'{"schema": "devctl.memstats.top/1", "token": "another", "pid": PID}', "it answers another request"),
        (b"not json at all", "not valid JSON"),
    ],
)
def test_a_damaged_answer_is_one_line_exit_2(runtime, damage, said):
    def answer(directory: Path, tok: str) -> None:
        _answer_whole(directory / f"{fake.pid}.top.{tok}.json", damage.replace(b"TOKEN", tok.encode()).replace(b"PID", str(fake.pid).encode()))

    fake = FakeJob(runtime, answer)
    try:
        proc = run_devctl("memstats", "--pid", str(fake.pid), "--top", "3", "--timeout", "30", env=devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime)))
        assert_usage_error(proc, "is damaged", said)
    finally:
        fake.stop()


def test_a_job_with_an_older_devctl_is_named_as_such(runtime):
    """A publisher of the single-file protocol: it publishes on, and never takes the per-reader request."""
    fake = FakeJob(runtime)
    try:
        proc = run_devctl("memstats", "--pid", str(fake.pid), "--top", "3", "--timeout", "2", env=devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime)))
        assert_usage_error(proc, f"job {fake.pid} did not answer within 2 s", "its devctl is older than this one", "upgrade devctl")
        assert top_files(runtime) == []  # withdrawn
    finally:
        fake.stop()


def _orphan(runtime: Path, name: str, *, age_s: float = 0.0, size: int = 100) -> Path:
    path = runtime / name
    path.write_bytes(b"x" * size)
    if age_s:
        then = time.time() - age_s
        os.utime(path, (then, then))
    return path


def test_orphans_are_swept_by_the_publisher_and_by_the_next_reader_and_nothing_else(tmp_path, runtime):
    dead, gone_job, other_host = _dead_pid(), _dead_pid(), "0badc0de"
    outside = tmp_path / "outside.txt"
    outside.write_text("not devctl's")
    # Before the job starts: files of a job that is gone (no snapshot), of an older devctl, and an abandoned temp.
    swept_by_publisher = [
        _orphan(runtime, f"{gone_job}.top.{token()}.json", size=1 << 20),
        _orphan(runtime, f"{gone_job}.top.{token()}.pprof", size=1 << 20),
        _orphan(runtime, f"{gone_job}.top-request.{token()}"),
        _orphan(runtime, f"{gone_job}.top.json"),
        _orphan(runtime, f"{gone_job}.top-request"),
        _orphan(runtime, f".{gone_job}.top.{token()}.json.abcd1234.tmp", age_s=120),
    ]
    untouched = [outside]
    for name in (f"{gone_job}.top.{token(dead)}.json", f"{gone_job}.top.{token(dead)}.pprof"):
        (runtime / name).symlink_to(outside)  # a link named like an answer: never followed, never removed
        untouched.append(runtime / name)
    fifo, directory = runtime / f"{gone_job}.top-request.{token(dead)}", runtime / f"{gone_job}.top.{token(dead)}.json"
    os.mkfifo(fifo, 0o600)
    directory.mkdir()
    untouched += [fifo, directory, _orphan(runtime, f"{gone_job}.top-request.{token(dead)}.x")]
    untouched += [_orphan(runtime, "notes.txt"), _orphan(runtime, f"{gone_job}.top-request.bogus"), _orphan(runtime, f"{gone_job}.top.json.bak")]
    job = PublishingJob(tmp_path, runtime, JOB)
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    try:
        wait_ticks(job, 3)
        assert [p.name for p in swept_by_publisher if p.exists()] == []
        # Now files of the live job: a killed reader's answer and request, a question given up long ago, a stale
        # temp; and what must stay: a live reader's (this test's) fresh answer, another host's reader's fresh one.
        killed = subprocess.Popen(["sleep", "60"])
        killed.kill()
        killed.wait()
        swept_by_reader = [
            _orphan(runtime, f"{job.pid}.top.{token(killed.pid)}.json", size=1 << 20),
            _orphan(runtime, f"{job.pid}.top.{token(killed.pid)}.pprof", size=1 << 20),
            _orphan(runtime, f"{job.pid}.top.{token()}.json", age_s=protocol.ORPHAN_MAX_AGE_S + 10),
            _orphan(runtime, f"{job.pid}.top.{token(dead, other_host)}.json", age_s=protocol.ORPHAN_MAX_AGE_S + 10),
            _orphan(runtime, f".{job.pid}.top-request.{token(killed.pid)}.zz99_abc.tmp", age_s=120),
        ]
        kept = [
            _orphan(runtime, f"{job.pid}.top.{token()}.json"),
            _orphan(runtime, f"{job.pid}.top.{token(dead, other_host)}.json"),
            _orphan(runtime, f".{job.pid}.top.{token()}.json.fresh123.tmp"),
        ]
        proc = run_devctl("memstats", "--pid", str(job.pid), "--top", "1", "--json", "--timeout", "60", env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert [p.name for p in swept_by_reader if p.exists()] == []
        assert all(p.exists() for p in kept)
        assert all(os.path.lexists(p) for p in untouched) and outside.read_text() == "not devctl's"
    finally:
        job.stop()
    # Stopped: the job's snapshot is gone, so what is left of its --top files is swept by the next reader anywhere.
    protocol.sweep_orphans(str(runtime))
    assert [p.name for p in kept if p.exists()] == []
    assert all(os.path.lexists(p) for p in untouched)


def test_leak_watch_keeps_its_rate_with_four_leaking_jobs_that_never_answer(runtime):
    """Four jobs whose arrays grow and that never answer --top (stuck in a call that holds the GIL, as far as devctl
    can tell): samples come at the --watch interval and each job is said not to have answered. Asked one after the
    other with a 3 s wait each, samples came 12 s apart."""
    fakes = [FakeJob(runtime, grow=True) for _ in range(4)]
    try:
        env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
        proc = run_devctl("memstats", "--watch", "--interval", "0.5", "--count", "14", "--leak-samples", "3", "--json", env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        docs = [json.loads(line) for line in proc.stdout.splitlines()]
        flagged = {leak["pid"]: leak for leak in docs[-1]["leaks"]}
        assert set(flagged) == {f.pid for f in fakes}, docs[-1]["leaks"]
        assert all("did not say where its arrays are" in leak["sites_note"] for leak in flagged.values())
        gaps = [b["timestamp"] - a["timestamp"] for a, b in zip(docs[1:], docs[2:])]
        assert max(gaps) < 3.0, gaps  # a tenth of what serial questions took; the interval is 0.5 s
    finally:
        for fake in fakes:
            fake.stop()


def test_leak_watch_asks_every_suspect_at_once_and_never_waits_for_a_silent_one():
    """Four jobs that do not answer (stuck in a call that holds the GIL): every sample returns without waiting for
    them (asked one after the other with 3 s each, samples came 12 s apart), all four are asked at once, a job that
    did not answer is said so, and its answer is used once it comes."""
    from devctl.collect.leaks import LeakWatch

    release = threading.Event()
    lock = threading.Lock()
    state = {"in_flight": 0, "most": 0, "asked": 0}

    def ask(pid: int) -> dict | None:
        with lock:
            state["in_flight"] += 1
            state["asked"] += 1
            state["most"] = max(state["most"], state["in_flight"])
        try:
            if not release.wait(60):
                return None
            return {f"train.py:{pid} (<module>)": (state["asked"], 1000 * state["asked"])}
        finally:
            with lock:
                state["in_flight"] -= 1

    watch = LeakWatch(window=4, ask_sites=ask, wait_s=0.05)
    jobs = [1001, 1002, 1003, 1004]

    def sample(i: int):
        publishers = [
            SimpleNamespace(pid=pid, command=["python", "train.py"], devices=[SimpleNamespace(live_arrays=10 + i, live_bytes=100 * (10 + i))])
            for pid in jobs
        ]
        done: list = []
        t = threading.Thread(target=lambda: done.append(watch.update(publishers)), daemon=True)
        t.start()
        t.join(30)  # a bound for a broken build, not a timing: the samples below never wait for the questions
        assert done, "a leak-watch sample waited for jobs that do not answer"
        return done[0]

    for i in range(6):
        leaks = sample(i)
    assert state["most"] == 4  # asked in parallel, one question per job
    assert {leak.pid for leak in leaks} == set(jobs)
    assert all(leak.sites_note and "asking the job" in leak.sites_note for leak in leaks)
    release.set()
    deadline = time.monotonic() + 30
    while state["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.01)
    for i in range(6, 9):
        leaks = sample(i)
    grown = [leak for leak in leaks if leak.growing_sites]
    assert {leak.pid for leak in grown} == set(jobs), leaks


def test_leak_watch_says_a_job_did_not_answer_and_does_not_wait_for_it_again():
    from devctl.collect.leaks import _NO_ANSWER, LeakWatch

    stuck = threading.Event()
    calls: list[int] = []

    def ask(pid: int) -> dict | None:
        calls.append(pid)
        if len(calls) > 1:
            stuck.wait(120)  # from now on the job never answers
        return None

    watch = LeakWatch(window=2, ask_sites=ask, wait_s=60)

    def sample(n: int):
        publishers = [SimpleNamespace(pid=7, command=["python"], devices=[SimpleNamespace(live_arrays=n, live_bytes=n)])]
        done: list = []
        t = threading.Thread(target=lambda: done.append(watch.update(publishers)), daemon=True)
        t.start()
        t.join(30)  # half of wait_s: a sample that waited for the silent job would not be back
        assert done, "a leak-watch sample waited for a job that did not answer its last question"
        return done[0]

    try:
        sample(1)
        (leak,) = sample(2)  # a suspect: asked, and it said nothing
        assert leak.sites_note == _NO_ANSWER and 7 in watch.silent
        for n in (3, 4, 5):
            (leak,) = sample(n)  # asked again in the background (one question at a time), never waited for
            assert leak.sites_note == _NO_ANSWER
        assert len(calls) == 2
    finally:
        stuck.set()
