"""Read the snapshots that running JAX jobs publish with `devctl.publish.publish()`.

`Device.memory_stats()` and `jax.live_arrays()` answer only inside the process
that owns the devices, so each job writes `<pid>.json` into a per-user
directory and this module reads them back. No jax or numpy import here: the
CLI calls this on every `memstats --watch` refresh.

The directory is private to the user (mode 0700): snapshots carry command
lines, and a directory others can write to would let them plant snapshots.
The directory helpers are shared with the writer (devctl.publish) so both
sides agree on where to look and what to refuse; what a snapshot may hold, and
how one is decoded and checked, is devctl.discovery.snapshot_format.

What the reader trusts, and what it does not (see SECURITY.md):
- the directory's name may have been planted by another user (/dev/shm is
  world-writable): a symbolic link there is refused, never followed, and the
  directory is opened once (O_NOFOLLOW | O_DIRECTORY) and used through that fd;
- anything in it may be damaged or not a snapshot at all (the user may point
  DEVCTL_RUNTIME_DIR at a directory of their own): a link, a FIFO or a device
  named like a snapshot is never opened, every read is capped (each file, and
  the bytes of one refresh: what devctl prints from it stays bounded too), a
  document is checked for nesting before json parses it, every value is checked
  for range before it becomes a figure, and a command line is cut to what a
  person reads;
- a file is removed only when it is provably a snapshot devctl wrote (a valid
  devctl.publisher/1 document, owned by us, unchanged since it was read) whose
  process is gone. A damaged or foreign file is reported, never removed.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
import tempfile
import time

from devctl.discovery.snapshot_format import (
    MAX_FILE_BYTES,
    PID_MAX,
    SNAPSHOT_PREFIX,
    decode_snapshot,
)
from devctl.errors import InputRejected
from devctl.model.publishers import (
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
_NAME = re.compile(r"^([1-9][0-9]{0,6})\.json$")
# safefs.write_atomic's temporary name (.<pid>.json.<random>.tmp), and the fixed one older writers used.
_TEMP_NAME = re.compile(r"^\.([1-9][0-9]{0,6})\.json(?:\.[a-z0-9_]{1,16})?\.tmp$")
MAX_FILES = 512  # snapshot files read per directory and refresh: far more jobs than one host runs
# Snapshot bytes read per refresh, over every directory: what bounds the cost of a refresh and the size of what
# devctl prints from it (memstats --json repeats each device of each job once more as a process row). A job of
# 1024 devices with full allocator stats writes about 1 MiB; a host's jobs write a few KiB each.
MAX_READ_BYTES = 16 << 20
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
    """Why `path` is not a safe snapshot directory, or None when it is (or does not exist).
    A symbolic link is refused whatever it points at (lstat): another user may have planted it."""
    return private_directory_problem(path)


def ensure_directory(path: str) -> str | None:
    """Create `path` with mode 0700 if absent; return why it is unusable, or None."""
    # Checked before creating too: makedirs(exist_ok=True) accepts a link to a directory.
    problem = directory_problem(path)
    if problem:
        return problem
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        return f"cannot create it: {e.strerror or e}"
    return directory_problem(path)


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
    reported in `problems` and never removed. Raises InputRejected when the
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
            raise InputRejected(f"refusing to read snapshots from {printable(path, 500)}: {problem}")
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
        self.bytes_read = 0  # of snapshot files, over every directory: at most MAX_READ_BYTES

    def problem(self, path: str, reason: str) -> None:
        self.problems.append(PublisherProblem(printable(path, 500), printable(reason, 500)))

    def directory(self, directory: str) -> str | None:
        """Read one directory; why it was refused, or None."""
        problem = directory_problem(directory)
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
        unread = [name for pid, name in snapshots if not self.file(name, pid)]
        if unread:
            self.scan.problem(
                self.directory,
                f"{len(unread)} snapshot files not read (pids {_pids(unread)}): the snapshots read in one refresh are bounded "
                f"at {MAX_READ_BYTES >> 20} MiB",
            )
        temps = [(int(m.group(1)), name) for name in names if (m := _TEMP_NAME.match(name))]
        for pid, name in sorted(temps)[:MAX_FILES]:  # the rest in a later refresh, once these are gone
            self.temp_file(name, pid)

    def file(self, name: str, pid: int) -> bool:
        """Read, check and keep (or drop, if stale) one snapshot; False when it was left unread because the
        refresh has read MAX_READ_BYTES already."""
        path = os.path.join(self.directory, name)
        st = self.regular_and_ours(name, path)
        if st is None:
            return True
        if st.st_size > MAX_FILE_BYTES:  # said without reading it: the cap costs nothing
            self.scan.problem(path, f"is larger than {MAX_FILE_BYTES} bytes: not read")
            return True
        if self.scan.bytes_read + st.st_size > MAX_READ_BYTES:
            return False
        raw = self.read(name, path)
        if raw is None:
            return True
        self.scan.bytes_read += len(raw)
        snap, reason = decode_snapshot(raw, path=path, now=self.scan.now)
        if snap is None:
            # Never removed, however old: nothing proves devctl wrote it.
            self.scan.problem(path, reason or "unreadable")
        elif snap.pid != pid:
            self.scan.problem(path, f"file name says pid {pid} but the snapshot says {snap.pid}")
        elif self.scan.is_stale(snap):
            self.drop(name, pid, st)
        elif pid not in self.scan.seen_pids:  # else the same job seen through a second default directory: keep the first
            self.scan.seen_pids.add(pid)
            self.scan.publishers.append(snap)
        return True

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


def _pids(names: list[str], most: int = 5) -> str:
    shown = ", ".join(name.removesuffix(".json") for name in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


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
