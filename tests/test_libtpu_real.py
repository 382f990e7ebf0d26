"""Real libtpu on a machine without a TPU: devctl's probe children leave nothing behind (issue 10).

libtpu creates /tmp/libtpu_lockfile (and /tmp/tpu_logs) when it initializes,
and unlinks the lockfile from a C exit handler that a child ending with
os._exit never runs; devctl.probe.channel.release_runtime does it instead, for
what the child itself created. The heavy tests run devctl with the real
`jax[tpu]` from a cached virtual environment, each in a private /tmp and
/dev/shm (a mount namespace), so what is left there is exactly what devctl
left, and a real job's lockfile on this machine is never touched.

The light tests cover the ownership rule without libtpu, and the advice that
depends on whether devctl runs as root.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT
from hosttrees import tpu_v5e_host

from devctl import privilege
from devctl.probe import channel

# The cache tests/scenarios.py keeps (same variable, same default); its "tpu-0.10.2" venv, or a hand-built "tpu".
SCENARIOS = Path(os.environ.get("DEVCTL_SCENARIO_CACHE") or "/root/.cache/devctl-scenarios")
TPU_VENV = next((SCENARIOS / n for n in ("tpu-0.10.2", "tpu") if (SCENARIOS / n / "bin" / "python").exists()), SCENARIOS / "tpu")
TPU_PYTHON = TPU_VENV / "bin" / "python"
BUILD = (
    "python tests/scenarios.py build tpu-0.10.2, or by hand: "
    f"python3 -m venv {SCENARIOS / 'tpu'} && {SCENARIOS / 'tpu' / 'bin' / 'pip'} install 'jax[tpu]==0.10.2' 'typer<0.29' rich psutil nvidia-ml-py pytest jsonschema"
)
LOCKFILE = "/tmp/libtpu_lockfile"


# ---------------------------------------------------------------- heavy: the real libtpu


def _private_tmp_prefix() -> list[str] | None:
    """A command prefix that runs its argv with a fresh tmpfs on /tmp and /dev/shm, or None where that is not allowed."""
    if shutil.which("unshare") is None:
        return None
    mounts = 'mount -t tmpfs tmpfs /tmp && mount -t tmpfs tmpfs /dev/shm && exec "$@"'
    for userns in ([], ["--user", "--map-root-user"]):  # root, or a user allowed unprivileged namespaces
        prefix = ["unshare", *userns, "--mount", "--propagation", "private", "sh", "-c", mounts, "sh"]
        try:
            probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return None


@pytest.fixture(scope="module")
def in_private_tmp():
    if not TPU_PYTHON.exists():
        pytest.skip(f"no cached jax[tpu] virtual environment at {TPU_VENV}; build it with: {BUILD}")
    found = subprocess.run(
        [str(TPU_PYTHON), "-c", "import libtpu, jax; print(jax.__version__)"], capture_output=True, text=True, timeout=120
    )
    if found.returncode != 0:
        pytest.skip(f"{TPU_VENV} has no working jax with libtpu ({found.stderr.strip()[-200:]}); rebuild it with: {BUILD}")
    if str(ROOT).startswith(("/tmp/", "/dev/shm/")):
        pytest.skip(f"the checkout {ROOT} is under /tmp or /dev/shm, which the private /tmp hides from the tests' devctl")
    prefix = _private_tmp_prefix()
    if prefix is None:
        pytest.skip("needs a private /tmp (unshare --mount, as root or in a user namespace): a real job's libtpu lockfile must never be touched")
    return prefix


# Runs inside the private /tmp with the tpu venv's Python; prints one JSON report.
_DRIVER = textwrap.dedent(
    r"""
    import fcntl, json, os, socket, subprocess, sys
    LOCK = "/tmp/libtpu_lockfile"
    scenario, commands = sys.argv[1], json.loads(sys.argv[2])

    def left():
        return sorted(os.path.join(d, n) for top in ("/tmp", "/dev/shm") for d, dirs, files in os.walk(top) for n in dirs + files)

    def ident(path):
        try:
            st = os.stat(path)
            return [st.st_dev, st.st_ino]
        except OSError:
            return None

    def devctl(args):
        p = subprocess.run([sys.executable, "-m", "devctl", *args], capture_output=True, text=True, timeout=180)
        return {"args": args, "rc": p.returncode, "tail": (p.stdout + p.stderr)[-1500:], "left": left(), "lock": ident(LOCK)}

    out = {"before": left()}
    if scenario == "baseline":
        # The mechanism: libtpu's init creates the lockfile; _exit keeps it, a normal exit removes it.
        init = "import os, jax\nfrom jax._src import xla_bridge as xb\ntry:\n    xb._init_backend('tpu')\nexcept Exception:\n    pass\nprint(os.path.exists('/tmp/libtpu_lockfile'), flush=True)\n"
        p = subprocess.run([sys.executable, "-c", init + "os._exit(0)"], capture_output=True, text=True, timeout=180)
        out["created_during_init"] = p.stdout.strip() == "True"
        out["left_by_os_exit"] = os.path.exists(LOCK)
        if os.path.exists(LOCK):
            os.unlink(LOCK)
        subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], capture_output=True, timeout=180)
        out["left_by_plain_jax"] = os.path.exists(LOCK)
    elif scenario == "held":
        # Another live process holds the lock, as a running job does: it must keep its file.
        hold = "import fcntl, os, sys\nfd = os.open('/tmp/libtpu_lockfile', os.O_RDWR | os.O_CREAT, 0o600)\nfcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nprint('locked', flush=True)\nsys.stdin.read()\n"
        holder = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "locked"
        out["holder_lock"] = ident(LOCK)
        out["runs"] = [devctl(c) for c in commands]
        out["holder_alive"] = holder.poll() is None
        holder.stdin.close()
        holder.wait(30)
    elif scenario == "stale":
        # A leftover lockfile nobody holds: devctl's child locks it again, but did not create it.
        open(LOCK, "w").close()
        out["stale_lock"] = ident(LOCK)
        out["runs"] = [devctl(c) for c in commands]
    else:
        out["runs"] = [devctl(c) for c in commands]
    print(json.dumps(out))
    """
)


def _drive(prefix: list[str], scenario: str, commands: list[list[str]] = ()) -> dict:
    env = dict(os.environ)
    for name in ("JAX_PLATFORMS", "TPU_LOG_DIR", "XLA_FLAGS", "DEVCTL_RUNTIME_DIR"):
        env.pop(name, None)
    env.update(PYTHONPATH=str(ROOT), NO_COLOR="1", TPU_SKIP_MDS_QUERY="1")
    proc = subprocess.run(
        [*prefix, str(TPU_PYTHON), "-c", _DRIVER, scenario, json.dumps(list(commands))],
        capture_output=True, text=True, timeout=900, env=env, cwd="/",
    )  # fmt: skip
    assert proc.returncode == 0, f"driver failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _assert_ran(run: dict) -> None:
    # 0 or 1 (a check that fails is still an answer); never a usage error, a crash or a hang. Python's own
    # "No module named devctl" is exit 1 too: devctl must have run.
    assert run["rc"] in (0, 1), f"devctl {' '.join(run['args'])} exited {run['rc']}:\n{run['tail']}"
    assert "No module named" not in run["tail"] and "Traceback" not in run["tail"], run["tail"]


@pytest.mark.heavy
def test_real_libtpu_makes_the_lockfile_that_os_exit_leaves_and_plain_jax_removes(in_private_tmp):
    out = _drive(in_private_tmp, "baseline")
    assert out["before"] == []
    # Without these the tests below would pass for want of a lockfile.
    assert out["created_during_init"], "libtpu no longer creates /tmp/libtpu_lockfile when it initializes"
    assert out["left_by_os_exit"], "a child ending with os._exit no longer leaves the lockfile"
    assert not out["left_by_plain_jax"], "plain JAX leaves the lockfile too"


@pytest.mark.heavy
def test_every_probing_command_leaves_nothing_in_tmp_or_shm(in_private_tmp):
    port = _free_port()
    commands = [
        ["list"], ["check"], ["doctor"], ["memstats"],
        ["bench", "transfer", "--sizes", "1MiB", "--repeats", "2"],
        ["list", "--distributed", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "1", "--process-id", "0", "--timeout", "20"],
    ]  # fmt: skip
    out = _drive(in_private_tmp, "clean", commands)
    assert out["before"] == []
    for run in out["runs"]:
        _assert_ran(run)
        assert run["lock"] is None, f"devctl {' '.join(run['args'])} left {LOCKFILE}"
        assert run["left"] == [], f"devctl {' '.join(run['args'])} left {run['left']}"
    # The probe saw libtpu, so the lockfile really was made and removed: the tpu row says why it failed.
    assert "tpu" in out["runs"][0]["tail"]


@pytest.mark.heavy
def test_a_lockfile_another_live_process_holds_is_never_removed(in_private_tmp):
    out = _drive(in_private_tmp, "held", [["list"], ["check"], ["doctor"], ["memstats"]])
    assert out["holder_alive"]
    for run in out["runs"]:
        _assert_ran(run)
        assert run["lock"] == out["holder_lock"], f"devctl {' '.join(run['args'])} removed or replaced a lockfile another process holds"
        assert run["left"] == [LOCKFILE], run["left"]
    check = out["runs"][1]["tail"]
    assert "held by pid" in check and LOCKFILE in check


@pytest.mark.heavy
def test_a_stale_lockfile_devctl_did_not_create_is_left_alone(in_private_tmp):
    out = _drive(in_private_tmp, "stale", [["list"], ["memstats"]])
    for run in out["runs"]:
        _assert_ran(run)
        assert run["lock"] == out["stale_lock"], f"devctl {' '.join(run['args'])} removed a lockfile it did not create"
        assert run["left"] == [LOCKFILE], run["left"]


# ---------------------------------------------------------------- light: the ownership rule, without libtpu


def test_release_removes_only_a_lockfile_this_process_created_and_holds(tmp_path):
    path = str(tmp_path / "libtpu_lockfile")

    def lock() -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd

    fd = lock()  # created and held here, as libtpu does in the child
    channel._remove_own_lockfile(path, None)
    assert not os.path.exists(path)
    os.close(fd)

    fd = lock()  # held here, but it was there when the child started
    channel._remove_own_lockfile(path, channel._identity(path))
    assert os.path.exists(path)
    os.close(fd)
    os.unlink(path)

    open(path, "w").close()  # created but not locked by this process (another process's, or nobody's)
    channel._remove_own_lockfile(path, None)
    assert os.path.exists(path)
    os.unlink(path)

    # Held by another live process: it keeps it whoever made it.
    hold = f"import fcntl, os, sys\nfd = os.open({path!r}, os.O_RDWR | os.O_CREAT)\nfcntl.lockf(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\nsys.stdin.read()"
    holder = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        channel._remove_own_lockfile(path, None)
        assert os.path.exists(path)
    finally:
        holder.stdin.close()
        holder.wait(30)


def test_release_removes_this_process_logs_and_links_only(tmp_path):
    logs = tmp_path / "tpu_logs"
    logs.mkdir()
    pid = os.getpid()
    (logs / "tpu_driver.vm.root.log.INFO.20260101-000000.99999999").write_text("another process's\n")
    before = channel._names(str(logs))
    mine = f"tpu_driver.vm.root.log.INFO.20260101-000001.{pid}"
    (logs / mine).write_text("ours\n")
    (logs / "tpu_driver.INFO").symlink_to(mine)
    channel._remove_own_logs(str(logs), before)
    assert sorted(p.name for p in logs.iterdir()) == ["tpu_driver.vm.root.log.INFO.20260101-000000.99999999"]

    fresh = tmp_path / "made_here"
    fresh.mkdir()
    (fresh / f"tpu_driver.vm.root.log.WARNING.20260101-000002.{pid}").write_text("ours\n")
    (fresh / "tpu_driver.WARNING").symlink_to(f"tpu_driver.vm.root.log.WARNING.20260101-000002.{pid}")
    channel._remove_own_logs(str(fresh), None)  # the directory did not exist when the child started
    assert not fresh.exists()


# ---------------------------------------------------------------- light: sudo only for a user who is not root


def test_sudo_and_run_as_root_are_said_only_to_a_user_who_is_not_root():
    assert privilege.as_root("rm /tmp/libtpu_lockfile", euid=1000) == "sudo rm /tmp/libtpu_lockfile"
    assert privilege.as_root("rm /tmp/libtpu_lockfile", euid=0) == "rm /tmp/libtpu_lockfile"

    assert "sudo lsof -w /tmp/libtpu_lockfile" in privilege.inspect_fix(LOCKFILE, euid=1000)
    for can_ptrace in (True, False):
        fix = privilege.inspect_fix(LOCKFILE, euid=0, can_ptrace=can_ptrace)
        why = privilege.why_uninspectable(3, euid=0, can_ptrace=can_ptrace)
        assert "sudo" not in fix and "run as root" not in fix
        assert "(run as root)" not in why and why.startswith("3 processes could not be inspected")
    # To root, name what is really missing: the capability, or the namespace the others are in.
    assert "CAP_SYS_PTRACE" in privilege.inspect_fix(LOCKFILE, euid=0, can_ptrace=False)
    assert "CAP_SYS_PTRACE" in privilege.why_uninspectable(3, euid=0, can_ptrace=False)
    assert "on the host" in privilege.inspect_fix(LOCKFILE, euid=0, can_ptrace=True)
    assert "outer user namespace" in privilege.why_uninspectable(3, euid=0, can_ptrace=True)
    assert privilege.why_uninspectable(3, euid=1000) == "3 processes could not be inspected (run as root)"
    assert privilege.why_uninspectable(1, euid=1000) == "1 process could not be inspected (run as root)"

    thp = "/sys/kernel/mm/transparent_hugepage/enabled"
    assert privilege.thp_fix(euid=1000) == f"echo always | sudo tee {thp}"
    assert privilege.thp_fix(euid=0, writable=True) == f"echo always > {thp}"
    assert "host" in privilege.thp_fix(euid=0, writable=False) and "sudo" not in privilege.thp_fix(euid=0, writable=False)

    assert privilege.has_capability(privilege.CAP_SYS_PTRACE, "CapEff:\t000001fffeffffff\n") is True
    assert privilege.has_capability(privilege.CAP_SYS_PTRACE, "CapEff:\t00000000a80425fb\n") is False  # Docker's default set
    assert privilege.has_capability(privilege.CAP_SYS_PTRACE, "Name:\tx\n") is None


@pytest.mark.parametrize("euid", [0, 1000])
def test_tpu_lockfile_advice_depends_on_who_runs_devctl(tmp_path, monkeypatch, euid):
    from devctl.checks.machine import check_tpu
    from devctl.discovery import tpu
    from devctl.model.check import Expectations

    monkeypatch.setattr(os, "geteuid", lambda: euid)
    host = tpu_v5e_host(tmp_path)
    host.lockfile("31337\n")  # stale: names a dead pid, nobody has it open
    report = tpu.tpu_info(host.root, environ={})
    assert report.lockfile.state == "stale"
    verdict = check_tpu(SimpleNamespace(hardware=lambda: SimpleNamespace(tpu=report), expectations=Expectations()))
    if euid == 0:
        assert report.lockfile.reason.endswith(": rm /tmp/libtpu_lockfile")
        assert verdict.remediation == "rm /tmp/libtpu_lockfile"
    else:
        assert report.lockfile.reason.endswith(": sudo rm /tmp/libtpu_lockfile")
        assert verdict.remediation == "sudo rm /tmp/libtpu_lockfile"


def test_a_lockfile_nobody_has_locked_is_stale_even_when_some_processes_cannot_be_inspected(tmp_path):
    # Here as root: pid 1 of a sandbox in another user namespace cannot be inspected, and every
    # leftover lockfile read "unknown ... (run as root)". libtpu locks the file while it runs, and
    # /proc/locks lists every visible process's locks, so no listed lock means nobody holds it.
    from devctl.discovery import tpu

    host = tpu_v5e_host(tmp_path)
    host.lockfile()
    host.process(4300, ["python", "job.py"], uid=0, fds_readable=False)
    assert tpu.tpu_info(host.root, environ={}).lockfile.state == "unknown"  # no /proc/locks to read
    host.file("/proc/locks", "1: POSIX  ADVISORY  WRITE 999 00:00:1 0 EOF\n")  # another file's lock
    lock = tpu.tpu_info(host.root, environ={}).lockfile
    assert lock.state == "stale" and lock.reason.endswith(privilege.as_root("rm /tmp/libtpu_lockfile"))
    host.proc_lock(-1, "/tmp/libtpu_lockfile", kind="OFDLCK")  # a lock whose owner /proc/locks does not name
    assert tpu.tpu_info(host.root, environ={}).lockfile.state == "unknown"
