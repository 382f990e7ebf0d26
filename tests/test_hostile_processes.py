"""devctl's children die with devctl, its temporary directories do not outlive it, and its coordinator listens only where asked.

Every test makes the real condition: devctl killed with SIGKILL while its
probe child sits in a plugin that never returns, a coordinator port read back
from the kernel's own socket tables (/proc/net/tcp, /proc/net/tcp6), real dead
processes behind the directories a killed run left.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, devctl_env

# Long enough never to end on its own while a test kills devctl (60 is the most --timeout takes).
NEVER = "60"


# ---------------------------------------------------------------- the kernel's view of processes and sockets


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaped yet has stopped running: it holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    if int(f.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def descendants_of(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in children_of(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def _address(hex_text: str) -> str:
    raw = bytes.fromhex(hex_text)
    # /proc/net/tcp{,6} print each 32-bit word of the address in host (little-endian) order.
    ip = ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def tcp_sockets(port: int, *, state: str = "0A", remote: bool = False) -> list[tuple[str, int]]:
    """(local address, inode) of every TCP socket in `state` (0A: LISTEN, 01: ESTABLISHED) whose local (or remote) port is `port`."""
    out = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, peer, st, inode = fields[1], fields[2], fields[3], int(fields[9])
            addr, port_hex = (peer if remote else local).rsplit(":", 1)
            if st == state and int(port_hex, 16) == port:
                out.append((_address(local.rsplit(":", 1)[0]), inode))
    return out


def listeners(port: int) -> list[str]:
    return sorted({addr for addr, _ in tcp_sockets(port)})


def socket_owner(inode: int) -> int | None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}") == f"socket:[{inode}]":
                    return int(entry)
        except OSError:
            continue
    return None


def wait_for(what: str, predicate, timeout: float = 60, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"devctl exited ({proc.returncode}) before {what}: {proc.stderr.read() if proc.stderr else ''}")
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:g} s: {what}")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def devctl(*args: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "devctl", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def kill_all(procs, pids=()) -> None:
    """End what a test started, and the children it found, should devctl have failed to (a failing test leaves nothing running)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    for pid in pids:
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- plugins that never return, and say where they run

_HANG = {
    # GIL released: the child's lifeline thread can run, and so can the kernel's death signal.
    "sleeps": "while True:\n        time.sleep(1)",
    # libc's sleep(3) called with the GIL held: no Python thread of the child runs again; only the kernel can end it.
    "holds_gil": "ctypes.PyDLL(None).sleep(3600)",
    # Changing the effective gid clears the parent-death signal (prctl(2)): only the lifeline thread can end it.
    "drops_gid": "os.setegid(65534)\n    while True:\n        time.sleep(1)",
}


def write_hanging_plugin(site: Path, name: str, how: str, marker: Path) -> None:
    """A jax plugin whose initialize() writes its pid to `marker`, then never returns, in the way `how` says."""
    pkg = site / "jax_plugins" / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "import ctypes, os, time\n"
        "def initialize():\n"
        f"    with open({str(marker)!r} + '.tmp', 'w') as f:\n"
        "        f.write(str(os.getpid()))\n"
        f"    os.rename({str(marker)!r} + '.tmp', {str(marker)!r})\n"
        f"    {_HANG[how]}\n"
    )


def plugin_env(site: Path, **extra: str) -> dict[str, str]:
    return devctl_env(devices=2, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), **extra)


# ---------------------------------------------------------------- children die with devctl


