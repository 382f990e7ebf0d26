"""Parent side: start a probe child, collect its events, bound it, name what went wrong."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import selectors
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from devctl.probe.channel import FD_ENV, LIFELINE_ENV

DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 60.0
_OUTPUT_TAIL_BYTES = 4096
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class ChildResult:
    events: list[dict] = field(default_factory=list)
    returncode: int | None = None
    silence_s: float | None = None  # killed by the watchdog: how long it had said nothing (the watchdog's limit)
    output_tail: str = ""  # the child's merged stdout and stderr, last few KiB
    output_head: str = ""  # ... and first few KiB: where XLA says why it ends the process, before a long dump
    elapsed_s: float = 0.0

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    @property
    def timed_out(self) -> bool:
        return self.silence_s is not None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def last(self, kind: str) -> dict | None:
        for ev in reversed(self.events):
            if ev.get("event") == kind:
                return ev
        return None

    def failure_text(self) -> str:
        """Why the child did not finish, in one line."""
        if self.timed_out:
            return f"said nothing for {self.silence_s:g} s and was killed"
        from devctl.model.xla_flags import fatal_message

        said = fatal_message(f"{self.output_head}\n{self.output_tail}")
        if self.signal_name:  # an abort says why first (older XLA aborts on a flag it refuses)
            return f"killed by {self.signal_name}" + (f": {said}" if said else "")
        why = said or last_line(self.output_tail)
        return f"exited with status {self.returncode}" + (f": {why}" if why else "")


# What names the work a probe child's event is about, in the order a person reads it.
_WHAT = ("kind", "name", "collective", "axis", "direction", "variant", "device", "dtype", "n", "size_bytes")


def last_word(events: list[dict]) -> str:
    """The last thing a child said before it went silent: where it was stuck."""
    if not events:
        return "it said nothing at all"
    ev = events[-1]
    what = " ".join(str(ev[k]) for k in _WHAT if isinstance(ev.get(k), (str, int)) and not isinstance(ev.get(k), bool))
    return f"its last event: {ev.get('event')}" + (f" ({what})" if what else "")


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # Never take 75% of a GPU that a real job needs, unless the user asked for it.
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


@dataclass
class Child:
    """A started probe child that has not been collected yet."""

    module: str
    proc: subprocess.Popen
    read_fd: int
    started: float
    # The write end of the child's lifeline pipe, held only here: when devctl dies, however it dies,
    # the kernel closes it and the child reads EOF (devctl.probe.channel ends it and its group then).
    lifeline_fd: int | None = None


def start_child(module: str, request: dict | None = None, *, env: dict[str, str] | None = None) -> Child:
    """Start `python -m <module> <request-json>`; with request None the child reads it from stdin (see send_request)."""
    read_fd, write_fd = os.pipe()
    life_read, life_write = os.pipe()  # both non-inheritable: no other child ever holds this child's lifeline
    full_env = child_env(env)
    full_env[FD_ENV] = str(write_fd)
    full_env[LIFELINE_ENV] = f"{life_read}:{os.getpid()}"
    argv = [sys.executable, "-m", module, "-" if request is None else json.dumps(request)]
    try:
        proc = _spawn(
            argv,
            stdin=subprocess.PIPE if request is None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd, life_read),
            env=full_env,
            start_new_session=True,  # Ctrl-C reaches devctl, which then ends the child itself
        )
    except BaseException:
        os.close(read_fd)
        os.close(life_write)
        raise
    finally:
        os.close(write_fd)
        os.close(life_read)
    return Child(module, proc, read_fd, time.monotonic(), life_write)


def end_child(child: Child) -> None:
    """Kill a child that will not be collected, and let go of its pipes."""
    _kill(child.proc)
    with contextlib.suppress(OSError):
        os.close(child.read_fd)
    _cut_lifeline(child)


def _cut_lifeline(child: Child) -> None:
    if child.lifeline_fd is not None:
        with contextlib.suppress(OSError):
            os.close(child.lifeline_fd)
        child.lifeline_fd = None


# ---------------------------------------------------------------- spawning from one thread that lives as long as devctl

_spawn_queue: queue.SimpleQueue | None = None
_spawn_lock = threading.Lock()


def _spawn(argv: list[str], **kwargs) -> subprocess.Popen:
    """Popen from the main thread, or from the one spawner thread, never from a short-lived worker.

    The kernel sends a child its parent-death signal when the *thread* that
    forked it ends, not the process (prctl(2), PR_SET_PDEATHSIG): a child
    started from a pool thread that later finishes would be killed mid-probe.
    """
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(argv, **kwargs)
    from concurrent.futures import Future

    global _spawn_queue
    with _spawn_lock:
        if _spawn_queue is None:
            _spawn_queue = queue.SimpleQueue()
            threading.Thread(target=_spawner, args=(_spawn_queue,), name="devctl-spawner", daemon=True).start()
    done: Future = Future()
    _spawn_queue.put((argv, kwargs, done))
    return done.result()


def _spawner(requests: queue.SimpleQueue) -> None:
    while True:
        argv, kwargs, done = requests.get()
        try:
            done.set_result(subprocess.Popen(argv, **kwargs))
        except BaseException as e:  # handed to the thread that asked
            done.set_exception(e)


def send_request(child: Child, request: dict) -> None:
    stdin = child.proc.stdin
    assert stdin is not None  # start_child always opens stdin as a pipe
    try:
        stdin.write(json.dumps(request).encode())
        stdin.close()
    except BrokenPipeError:  # it died already; collect() reports how
        pass


def collect(child: Child, *, timeout_s: float, on_event: Callable[[dict], None] | None = None) -> ChildResult:
    """Read the child's events until it exits.

    `timeout_s` is a watchdog: the child is killed when it sends no event for
    that long, so a long but progressing task survives and a hang does not.
    """
    proc = child.proc
    result = ChildResult()
    try:
        _pump(proc, child.read_fd, result, timeout_s, on_event)
        result.returncode = proc.wait()
    except BaseException:
        _kill(proc)
        raise
    finally:
        os.close(child.read_fd)
        if proc.stdout:
            proc.stdout.close()
        _cut_lifeline(child)  # after wait(): a child that is still leaving must not read it as devctl gone
    result.elapsed_s = time.monotonic() - child.started
    return result


def run_child(
    module: str,
    request: dict | None = None,
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    on_event: Callable[[dict], None] | None = None,
) -> ChildResult:
    """Run `python -m <module> <request-json>` and collect its events (see collect for the watchdog)."""
    return collect(start_child(module, request or {}, env=env), timeout_s=timeout_s, on_event=on_event)


_prestarted: dict[str, Child] = {}


def prestart(module: str) -> None:
    """Start a probe child now, before the CLI has even parsed its flags, so jax imports while typer does.

    The request follows later through stdin (take_prestarted + send_request);
    a child never asked for (bad flags, --help) is killed at exit.
    """
    import atexit

    child = start_child(module, None)
    _prestarted[module] = child
    atexit.register(_discard, module)


def take_prestarted(module: str) -> Child | None:
    return _prestarted.pop(module, None)


def _discard(module: str) -> None:
    child = _prestarted.pop(module, None)
    if child is not None:
        end_child(child)


def _pump(proc, read_fd, result: ChildResult, timeout_s: float, on_event) -> None:
    sel = selectors.DefaultSelector()
    sel.register(read_fd, selectors.EVENT_READ, "events")
    sel.register(proc.stdout.fileno(), selectors.EVENT_READ, "output")
    pending = b""
    tail = b""
    head = b""
    open_streams = 2
    deadline = time.monotonic() + timeout_s
    while open_streams:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            result.silence_s = timeout_s
            _kill(proc)
            break
        for key, _ in sel.select(timeout=remaining):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fd)
                open_streams -= 1
                continue
            if key.data == "output":
                if len(head) < _OUTPUT_TAIL_BYTES:
                    head += chunk[: _OUTPUT_TAIL_BYTES - len(head)]
                tail = (tail + chunk)[-_OUTPUT_TAIL_BYTES:]
                continue
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                result.events.append(event)
                deadline = time.monotonic() + timeout_s
                if on_event:
                    on_event(event)
    sel.close()
    result.output_tail = tail.decode("utf-8", "replace")
    result.output_head = head.decode("utf-8", "replace")


def _kill(proc: subprocess.Popen) -> None:
    """End the child's whole process group: TERM, a short grace, then KILL."""
    if proc.poll() is not None:
        return
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


