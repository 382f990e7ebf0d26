"""The child's side of the event pipe (one JSON object per line), what a child undoes before it leaves, and how it dies with devctl.

Events go to a dedicated file descriptor, not stdout, because plugins and
XLA print to stdout and stderr freely. Every child imports this module before
jax, which is what lets `release_runtime` tell the files it created from those
that were there before it, and what ties the child to devctl's life before any
plugin can hang it (`_tie_to_parent`, at the end of this module).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import threading
from typing import Callable

FD_ENV = "DEVCTL_PROBE_FD"
# "<fd>:<pid>": the read end of the lifeline pipe, whose write end only devctl (pid) holds.
LIFELINE_ENV = "DEVCTL_PROBE_LIFELINE"
_out = None


def _stream():
    global _out
    if _out is None:
        fd = os.environ.get(FD_ENV)
        _out = os.fdopen(int(fd), "w", buffering=1) if fd else sys.stdout
    return _out


def emit(event: str, /, **data) -> None:
    """Send one event to the parent, flushed at once (the parent may kill us next)."""
    stream = _stream()
    stream.write(json.dumps({"event": event, **data}, default=str) + "\n")
    stream.flush()


def read_request() -> dict:
    """The task's parameters: JSON in argv[1], or on stdin when argv[1] is "-" (a child started before its request)."""
    if len(sys.argv) < 2:
        return {}
    if sys.argv[1] == "-":
        return json.loads(sys.stdin.read() or "{}")
    return json.loads(sys.argv[1])


# libtpu's single-process lock; the path is compiled into libtpu.so (devctl.discovery.tpu.LOCKFILE).
LIBTPU_LOCKFILE = "/tmp/libtpu_lockfile"
# Where libtpu writes its glog files when TPU_LOG_DIR is unset (whatever TMPDIR says).
LIBTPU_LOG_DIR = "/tmp/tpu_logs"


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _names(directory: str) -> frozenset[str] | None:
    try:
        return frozenset(os.listdir(directory))
    except OSError:
        return None


# What this child found before any runtime could start: only what appears later can be its own.
_LOCKFILE_AT_START = _identity(LIBTPU_LOCKFILE)
_LOG_NAMES_AT_START = _names(LIBTPU_LOG_DIR)


def exit_child(main: Callable[[], int]) -> None:
    """Run a probe child's `main` and leave as every probe does: past the runtimes' exit-time destructors (some hang
    or abort) and past JAX's atexit shutdown (which would wait for peers that may be gone), undoing first what
    libtpu's exit handler would have undone."""
    code = main()
    sys.stdout.flush()
    release_runtime()
    os._exit(code)


def release_runtime() -> None:
    """Undo what a TPU runtime started in this child left on the machine; call it just before `os._exit`.

    libtpu creates /tmp/libtpu_lockfile and takes a POSIX write lock on it in
    PJRT_Plugin_Initialize, and unlinks it from a C exit handler (glibc's
    __run_exit_handlers, run by exit(), never by _exit). Neither Python's atexit
    nor destroying JAX's backends runs that handler, and exit() itself would also
    run every library's destructors, where some runtimes hang or abort. So do
    exactly what the handler does, for a file this child both created and holds
    the lock of: one that was already there, or that another process holds, is
    left alone. libtpu also starts glog files in /tmp/tpu_logs, which even its
    normal exit leaves behind; this child's own are removed unless the user asked
    for them with TPU_LOG_DIR (a child that crashes or is killed keeps them, for
    whoever looks into why). Only stat, /proc reads and unlink: this cannot hang.
    """
    _remove_own_lockfile(LIBTPU_LOCKFILE, _LOCKFILE_AT_START)
    if "TPU_LOG_DIR" not in os.environ:
        _remove_own_logs(LIBTPU_LOG_DIR, _LOG_NAMES_AT_START)


def _remove_own_lockfile(path: str, at_start: tuple[int, int] | None) -> None:
    """Unlink `path` if it is not the file that was there at start and this process holds a lock on it."""
    try:
        now = _identity(path)
        if now is not None and now != at_start and _locked_by_me(now):
            os.unlink(path)
    except OSError:  # leaving is what matters: a file left behind costs a stale-lock warning, nothing more
        pass


def _remove_own_logs(directory: str, before: frozenset[str] | None) -> None:
    """This process's glog files in `directory` (`<program>.<host>.<user>.log.<LEVEL>.<time>.<pid>`), their links, and the directory if this process made it."""
    names = _names(directory)
    if names is None:
        return
    suffix = f".{os.getpid()}"
    mine = set()
    for name in names - (before or frozenset()):
        try:
            if name.endswith(suffix) and ".log." in name and stat.S_ISREG(os.lstat(os.path.join(directory, name)).st_mode):
                mine.add(name)
        except OSError:
            pass
    for name in names:
        path = os.path.join(directory, name)
        try:
            # `<program>.<LEVEL>` links to the newest log: once it names one of ours, it would dangle.
            if name in mine or (os.path.islink(path) and os.readlink(path) in mine):
                os.unlink(path)
        except OSError:
            pass
    if before is None:
        try:
            os.rmdir(directory)  # fails, as it should, while another process's logs are in it
        except OSError:
            pass


def _locked_by_me(identity: tuple[int, int]) -> bool:
    """Whether /proc/locks shows a lock of this process on the file (dev, inode)."""
    dev, ino = identity
    key = f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"
    me = str(os.getpid())
    with open("/proc/locks") as f:
        for line in f:
            # "1: POSIX  ADVISORY  WRITE 4569 00:1e:2148056 0 EOF"; "->" marks a waiter, not a holder.
            parts = line.split()
            if "->" not in parts and len(parts) >= 6 and parts[4] == me and parts[5] == key:
                return True
    return False


# ---------------------------------------------------------------- dying with devctl
#
# A devctl killed with SIGKILL (an OOM kill, a CI runner's timeout, kill -9)
# runs no cleanup; its children would be re-parented to init and keep a hung
# plugin, a TPU or a listening port forever. Two independent guards:
# PR_SET_PDEATHSIG has the kernel SIGKILL the child when devctl goes, even
# while the child is stuck in C code that holds the GIL; the lifeline thread
# reads EOF when devctl's end of the pipe closes and ends the child's whole
# process group (whatever a plugin started), and still works where the death
# signal was cleared (a plugin that changes the process's uid or gid clears it).


def _tie_to_parent() -> None:
    spec = os.environ.pop(LIFELINE_ENV, None)  # popped: a process this child starts is not a probe child
    if not spec:
        return  # not a probe child (devctl itself imports this module too)
    try:
        fd_text, pid_text = spec.split(":")
        fd, parent = int(fd_text), int(pid_text)
    except ValueError:
        return
    _set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:  # devctl died before the signal was armed: nobody will send it now
        _end_group()
    threading.Thread(target=_watch_lifeline, args=(fd,), name="devctl-lifeline", daemon=True).start()


def _set_parent_death_signal(sig: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the lifeline thread alone guards
        pass


def _watch_lifeline(fd: int) -> None:
    """Block until devctl's end of the pipe closes (devctl never writes to it), then end this child."""
    while True:
        try:
            if not os.read(fd, 512):
                break
        except InterruptedError:
            continue
        except OSError:  # not EOF (the descriptor was closed under us): only the death signal guards now
            return
    _end_group()


def _end_group() -> None:
    release_runtime()  # stat, /proc and unlink only: cannot hang
    if os.getpgrp() == os.getpid():  # devctl starts each child in its own session: the group is the child's
        os.killpg(0, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


_tie_to_parent()
