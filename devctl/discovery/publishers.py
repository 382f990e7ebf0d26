"""Read the snapshots that running JAX jobs publish with `devctl.monitor.publish()`.

`Device.memory_stats()` and `jax.live_arrays()` answer only inside the process
that owns the devices, so each job writes `<pid>.json` into a per-user
directory and this module reads them back. No jax or numpy import here: the
CLI calls this on every `memstats --watch` refresh.

The directory is private to the user (mode 0700): snapshots carry command
lines, and a directory others can write to would let them plant snapshots.
The directory helpers are shared with the writer (devctl/monitor.py) so both
sides agree on where to look and what to refuse.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import stat
import tempfile
import time
from typing import Any

from devctl.errors import UsageError
from devctl.model.publishers import (
    SCHEMA,
    PublishedArray,
    PublishedDevice,
    PublisherProblem,
    PublishersReport,
    PublisherSnapshot,
)

ENV_DIR = "DEVCTL_RUNTIME_DIR"
STALE_INTERVALS = 3  # a snapshot older than this many of its intervals is stale
# Intervals below this count as this much for staleness: a sub-second publisher
# that a busy machine or a GIL-holding call delays by a few hundred ms would
# otherwise flicker out of the list. Exited jobs are caught by their pid at once.
MIN_STALE_INTERVAL_S = 1.0
_NAME = re.compile(r"^(\d+)\.json$")
_TEMP_NAME = re.compile(r"^\.(\d+)\.json\.tmp$")
_MAX_FILE_BYTES = 4 << 20  # a snapshot is a few KiB; anything larger is not ours
_CREATE_TIME_TOLERANCE_S = 1.0  # psutil derives create_time from boot time and ticks: equal for one process


# --- where snapshots live ---------------------------------------------------


def candidate_directories() -> list[str]:
    """The per-user places publishers may write to, the preferred one first.

    $XDG_RUNTIME_DIR is per login session and tmpfs; /dev/shm is tmpfs on
    nearly every Linux; the temp dir is the last resort.
    """
    uid = os.geteuid()
    out: list[str] = []
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and _is_own_dir(xdg, uid):
        out.append(os.path.join(xdg, "devctl"))
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
        out.append(f"/dev/shm/devctl-{uid}")
    out.append(os.path.join(tempfile.gettempdir(), f"devctl-{uid}"))
    return list(dict.fromkeys(out))


def resolve_directory(directory: str | None = None) -> str:
    """The directory to publish to: the argument, else $DEVCTL_RUNTIME_DIR, else the preferred default."""
    if directory:
        return os.path.abspath(directory)
    env = os.environ.get(ENV_DIR)
    if env:
        return os.path.abspath(env)
    return candidate_directories()[0]


def directory_problem(path: str) -> str | None:
    """Why `path` is not a safe snapshot directory, or None when it is (or does not exist)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot stat it: {e.strerror or e}"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    uid = os.geteuid()
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not {uid}"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return f"mode {mode:04o} lets other users {_what_others_may(mode)} it; expected 0700"
    return None


