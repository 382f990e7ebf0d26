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
- the destination's directory is reached as the kernel would reach it, one
  component at a time, each opened with O_NOFOLLOW | O_DIRECTORY under the one
  before it (openat), and only through what no user but root and you can change
  (the rule, after systemd's `chase`, is at `open_output_directory`); the
  temporary file is created and renamed under that directory's descriptor, so
  nothing swapped in after the check is written through;
- a private directory is one that is not a symlink, is a directory, is owned by
  us and is closed to everyone else.

Stdlib only: this is imported on the paths of every command.
"""

from __future__ import annotations

import errno
import os
import stat

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# A directory walked through is only looked in, never read: O_PATH needs no read permission (a home
# directory of mode 0711 can be passed through) and gives a descriptor the *at calls take as their base.
_WALK = getattr(os, "O_PATH", os.O_RDONLY) | _DIRECTORY | _NOFOLLOW | _CLOEXEC
_MAX_LINKS = 40  # the kernel's own limit (ELOOP)


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
    `sync=False` skips the fsync: for a file rewritten every second whose loss in a power cut costs nothing.

    The directory is reached by open_output_directory's rule (no component another user can change), and the
    temporary file is created and renamed under that directory's descriptor: what the check saw is what is
    written, whatever is renamed or planted along the path meanwhile."""
    directory, name, where = open_output_directory(path)
    try:
        _check_target(directory, name, where, path)
        fd, tmp = _create_temporary(directory, name)
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
            os.rename(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=directory)
            except OSError:
                pass
            raise
    finally:
        os.close(directory)


def _create_temporary(directory: int, name: str) -> tuple[int, str]:
    """A new file `.<name>.<8 random characters>.tmp` in the open `directory`, as tempfile.mkstemp names it
    (the publisher's sweep knows that name), created with O_EXCL | O_NOFOLLOW: never an existing file or a link."""
    import secrets

    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    for _ in range(100):
        tmp = f".{name}.{''.join(secrets.choice(alphabet) for _ in range(8))}.tmp"
        try:
            return os.open(tmp, flags, 0o600, dir_fd=directory), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary name in its directory", name)


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
    """OSError (UnsafeFile for a refusal) unless write_atomic may replace `path` with a regular file: the
    directory must be reachable by open_output_directory's rule, and a device, FIFO, socket or directory at
    `path` (or behind a link there) is never replaced by a file, nor is anything in /dev, /proc or /sys: as
    root, renaming over /dev/full or /dev/stdout would break the machine until it reboots."""
    directory, name, where = open_output_directory(path)
    try:
        _check_target(directory, name, where, path)
    finally:
        os.close(directory)


def _check_target(directory: int, name: str, where: str, path: str) -> None:
    """The last component's rule: `name` in the open `directory` (resolved path `where`) may be replaced by a
    regular file. It is never followed to be written; a link there is followed only to say what it points at."""
    try:
        st: os.stat_result | None = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(name, dir_fd=directory)
        except OSError:
            st = None  # a dangling link: replaced like any link
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UnsafeFile(errno.EINVAL, f"is not a regular file ({file_kind(st.st_mode)}); give the path of a file to write", path)
    if path.endswith("/"):
        raise UnsafeFile(errno.EISDIR, "ends with '/', the path of a directory; give the path of a file to write", path)
    if in_system_tree(where):
        # /dev/stdout is a link to a regular file when stdout is redirected to one: renaming over it would
        # replace the system's link, not write to stdout.
        raise UnsafeFile(errno.EINVAL, "is in /dev, /proc or /sys, where devctl writes nothing (of /dev, only /dev/shm)", path)


def open_output_directory(path: str) -> tuple[int, str, str]:
    """(a descriptor on the directory that holds `path`'s last component, that component, the directory's
    resolved path), the directory reached as the kernel would reach it and only through what no user other
    than root and you can change. OSError naming the component and why otherwise (UnsafeFile for a refusal);
    the caller closes the descriptor.

    The path is walked one component at a time from / (or the working directory), each directory opened
    with O_NOFOLLOW | O_DIRECTORY under the one before it, each symbolic link read and its target walked the
    same way (`..` after a link is the link target's parent, as for the kernel). On the way:

    - a symbolic link is followed only when both the link and the directory holding it are owned by root or
      by you. A link someone else owns may have been planted (`/tmp/mdir -> /home/victim` made root replace
      the victim's file); one in a directory someone else owns may have been moved or hard-linked there.
    - a directory is passed through only when users other than root and you cannot write it (no write bit
      for group or others; a group-writable one counts as yours when its group is your own group, with no
      other member), or when it is sticky, like /tmp, where no one can rename or remove an entry they do not
      own. In a world-writable directory without the sticky bit anyone can swap a subdirectory for a link
      or a directory of theirs between two runs.

    systemd's `chase` (CHASE_SAFE) refuses the same transitions by ownership. Directories owned by another
    user are passed through (a container's root writing into a bind mount of the host user's): their owner
    can only plant links, which are not followed. The last component is not walked: it is replaced, never
    followed (check_writable), and the directory that holds it may be any, /tmp included."""
    if not path:
        raise FileNotFoundError(errno.ENOENT, "is empty; give the path of a file to write", path)
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise UnsafeFile(errno.EISDIR, "is not a regular file (a directory); give the path of a file to write", path)
    name = parts.pop()
    if name in (".", ".."):
        raise UnsafeFile(errno.EISDIR, "is not a regular file (a directory); give the path of a file to write", path)
    if path.startswith("/"):
        fd, where = os.open("/", _WALK), "/"
    else:
        fd, where = os.open(".", _WALK), _working_directory()
    try:
        here = os.fstat(fd)
        links = 0
        todo = parts
        while todo:
            part = todo.pop(0)
            if part == ".":
                continue
            _check_passable(here, where, path)
            if part == "..":
                parent = os.open("..", _WALK, dir_fd=fd)
                os.close(fd)
                fd, where = parent, os.path.dirname(where)
                here = os.fstat(fd)
                continue
            component = os.path.join(where, part)
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                raise FileNotFoundError(errno.ENOENT, f"directory {_shown(component)} does not exist", path) from None
            except OSError as e:
                raise _named(e, f"cannot look up {_shown(component)}", path) from None
            if stat.S_ISLNK(st.st_mode):
                _check_link(st, here, component, path)
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, f"more than {_MAX_LINKS} symbolic links on the way (at {_shown(component)})", path)
                target = os.readlink(part, dir_fd=fd)
                again = os.stat(part, dir_fd=fd, follow_symlinks=False)
                if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
                    raise UnsafeFile(errno.EAGAIN, f"{_shown(component)} changed while it was being checked; not followed", path)
                if not target:
                    raise FileNotFoundError(errno.ENOENT, f"{_shown(component)} is a symbolic link to nothing", path)
                if target.startswith("/"):
                    root = os.open("/", _WALK)
                    os.close(fd)
                    fd, where = root, "/"
                    here = os.fstat(fd)
                todo[:0] = [p for p in target.split("/") if p]
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, f"{_shown(component)} is not a directory ({file_kind(st.st_mode)})", path)
            try:
                child = os.open(part, _WALK, dir_fd=fd)  # O_NOFOLLOW | O_DIRECTORY: a link swapped in since the stat fails here
            except OSError as e:
                raise _named(e, f"cannot open directory {_shown(component)}", path) from None
            opened = os.fstat(child)
            if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
                os.close(child)
                raise UnsafeFile(errno.EAGAIN, f"{_shown(component)} changed while it was being checked; not passed through", path)
            os.close(fd)
            fd, where, here = child, component, opened
    except BaseException:
        os.close(fd)
        raise
    return fd, name, where


