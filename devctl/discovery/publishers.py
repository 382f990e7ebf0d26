"""Read the snapshots that running JAX jobs publish with `devctl.publish.publish()`.

`Device.memory_stats()` and `jax.live_arrays()` answer only inside the process
that owns the devices, so each job writes `<pid>.json` into a per-user
directory and this module reads them back. No jax or numpy import here: the
CLI calls this on every `memstats --watch` refresh.

The directory is private to the user (mode 0700): snapshots carry command
lines, and a directory others can write to would let them plant snapshots.
The directory helpers are shared with the writer (devctl/monitor.py) so both
sides agree on where to look and what to refuse.

What the reader trusts, and what it does not (see the README's threat model):
- the directory's name may have been planted by another user (/dev/shm is
  world-writable): a symbolic link there is refused, never followed, and the
  directory is opened once (O_NOFOLLOW | O_DIRECTORY) and used through that fd;
- anything in it may be damaged or not a snapshot at all (the user may point
  DEVCTL_RUNTIME_DIR at a directory of their own): a link, a FIFO or a device
  named like a snapshot is never opened, every read is capped, a document is
  checked for nesting before json parses it, and every value is checked for
  range before it becomes a figure;
- a file is removed only when it is provably a snapshot devctl wrote (a valid
  devctl.publisher/1 document, owned by us, unchanged since it was read) whose
  process is gone. A damaged or foreign file is reported, never removed.
"""

from __future__ import annotations

import errno
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
    PublisherSnapshot,
    PublishersReport,
)
from devctl.safefs import (
    UnsafeFile,
    file_kind,
    open_private_directory,
    private_directory_problem,
    read_regular,
)
from devctl.text import printable

ENV_DIR = "DEVCTL_RUNTIME_DIR"
STALE_INTERVALS = 3  # a snapshot older than this many of its intervals is stale
# Intervals below this count as this much for staleness: a sub-second publisher
# that a busy machine or a GIL-holding call delays by a few hundred ms would
# otherwise flicker out of the list. Exited jobs are caught by their pid at once.
MIN_STALE_INTERVAL_S = 1.0
PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT: no pid is larger
_NAME = re.compile(r"^([1-9][0-9]{0,6})\.json$")
# safefs.write_atomic's temporary name (.<pid>.json.<random>.tmp), and the fixed one older writers used.
_TEMP_NAME = re.compile(r"^\.([1-9][0-9]{0,6})\.json(?:\.[a-z0-9_]{1,16})?\.tmp$")
# What every snapshot devctl writes begins with (monitor._encode): how a left-over temp file is known as ours.
SNAPSHOT_PREFIX = b'{"schema":"devctl.publisher/1"'
# Bounds on what one snapshot may hold. A job has a handful of local devices
# (1024 is a large forced CPU count); the writer's top_k is capped to MAX_ARRAYS.
# A snapshot of 1024 devices with full allocator stats and the default top_k is
# under 1 MiB; the file cap also bounds the cost of a damaged one (the nesting
# scan and the parser are linear in it).
MAX_FILE_BYTES = 2 << 20
MAX_DEVICES = 1024
MAX_ARRAYS = 1024
MAX_FILES = 512  # snapshot files read per directory and refresh: far more jobs than one host runs
MAX_DEPTH = 16  # a snapshot nests 4 levels; json's parser recurses once per level
_MAX_STATS = 64  # memory_stats keys (PJRT reports about 15)
_MAX_RANK = 64
_MAX_COMMAND_WORDS = 1024
_SIZE_LIMIT = 1 << 63  # bytes, counts: anything at or past int64's range is not a figure
_ID_LIMIT = 1 << 31
_CREATE_TIME_TOLERANCE_S = 1.0  # psutil derives create_time from boot time and ticks: equal for one process
_PLATFORM = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")


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
    """Why `path` is not a safe snapshot directory, or None when it is (or does not exist).
    A symbolic link is refused whatever it points at (lstat): another user may have planted it."""
    return private_directory_problem(path)


def ensure_directory(path: str) -> str | None:
    """Create `path` with mode 0700 if absent; return why it is unusable, or None."""
    # Checked before creating too: makedirs(exist_ok=True) accepts a link to a directory.
    problem = private_directory_problem(path)
    if problem:
        return problem
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        return f"cannot create it: {e.strerror or e}"
    return private_directory_problem(path)