def ensure_directory(path: str) -> str | None:
    """Create `path` with mode 0700 if absent; return why it is unusable, or None."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        return f"cannot create it: {e.strerror or e}"
    return directory_problem(path)


def snapshot_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{pid}.json")


def temp_path(directory: str, pid: int) -> str:
    # One fixed temp name per pid: a publisher killed mid-write leaves at most
    # one, and the reader can tell whose it is.
    return os.path.join(directory, f".{pid}.json.tmp")


def _is_own_dir(path: str, uid: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid


def _what_others_may(mode: int) -> str:
    verbs = []
    if mode & 0o044:
        verbs.append("read")
    if mode & 0o022:
        verbs.append("write")
    if not verbs:
        verbs.append("enter")
    return " and ".join(verbs)


# --- reading ----------------------------------------------------------------


def read_publishers(
    directory: str | None = None,
    *,
    now: float | None = None,
    remove_stale: bool = True,
) -> PublishersReport:
    """Every live publisher in `directory` (default: $DEVCTL_RUNTIME_DIR, else the per-user defaults).

    A snapshot whose process is gone (or whose pid now belongs to another
    process), or older than 3 of its intervals (at least 3 s), is stale: left
    out, and its file removed when `remove_stale`. A corrupt file is reported
    in `problems`, and left alone unless its mtime is that old too (then it
    is removed, and the problem says so). Raises UsageError when the
    directory is owned by another user or open to other users.
    """
    now = time.time() if now is None else now
    explicit = directory or os.environ.get(ENV_DIR)
    if explicit:
        primary, others = os.path.abspath(explicit), []
    else:
        # A job started where $XDG_RUNTIME_DIR was unset (cron, a batch
        # scheduler, sudo) falls back to /dev/shm: look in every default.
        primary, *others = candidate_directories()
    problem = directory_problem(primary)
    if problem:
        raise UsageError(f"refusing to read snapshots from {primary}: {problem}")

    scan = _Scan(now=now, remove_stale=remove_stale, hostname=socket.gethostname())
    scan.directory(primary)
    for other in others:
        problem = directory_problem(other)
        if problem:
            # Not the place the user asked about: say so without failing the command.
            scan.problems.append(PublisherProblem(other, f"refusing to read snapshots: {problem}"))
        else:
            scan.directory(other)
    publishers = sorted(scan.publishers, key=lambda p: p.pid)
    return PublishersReport(
        directory=primary,
        publishers=tuple(publishers),
        problems=tuple(scan.problems),
        removed_stale=tuple(sorted(scan.removed)),
        directories=(primary, *others),
    )


class _Scan:
    """State of one read: what was found, what was wrong, what was removed."""

    def __init__(self, *, now: float, remove_stale: bool, hostname: str) -> None:
        self.now = now
        self.remove_stale = remove_stale
        self.hostname = hostname
        self.publishers: list[PublisherSnapshot] = []
        self.problems: list[PublisherProblem] = []
        self.removed: set[int] = set()
        self._seen_pids: set[int] = set()

    def directory(self, directory: str) -> None:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return  # nobody has published yet: normal
        except OSError as e:
            raise UsageError(f"cannot list snapshots in {directory}: {e.strerror or e}") from None
        for name in sorted(names):
            path = os.path.join(directory, name)
            if m := _NAME.match(name):
                self.file(path, int(m.group(1)))
            elif m := _TEMP_NAME.match(name):
                self.temp_file(path, int(m.group(1)))

    def file(self, path: str, pid: int) -> None:
        try:
            raw, st = _read_small(path)
        except FileNotFoundError:
            return  # its publisher stopped while we listed
        except OSError as e:
            self.problems.append(PublisherProblem(path, f"cannot read it: {e.strerror or e}"))
            return
        doc, reason = _decode(raw)
        if doc is not None:
            try:
                snap = parse_snapshot(doc, path=path, now=self.now)
            except (ValueError, TypeError) as e:
                doc, reason = None, f"not a valid snapshot: {e}"
        if doc is None:
            self.corrupt(path, pid, st, reason or "unreadable", raw)
            return
        if snap.pid != pid:
            self.problems.append(PublisherProblem(path, f"file name says pid {pid} but the snapshot says {snap.pid}"))
            return
        if self.is_stale(snap):
            self.drop(path, pid, st)
            return
        if pid in self._seen_pids:
            return  # the same job seen through a second default directory: keep the first
        self._seen_pids.add(pid)
        self.publishers.append(snap)

    def is_stale(self, snap: PublisherSnapshot) -> bool:
        if snap.hostname == self.hostname and not _same_process_alive(snap.pid, snap.process_create_time):
            return True
        # A job on another host (a shared directory) or in another UTS namespace
        # has pids we cannot check: its clock is all we have.
        interval = snap.interval_s if snap.interval_s is not None else MIN_STALE_INTERVAL_S
        return self.now - snap.timestamp > STALE_INTERVALS * max(interval, MIN_STALE_INTERVAL_S)

    def corrupt(self, path: str, pid: int, st: os.stat_result, reason: str, raw: bytes) -> None:
        age = self.now - st.st_mtime
        if age > STALE_INTERVALS * max(_interval_hint(raw), MIN_STALE_INTERVAL_S) and self.drop(path, pid, st):
            # Said once, in the read that removes it, so the user learns what was there.
            reason = f"{reason}; removed, {age:.0f} s old"
        self.problems.append(PublisherProblem(path, reason))

    def temp_file(self, path: str, pid: int) -> None:
        # A publisher killed between writing its temp file and renaming it.
        if self.remove_stale and not _pid_alive(pid):
            _unlink_quietly(path)

    def drop(self, path: str, pid: int, st: os.stat_result) -> bool:
        """Remove a stale file unless it changed since it was read; True when removed."""
        if not self.remove_stale:
            return False
        # A live publisher that fell behind may have replaced the file since
        # we read it; removing its fresh snapshot would hide a live job.
        try:
            cur = os.stat(path)
        except FileNotFoundError:
            return False
        if (cur.st_ino, cur.st_mtime_ns) != (st.st_ino, st.st_mtime_ns):
            return False
        if _unlink_quietly(path):
            self.removed.add(pid)
            return True
        return False


def _read_small(path: str) -> tuple[bytes, os.stat_result]:
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        return f.read(_MAX_FILE_BYTES + 1), st


def _decode(raw: bytes) -> tuple[dict | None, str | None]:
    if len(raw) > _MAX_FILE_BYTES:
        return None, f"larger than {_MAX_FILE_BYTES} bytes"
    if not raw.strip():
        return None, "empty file"
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"not valid JSON ({e})"
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    if doc.get("schema") != SCHEMA:
        return None, f"schema {doc.get('schema')!r}, expected {SCHEMA!r}"
    return doc, None


def _interval_hint(raw: bytes) -> float:
    """The interval a damaged snapshot declares, if it can still be found; else 1 s."""
    m = re.search(rb'"interval_s"\s*:\s*([0-9.eE+-]+)', raw[:_MAX_FILE_BYTES])
    try:
        value = float(m.group(1)) if m else 1.0
    except ValueError:
        return 1.0
    return value if math.isfinite(value) and value > 0 else 1.0


# --- liveness ---------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except OSError:
        return False
    return True


def _same_process_alive(pid: int, create_time: float | None) -> bool:
    """True when `pid` runs and is the process that wrote the snapshot, not a later one given its pid."""
    if not _pid_alive(pid):
        return False
    if create_time is None:
        return True
    import psutil  # only here: keeps `import devctl.discovery.publishers` light

    try:
        actual = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # cannot tell: trust the pid
    return abs(actual - create_time) <= _CREATE_TIME_TOLERANCE_S


def _unlink_quietly(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError:
        return False
    return True


# --- parsing ----------------------------------------------------------------


def parse_snapshot(doc: dict[str, Any], *, path: str | None = None, now: float | None = None) -> PublisherSnapshot:
    """A `devctl.publisher/1` document as a PublisherSnapshot; ValueError names the first bad field."""
    timestamp = _num(doc, "timestamp")
    interval = doc.get("interval_s")
    if interval is not None:
        interval = _num(doc, "interval_s")
        if not interval > 0:
            raise ValueError(f"interval_s {interval!r} is not positive")
    devices = doc.get("devices", [])
    arrays = doc.get("largest_arrays", [])
    if not isinstance(devices, list) or not isinstance(arrays, list):
        raise ValueError("devices and largest_arrays must be lists")
    command = doc.get("command", [])
    if not isinstance(command, list):
        raise ValueError("command must be a list")
    return PublisherSnapshot(
        pid=_int(doc, "pid"),
        command=tuple(str(c) for c in command),
        hostname=str(doc.get("hostname", "")),
        timestamp=timestamp,
        interval_s=interval,
        devices=tuple(_device(d) for d in devices),
        largest_arrays=tuple(_array(a) for a in arrays),
        error=_opt_str(doc.get("error")),
        process_create_time=_opt_num(doc, "process_create_time"),
        jax_version=_opt_str(doc.get("jax_version")),
        jaxlib_version=_opt_str(doc.get("jaxlib_version")),
        backend_initialized=bool(doc.get("backend_initialized", True)),
        snapshot_s=_opt_num(doc, "snapshot_s"),
        path=path,
        age_s=None if now is None else now - timestamp,
    )


def _device(d: Any) -> PublishedDevice:
    if not isinstance(d, dict):
        raise ValueError("a device entry is not an object")
    stats = d.get("memory_stats")
    if stats is not None:
        if not isinstance(stats, dict):
            raise ValueError("memory_stats must be an object or null")
        stats = {str(k): _stat_value(v) for k, v in stats.items()}
    return PublishedDevice(
        id=_int(d, "id"),
        platform=str(d.get("platform", "")),
        device_kind=str(d.get("device_kind", "")),
        process_index=int(d.get("process_index", 0) or 0),
        live_bytes=_int(d, "live_bytes"),
        live_arrays=_int(d, "live_arrays"),
        memory_stats=stats,
        memory_stats_error=_opt_str(d.get("memory_stats_error")),
    )


def _array(a: Any) -> PublishedArray:
    if not isinstance(a, dict):
        raise ValueError("a largest_arrays entry is not an object")
    shape, devices = a.get("shape", []), a.get("devices", [])
    if not isinstance(shape, list) or not isinstance(devices, list):
        raise ValueError("shape and devices must be lists")
    return PublishedArray(
        shape=tuple(int(s) for s in shape),
        dtype=str(a.get("dtype", "")),
        nbytes=_int(a, "nbytes"),
        local_bytes=int(a.get("local_bytes", a.get("nbytes", 0))),
        devices=tuple(int(x) for x in devices),
    )


def _stat_value(v: Any) -> int | None:
    # -1 is how PJRT plugins say "not set"; the writer already maps it, older writers may not.
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        return None
    return v


def _int(doc: dict, key: str) -> int:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"field {key!r} missing or not an integer")
    return v


def _num(doc: dict, key: str) -> float:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"field {key!r} missing or not a number")
    return float(v)


def _opt_num(doc: dict, key: str) -> float | None:
    return None if doc.get(key) is None else _num(doc, key)


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)
