"""Defaults as users get them: a job that calls `publish()` with no argument, and devctl's readers with no flag,
in a clean environment (no DEVCTL_*, no XDG_RUNTIME_DIR: root, containers, CI runners, batch jobs), as root and as
a second, unprivileged user, in a private /dev/shm as a container has one.

Every other test of the publisher names its own directory and timeout; these are their twins that do not. The job
must appear in `memstats`, answer `--top`, be in the exporter's `devctl_job_*` series, and leave a post-mortem when
it dies of RESOURCE_EXHAUSTED, all through the default directory (/dev/shm/devctl-UID without XDG_RUNTIME_DIR,
$XDG_RUNTIME_DIR/devctl with it). Issue 20: the writer refused every path under /dev, so all of that was silent
while the tests, which set DEVCTL_RUNTIME_DIR, passed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

NOBODY = 65534
MIB = 1 << 20

# The job: publish() with its defaults, an 8 MiB holder, then, when told, a 4 TiB request that no machine grants.
_JOB = textwrap.dedent(
    """
    import json, os, sys
    import jax.numpy as jnp
    from devctl.publish import publish
    pub = publish()
    holder = jnp.ones((2, 1024, 1024), jnp.float32)
    holder.block_until_ready()
    print(json.dumps({"pid": os.getpid(), "directory": pub.directory}), flush=True)
    sys.stdin.readline()
    jnp.zeros((1 << 42,), jnp.uint8).block_until_ready()
    """
)

# Runs as the user under test, in the clean environment: the job, then each reader as a user types it; one JSON
# report on stdout. `reader_env` is the readers' environment where it differs from the job's (a cron job read from
# a login shell).
_DRIVER = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    job_src, reader_env = sys.argv[1], json.loads(sys.argv[2])
    py = sys.executable
    readers = dict(os.environ, **reader_env)
    out = {"uid": os.geteuid()}

    def devctl(*args):
        p = subprocess.run([py, "-m", "devctl", *args], capture_output=True, text=True, timeout=240, env=readers)
        return {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr[-3000:]}

    job = subprocess.Popen([py, "-c", job_src], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out["job"] = json.loads(job.stdout.readline() or "null")
        if out["job"]:
            pid = str(out["job"]["pid"])
            out["memstats"] = devctl("memstats", "--json")
            out["top"] = devctl("memstats", "--pid", pid, "--top", "3", "--json")
            out["exporter"] = devctl("exporter", "--once", "--per-process")  # a pid label: only this job's series
        # communicate: the job's stderr must never fill its pipe while it is waited for.
        _, err = job.communicate("\\n" if out["job"] else None, timeout=120)
        out["job_stderr"] = err[-5000:]
        out["postmortem"] = devctl("memstats", "--postmortem", "--json")
        if out["job"]:
            # The job's own post-mortem, read: not left in the user's real directory for doctor to report ever after.
            import glob
            for path in glob.glob(os.path.join(out["job"]["directory"], str(out["job"]["pid"]) + "-*.postmortem.json")):
                os.unlink(path)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    out["job_rc"] = job.returncode
    print(json.dumps(out))
    """
)


