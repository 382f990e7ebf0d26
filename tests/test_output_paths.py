"""Files devctl writes for the user (--junit-xml, --pprof, --textfile) are reached only through directories and
links that no user but root and the invoking one can change (issue 23).

The attack these tests replay, with two real users (root runs devctl, uid 65534 plants; setpriv switches): as
root, `--pprof /tmp/mdir/secret.txt` where another user had made /tmp/mdir a symbolic link to the victim's home
replaced the victim's file with a root-owned gzip; a world-writable directory without the sticky bit did the same.
The rule (devctl.safefs.open_output_directory): a link is followed only when it and the directory holding it are
owned by root or by you; a directory is passed through only when no one else may write it, or when it is sticky.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, assert_usage_error, devctl_env, run_devctl

OTHER = 65534  # nobody: the user who plants
VICTIM = 4242  # a third user, without an account: whose file must stay as it was
QUICK_CHECK = ("check", "--only", "versions")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv: a second, real user plants the links"
)


def as_user(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def plant(*argv: str) -> None:
    """Run `argv` as the other user: what they can do, they do for real."""
    subprocess.run([*as_user(OTHER), *argv], check=True, capture_output=True, timeout=60)


@pytest.fixture
def tmp() -> Path:
    """A sticky world-writable directory, as /tmp is (pytest's tmp_path is root's alone: the other user could not plant there)."""
    d = Path(tempfile.mkdtemp(prefix="devctl-paths-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def victim(tmp: Path) -> Path:
    """A third user's directory with a private file in it."""
    home = tmp / "victim"
    home.mkdir(mode=0o755)
    secret = home / "secret.txt"
    secret.write_text("the victim's own data\n")
    secret.chmod(0o600)
    os.chown(secret, VICTIM, VICTIM)
    os.chown(home, VICTIM, VICTIM)
    return home


def untouched(victim: Path) -> None:
    secret = victim / "secret.txt"
    st = secret.lstat()
    assert secret.read_text() == "the victim's own data\n"
    assert (st.st_uid, st.st_mode & 0o777) == (VICTIM, 0o600)
    assert sorted(p.name for p in victim.iterdir()) == ["secret.txt"]  # no temporary file left there either


def writes(flag: str, path: str) -> tuple[str, ...]:
    """A devctl command line that writes `path` with `flag`, and refuses a bad path before any work."""
    if flag == "--junit-xml":
        return (*QUICK_CHECK, "--junit-xml", path)
    if flag == "--pprof":
        return ("memstats", "--pid", str(os.getpid()), "--pprof", path)
    return ("exporter", "--textfile", path, "--interval", "60")


@pytest.mark.parametrize("flag", ["--junit-xml", "--pprof", "--textfile"])
def test_a_link_another_user_planted_on_the_way_is_not_followed(tmp, victim, flag):
    plant("ln", "-s", str(victim), str(tmp / "mdir"))
    target = str(tmp / "mdir" / "secret.txt")
    proc = run_devctl(*writes(flag, target), env=devctl_env(1), cwd=tmp, timeout=120)
    assert_usage_error(proc, flag, f"{tmp}/mdir is a symbolic link owned by uid {OTHER}", "not followed")
    untouched(victim)


@pytest.mark.parametrize("flag", ["--junit-xml", "--pprof", "--textfile"])
def test_a_world_writable_directory_without_the_sticky_bit_is_not_passed_through(tmp, victim, flag):
    shared = tmp / "shared"
    plant("mkdir", "-m", "0777", str(shared))
    plant("ln", "-s", str(victim), str(shared / "mdir"))
    proc = run_devctl(*writes(flag, str(shared / "mdir" / "secret.txt")), env=devctl_env(1), cwd=tmp, timeout=120)
    assert_usage_error(proc, flag, f"directory {shared} may be changed by all users (mode 0777", "not sticky")
    untouched(victim)
    # A real directory in it is refused all the same: its owner could swap it for a link at any moment.
    (shared / "out").mkdir()
    proc = run_devctl(*writes(flag, str(shared / "out" / "report")), env=devctl_env(1), cwd=tmp, timeout=120)
    assert_usage_error(proc, flag, f"directory {shared} may be changed", "not sticky")
    assert list((shared / "out").iterdir()) == []