def snapshot_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{pid}.json")


def _is_own_dir(path: str, uid: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid


# --- reading ----------------------------------------------------------------


def read_publishers(
    directory: str | None = None,
    *,
    now: float | None = None,
    remove_stale: bool = True,
) -> PublishersReport:
    """Every live publisher in `directory` (default: $DEVCTL_RUNTIME_DIR, else the per-user defaults).

    A snapshot whose process is gone (exited, a zombie, or its pid now another
    process's), or older than 3 of its intervals (at least 3 s), is stale: left
    out, and its file removed when `remove_stale`. A damaged or foreign file is
    reported in `problems` and never removed. Raises UsageError when the
    directory asked for (the argument or $DEVCTL_RUNTIME_DIR) is a symbolic link,
    not a directory, owned by another user or open to other users; a default
    directory in that state is a problem line instead, and is not read.
    """
    now = time.time() if now is None else now
    explicit = directory or os.environ.get(ENV_DIR)
    if explicit:
        primary, others = os.path.abspath(explicit), []
    else:
        # A job started where $XDG_RUNTIME_DIR was unset (cron, a batch
        # scheduler, sudo) falls back to /dev/shm: look in every default.
        primary, *others = candidate_directories()
    scan = _Scan(now=now, remove_stale=remove_stale, hostname=socket.gethostname())
    for path in (primary, *others):
        problem = scan.directory(path)
        if problem and explicit:
            raise UsageError(f"refusing to read snapshots from {printable(path, 500)}: {problem}")
        if problem:
            # Not a place the user named: say so without failing the command.
            scan.problem(path, f"refusing to read snapshots: {problem}")
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
        self.euid = os.geteuid()
        self.publishers: list[PublisherSnapshot] = []
        self.problems: list[PublisherProblem] = []
        self.removed: set[int] = set()
        self.seen_pids: set[int] = set()

    def problem(self, path: str, reason: str) -> None:
        self.problems.append(PublisherProblem(printable(path, 500), printable(reason, 500)))

    def directory(self, directory: str) -> str | None:
        """Read one directory; why it was refused, or None."""
        problem = private_directory_problem(directory)
        if problem:
            return problem
        try:
            fd = open_private_directory(directory)
        except FileNotFoundError:
            return None  # nobody has published yet: normal
        except OSError as e:  # swapped for a link or a file since the check above
            return _open_problem(e)
        try:
            try:
                names = os.listdir(fd)
            except OSError as e:
                return f"cannot list it: {e.strerror or e}"
            _Dir(self, fd, directory).read_all(names)
        finally:
            os.close(fd)
        return None

    def is_stale(self, snap: PublisherSnapshot) -> bool:
        if snap.hostname == self.hostname and not _same_process_alive(snap.pid, snap.process_create_time):
            return True
        # A job on another host (a shared directory) or in another UTS namespace
        # has pids we cannot check: its clock is all we have.
        interval = snap.interval_s if snap.interval_s is not None else MIN_STALE_INTERVAL_S
        return self.now - snap.timestamp > STALE_INTERVALS * max(interval, MIN_STALE_INTERVAL_S)


def _open_problem(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "a symbolic link (not followed: another user may have planted it)"
    if e.errno == errno.ENOTDIR:
        return "not a directory"
    return f"cannot open it: {e.strerror or e}"


class _Dir:
    """One directory, opened once: every name is looked up relative to its fd, so the directory
    cannot be swapped for a link between the check and the reads or removals."""

    def __init__(self, scan: _Scan, fd: int, directory: str) -> None:
        self.scan, self.fd, self.directory = scan, fd, directory

    def read_all(self, names: list[str]) -> None:
        snapshots = sorted((int(m.group(1)), name) for name in names if (m := _NAME.match(name)))
        if len(snapshots) > MAX_FILES:
            self.scan.problem(self.directory, f"{len(snapshots)} snapshot files; only the first {MAX_FILES} by pid were read")
            del snapshots[MAX_FILES:]
        for pid, name in snapshots:
            self.file(name, pid)
        temps = [(int(m.group(1)), name) for name in names if (m := _TEMP_NAME.match(name))]
        for pid, name in sorted(temps)[:MAX_FILES]:  # the rest in a later refresh, once these are gone
            self.temp_file(name, pid)

    def file(self, name: str, pid: int) -> None:
        path = os.path.join(self.directory, name)
        st = self.regular_and_ours(name, path)
        if st is None:
            return
        raw = self.read(name, path)
        if raw is None:
            return
        snap, reason = decode_snapshot(raw, path=path, now=self.scan.now)
        if snap is None:
            # Never removed, however old: nothing proves devctl wrote it.
            self.scan.problem(path, reason or "unreadable")
            return
        if snap.pid != pid:
            self.scan.problem(path, f"file name says pid {pid} but the snapshot says {snap.pid}")
            return
        if self.scan.is_stale(snap):
            self.drop(name, pid, st)
            return
        if pid in self.scan.seen_pids:
            return  # the same job seen through a second default directory: keep the first
        self.scan.seen_pids.add(pid)
        self.scan.publishers.append(snap)

    def regular_and_ours(self, name: str, path: str) -> os.stat_result | None:
        """lstat of `name` when it is a regular file owned by us; else None, with the reason recorded.
        Checked before opening: opening a device node can act on the device."""
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None  # its publisher stopped while we listed
        except OSError as e:
            self.scan.problem(path, f"cannot stat it: {e.strerror or e}")
            return None
        if stat.S_ISLNK(st.st_mode):
            self.scan.problem(path, "a symbolic link: not followed")
            return None
        if not stat.S_ISREG(st.st_mode):
            self.scan.problem(path, f"not a regular file ({file_kind(st.st_mode)}): not opened")
            return None
        if st.st_uid != self.scan.euid:
            self.scan.problem(path, f"owned by uid {st.st_uid}, not {self.scan.euid}: not read")
            return None
        return st

    def read(self, name: str, path: str) -> bytes | None:
        try:
            return read_regular(name, MAX_FILE_BYTES, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except UnsafeFile as e:  # replaced by a link or a FIFO since the lstat, or too large
            self.scan.problem(path, f"{e.strerror}: not read")
        except OSError as e:
            self.scan.problem(path, f"cannot read it: {e.strerror or e}")
        return None

    def temp_file(self, name: str, pid: int) -> None:
        """A publisher killed between writing its temp file and renaming it leaves one behind."""
        if not self.scan.remove_stale or _same_process_alive(pid, None):
            return
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode) or st.st_uid != self.scan.euid or st.st_size > MAX_FILE_BYTES:
            return
        try:
            raw = read_regular(name, MAX_FILE_BYTES, dir_fd=self.fd)
        except OSError:
            return
        if raw.startswith(SNAPSHOT_PREFIX):  # what devctl writes; anything else is not ours to remove
            self.unlink_if_unchanged(name, st)

    def drop(self, name: str, pid: int, st: os.stat_result) -> None:
        """Remove a stale snapshot unless it changed since it was read."""
        if self.scan.remove_stale and self.unlink_if_unchanged(name, st):
            self.scan.removed.add(pid)

    def unlink_if_unchanged(self, name: str, st: os.stat_result) -> bool:
        # A live publisher that fell behind may have replaced the file since
        # we read it; removing its fresh snapshot would hide a live job.
        try:
            cur = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return False
        if (cur.st_ino, cur.st_mtime_ns, cur.st_uid) != (st.st_ino, st.st_mtime_ns, self.scan.euid):
            return False
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError:
            return False
        return True


# --- decoding -----------------------------------------------------------------

# A JSON string, matched so that it always succeeds at its opening quote (at the
# closing quote or at the end of the input): no backtracking, linear on any input.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*\\?(?:"|\Z)', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")


def nesting_too_deep(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """True when `raw` nests arrays and objects deeper than `limit` (or leaves more than `limit` open).

    json's parser recurses once per level, so a 200,000-deep array would end in
    RecursionError, or on a small stack in a crash; this answers first, in a few
    linear passes at C speed: strings blanked, everything but brackets dropped,
    then innermost pairs removed one level per pass.
    """
    brackets = _STRING.sub(b'""', raw).translate(_SQUARE, _NOT_BRACKETS)
    for _ in range(limit):
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):
            break
        brackets = shorter
    return b"[]" in brackets or brackets.count(b"[") > limit


def decode_snapshot(raw: bytes, *, path: str | None = None, now: float | None = None) -> tuple[PublisherSnapshot | None, str | None]:
    """The snapshot in `raw`, or None and why it is not one (a line fit to print)."""
    if len(raw) > MAX_FILE_BYTES:
        return None, f"larger than {MAX_FILE_BYTES} bytes"
    if not raw.strip():
        return None, "empty file"
    if nesting_too_deep(raw):
        return None, f"not valid JSON (nested deeper than {MAX_DEPTH} levels)"
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_constant, parse_int=_int_token, parse_float=_float_token)
    except RecursionError:
        return None, "not valid JSON (nested too deeply)"
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError and the token checks below
        return None, f"not valid JSON ({_one_line(e)})"
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    if doc.get("schema") != SCHEMA:
        return None, f"schema {_show(doc.get('schema'))}, expected {SCHEMA!r}"
    try:
        return parse_snapshot(doc, path=path, now=now), None
    except (ValueError, TypeError, OverflowError) as e:
        return None, f"not a valid snapshot: {_one_line(e)}"


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _int_token(text: str) -> int:
    # int() of a 5000-digit token costs quadratic time (and raises past 4300 digits on new Pythons).
    # 64 digits is far past any figure, and lets the field checks name a merely too-large value.
    if len(text) > 64:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits")
    return int(text)


def _float_token(text: str) -> float:
    value = float(text[:40]) if len(text) <= 40 else math.inf
    if not math.isfinite(value):
        raise ValueError(f"number {printable(text, 24)} is out of range")
    return value


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def _show(value: Any) -> str:
    """A value from a snapshot, short and printable, for a problem line."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return printable(repr(value), 40)


# --- liveness ---------------------------------------------------------------


def _pid_exists(pid: int) -> bool:
    if not 0 < pid <= PID_MAX:
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
    """True when `pid` runs and is the process that wrote the snapshot, not a later one given its pid.
    A zombie (exited, not yet reaped by its parent) is not running: its snapshot is stale."""
    if not _pid_exists(pid):
        return False
    import psutil  # only here: keeps `import devctl.discovery.publishers` light

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                return False
            actual = proc.create_time() if create_time is not None else None
    except psutil.NoSuchProcess:  # psutil.ZombieProcess is one too
        return False
    except psutil.Error:
        return True  # cannot tell: trust the pid
    return actual is None or abs(actual - create_time) <= _CREATE_TIME_TOLERANCE_S


# --- parsing ----------------------------------------------------------------
#
# Every check names the field (devices[3].live_bytes) and the value it found:
# the problem line tells the user which job wrote what. A value outside its
# range (a negative size, a device id -7, a size past 2**63) makes the whole
# snapshot invalid rather than a figure in a table.


def parse_snapshot(doc: dict[str, Any], *, path: str | None = None, now: float | None = None) -> PublisherSnapshot:
    """A `devctl.publisher/1` document as a PublisherSnapshot; ValueError names the first bad field."""
    timestamp = _number(doc.get("timestamp"), "timestamp")
    interval = doc.get("interval_s")
    if interval is not None:
        interval = _number(interval, "interval_s")
        if not interval > 0:
            raise ValueError(f"interval_s is {interval!r}, not a positive number of seconds")
    devices = _list(doc.get("devices", []), "devices", MAX_DEVICES)
    arrays = _list(doc.get("largest_arrays", []), "largest_arrays", MAX_ARRAYS)
    command = _list(doc.get("command", []), "command", _MAX_COMMAND_WORDS)
    pid = _whole(doc.get("pid"), "pid", PID_MAX + 1)
    if pid == 0:
        raise ValueError("pid is 0, not a process id")
    return PublisherSnapshot(
        pid=pid,
        command=tuple(_text(c, f"command[{i}]", 4096) for i, c in enumerate(command)),
        hostname=_text(doc.get("hostname", ""), "hostname", 255),
        timestamp=timestamp,
        interval_s=interval,
        devices=tuple(_device(d, f"devices[{i}]") for i, d in enumerate(devices)),
        largest_arrays=tuple(_array(a, f"largest_arrays[{i}]") for i, a in enumerate(arrays)),
        error=_opt_text(doc.get("error"), "error", 1000),
        process_create_time=_opt_number(doc.get("process_create_time"), "process_create_time"),
        jax_version=_opt_text(doc.get("jax_version"), "jax_version", 64),
        jaxlib_version=_opt_text(doc.get("jaxlib_version"), "jaxlib_version", 64),
        backend_initialized=bool(doc.get("backend_initialized", True)),
        snapshot_s=_opt_number(doc.get("snapshot_s"), "snapshot_s"),
        path=path,
        age_s=None if now is None else now - timestamp,
    )


def _device(d: Any, where: str) -> PublishedDevice:
    if not isinstance(d, dict):
        raise ValueError(f"{where} is {_show(d)}, not an object")
    stats = d.get("memory_stats")
    if stats is not None:
        if not isinstance(stats, dict):
            raise ValueError(f"{where}.memory_stats is {_show(stats)}, not an object or null")
        if len(stats) > _MAX_STATS:
            raise ValueError(f"{where}.memory_stats has {len(stats)} keys, more than {_MAX_STATS}")
        stats = {printable(k, 64): _stat_value(v, f"{where}.memory_stats.{printable(k, 64)}") for k, v in stats.items()}
    platform = d.get("platform", "")
    if not isinstance(platform, str) or not _PLATFORM.match(platform):
        raise ValueError(f"{where}.platform is {_show(platform)}, not a platform name")
    return PublishedDevice(
        id=_whole(d.get("id"), f"{where}.id", _ID_LIMIT),
        platform=platform,
        device_kind=_text(d.get("device_kind", ""), f"{where}.device_kind", 128),
        process_index=_whole(d.get("process_index", 0) or 0, f"{where}.process_index", _ID_LIMIT),
        live_bytes=_whole(d.get("live_bytes"), f"{where}.live_bytes", _SIZE_LIMIT),
        live_arrays=_whole(d.get("live_arrays"), f"{where}.live_arrays", _SIZE_LIMIT),
        memory_stats=stats,
        memory_stats_error=_opt_text(d.get("memory_stats_error"), f"{where}.memory_stats_error", 1000),
    )


def _array(a: Any, where: str) -> PublishedArray:
    if not isinstance(a, dict):
        raise ValueError(f"{where} is {_show(a)}, not an object")
    shape = _list(a.get("shape", []), f"{where}.shape", _MAX_RANK)
    devices = _list(a.get("devices", []), f"{where}.devices", MAX_DEVICES)
    nbytes = _whole(a.get("nbytes"), f"{where}.nbytes", _SIZE_LIMIT)
    return PublishedArray(
        shape=tuple(_whole(n, f"{where}.shape[{i}]", _SIZE_LIMIT) for i, n in enumerate(shape)),
        dtype=_text(a.get("dtype", ""), f"{where}.dtype", 64),
        nbytes=nbytes,
        local_bytes=_whole(a.get("local_bytes", nbytes), f"{where}.local_bytes", _SIZE_LIMIT),
        devices=tuple(_whole(x, f"{where}.devices[{i}]", _ID_LIMIT) for i, x in enumerate(devices)),
    )


def _stat_value(v: Any, where: str) -> int | None:
    # -1 is how PJRT plugins say "not set"; the writer maps it to null, older writers may not.
    if v is None or (type(v) is int and v == -1):
        return None
    return _whole(v, where, _SIZE_LIMIT)


def _whole(v: Any, where: str, limit: int) -> int:
    """An integer in [0, limit): a size, a count, an id."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{where} is {_show(v) if v is not None else 'missing'}, not an integer")
    if not 0 <= v < limit:
        raise ValueError(f"{where} is {_show(v)}, out of range (0 to {limit - 1})")
    return v


def _number(v: Any, where: str) -> float:
    # json gives no NaN or infinity here (parse_constant refuses them); a caller handing a dict may.
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{where} is {_show(v) if v is not None else 'missing'}, not a number")
    return float(v)


def _opt_number(v: Any, where: str) -> float | None:
    return None if v is None else _number(v, where)


def _list(v: Any, where: str, limit: int) -> list:
    if not isinstance(v, list):
        raise ValueError(f"{where} is {_show(v)}, not a list")
    if len(v) > limit:
        raise ValueError(f"{where} has {len(v)} entries, more than {limit}")
    return v


def _text(v: Any, where: str, limit: int) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{where} is {_show(v)}, not a string")
    return printable(v, limit)


def _opt_text(v: Any, where: str, limit: int) -> str | None:
    return None if v is None else _text(v, where, limit)