@pytest.mark.parametrize("how", sorted(_HANG))
def test_sigkill_of_devctl_list_ends_its_probe_child_stuck_in_a_plugin(tmp_path, how):
    if how == "drops_gid" and os.geteuid() != 0:
        pytest.skip("only root can change its effective gid to another group")
    marker = tmp_path / "plugin.pid"
    write_hanging_plugin(tmp_path / "site", "stuck", how, marker)
    proc = devctl("list", "--json", "--timeout", NEVER, env=plugin_env(tmp_path / "site"))
    child = None
    try:
        child = int(wait_for("the plugin is running in the probe child", lambda: marker.exists() and marker.read_text(), proc=proc))
        assert child in children_of(proc.pid)  # the plugin runs in devctl's own child, not somewhere else
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_for(f"the probe child {child} ({how}) ends after devctl was killed", lambda: not alive(child), timeout=20)
    finally:
        kill_all([proc], [child])


def test_a_child_whose_devctl_dies_while_it_starts_ends_itself(tmp_path):
    # devctl gone before the child armed its death signal: the kernel will never send it; the child must see it alone.
    script = (
        "import os, sys\n"
        "from devctl.probe.runner import start_child\n"
        "child = start_child('devctl.probe.pjrt_library', None)\n"  # reads its request from stdin: waits forever
        "print(child.proc.pid, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    parent = subprocess.run([sys.executable, "-c", script], env=devctl_env(), capture_output=True, text=True, timeout=60)
    assert parent.returncode == -signal.SIGKILL
    child = int(parent.stdout.strip())
    try:
        wait_for(f"the orphaned child {child} ends", lambda: not alive(child), timeout=20)
    finally:
        kill_all([], [child])


def test_a_child_started_from_a_thread_that_ends_keeps_running():
    # The kernel's parent-death signal follows the thread that forked, not the process: devctl forks from a thread that stays.
    from devctl.probe.runner import collect, send_request, start_child

    started = []

    def start_and_end() -> None:
        child = start_child("devctl.probe.pjrt_library", None)
        started.append(child)
        # Armed: the child starts its lifeline thread right after setting its death signal.
        wait_for("the child armed its death signal", lambda: len(os.listdir(f"/proc/{child.proc.pid}/task")) >= 2, timeout=30)

    thread = threading.Thread(target=start_and_end)
    thread.start()
    thread.join()
    (child,) = started
    time.sleep(0.5)  # a death signal is sent as the thread exits; this leaves it time to land
    assert alive(child.proc.pid), "the child died with the thread that started it"
    send_request(child, {"path": "/nonexistent/libfoo.so"})
    result = collect(child, timeout_s=30)
    assert result.returncode == 0 and result.last("result") is not None, result.output_tail


def test_sigkill_of_devctl_distributed_closes_the_port_and_the_next_run_sweeps_its_directory(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = devctl_env(devices=1, TMPDIR=str(scratch))
    port = free_port()
    # Process 1 never comes: process 0 listens until --timeout.
    proc = devctl("list", "--distributed", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", "0",
                  "--timeout", NEVER, env=env)  # fmt: skip
    coordinator = None
    try:
        (_, inode), *_ = wait_for("the coordinator listens", lambda: tcp_sockets(port), proc=proc)
        coordinator = socket_owner(inode)
        assert coordinator in children_of(proc.pid)  # devctl's child listens, not devctl
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_for("the coordinator child ends", lambda: not alive(coordinator), timeout=20)
        # The kernel may release a dead process's socket a moment after the process is gone.
        wait_for(f"nothing listens on port {port} any more", lambda: not tcp_sockets(port), timeout=20)
    finally:
        kill_all([proc], [coordinator])
    (left,) = list(scratch.glob("devctl-distributed-*"))  # SIGKILL leaves devctl no chance to remove it
    assert left.name.startswith(f"devctl-distributed-{proc.pid}-")

    # The next run, whatever it is, removes it: its owner is dead.
    nxt = subprocess.run(
        [sys.executable, "-m", "devctl", "list", "--distributed", "--coordinator", f"127.0.0.1:{free_port()}", "--num-processes", "1",
         "--process-id", "0", "--timeout", "20", "--json"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert nxt.returncode == 0, nxt.stderr
    assert json.loads(nxt.stdout)["num_processes"] == 1
    assert list(scratch.iterdir()) == []


# ---------------------------------------------------------------- the sweep removes only what is devctl's and dead


def _start_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[19])


def _dead_process() -> tuple[int, int]:
    """The pid and start time of a process that really ran and is gone."""
    p = subprocess.Popen(["sleep", "60"])
    start = _start_ticks(p.pid)
    p.kill()
    p.wait()
    return p.pid, start


def _devctl_dir(parent: Path, pid: int, start: int, suffix: str, *, log: bool = True) -> Path:
    d = parent / f"devctl-distributed-{pid}-{start}-{suffix}"
    d.mkdir(mode=0o700)
    if log:
        (d / "child.log").write_text("what the child said\n")
    return d


def test_sweep_removes_only_devctl_directories_whose_owner_is_gone(tmp_path):
    from devctl.probe.runner import sweep_orphaned_tempdirs

    dead_pid, dead_start = _dead_process()
    me, my_start = os.getpid(), _start_ticks(os.getpid())
    orphan = _devctl_dir(tmp_path, dead_pid, dead_start, "orphan01")
    reused = _devctl_dir(tmp_path, me, my_start + 1, "reused01")  # same pid, another process: its owner is gone
    live = _devctl_dir(tmp_path, me, my_start, "liveown1")
    with_extra = _devctl_dir(tmp_path, dead_pid, dead_start, "extra001")
    (with_extra / "notes.txt").write_text("not devctl's")
    locked = _devctl_dir(tmp_path, dead_pid, dead_start, "locked01")  # as an owner in another pid namespace holds it
    lock_fd = os.open(locked, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "child.log").write_text("keep me")
    (tmp_path / f"devctl-distributed-{dead_pid}-{dead_start}-symlink1").symlink_to(target)
    (tmp_path / f"devctl-distributed-{dead_pid}-{dead_start}-afile001").write_text("a file, not a directory")
    unrelated = [tmp_path / f"devctl-{os.getuid()}", tmp_path / "devctl-distributed-abc", tmp_path / f"devctl-heavy-{dead_pid}-{dead_start}-abcdefgh"]
    for d in unrelated:
        d.mkdir()
    others = None
    if os.geteuid() == 0:
        others = _devctl_dir(tmp_path, dead_pid, dead_start, "nobody01")
        os.chown(others, 65534, 65534)
    try:
        removed = sweep_orphaned_tempdirs("distributed", ("child.log",), directory=str(tmp_path))
    finally:
        os.close(lock_fd)
    assert sorted(removed) == sorted([str(orphan), str(reused)])
    assert not orphan.exists() and not reused.exists()
    assert (live / "child.log").exists()
    assert (with_extra / "notes.txt").read_text() == "not devctl's"  # what devctl did not write stays, and so does its directory
    assert (locked / "child.log").exists()
    assert (target / "child.log").read_text() == "keep me"
    assert (tmp_path / f"devctl-distributed-{dead_pid}-{dead_start}-symlink1").is_symlink()
    assert (tmp_path / f"devctl-distributed-{dead_pid}-{dead_start}-afile001").is_file()
    assert all(d.is_dir() for d in unrelated)
    if others is not None:
        assert (others / "child.log").exists()


def test_owned_tempdir_is_named_for_its_owner_locked_and_removed(tmp_path, monkeypatch):
    import tempfile

    from devctl.probe.runner import owned_tempdir, sweep_orphaned_tempdirs

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with owned_tempdir("distributed", ("child.log",)) as path:
        Path(path, "child.log").write_text("x")
        assert Path(path).name.startswith(f"devctl-distributed-{os.getpid()}-{_start_ticks(os.getpid())}-")
        assert oct(os.stat(path).st_mode & 0o777) == oct(0o700)
        # Another process cannot take the lock while the owner lives, and a sweep leaves the directory alone.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        assert sweep_orphaned_tempdirs("distributed", ("child.log",), directory=str(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the coordinator listens where the user said


def _loopback6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def _resolved(name: str) -> set[str]:
    return {str(ipaddress.ip_address(i[4][0].split("%")[0])) for i in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)}


def _cluster_of_two(host: str, port: int, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, list[str]]:
    """Process 0 alone, until its coordinator listens; what the kernel says it listens on."""
    env = env or devctl_env(devices=1)
    p0 = devctl("list", "--distributed", "--coordinator", f"{host}:{port}", "--num-processes", "2", "--process-id", "0",
                "--timeout", "30", "--json", env=env)  # fmt: skip
    wait_for("process 0's coordinator listens", lambda: listeners(port), proc=p0)
    return p0, listeners(port)


def _finish_with_process_1(p0: subprocess.Popen, host: str, port: int, env: dict[str, str] | None = None) -> None:
    p1 = devctl("list", "--distributed", "--coordinator", f"{host}:{port}", "--num-processes", "2", "--process-id", "1",
                "--timeout", "30", env=env or devctl_env(devices=1))  # fmt: skip
    try:
        out0, err0 = p0.communicate(timeout=120)
        _, err1 = p1.communicate(timeout=120)
    finally:
        kill_all([p0, p1])
    assert p0.returncode == 0 and p1.returncode == 0, err0 + err1
    assert json.loads(out0)["num_processes"] == 2


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]", "localhost", "this-hostname"])
def test_the_coordinator_listens_only_on_the_address_it_was_given(host):
    if host == "[::1]" and not _loopback6():
        pytest.skip("no IPv6 loopback here")
    if host == "this-hostname":
        host = socket.gethostname()
    port = free_port()
    p0, listening = _cluster_of_two(host, port)
    try:
        expected = {"[::1]": {"::1"}, "127.0.0.1": {"127.0.0.1"}}.get(host) or _resolved(host)
        # Never the wildcard: not 0.0.0.0, not ::, which JAX binds by default.
        assert listening and set(listening) <= expected, f"{host}:{port} listens on {listening}, expected only {expected}"
        _finish_with_process_1(p0, host, port)
    finally:
        kill_all([p0])


def test_jax_coordinator_bind_address_is_the_users_choice():
    port = free_port()
    env = devctl_env(devices=1, JAX_COORDINATOR_BIND_ADDRESS=f"[::]:{port}")
    p0, listening = _cluster_of_two("127.0.0.1", port, env)
    try:
        assert listening == ["::"], listening  # every interface, as the user asked JAX
        _finish_with_process_1(p0, "127.0.0.1", port)
    finally:
        kill_all([p0])


# ---------------------------------------------------------------- joining waits as long as asked


JOIN_GRACE_S = 2  # devctl.probe.distributed_runtime.JOIN_GRACE_S, as the README documents it


def test_a_coordinator_that_never_answers_is_given_up_on_after_the_timeout_and_its_grace():
    # A port that accepts connections and never speaks: joining starts when the child connects (jax imported).
    timeout = 3
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        proc = devctl("list", "--distributed", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", "1",
                      "--timeout", str(timeout), env=devctl_env(devices=1))  # fmt: skip
        held = []
        try:
            server.settimeout(60)
            held.append(server.accept()[0])  # the child began to join
            try:
                proc.wait(timeout=timeout + JOIN_GRACE_S + 0.5)  # + the parent reading the child's end and printing it
            except subprocess.TimeoutExpired:
                pytest.fail(f"devctl --timeout {timeout} still waited {timeout + JOIN_GRACE_S + 0.5} s after it began to join")
            err = proc.stderr.read()
        finally:
            kill_all([proc])
            for s in held:
                s.close()
    assert proc.returncode == 1
    (line,) = err.strip().splitlines()
    assert "process 1 could not join the cluster at 127.0.0.1:" in line and f"within {timeout} s" in line, line
