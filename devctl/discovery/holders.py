"""The files through which devctl asks a publishing job what holds its memory, and reads its post-mortems.

All live in the job's private snapshot directory (devctl.discovery.publishers: mode 0700, owned by the user,
never a link), beside its `<pid>.json`. Each reader asks with its own token, so readers never overwrite or
remove each other's files:

  <pid>.top-request.<token>       a reader asks: {"n": N, "pprof": bool, "token": T}
  <pid>.top.<token>.json          the job answers within one publish interval (model.holders.TopReport + token)
  <pid>.top.<token>.pprof         with "pprof": jax.profiler.device_memory_profile(), for the pprof tools
  <pid>-<time>.postmortem.json    a job that died of RESOURCE_EXHAUSTED (model.holders.PostMortem)

A token is `<reader pid>-<host tag>-<16 hex digits>`: the reader's pid and host (the first 8 hex digits of
sha256(hostname)) say whose it is, so that files a reader left behind (it was killed, or gave up) are known as
orphans once it is gone; the random part makes it unique. The job takes a request (removes it) at its next tick,
answers it at most once, and never looks at it again whatever happened; the reader removes the answer it read.
Orphans (the reader gone, the job gone, or older than any reader waits) are swept by the next reader and by the
publisher (sweep_orphans): only names of this form, only regular files of this user, never through a link.

No socket, no signal: the job reads the request at its next tick. The names are not `<pid>.json`, so the
snapshot reader neither lists nor removes them.

Compatibility: a devctl before per-reader tokens used one `<pid>.top-request` / `<pid>.top.json` pair per job.
This reader does not speak that protocol. It is the protocol that let concurrent readers overwrite and remove
each other's requests, and that made a job recompute its answer every tick when the one answer path was damaged;
a reader that still wrote it would keep older jobs exposed to both. Instead the reader tells such a job apart: it
publishes snapshot after snapshot but never takes the request, and the error says its devctl is older and what to
do. The publisher neither answers nor keeps those older names: it removes its own at start and stop, and the
sweep removes those of jobs that are gone.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import socket
import stat
import threading
import time
from typing import Any

from devctl.errors import InputRejected
from devctl.model.holders import (
    POSTMORTEM_MAX_BYTES,
    POSTMORTEM_SCHEMA,
    POSTMORTEMS_SCHEMA,
    TOP_SCHEMA,
    PostMortem,
    PostMortemReport,
    TopReport,
)

REQUEST_MAX_BYTES = 4096
ANSWER_MAX_BYTES = 8 << 20
PPROF_MAX_BYTES = 256 << 20
# An answer nests 3 levels (the report, its arrays, an array's shape); anything deeper is damaged, and is said so
# before json's parser, which recurses once per level, sees it.
ANSWER_MAX_DEPTH = 8
POSTMORTEM_NAME = re.compile(r"^([1-9][0-9]{0,6})-([0-9]{1,12})\.postmortem\.json$")
# How every post-mortem devctl writes begins (json.dumps with the schema first): what pruning checks before removing.
POSTMORTEM_PREFIX = b'{"schema": "' + POSTMORTEM_SCHEMA.encode() + b'"'

_PID = r"[1-9][0-9]{0,6}"
# (job pid, token, reader pid, host tag)
REQUEST_NAME = re.compile(rf"^({_PID})\.top-request\.(({_PID})-([0-9a-f]{{8}})-[0-9a-f]{{16}})$")
ANSWER_NAME = re.compile(rf"^({_PID})\.top\.(({_PID})-([0-9a-f]{{8}})-[0-9a-f]{{16}})\.(?:json|pprof)$")
# What a devctl before per-reader tokens named them (job pid): never read, swept once the job is gone.
LEGACY_NAME = re.compile(rf"^({_PID})\.top(?:-request|\.json|\.pprof)$")
# safefs.write_atomic's temporary file for one of the above: `.<name>.<random>.tmp`.
_TEMP_NAME = re.compile(r"^\.(.{1,200})\.[a-z0-9_]{1,16}\.tmp$")

# A reader waits at most a minute (--timeout's bound) and reads its answer within 50 ms of its arrival: a request
# or answer this old is nobody's, whoever wrote it (a reader on another host sharing the directory, a reused pid).
ORPHAN_MAX_AGE_S = 300.0
# A job killed without stopping leaves its snapshot behind until a reader drops it: its files are orphans once
# its pid is gone and they are this old (the age covers a job on another host, whose pid means nothing here).
JOB_GONE_AGE_S = 60.0
# A write_atomic temp file is renamed within a moment of its last write; one untouched this long was abandoned.
TEMP_MAX_AGE_S = 60.0
SWEEP_MAX_FILES = 256  # names examined per sweep: a directory full of them costs a bounded pass each time


def request_path(directory: str, pid: int, token: str) -> str:
    return os.path.join(directory, f"{pid}.top-request.{token}")


def answer_path(directory: str, pid: int, token: str) -> str:
    return os.path.join(directory, f"{pid}.top.{token}.json")


def pprof_path(directory: str, pid: int, token: str) -> str:
    return os.path.join(directory, f"{pid}.top.{token}.pprof")


def legacy_paths(directory: str, pid: int) -> tuple[str, ...]:
    """The request, answer and profile of a devctl before per-reader tokens, for job `pid`."""
    return tuple(os.path.join(directory, f"{pid}.top{suffix}") for suffix in ("-request", ".json", ".pprof"))


def postmortem_path(directory: str, pid: int, when: float) -> str:
    return os.path.join(directory, f"{pid}-{int(when)}.postmortem.json")


_host_tags: dict[str, str] = {}


def host_tag(hostname: str | None = None) -> str:
    """The 8 hex digits of a token that say which host wrote it: a reader's pid means something only there."""
    name = socket.gethostname() if hostname is None else hostname
    tag = _host_tags.get(name)
    if tag is None:
        tag = _host_tags[name] = hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:8]
    return tag


