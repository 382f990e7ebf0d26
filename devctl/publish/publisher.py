"""The publishing thread of a JAX process: publish(), stop(), current(), snapshot(), and the file it keeps.

One daemon thread per process writes the document devctl.publish.document
builds, atomically, into the per-user directory (devctl.discovery.publishers
says where, and what it refuses), and removes the file it wrote when the
process exits or stop() is called. Process hooks stop it at exit and forget it
in a forked child. Importing this module does not import jax.
"""

from __future__ import annotations

import atexit
import math
import os
import stat
import sys
import threading
import time
import warnings
from typing import Any

from devctl.discovery.publishers import (
    ensure_directory,
    resolve_directory,
    snapshot_path,
)
from devctl.discovery.snapshot_format import MAX_ARRAYS, MAX_FILE_BYTES, SNAPSHOT_PREFIX
from devctl.publish.document import build_snapshot, describe, encode
from devctl.publish.holders import TopRequests, install_oom_hook
from devctl.publish.live_arrays import ArrayCache
from devctl.safefs import read_regular, write_atomic

THREAD_NAME = "devctl-monitor"
_STOP_JOIN_S = 5.0

_lock = threading.Lock()
_publisher: Publisher | None = None
_atexit_registered = False


# --- public API -------------------------------------------------------------


def publish(interval: float = 1.0, *, directory: str | None = None, top_k: int = 10) -> Publisher:
    """Start publishing snapshots every `interval` seconds from one daemon thread; return the publisher.

    Calling it again is harmless: the running publisher is returned, with its
    interval, top_k and directory updated to the new arguments. If the
    directory is not private to this user, a warning is issued once and
    nothing is written (the thread keeps checking, so fixing the mode works).
    """
    interval = _check_interval(interval)
    top_k = _check_top_k(top_k)
    path = resolve_directory(directory)
    # Import JAX here, in the caller's thread: the publisher thread then never
    # races the program's own first import.
    import jax  # noqa: F401

    global _publisher
    with _lock:
        pub = _publisher
        if pub is not None and pub.running:
            pub._update(interval=interval, top_k=top_k, directory=path)
            return pub
        pub = Publisher(interval=interval, directory=path, top_k=top_k)
        pub._check_directory_now(stacklevel=3)
        _register_process_hooks()
        # A RESOURCE_EXHAUSTED that ends the job leaves a post-mortem where the job publishes.
        install_oom_hook(lambda: (p.directory if (p := current()) is not None else None))
        pub._start()
        _publisher = pub
        return pub


def stop() -> None:
    """Stop the running publisher, if any, and remove its snapshot file."""
    global _publisher
    with _lock:
        pub, _publisher = _publisher, None
    if pub is not None:
        pub.stop()


def current() -> Publisher | None:
    """The running publisher of this process, or None."""
    pub = _publisher
    return pub if pub is not None and pub.running else None


def snapshot(top_k: int = 10) -> dict[str, Any]:
    """This process's view now, as the publisher would write it (handy in a notebook).

    Unlike the publisher thread, this initializes JAX's backends if the
    program has not yet: the caller asked for devices.
    """
    top_k = _check_top_k(top_k)
    pub = current()
    return build_snapshot(
        interval_s=pub.interval if pub else None,
        top_k=top_k,
        initialize=True,
        cache=None,
    )