def test_a_file_directly_in_a_world_writable_directory_is_still_written(tmp):
    """The last directory is not passed through: a link at the file's own name is replaced, never followed."""
    shared = tmp / "shared"
    plant("mkdir", "-m", "0777", str(shared))
    proc = run_devctl(*QUICK_CHECK, "--junit-xml", str(shared / "report.xml"), env=devctl_env(1), cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    st = (shared / "report.xml").lstat()
    assert st.st_uid == 0 and (shared / "report.xml").read_text().startswith("<?xml")


def test_your_own_links_and_directories_under_tmp_are_written_through(tmp):
    real = tmp / "results"
    real.mkdir()
    (tmp / "latest").symlink_to(real)  # root's own link, in a root-owned sticky directory
    (tmp / "rel").symlink_to("results/../results")
    for path in (tmp / "latest" / "a.xml", tmp / "rel" / "b.xml", tmp / "results" / ".." / "results" / "c.xml"):
        proc = run_devctl(*QUICK_CHECK, "--junit-xml", str(path), env=devctl_env(1), cwd=tmp)
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in real.iterdir()) == ["a.xml", "b.xml", "c.xml"]
    proc = run_devctl(*QUICK_CHECK, "--junit-xml", "results/d.xml", env=devctl_env(1), cwd=tmp)  # relative, from the working directory
    assert proc.returncode == 0 and (real / "d.xml").is_file(), proc.stderr


def test_a_directory_of_another_user_is_passed_through_but_not_its_links(tmp, victim):
    """A container's root writing into the host user's bind mount: the owner can only plant links, which are not followed."""
    work = tmp / "work"
    plant("mkdir", "-m", "0755", str(work))
    plant("mkdir", "-m", "0755", str(work / "build"))
    proc = run_devctl(*QUICK_CHECK, "--junit-xml", str(work / "build" / "report.xml"), env=devctl_env(1), cwd=tmp)
    assert proc.returncode == 0 and (work / "build" / "report.xml").is_file(), proc.stderr
    plant("ln", "-s", str(victim), str(work / "out"))
    proc = run_devctl(*QUICK_CHECK, "--junit-xml", str(work / "out" / "secret.txt"), env=devctl_env(1), cwd=tmp)
    assert_usage_error(proc, "--junit-xml", f"owned by uid {OTHER}", "not followed")
    untouched(victim)


# ---- the second user's side: the same rule, from where they stand ------------------------------------------


def _other_python(snippet: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([*as_user(OTHER), sys.executable, "-c", snippet, *args], env=env, cwd="/", capture_output=True, text=True, timeout=120)


WRITE = "import sys; from devctl.safefs import write_atomic; write_atomic(sys.argv[1], b'ok')"


@pytest.fixture
def other_can_run_python():
    if _other_python("import devctl.safefs").returncode != 0:
        pytest.skip(f"uid {OTHER} cannot run this checkout's Python")


def test_an_ordinary_user_writes_through_their_own_link_and_not_through_another_users(tmp, other_can_run_python):
    mine = tmp / "mine"
    plant("mkdir", str(mine))
    plant("ln", "-s", str(mine), str(tmp / "to-mine"))
    proc = _other_python(WRITE, str(tmp / "to-mine" / "out.txt"))
    assert proc.returncode == 0, proc.stderr
    assert (mine / "out.txt").read_bytes() == b"ok" and (mine / "out.txt").stat().st_uid == OTHER
    # root's links are trusted (/bin -> usr/bin); a third user's are not.
    (tmp / "by-root").symlink_to(mine)
    assert _other_python(WRITE, str(tmp / "by-root" / "root.txt")).returncode == 0
    (tmp / "by-victim").symlink_to(mine)
    os.lchown(tmp / "by-victim", VICTIM, VICTIM)
    proc = _other_python(WRITE, str(tmp / "by-victim" / "victim.txt"))
    assert proc.returncode != 0 and f"owned by uid {VICTIM}" in proc.stderr and "not followed" in proc.stderr
    assert sorted(p.name for p in mine.iterdir()) == ["out.txt", "root.txt"]