def new_token() -> str:
    return f"{os.getpid()}-{host_tag()}-{secrets.token_hex(8)}"


def token_reader(token: str) -> tuple[int, str]:
    """(reader pid, host tag) of a token as new_token() makes it."""
    reader, tag, _ = token.split("-")
    return int(reader), tag


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists on this host (one kill(pid, 0); a zombie counts until it is reaped)."""
    if not 0 < pid <= 1 << 22:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, another user's
        return True
    return True


# ---- orphans -------------------------------------------------------------------------------------


def _parse(name: str) -> tuple[bool, int, int | None, str | None] | None:
    """(a temp file, job pid, reader pid, host tag) of a name of the --top protocol; None for any other name."""
    temp = False
    if name.startswith("."):
        m = _TEMP_NAME.match(name)
        if m is None:
            return None
        name, temp = m.group(1), True
    for pattern in (REQUEST_NAME, ANSWER_NAME):
        if m := pattern.match(name):
            return temp, int(m.group(1)), int(m.group(3)), m.group(4)
    if m := LEGACY_NAME.match(name):
        return temp, int(m.group(1)), None, None
    return None


def is_orphan(name: str, st: os.stat_result, *, now: float, snapshots: set[str]) -> bool:
    """Whether the --top file `name` (lstat `st`) is nobody's now: its reader is gone (on this host), its job is
    gone (no `<pid>.json` in `snapshots`, the directory's names; or killed, and the file is a minute old), or it
    is older than any reader waits. Not a name of the protocol: False."""
    parsed = _parse(name)
    if parsed is None:
        return False
    temp, job, reader, tag = parsed
    age = now - st.st_mtime
    if age > (TEMP_MAX_AGE_S if temp else ORPHAN_MAX_AGE_S) or f"{job}.json" not in snapshots:
        return True
    if age > JOB_GONE_AGE_S and not pid_alive(job):
        return True
    # This process's own questions are its to withdraw (forget_abandoned), not the sweep's.
    return reader is not None and tag == host_tag() and reader != os.getpid() and not pid_alive(reader)


def sweep_orphans(directory: str, names: list[str] | None = None, *, now: float | None = None) -> int:
    """Remove the orphaned --top files of `directory` (a private snapshot directory; `names` its listing when the
    caller has one), at most SWEEP_MAX_FILES looked at; how many were removed. Only regular files of this user with
    names of the protocol; never a link, a FIFO or a directory. Never raises."""
    from devctl.safefs import remove_own_file

    try:
        names = os.listdir(directory) if names is None else names
    except OSError:
        return 0
    now = time.time() if now is None else now
    snapshots = {n for n in names if n.endswith(".json") and n[:-5].isdigit()}
    euid = os.geteuid()
    removed = looked = 0
    for name in names:
        if ".top" not in name or _parse(name) is None:
            continue
        looked += 1
        if looked > SWEEP_MAX_FILES:
            break
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == euid and is_orphan(name, st, now=now, snapshots=snapshots):
            removed += remove_own_file(path)
    return removed


# ---- the reader's side of --top ------------------------------------------------------------------

# Questions this process gave up on (a timeout): the job may answer after all, and a long-lived reader (a leak
# watch) is alive, so the sweep would not take those answers: it removes them itself at its next question.
_abandoned: dict[tuple[str, int, str], float] = {}
_abandoned_lock = threading.Lock()


def _abandon(folder: str, pid: int, token: str) -> None:
    with _abandoned_lock:
        if len(_abandoned) >= 256:
            _abandoned.pop(next(iter(_abandoned)))
        _abandoned[(folder, pid, token)] = time.monotonic()


def forget_abandoned() -> None:
    """Remove what jobs answered to questions this process gave up on."""
    from devctl.safefs import remove_own_file

    with _abandoned_lock:
        items = list(_abandoned.items())
    now = time.monotonic()
    for (folder, pid, token), since in items:
        paths = (request_path(folder, pid, token), answer_path(folder, pid, token), pprof_path(folder, pid, token))
        found = sum(remove_own_file(path) for path in paths)
        # A job answers at its next tick: a minute on, one that has not is stuck, and what it writes when it wakes
        # is left to the sweep (ORPHAN_MAX_AGE_S).
        if not found and now - since > JOB_GONE_AGE_S:
            with _abandoned_lock:
                _abandoned.pop((folder, pid, token), None)


def request_top(pid: int, n: int, *, pprof: bool, timeout_s: float, directory: str | None = None) -> tuple[TopReport, bytes | None]:
    """Ask the publishing job `pid` for its `n` largest arrays (and its pprof profile), and wait for the answer.

    A pid that does not publish here, a job that does not answer within `timeout_s`, one that says it could not,
    and a damaged answer are InputRejected (one line, exit 2); the request is then withdrawn. Safe to call from
    several threads and processes at once: each question has its own files."""
    from devctl.discovery.publishers import read_publishers
    from devctl.safefs import remove_own_file, write_atomic

    report = read_publishers(directory, remove_stale=False)
    snap = next((p for p in report.publishers if p.pid == pid), None)
    if snap is None or snap.path is None:
        jobs = ", ".join(str(p.pid) for p in report.publishers) or "none"
        raise InputRejected(f"--pid {pid} is not a publishing job here (jobs that publish: {jobs}); a job publishes with devctl.publish.publish()")
    folder = os.path.dirname(snap.path)
    forget_abandoned()
    sweep_orphans(folder)
    token = new_token()
    asked, answer, profile_path = request_path(folder, pid, token), answer_path(folder, pid, token), pprof_path(folder, pid, token)
    request = {"n": n, "pprof": pprof, "token": token}
    try:
        write_atomic(asked, json.dumps(request).encode(), mode=0o600, sync=False)
    except OSError as e:
        raise InputRejected(f"cannot ask job {pid}: writing {asked} failed: {e.strerror or e}") from None
    interval = snap.interval_s or 1.0
    watch = _JobWatch(snap.path, token)
    deadline = time.monotonic() + timeout_s
    answered = False
    ended: str | None = None  # why waiting longer is pointless; the answer is looked for once more first
    try:
        while True:
            raw = _read(answer, ANSWER_MAX_BYTES)
            if raw is not None:
                top = _decode_answer(raw, answer, pid, token)
                profile = _read(profile_path, PPROF_MAX_BYTES) if pprof else None
                answered = True
                if pprof and profile is None:
                    raise InputRejected(f"job {pid} answered without its memory profile: {top.note or 'no profile file'}")
                return top, profile
            if ended is not None:
                raise InputRejected(ended)
            if time.monotonic() >= deadline:
                break
            watch.look(taken=not os.path.lexists(asked))
            if watch.failure is not None:
                ended = f"job {pid} could not answer: {watch.failure}"
            elif watch.gone:
                ended = f"job {pid} stopped publishing before it answered (its snapshot {snap.path} is gone)"
            else:
                time.sleep(min(0.05, interval / 4))
    finally:
        remove_own_file(asked)  # withdrawn, if the job has not taken it
        remove_own_file(answer)  # read: the job's answer to us, not left to pile up
        remove_own_file(profile_path)
        if not answered:
            _abandon(folder, pid, token)
    raise InputRejected(_no_answer(pid, timeout_s, interval, watch))


def _no_answer(pid: int, timeout_s: float, interval: float, watch: _JobWatch) -> str:
    said = f"job {pid} did not answer within {timeout_s:g} s"
    if watch.taken:
        return f"{said}: it took the request but sent no answer (it publishes every {interval:g} s); give a longer --timeout"
    if watch.publishes >= 2:
        # An older publisher reads only `<pid>.top-request` (module docstring: Compatibility).
        return (f"{said}: it published {watch.publishes} snapshots meanwhile but never took the request, so its devctl is "
                f"older than this one (it reads only {pid}.top-request, one request file per job that concurrent readers "
                "overwrote); upgrade devctl where the job runs, or use the devctl installed with it")  # fmt: skip
    return (f"{said} (it publishes every {interval:g} s: is it stuck in a long call that holds the GIL?); "
            "give a longer --timeout")  # fmt: skip


class _JobWatch:
    """What the job did with our request while we wait, from our request file and its snapshot: whether it took
    the request, how many snapshots it published since, and the error its snapshot gives for our token."""

    def __init__(self, snapshot: str, token: str) -> None:
        self.snapshot, self.token = snapshot, token
        self.key = self._key()
        self.taken = False
        self.publishes = 0
        self.failure: str | None = None
        self.gone = False

    def _key(self) -> tuple[int, int] | None:
        try:
            st = os.lstat(self.snapshot)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    def look(self, *, taken: bool) -> None:
        self.taken = self.taken or taken
        key = self._key()
        if key is None:
            self.gone = True
            return
        if key == self.key:
            return
        self.key = key
        self.publishes += 1
        if self.taken:  # the job says in its next snapshot why an answer failed
            self.failure = self._error()

    def _error(self) -> str | None:
        from devctl.discovery.snapshot_format import MAX_FILE_BYTES, decode_snapshot
        from devctl.safefs import read_regular
        from devctl.text import printable

        try:
            snap, _ = decode_snapshot(read_regular(self.snapshot, MAX_FILE_BYTES))
        except OSError:
            return None
        error = snap.error if snap is not None else None
        return printable(error, 500) if error and self.token in error else None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is not a finite number")
    return value


def _decode_answer(raw: bytes, path: str, pid: int, token: str) -> TopReport:
    """The job's answer in `raw` (our token's file), or InputRejected saying how it is damaged."""
    from devctl.discovery.snapshot_format import nesting_too_deep
    from devctl.text import printable

    if nesting_too_deep(raw, ANSWER_MAX_DEPTH):
        raise InputRejected(f"{path} is damaged: nested deeper than {ANSWER_MAX_DEPTH} levels")
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise InputRejected(f"{path} is damaged: nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, a NaN or an infinity
        raise InputRejected(f"{path} is damaged: not valid JSON ({printable(' '.join(str(e).split()), 200)})") from None
    if isinstance(doc, dict) and doc.get("token") != token:
        raise InputRejected(f"{path} is damaged: it answers another request")
    top: TopReport = decode(TopReport, doc, TOP_SCHEMA, path)
    if top.pid != pid:
        raise InputRejected(f"{path} is damaged: it says pid {printable(repr(top.pid), 40)}, not {pid}")
    for name in ("timestamp", "cost_s"):
        value = getattr(top, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise InputRejected(f"{path} is damaged: {name} {printable(repr(value), 40)}")
    return top


def _read(path: str, cap: int) -> bytes | None:
    from devctl.safefs import read_regular

    try:
        return read_regular(path, cap)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise InputRejected(f"{path}: {e.strerror or e}") from None


def decode(cls: type, doc: Any, schema: str, path: str) -> Any:
    """A TopReport or PostMortem from the job's document; InputRejected naming the file when it is not one."""
    from devctl.model import from_dict

    if not isinstance(doc, dict) or doc.get("schema") != schema:
        raise InputRejected(f"{path} is not a {schema} document")
    try:
        value: Any = from_dict(cls, {k: v for k, v in doc.items() if k != "token"})
        _check(value)
    except (TypeError, ValueError, KeyError) as e:
        raise InputRejected(f"{path} is damaged: {e}") from None
    return value