class Publisher:
    """The publishing thread of this process. Create it with publish(), not directly."""

    def __init__(self, *, interval: float, directory: str, top_k: int) -> None:
        self._interval = interval
        self._directory = directory
        self._top_k = top_k
        self._pid = os.getpid()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._pending_error: str | None = None
        self._warned = False
        # (path, st_dev, st_ino) of the file this publisher last wrote: the only file it ever removes.
        self._written: tuple[str, int, int] | None = None
        self._cache = ArrayCache()
        self._requests = TopRequests()  # `devctl memstats --top` questions, answered after each snapshot
        self.snapshots_written = 0
        self._ticks = 0  # loop turns, written or not: lets a test wait for turns instead of sleeping

    @property
    def interval(self) -> float:
        return self._interval

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def path(self) -> str:
        """Where this process's snapshot lives."""
        return snapshot_path(self._directory, self._pid)

    @property
    def top_k(self) -> int:
        return self._top_k

    @property
    def running(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive() and not self._stopping and self._pid == os.getpid()

    def stop(self, timeout: float = _STOP_JOIN_S) -> None:
        """Stop the thread and remove the snapshot file. Safe to call twice."""
        global _publisher
        self._stopping = True
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread() and t.is_alive():
            t.join(timeout)
        if self._pid == os.getpid():
            self._remove_file()
            self._requests.forget(self._directory, self._pid)
        with _lock:
            if _publisher is self:
                _publisher = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<devctl.publish.Publisher {state} interval={self._interval}s path={self.path!r}>"

    # --- internals ----------------------------------------------------------

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _update(self, *, interval: float, top_k: int, directory: str) -> None:
        self._top_k = top_k
        if directory != self._directory:
            self._remove_file()
            self._directory = directory
            self._warned = False
            self._check_directory_now(stacklevel=4)
        if interval != self._interval:
            self._interval = interval
            self._wake.set()  # start the new cadence now rather than after the old interval

    def _check_directory_now(self, *, stacklevel: int) -> None:
        problem = ensure_directory(self._directory)
        if problem:
            self._warn(problem, stacklevel=stacklevel + 1)

    def _warn(self, problem: str, *, stacklevel: int = 2) -> None:
        """Say once, on the job's stderr, why nothing is published: a RuntimeWarning (shown by default)."""
        if self._warned:
            return
        self._warned = True
        message = f"devctl.publish: not publishing snapshots to {self._directory}: {problem}"
        try:
            warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)
        except Warning:  # -W error: raised in the publisher's thread it would reach nobody
            print(message, file=sys.stderr, flush=True)

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stopping:
            try:
                self._tick()
            except BaseException as e:  # noqa: BLE001 - the publisher must never take the program down
                self._pending_error = describe(e)
            self._ticks += 1
            now = time.monotonic()
            if self._wake.is_set():
                self._wake.clear()
                next_t = now  # interval changed (or stopping): re-time from now
            # Fixed cadence; after a stall skip the missed ticks instead of bursting.
            next_t = max(next_t + self._interval, now)
            self._wake.wait(next_t - now)

    def _tick(self) -> None:
        directory = self._directory
        problem = ensure_directory(directory)
        if problem:
            self._warn(problem)
            return
        error, self._pending_error = self._pending_error, None
        doc = build_snapshot(
            interval_s=self._interval, top_k=self._top_k, initialize=False, cache=self._cache, error=error
        )
        if self._stopping:
            return  # stop() may already have removed the file: do not bring it back
        path = snapshot_path(directory, self._pid)
        if foreign := _foreign_file(path, self._written):
            self._warn(foreign)
            return
        try:
            # A new file renamed over the old: readers never see half a snapshot, and a link or FIFO
            # put at the name is replaced (or refused), never written through.
            write_atomic(path, encode(doc), mode=0o600, sync=False)  # rewritten every interval; tmpfs as a rule
            st = os.lstat(path)
        except OSError as e:
            # Said on the job's stderr, once: a snapshot that cannot be written cannot carry its own error.
            self._warn(f"writing {os.path.basename(path)} failed: {e.strerror or e}")
            self._pending_error = f"writing the snapshot failed: {describe(e)}"
            return
        written = (path, st.st_dev, st.st_ino)
        if directory != self._directory:
            _unlink_own(written)  # publish() moved us to another directory while we wrote
            return
        self._written = written
        self.snapshots_written += 1
        try:
            # One listdir when nobody asks; each request taken once and never retried, whatever it holds.
            error = self._requests.tick(directory, self._pid)
        except Exception as e:  # noqa: BLE001 - the next snapshot says what went wrong; the job goes on
            error = f"answering --top requests failed: {describe(e)}"
        if error:
            self._pending_error = error  # the next snapshot says it, once: readers waiting on a token read it there

    def _remove_file(self) -> None:
        written, self._written = self._written, None
        if written is not None:
            _unlink_own(written)


def _foreign_file(path: str, written: tuple[str, int, int] | None) -> str | None:
    """Why the file at `path` must not be replaced (it is not a devctl snapshot), or None.
    One lstat a tick while the name still holds the file this publisher wrote last."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot check {os.path.basename(path)}: {e.strerror or e}"
    if written is not None and written == (path, st.st_dev, st.st_ino):
        return None
    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
        try:
            # A snapshot an earlier process with this pid left behind is ours to replace.
            if read_regular(path, MAX_FILE_BYTES).startswith(SNAPSHOT_PREFIX):
                return None
        except OSError:  # a link, a FIFO, larger than any snapshot: not ours
            pass
    return f"{os.path.basename(path)} is there and is not a devctl snapshot; it is left as it is"


def _unlink_own(written: tuple[str, int, int]) -> None:
    """Remove the file this publisher wrote, if it is still that file (same inode): never another."""
    path, dev, ino = written
    try:
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) == (dev, ino) and stat.S_ISREG(st.st_mode):
            os.unlink(path)
    except OSError:
        pass


# --- process life -------------------------------------------------------------


def _register_process_hooks() -> None:
    global _atexit_registered
    if _atexit_registered:
        return
    _atexit_registered = True
    # Registered after `import jax`, so it runs before JAX's own exit handlers
    # tear the backends down under a thread that may be reading them.
    atexit.register(_at_exit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    pub = _publisher
    if pub is not None and pub._pid == os.getpid():
        pub.stop()


def _after_fork_in_child() -> None:
    # The thread did not survive the fork and the file belongs to the parent;
    # the child may call publish() for itself.
    global _publisher, _lock
    _publisher = None
    _lock = threading.Lock()


# --- argument checks ----------------------------------------------------------


def _check_interval(interval: float) -> float:
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not math.isfinite(interval) or interval <= 0:
        raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
    return float(interval)


def _check_top_k(top_k: int) -> int:
    # The reader refuses snapshots listing more arrays than MAX_ARRAYS.
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 0 <= top_k <= MAX_ARRAYS:
        raise ValueError(f"top_k must be a whole number from 0 to {MAX_ARRAYS}, got {top_k!r}")
    return top_k
