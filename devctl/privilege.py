"""Advice that depends on who runs devctl: "sudo" and "run as root" are for a user who is not root.

To root, devctl names what is really missing instead (a capability, a read-only
/sys, a device the container was not given): telling root to use sudo sends
them in a circle. Each function takes the effective uid as a parameter, so
tests can ask for either wording; None means this process's.
"""

from __future__ import annotations

import os

CAP_SYS_PTRACE = 19  # linux/capability.h: reading another user's /proc/<pid>/fd needs it


def is_root(euid: int | None = None) -> bool:
    return (os.geteuid() if euid is None else euid) == 0


def as_root(command: str, euid: int | None = None) -> str:
    """`command` as this user must type it: behind sudo, unless devctl already runs as root."""
    return command if is_root(euid) else f"sudo {command}"


def has_capability(bit: int, status_text: str | None = None) -> bool | None:
    """Whether this process's effective capabilities (CapEff in /proc/self/status) include `bit`; None if unknown."""
    if status_text is None:
        try:
            with open("/proc/self/status") as f:
                status_text = f.read()
        except OSError:
            return None
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            try:
                return bool(int(line.split()[1], 16) >> bit & 1)
            except (IndexError, ValueError):
                return None
    return None


def why_uninspectable(count: int, euid: int | None = None, can_ptrace: bool | None = None) -> str:
    """Why `count` processes' open files could not be read, and what would let devctl read them."""
    who = f"{count} process" if count == 1 else f"{count} processes"
    if not is_root(euid):
        return f"{who} could not be inspected (run as root)"
    can_ptrace = has_capability(CAP_SYS_PTRACE) if can_ptrace is None else can_ptrace
    if can_ptrace is False:
        # Root without CAP_SYS_PTRACE (Docker's default set lacks it) cannot read other users' /proc/<pid>/fd.
        return f"{who} could not be inspected: devctl runs as root but without CAP_SYS_PTRACE (add it: docker run --cap-add SYS_PTRACE)"
    return f"{who} could not be inspected even as root with CAP_SYS_PTRACE: {'it belongs' if count == 1 else 'they belong'} to an outer user namespace (a sandbox's or VM agent's init)"


def inspect_fix(path: str, euid: int | None = None, can_ptrace: bool | None = None) -> str:
    """How to find who holds `path` when some processes could not be inspected."""
    if not is_root(euid):
        return f"run as root to see who holds it: sudo lsof -w {path}"
    can_ptrace = has_capability(CAP_SYS_PTRACE) if can_ptrace is None else can_ptrace
    if can_ptrace is False:
        return f"give devctl CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE), or run lsof -w {path} on the host"
    return f"look from outside this namespace, as root on the host: lsof -w {path}"


THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_fix(euid: int | None = None, writable: bool | None = None) -> str:
    """How to turn transparent hugepages on: sudo for a user, and for root the host when /sys is read-only (a container)."""
    if not is_root(euid):
        return f"echo always | sudo tee {THP_ENABLED}"
    writable = os.access(THP_ENABLED, os.W_OK) if writable is None else writable
    if writable:
        return f"echo always > {THP_ENABLED}"
    return f"set it on the host (/sys is read-only here, as in a container): echo always > {THP_ENABLED}"