def _check(value: Any) -> None:
    """Figures that were not measured (negative sizes, a shape of strings) make a document damaged, not data."""
    from devctl.text import printable

    for a in value.arrays:
        if not isinstance(a.nbytes, int) or a.nbytes < 0 or not all(isinstance(d, int) and d >= 0 for d in a.shape):
            raise ValueError(f"an array with nbytes {printable(repr(a.nbytes), 40)} and shape {printable(repr(a.shape), 80)}")
    if not isinstance(value.total_bytes, int) or value.total_bytes < 0:
        raise ValueError(f"total_bytes {printable(repr(value.total_bytes), 40)}")
    for name in ("requested_bytes", "free_bytes", "capacity_bytes"):  # a post-mortem's
        n = getattr(value, name, None)
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
            raise ValueError(f"{name} {printable(repr(n), 40)}")


# ---- post-mortems -------------------------------------------------------------------------------
#
# A post-mortem is read as a snapshot is (devctl.discovery.snapshot_format): only a regular file owned by this
# user, at most POSTMORTEM_MAX_BYTES, nesting checked before json parses it, no NaN, infinity or 5000-digit
# number, and every value checked for type and range before it becomes a field. What fails is a problem line.

POSTMORTEMS_READ = 100  # the newest, by the file's modification time: a flood of them costs a bounded read
_POSTMORTEM_ERROR_CHARS = 1000  # the job writes its first 500
_SITE_CHARS = 500
_SHARDING_CHARS = 300
_NAME_CHARS = 64  # a device, a dtype, a memory kind


