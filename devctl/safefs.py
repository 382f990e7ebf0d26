"""Reading and writing files another local user may have prepared.

Every file devctl reads from a place it does not own (a snapshot directory, a
--host-root tree, a baseline, a config file) and every file it writes for the
user goes through here, so one set of rules holds everywhere:

- a read opens with O_NONBLOCK (a FIFO put in a file's place never blocks),
  checks with fstat that what it opened is a regular file, and reads at most
  `cap` bytes (st_size can lie: procfs, a growing file);
- a read does not follow a symbolic link unless the caller says so (O_NOFOLLOW
  covers the last component; `within` confines every component to a root);
- a write goes to a new temporary file in the destination's directory, then
  renames it over the destination: a symlink at the destination is replaced,
  never written through, and a failed write (a full disk, /dev/full) leaves the
  old file as it was;
- a private directory is one that is not a symlink, is a directory, is owned by
  us and is closed to everyone else.

Stdlib only: this is imported on the paths of every command.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class UnsafeFile(OSError):
    """A path that is not a regular file, is a link where none was expected, or is larger than allowed."""


def read_regular(
    path: str, cap: int, *, follow_symlinks: bool = False, truncate: bool = False, dir_fd: int | None = None
) -> bytes:
    """At most `cap` bytes of the regular file at `path`; UnsafeFile for a link (unless followed), a FIFO,
    a device, a directory or a file larger than `cap`; OSError when it cannot be opened.

    With `truncate`, a larger file gives its first `cap` bytes instead (`head -c`): for text whose start
    is what matters, such as a process's long command line. With `dir_fd`, `path` is relative to that open
    directory (openat), so a directory checked once cannot be swapped for a link before its files are read."""
    flags = os.O_RDONLY | _NONBLOCK | _CLOEXEC | (0 if follow_symlinks else _NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_symlinks:
            raise UnsafeFile(errno.ELOOP, "is a symbolic link; not followed", path) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeFile(errno.EINVAL, f"is not a regular file ({file_kind(mode)})", path)
        data = _read_fd(fd, cap + 1)
    finally:
        os.close(fd)
    if len(data) > cap:
        if truncate:
            return data[:cap]
        raise UnsafeFile(errno.EFBIG, f"is larger than {cap} bytes", path)
    return data


def _read_fd(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes from `fd`, read with plain read(2) calls: a buffered file object would add an
    fstat, an isatty ioctl and an lseek to every read, and discovery reads hundreds of small sysfs files."""
    chunks = []
    while limit > 0:
        chunk = os.read(fd, min(limit, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def within(root: str, absolute: str, *, root_is_resolved: bool = False) -> str | None:
    """`absolute` (a path on the inspected host) resolved inside `root` the way the host's kernel would
    resolve it, every symlink taken relative to `root`; None when a link leaves `root`, loops, or a
    component is missing. The result is a real path under `root` with no symlink in it.

    `root_is_resolved` says `root` is already os.path.realpath's answer (a caller resolving many paths
    under one root saves resolving it again each time)."""
    if not root_is_resolved:
        root = os.path.realpath(root)
    parts = [p for p in absolute.split("/") if p not in ("", ".")]
    resolved = root
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            resolved = os.path.dirname(resolved) if resolved != root else root
            continue
        candidate = os.path.join(resolved, part)
        try:
            st = os.lstat(candidate)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > 40:  # the kernel's own limit (ELOOP)
                return None
            try:
                target = os.readlink(candidate)
            except OSError:
                return None
            if target.startswith("/"):
                resolved = root  # absolute links are the host's: they start again at the host's root
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        resolved = candidate
    return resolved


def write_atomic(path: str, data: bytes, mode: int = 0o644, *, sync: bool = True) -> None:
    """Replace `path` with `data` whole: readers see the old file or the new one, a symlink at `path` is
    replaced rather than followed, and on any failure the old file is left untouched (OSError raised).
    `sync=False` skips the fsync: for a file rewritten every second whose loss in a power cut costs nothing."""
    check_writable(path)
    directory = _resolved_directory(path)
    target = os.path.join(directory, os.path.basename(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        try:
            os.fchmod(fd, mode & ~_umask())
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def remove_own_file(path: str, *, starts_with: bytes | None = None) -> bool:
    """Remove `path` only when it is a regular file of this user (never a link: lstat), and, with `starts_with`,
    only when its content begins so (a file devctl wrote); whether it was removed. Never raises."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False
        if starts_with is not None and not read_regular(path, len(starts_with), truncate=True).startswith(starts_with):
            return False
        os.unlink(path)
    except OSError:
        return False
    return True


def check_writable(path: str) -> None:
    """UnsafeFile unless write_atomic may replace `path` with a regular file. A device, FIFO, socket or
    directory at `path` (or behind a link there) is never replaced by a file, nor is anything in /dev, /proc
    or /sys: as root, renaming over /dev/full or /dev/stdout would break the machine until it reboots."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(path)
        except OSError:
            st = None  # a dangling link: replaced like any link
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UnsafeFile(errno.EINVAL, f"is not a regular file ({file_kind(st.st_mode)}); give the path of a file to write", path)
    if in_system_tree(_resolved_directory(path)):
        # /dev/stdout is a link to a regular file when stdout is redirected to one: renaming over it would
        # replace the system's link, not write to stdout.
        raise UnsafeFile(errno.EINVAL, "is in /dev, /proc or /sys, where devctl writes nothing (of /dev, only /dev/shm)", path)


def _resolved_directory(path: str) -> str:
    """The directory `path` names, resolved as the kernel does: every link followed before the `..` after it
    (os.path.abspath would drop `link/..` as text, and `l/../stdout` with `l -> /dev/pts` is /dev/stdout)."""
    return os.path.realpath(os.path.dirname(path) or ".")


def in_system_tree(directory: str) -> bool:
    """Whether files in the resolved `directory` belong to the system: /proc, /sys and /dev, but /dev/shm.

    /dev/shm is the tmpfs of POSIX shared memory, meant for regular files: the default snapshot directory
    where $XDG_RUNTIME_DIR is unset (root, containers, CI runners, batch jobs) and Kubernetes' memory-backed
    emptyDir. Refusing it made every publisher there write nothing."""
    if directory == "/dev/shm" or directory.startswith("/dev/shm/"):
        return False
    return directory in ("/dev", "/proc", "/sys") or directory.startswith(("/dev/", "/proc/", "/sys/"))


def private_directory_problem(path: str) -> str | None:
    """Why `path` is not a directory only we may use, or None when it is one (or does not exist).
    A symlink is refused whatever it points at: another user may have planted it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot stat it: {e.strerror or e}"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link (not followed: another user may have planted it)"
    if not stat.S_ISDIR(st.st_mode):
        return f"not a directory ({file_kind(st.st_mode)})"
    uid = os.geteuid()
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not {uid}"
    bits = stat.S_IMODE(st.st_mode)
    if bits & 0o077:
        return f"mode {bits:04o} lets other users {_what_others_may(bits)} it; expected 0700"
    return None


def open_private_directory(path: str) -> int:
    """A file descriptor on the private directory `path`, opened without following a link in its last
    component and checked after opening (no swap between the check and the use). OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    st = os.fstat(fd)
    bits = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid() or bits & 0o077:
        os.close(fd)
        raise UnsafeFile(errno.EPERM, f"is not private to uid {os.geteuid()} (owner {st.st_uid}, mode {bits:04o})", path)
    return fd


def _what_others_may(mode: int) -> str:
    verbs = [v for bits, v in ((0o044, "read"), (0o022, "write")) if mode & bits]
    return " and ".join(verbs or ["enter"])


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words: "a FIFO", "a character device", ..."""
    for test, name in (
        (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"),
    ):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"


def _umask() -> int:
    """The process's umask, read without changing it (os.umask would race the job's other threads)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