# ---------------------------------------------------------------- a child's files, and what a killed devctl left behind
#
# A devctl killed by SIGKILL cannot remove its temporary directory. Each one is
# named `devctl-<kind>-<pid>-<start>-<random>` (start: the owner's start time in
# clock ticks since boot, /proc/<pid>/stat field 22, so a reused pid is not
# mistaken for the owner) and locked (flock) by its owner while it lives, which
# also covers an owner in another pid namespace sharing /tmp. The next run
# removes one only when all of this holds: the name matches, it is a directory
# (not a link) owned by this user, its owner process is gone, nobody holds its
# lock; and then only the files devctl writes there, so anything else in it
# keeps the directory too.


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # the command name may hold spaces and parentheses
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _owner_alive(pid: int, start: int) -> bool:
    now = _start_ticks(pid)
    if now is not None:
        return now == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, and /proc does not show it to us: assume it is the owner
        return True
    return True


def _tempdir_pattern(kind: str) -> re.Pattern:
    # mkdtemp's random part: 8 of [a-z0-9_].
    return re.compile(rf"devctl-{re.escape(kind)}-(\d+)-(\d+)-[a-z0-9_]{{8}}")


@contextlib.contextmanager
def owned_tempdir(kind: str, files: tuple[str, ...]) -> Iterator[str]:
    """A private directory for a child's files (only `files` are ever written there), removed on the way out.

    Directories of earlier runs that were killed before they could remove
    theirs are removed first (see above for what makes one removable).
    """
    import fcntl
    import tempfile

    sweep_orphaned_tempdirs(kind, files)
    me = os.getpid()
    path = tempfile.mkdtemp(prefix=f"devctl-{kind}-{me}-{_start_ticks(me) or 0}-")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield path
    finally:
        _remove_own(path, fd, files)
        os.close(fd)


def sweep_orphaned_tempdirs(kind: str, files: tuple[str, ...], directory: str | None = None) -> list[str]:
    """Remove what devctl runs that died left in `directory` (default: the temporary directory); returns the paths removed."""
    import tempfile

    directory = directory or tempfile.gettempdir()
    pattern = _tempdir_pattern(kind)
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if not m:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or _owner_alive(int(m[1]), int(m[2])):
            continue
        if _remove_if_unlocked(entry.path, files):
            removed.append(entry.path)
    return removed


def _remove_if_unlocked(path: str, files: tuple[str, ...]) -> bool:
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its owner still holds it (or the file system cannot say): leave it
            return False
        return _remove_own(path, fd, files)
    finally:
        os.close(fd)


def _remove_own(path: str, dir_fd: int, files: tuple[str, ...]) -> bool:
    """Unlink `files` (regular files only) inside the open directory, then the directory if nothing else is in it."""
    for name in files:
        try:
            if stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
    try:
        os.rmdir(path)  # fails, as it should, when something devctl did not write is in it
        return True
    except OSError:
        return False