def read_postmortems(pid: int | None = None, directory: str | None = None) -> PostMortemReport:
    """The post-mortems in the snapshot directories (of job `pid` only, when given), newest first: the
    POSTMORTEMS_READ most recently written files are read. A damaged file, one another user owns or one that is
    not a regular file is a problem line, never removed."""
    from devctl.discovery.publishers import directory_problem, read_publishers
    from devctl.safefs import open_private_directory
    from devctl.text import printable

    report = read_publishers(directory, remove_stale=False)
    found: list[PostMortem] = []
    problems: list[str] = []
    opened: list[tuple[str, int]] = []
    try:
        candidates: list[tuple[int, str, int, str, os.stat_result]] = []
        for folder in report.directories:
            if directory_problem(folder):
                continue  # read_publishers said why, for the snapshots
            try:
                fd = open_private_directory(folder)
            except OSError:
                continue
            opened.append((folder, fd))
            try:
                names = os.listdir(fd)
            except OSError:
                continue
            for name in names:
                m = POSTMORTEM_NAME.match(name)
                if m is None or (pid is not None and int(m.group(1)) != pid):
                    continue
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue  # removed since the listing (the next publisher prunes)
                candidates.append((st.st_mtime_ns, folder, fd, name, st))
        candidates.sort(key=lambda c: (-c[0], c[3]))  # newest first, whatever the names say
        for _, folder, fd, name, st in candidates[:POSTMORTEMS_READ]:
            path = os.path.join(folder, name)
            try:
                found.append(_read_postmortem(fd, name, st, path))
            except ValueError as e:
                problems.append(printable(f"{path}: {e}", 500))
    finally:
        for _, fd in opened:
            os.close(fd)
    found.sort(key=lambda p: -p.timestamp)
    return PostMortemReport(POSTMORTEMS_SCHEMA, report.directory, tuple(found), tuple(problems))