def _clean_env(home: str) -> dict[str, str]:
    """What a batch job or a container's shell has: this environment (its driver's LD_LIBRARY_PATH, its
    CUDA_VISIBLE_DEVICES) without DEVCTL_* or XDG_RUNTIME_DIR, and one CPU device unless the machine has an
    accelerator (no XLA_FLAGS or JAX_PLATFORMS of the tests')."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVCTL_") and k not in ("XDG_RUNTIME_DIR", "XLA_FLAGS", "JAX_PLATFORMS")}
    return env | {"HOME": home, "LANG": "C.UTF-8", "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}


def _as_user(uid: int) -> list[str]:
    if uid == os.geteuid():
        return []
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def _private_shm() -> list[str] | None:
    """A prefix that runs its argv with a fresh tmpfs on /dev/shm (a container's), or None where that is not allowed.
    Then nothing another test or user has in /dev/shm is seen, and nothing is left there."""
    if shutil.which("unshare") is None:
        return None
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"', "sh"]
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return prefix if probe.returncode == 0 else None


def _python_for(uid: int) -> tuple[str, str]:
    """(interpreter, PYTHONPATH) with which `uid` runs this checkout and its packages, the job's children included.

    This user's own interpreter, unless the other user cannot run it (a pyenv Python under /root, mode 0700); then
    the system's Python of the same version with this environment's site-packages, as a second user of the same
    machine and packages would have it. Skipped where neither works."""
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    tries = [(sys.executable, str(ROOT))] + ([(system, os.pathsep.join((str(ROOT), site)))] if os.path.exists(system) else [])
    # A child of a child: the job's Python must also be able to start the readers.
    check = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import jax, devctl'], check=True)"
    why = ""
    for python, path in tries:
        env = dict(_clean_env("/"), PYTHONPATH=path)
        can = subprocess.run([*_as_user(uid), python, "-c", check], env=env, cwd="/", capture_output=True, text=True, timeout=120)
        if can.returncode == 0:
            return python, path
        why = can.stderr.strip()[-200:]
    pytest.skip(f"uid {uid} cannot run this checkout's Python: {why}")


def _run(uid: int, *, job_env: dict[str, str] | None = None, reader_env: dict[str, str] | None = None) -> dict:
    if uid != os.geteuid() and (os.geteuid() != 0 or shutil.which("setpriv") is None):
        pytest.skip("running as another user needs root and setpriv")
    python, path = _python_for(uid)
    shm = _private_shm()
    if shm is None and uid != os.geteuid():
        pytest.skip("needs a private /dev/shm (unshare --mount as root) to run a second user's job")
    env = _clean_env("/" if uid != os.geteuid() else os.environ.get("HOME", "/"))
    env.update(PYTHONPATH=path, **(job_env or {}))
    argv = [*(shm or []), *_as_user(uid), python, "-c", _DRIVER, _JOB, json.dumps(reader_env or {})]
    proc = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_the_job_is_seen_everywhere(report: dict, directory: str) -> None:
    job = report["job"]
    assert job, f"the job did not start: {report['job_stderr']}"
    pid = job["pid"]
    assert job["directory"] == directory
    # Never silent: the job said nothing about not publishing, and died of its own error.
    assert "not publishing" not in report["job_stderr"], report["job_stderr"]
    assert "RESOURCE_EXHAUSTED" in report["job_stderr"] and report["job_rc"] != 0

    memstats = report["memstats"]
    assert memstats["rc"] == 0, memstats["stderr"]
    snap = json.loads(memstats["stdout"])
    assert [p["pid"] for p in snap["publishers"]] == [pid], snap["problems"]
    assert snap["publishers"][0]["path"] == os.path.join(directory, f"{pid}.json")

    top = report["top"]
    assert top["rc"] == 0, top["stderr"]
    answer = json.loads(top["stdout"])
    assert answer["pid"] == pid and answer["arrays"][0]["nbytes"] == 8 * MIB

    exporter = report["exporter"]
    assert exporter["rc"] == 0, exporter["stderr"]
    series = [line for line in exporter["stdout"].splitlines() if line.startswith("devctl_job_live_array_bytes{") and f'pid="{pid}"' in line]
    assert series and sum(float(line.rsplit(" ", 1)[1]) for line in series) == 8 * MIB, exporter["stdout"][-2000:]

    pm = report["postmortem"]
    assert pm["rc"] == 0, pm["stderr"]
    postmortems = [p for p in json.loads(pm["stdout"])["postmortems"] if p["pid"] == pid]
    assert len(postmortems) == 1 and postmortems[0]["path"].startswith(directory + "/")
    # What it held: the 8 MiB holder (and a scalar or two of JAX's own), never the 4 TiB it asked for.
    assert postmortems[0]["arrays"][0]["nbytes"] == 8 * MIB and postmortems[0]["total_bytes"] < 9 * MIB


@pytest.mark.slow
@pytest.mark.parametrize("who", ["this user", "a second, unprivileged user"])
def test_a_job_publishing_in_the_default_directory_is_seen_by_every_reader(who):
    uid = os.geteuid() if who == "this user" else NOBODY
    report = _run(uid)
    assert report["uid"] == uid
    _assert_the_job_is_seen_everywhere(report, f"/dev/shm/devctl-{uid}")


@pytest.mark.gpu
def test_a_gpu_job_publishing_in_the_default_directory_is_seen_by_every_reader():
    """The same on a GPU: the job's arrays live on the GPU, and its post-mortem (a real CUDA RESOURCE_EXHAUSTED,
    whose failed 4 TiB array exists from dispatch) holds the 8 MiB only."""
    report = _run(os.geteuid())
    _assert_the_job_is_seen_everywhere(report, f"/dev/shm/devctl-{os.geteuid()}")
    snap = json.loads(report["memstats"]["stdout"])
    assert [d["platform"] for d in snap["publishers"][0]["devices"]] == ["gpu"]


@pytest.mark.slow
def test_a_job_publishing_in_its_own_xdg_runtime_dir_is_seen(tmp_path):
    xdg = tmp_path / "run-user"
    xdg.mkdir(mode=0o700)
    report = _run(os.geteuid(), job_env={"XDG_RUNTIME_DIR": str(xdg)})
    _assert_the_job_is_seen_everywhere(report, str(xdg / "devctl"))


@pytest.mark.slow
def test_a_batch_job_without_xdg_runtime_dir_is_seen_from_a_login_shell_that_has_one(tmp_path):
    """cron, a scheduler or sudo start the job without XDG_RUNTIME_DIR; the user looks from a login shell with it."""
    xdg = tmp_path / "run-user"
    xdg.mkdir(mode=0o700)
    report = _run(os.geteuid(), reader_env={"XDG_RUNTIME_DIR": str(xdg)})
    _assert_the_job_is_seen_everywhere(report, f"/dev/shm/devctl-{os.geteuid()}")


def test_a_job_that_cannot_write_its_snapshot_says_so_once_on_its_stderr(tmp_path):
    """Never silence: a snapshot that cannot be written cannot carry its own error, so the job's stderr says it,
    once, with the path and the reason (here every write fails with EFBIG: RLIMIT_FSIZE 0, which Python's
    ignored SIGXFSZ turns into an error instead of a kill)."""
    runtime = tmp_path / "runtime"
    job = textwrap.dedent(
        f"""
        import resource, time
        from devctl.publish import publish
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        pub = publish(interval=0.05, directory={str(runtime)!r})
        deadline = time.monotonic() + 60
        while pub._ticks < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        import os
        print(os.getpid(), pub._ticks, pub.snapshots_written)
        """
    )
    proc = subprocess.run([sys.executable, "-c", job], env=_clean_env(os.environ.get("HOME", "/")) | {"PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pid, ticks, written = map(int, proc.stdout.split())
    assert ticks >= 10 and written == 0
    said = [line for line in proc.stderr.splitlines() if "devctl.publish" in line]
    assert len(said) == 1, proc.stderr
    assert said[0].endswith(f"devctl.publish: not publishing snapshots to {runtime}: writing {pid}.json failed: File too large"), said


_SCRAPE_DEFAULT = textwrap.dedent(
    """
    import json, signal, socket, subprocess, sys, time, urllib.request
    server = subprocess.Popen([sys.executable, "-m", "devctl", "exporter"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen("http://127.0.0.1:9479/metrics", timeout=10) as r:
                    out["body"] = r.read().decode()
                break
            except OSError:
                time.sleep(0.2)
        # Bound to loopback only: the namespace's other address of the host is not served.
        s = socket.socket(socket.AF_INET6)
        out["ipv6_loopback_refused"] = s.connect_ex(("::1", 9479)) != 0
        s.close()
    finally:
        server.send_signal(signal.SIGTERM)
        out["rc"] = server.wait(60)
        out["stderr"] = server.stderr.read()[-2000:]
    print(json.dumps(out))
    """
)


def test_the_exporter_serves_loopback_port_9479_by_default():
    """`devctl exporter` with no flag, in a network namespace of its own (a fresh loopback, so the port is free)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare --net and ip for a private loopback")
    prefix = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
    if subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("cannot make a network namespace here (unshare --net needs root or user namespaces)")
    proc = subprocess.run([*prefix, sys.executable, "-c", _SCRAPE_DEFAULT], env=_clean_env(os.environ.get("HOME", "/")),
                          cwd="/", capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "devctl_info{" in out.get("body", ""), out
    assert out["ipv6_loopback_refused"]
    assert out["rc"] == 143, out["stderr"]
