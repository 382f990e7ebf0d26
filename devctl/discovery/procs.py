"""Processes: which hold a path open (from /proc/*/fd, the way tpu-info finds a TPU's owner), which is alive, which runs a program.

Link targets are compared as text with os.readlink, never followed, so a host
root's links (which point at the host's paths) and a fake tree's dangling
links both work. Another user's fds are unreadable without root: those
processes are counted, not reported as errors. A command line is shown with
its control characters replaced: any user can name a process anything.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from devctl.hostroot import HostRoot
from devctl.model.hardware import HolderScan, ProcessRef
from devctl.text import printable

PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT: no pid is larger


def path_holders(root: HostRoot, match: str | re.Pattern[str] | Iterable[str]) -> dict[str, list[ProcessRef]]:
    """{held path: processes holding it}; `match` is one path, several paths, or a compiled regex.

    Use `scan_holders` to also learn how many processes could not be inspected.
    """
    return {path: list(refs) for path, refs in scan_holders(root, match).holders.items()}


def scan_holders(root: HostRoot, match: str | re.Pattern[str] | Iterable[str]) -> HolderScan:
    wanted = _matcher(match)
    found: dict[str, dict[int, ProcessRef]] = {}
    inspected = uninspectable = 0
    ours = _own_processes(root)
    for pid in _pids(root):
        if pid in ours:
            continue
        try:
            targets = fd_targets(root, pid)
        except ProcessLookupError:
            continue  # exited while we looked
        if targets is None:
            uninspectable += 1
            continue
        inspected += 1
        hits = [t for t in targets if wanted(t)]
        if not hits:
            continue
        ref = process_ref(root, pid)
        for target in hits:
            found.setdefault(target, {})[pid] = ref
    holders = {path: tuple(refs[p] for p in sorted(refs)) for path, refs in sorted(found.items())}
    return HolderScan(holders=holders, inspected_processes=inspected, uninspectable_processes=uninspectable)


def _own_processes(root: HostRoot) -> set[int]:
    """devctl itself and its probe children: discovery runs while a probe child may hold the device it scans."""
    if not root.is_real:
        return set()
    me = os.getpid()
    ours = {me}
    for pid in _pids(root):
        stat = root.read_text(f"/proc/{pid}/stat") or ""
        # "pid (comm) state ppid ...": comm may contain spaces and parentheses, so split after the last ')'.
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1 and fields[1] == str(me):
            ours.add(pid)
    return ours


def _matcher(match: str | re.Pattern[str] | Iterable[str]):
    if isinstance(match, re.Pattern):
        return lambda target: match.fullmatch(target) is not None
    paths = {match} if isinstance(match, str) else set(match)
    return paths.__contains__


def _pids(root: HostRoot) -> list[int]:
    return sorted(int(name) for name in root.listdir("/proc") if name.isdigit())


def fd_targets(root: HostRoot, pid: int) -> list[str] | None:
    """Link targets of the pid's fds; None when they cannot be read. ProcessLookupError when it is gone."""
    fd_dir = root.local(f"/proc/{pid}/fd")
    if fd_dir is None:
        raise ProcessLookupError(pid)
    try:
        names = os.listdir(fd_dir)
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None
    except OSError:
        return None
    targets = []
    for name in names:
        try:
            targets.append(os.readlink(os.path.join(fd_dir, name)))
        except FileNotFoundError:
            continue  # fd closed between listdir and readlink
        except OSError:
            return None
    return targets


def process_ref(root: HostRoot, pid: int) -> ProcessRef:
    uid = _uid(root, pid)
    return ProcessRef(pid=pid, uid=uid, user=_user_name(root, uid), command=_command(root, pid))


def _uid(root: HostRoot, pid: int) -> int | None:
    status = root.read_text(f"/proc/{pid}/status") or ""
    m = re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE)
    return int(m.group(1)) if m else None


def _user_name(root: HostRoot, uid: int | None) -> str | None:
    if uid is None:
        return None
    # This machine's passwd names another root's uids wrongly, so only map them on the real host.
    if root.is_real:
        try:
            import pwd

            return pwd.getpwuid(uid).pw_name
        except (ImportError, KeyError):
            pass
    return str(uid)


def _command(root: HostRoot, pid: int) -> str | None:
    raw = root.read_bytes(f"/proc/{pid}/cmdline", 1 << 16) or b""
    args = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
    if args:
        return printable(" ".join(args))
    # Kernel threads and zombies have an empty cmdline; comm is still there.
    return printable(root.read_text(f"/proc/{pid}/comm", limit=256) or "") or None


def pid_alive(root: HostRoot, pid: int) -> bool:
    """Whether the pid runs in the root's pid namespace: it exists and is not a zombie.

    On this machine the kernel is asked first (signal 0): /proc mounted with hidepid hides another
    user's processes that still run. Under a host root, its /proc is all there is to go by.
    """
    if not 0 < pid <= PID_MAX:
        return False
    if not (_signal_reaches(pid) if root.is_real else root.exists(f"/proc/{pid}")):
        return False
    status = root.read_text(f"/proc/{pid}/status")
    if status is None:
        return True  # it exists; a status we may not read (hidepid) still means a live process
    m = re.search(r"^State:\s+(\S)", status, re.MULTILINE)
    return not (m and m.group(1) in ("Z", "X"))


def _signal_reaches(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    except OSError:
        return False
    return True


def find_process(root: HostRoot, name: str) -> ProcessRef | None:
    """The first live process whose comm or argv[0] basename is `name` (a daemon looked for by its program)."""
    for pid in _pids(root):
        comm = root.read_text(f"/proc/{pid}/comm", limit=256) or ""
        cmdline = root.read_text(f"/proc/{pid}/cmdline", limit=4096) or ""
        argv0 = os.path.basename(cmdline.split("\0", 1)[0]) if cmdline else ""
        # comm is cut to 15 characters: "nv-fabricmanage".
        if name in (argv0, comm) or (len(comm) == 15 and name.startswith(comm)):
            return process_ref(root, pid)
    return None