def _read_postmortem(fd: int, name: str, st: os.stat_result, path: str) -> PostMortem:
    """The post-mortem `name` in the open directory `fd`; ValueError saying why it is not one."""
    from devctl.discovery.snapshot_format import load_json
    from devctl.safefs import UnsafeFile, file_kind, read_regular

    if stat.S_ISLNK(st.st_mode):
        raise ValueError("a symbolic link: not followed")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"not a regular file ({file_kind(st.st_mode)}): not opened")
    euid = os.geteuid()
    if st.st_uid != euid:
        # As for snapshots: another user's file in this directory says nothing about this user's jobs.
        raise ValueError(f"owned by uid {st.st_uid}, not {euid}: not read")
    if st.st_size > POSTMORTEM_MAX_BYTES:
        raise ValueError(f"is larger than {POSTMORTEM_MAX_BYTES} bytes: not read")
    try:
        raw = read_regular(name, POSTMORTEM_MAX_BYTES, dir_fd=fd)
    except UnsafeFile as e:  # replaced by a link or a FIFO since the lstat, or grown
        raise ValueError(f"{e.strerror}: not read") from None
    except OSError as e:
        raise ValueError(f"cannot read it: {e.strerror or e}") from None
    doc = load_json(raw)
    pm = postmortem_from(doc, path)
    m = POSTMORTEM_NAME.match(name)
    if m is not None and int(m.group(1)) != pm.pid:
        raise ValueError(f"file name says pid {m.group(1)} but the post-mortem says {pm.pid}")
    return pm


