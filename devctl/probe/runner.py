"""Parent side: start a probe child, collect its events, bound it, name what went wrong."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from devctl.errors import UsageError
from devctl.probe.channel import FD_ENV

DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 60.0
_OUTPUT_TAIL_BYTES = 4096
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class ChildResult:
    events: list[dict] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    output_tail: str = ""  # the child's merged stdout and stderr, last few KiB
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
            return "did not answer in time and was killed"
        if self.signal_name:
            return f"killed by {self.signal_name}"
        tail = last_line(self.output_tail)
        return f"exited with status {self.returncode}" + (f": {tail}" if tail else "")


def check_timeout(text: str | None) -> float:
    if text is None:
        return DEFAULT_TIMEOUT_S
    try:
        timeout_s = float(text)
    except ValueError:
        timeout_s = float("nan")
    if not (0 < timeout_s <= MAX_TIMEOUT_S):  # NaN fails this too
        raise UsageError(f"--timeout (or DEVCTL_TIMEOUT) must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {text!r}")
    return timeout_s


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


def start_child(module: str, request: dict | None = None, *, env: dict[str, str] | None = None) -> Child:
    """Start `python -m <module> <request-json>`; with request None the child reads it from stdin (see send_request)."""
    read_fd, write_fd = os.pipe()
    full_env = child_env(env)
    full_env[FD_ENV] = str(write_fd)
    argv = [sys.executable, "-m", module, "-" if request is None else json.dumps(request)]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if request is None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=(write_fd,),
        env=full_env,
        start_new_session=True,  # Ctrl-C reaches devctl, which then ends the child itself
    )
    os.close(write_fd)
    return Child(module, proc, read_fd, time.monotonic())


def send_request(child: Child, request: dict) -> None:
    try:
        child.proc.stdin.write(json.dumps(request).encode())
        child.proc.stdin.close()
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
    except BaseException:
        _kill(proc)
        raise
    finally:
        os.close(child.read_fd)
        if proc.stdout:
            proc.stdout.close()
    result.returncode = proc.wait()
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
        _kill(child.proc)
        os.close(child.read_fd)


def _pump(proc, read_fd, result: ChildResult, timeout_s: float, on_event) -> None:
    sel = selectors.DefaultSelector()
    sel.register(read_fd, selectors.EVENT_READ, "events")
    sel.register(proc.stdout.fileno(), selectors.EVENT_READ, "output")
    pending = b""
    tail = b""
    open_streams = 2
    deadline = time.monotonic() + timeout_s
    while open_streams:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            result.timed_out = True
            _kill(proc)
            break
        for key, _ in sel.select(timeout=remaining):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fd)
                open_streams -= 1
                continue
            if key.data == "output":
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