def _check_link(link: os.stat_result, holder: os.stat_result, component: str, path: str) -> None:
    """UnsafeFile unless the link `component` (lstat `link`, in a directory of stat `holder`) may be followed."""
    me = os.geteuid()
    if link.st_uid not in (0, me):
        raise UnsafeFile(
            errno.EPERM,
            f"{_shown(component)} is a symbolic link owned by uid {link.st_uid}, not by root or you (uid {me}): "
            "not followed, another user may have planted it; give the path it points to",
            path,
        )
    if holder.st_uid not in (0, me):
        raise UnsafeFile(
            errno.EPERM,
            f"{_shown(component)} is a symbolic link in a directory of uid {holder.st_uid}, not of root or you (uid {me}): "
            "not followed, another user may have put it there; give the path it points to",
            path,
        )


def _check_passable(here: os.stat_result, where: str, path: str) -> None:
    """UnsafeFile when the directory `where` (stat `here`) holds entries a user other than root and us may change."""
    bits = stat.S_IMODE(here.st_mode)
    if bits & stat.S_ISVTX:
        return  # sticky: an entry is renamed or removed only by its owner (or the directory's)
    if bits & stat.S_IWOTH or (bits & stat.S_IWGRP and not _own_group(here.st_gid)):
        who = "all users" if bits & stat.S_IWOTH else f"group {here.st_gid}"
        raise UnsafeFile(
            errno.EPERM,
            f"directory {_shown(where)} may be changed by {who} (mode {bits:04o}, owner uid {here.st_uid}, not sticky): "
            "not passed through, another user could swap what it holds; write into a directory only you can change",
            path,
        )


def _own_group(gid: int) -> bool:
    """Whether the group `gid` is ours alone: our effective group, listing no member but us (a user private
    group, whose directories are 0775 under umask 002)."""
    if gid != os.getegid():
        return False
    try:
        import grp
        import pwd

        members = grp.getgrgid(gid).gr_mem
        me = pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return False
    return all(member == me for member in members)


def _working_directory() -> str:
    try:
        return os.getcwd()
    except OSError:
        return "."  # removed since: the walk from "." still goes where the kernel would, and creating there fails


def _named(e: OSError, what: str, path: str) -> OSError:
    """`e` again, its message saying which component it was about."""
    return type(e)(e.errno, f"{what}: {e.strerror or e}", path)


def _shown(component: str) -> str:
    """A component of a path in a message: printable, and cut when someone made it absurdly long."""
    from devctl.text import printable

    return printable(component, 300)


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
    """What a file is, in words: "a FIFO", "a character device", "a regular file" (where a directory was wanted)..."""
    for test, name in (
        (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISREG, "a regular file"),
    ):  # fmt: skip
        if test(mode):
            return name
    return "of an unknown kind"


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