def postmortem_from(doc: Any, path: str | None = None) -> PostMortem:
    """A `devctl.memstats.postmortem/1` document as a PostMortem: every value checked for type and range (a size
    is a whole number from 0 to 2**63 - 1, a time a finite moment from 1970 to 9999), every string cut and made
    printable, the command line to what a person reads; ValueError naming the first bad field."""
    from dataclasses import replace

    from devctl.discovery import snapshot_format as f
    from devctl.model.holders import MAX_SITES, MAX_TOP
    from devctl.text import printable

    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if doc.get("schema") != POSTMORTEM_SCHEMA:
        raise ValueError(f"schema {f.show(doc.get('schema'))}, expected {POSTMORTEM_SCHEMA!r}")
    try:
        pid = f.whole_number(doc.get("pid"), "pid", f.PID_MAX + 1)
        if pid == 0:
            raise ValueError("pid is 0, not a process id")
        error = doc.get("error")
        if not isinstance(error, str):
            raise ValueError(f"error is {f.show(error) if error is not None else 'missing'}, not a string")
        scope = doc.get("requested_scope")
        if scope not in (None, "allocation", "program"):
            raise ValueError(f"requested_scope is {f.show(scope)}, not 'allocation' or 'program'")
        exact = doc.get("requested_exact")
        if exact is not None and not isinstance(exact, bool):
            raise ValueError(f"requested_exact is {f.show(exact)}, not true, false or null")
        arrays = f.bounded_list(doc.get("arrays", []), "arrays", MAX_TOP)
        sites = f.bounded_list(doc.get("sites", []), "sites", MAX_SITES)
        devices = f.bounded_list(doc.get("devices", []), "devices", f.MAX_DEVICES)
        pm = PostMortem(
            schema=POSTMORTEM_SCHEMA,
            pid=pid,
            command=f.readable_command(doc.get("command", []), "command"),
            hostname=f.bounded_text(doc.get("hostname", ""), "hostname", 255),
            timestamp=f.unix_time(doc.get("timestamp"), "timestamp"),
            error=error[:_POSTMORTEM_ERROR_CHARS],  # raw until its request is read from it, printable below
            requested_bytes=_opt_size(doc, "requested_bytes"),
            requested_device=f.opt_text(doc.get("requested_device"), "requested_device", _NAME_CHARS),
            devices=tuple(_device_memory(d, f"devices[{i}]") for i, d in enumerate(devices)),
            total_arrays=f.whole_number(doc.get("total_arrays"), "total_arrays", f.SIZE_LIMIT),
            total_bytes=f.whole_number(doc.get("total_bytes"), "total_bytes", f.SIZE_LIMIT),
            arrays=tuple(_held_array(a, f"arrays[{i}]") for i, a in enumerate(arrays)),
            sites=tuple(_site_total(s, f"sites[{i}]") for i, s in enumerate(sites)),
            requested_exact=exact,
            requested_scope=scope,
            requested_memory=f.opt_text(doc.get("requested_memory"), "requested_memory", _NAME_CHARS),
            free_bytes=_opt_size(doc, "free_bytes"),
            capacity_bytes=_opt_size(doc, "capacity_bytes"),
            path=path,
        )
    except (TypeError, OverflowError) as e:
        raise ValueError(str(e)) from None
    pm = _with_request(pm)
    return replace(pm, error=printable(pm.error, _POSTMORTEM_ERROR_CHARS))


def _opt_size(doc: dict[str, Any], name: str) -> int | None:
    from devctl.discovery.snapshot_format import SIZE_LIMIT, whole_number

    value = doc.get(name)
    return None if value is None else whole_number(value, name, SIZE_LIMIT)


def _device_memory(d: Any, where: str) -> Any:
    from devctl.discovery import snapshot_format as f
    from devctl.model.holders import DeviceMemory

    if not isinstance(d, dict):
        raise ValueError(f"{where} is {f.show(d)}, not an object")
    return DeviceMemory(device=f.bounded_text(d.get("device"), f"{where}.device", _NAME_CHARS), memory_stats=f.memory_stats(d, where))


def _held_array(a: Any, where: str) -> Any:
    from devctl.discovery import snapshot_format as f
    from devctl.model.holders import HeldArray

    if not isinstance(a, dict):
        raise ValueError(f"{where} is {f.show(a)}, not an object")
    shape = f.bounded_list(a.get("shape", []), f"{where}.shape", 64)
    devices = f.bounded_list(a.get("devices", []), f"{where}.devices", f.MAX_DEVICES)
    return HeldArray(
        nbytes=f.whole_number(a.get("nbytes"), f"{where}.nbytes", f.SIZE_LIMIT),
        shape=tuple(f.whole_number(n, f"{where}.shape[{i}]", f.SIZE_LIMIT) for i, n in enumerate(shape)),
        dtype=f.bounded_text(a.get("dtype", ""), f"{where}.dtype", _NAME_CHARS),
        sharding=f.bounded_text(a.get("sharding", ""), f"{where}.sharding", _SHARDING_CHARS),
        memory_kind=f.opt_text(a.get("memory_kind"), f"{where}.memory_kind", _NAME_CHARS),
        devices=tuple(f.bounded_text(x, f"{where}.devices[{i}]", _NAME_CHARS) for i, x in enumerate(devices)),
        site=f.opt_text(a.get("site"), f"{where}.site", _SITE_CHARS),
    )


def _site_total(s: Any, where: str) -> Any:
    from devctl.discovery import snapshot_format as f
    from devctl.model.holders import SiteTotal

    if not isinstance(s, dict):
        raise ValueError(f"{where} is {f.show(s)}, not an object")
    arrays = f.whole_number(s.get("arrays"), f"{where}.arrays", f.SIZE_LIMIT)
    if arrays == 0:
        raise ValueError(f"{where}.arrays is 0: a site holds at least one array")
    return SiteTotal(
        site=f.opt_text(s.get("site"), f"{where}.site", _SITE_CHARS),
        arrays=arrays,
        nbytes=f.whole_number(s.get("nbytes"), f"{where}.nbytes", f.SIZE_LIMIT),
    )


def _with_request(pm: PostMortem) -> PostMortem:
    """A post-mortem of an older devctl (no requested_exact: it read only "allocat... N bytes") with the request
    read again from its error (devctl.model.oom), as a newer publisher records it. The device is named only where
    the job's GPUs were gpu:0 to gpu:N-1 (one process: JAX's id is then the local ordinal the message names)."""
    from dataclasses import replace

    from devctl.model.oom import parse_oom

    if pm.requested_exact is not None:
        return pm  # the publisher read it, with the job's devices at hand
    found = parse_oom(pm.error)
    if found.requested_bytes is None:
        return pm
    device = pm.requested_device
    if device is None and found.device_ordinal is not None:
        gpus = {d.device for d in pm.devices if d.device.partition(":")[0] in ("gpu", "cuda", "rocm")}
        platforms = {g.partition(":")[0] for g in gpus}
        if len(platforms) == 1 and gpus == {f"{next(iter(platforms))}:{i}" for i in range(len(gpus))} and found.device_ordinal < len(gpus):
            device = f"{next(iter(platforms))}:{found.device_ordinal}"
    return replace(
        pm, requested_bytes=found.requested_bytes, requested_device=device, requested_exact=found.exact, requested_scope=found.scope,
        requested_memory=found.memory, free_bytes=found.free_bytes, capacity_bytes=found.capacity_bytes,
    )  # fmt: skip
