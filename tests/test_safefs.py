"""devctl.safefs against real links, FIFOs, devices and a full disk: the primitives every hostile-path fix uses."""

from __future__ import annotations

import os
import stat

import pytest

from devctl import safefs


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "17.json"
    os.mkfifo(fifo)  # opened without O_NONBLOCK, this read would wait for a writer forever
    with pytest.raises(safefs.UnsafeFile, match="FIFO"):
        safefs.read_regular(str(fifo), 100)


def test_a_link_is_not_followed_unless_asked(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root:hash")
    link = tmp_path / "17.json"
    link.symlink_to(secret)
    with pytest.raises(safefs.UnsafeFile, match="symbolic link"):
        safefs.read_regular(str(link), 100)
    assert safefs.read_regular(str(link), 100, follow_symlinks=True) == b"root:hash"


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_an_endless_device_is_refused_not_read(device):
    with pytest.raises(safefs.UnsafeFile, match="character device"):
        safefs.read_regular(device, 1 << 20, follow_symlinks=True)


def test_the_read_is_capped_whatever_the_size_says(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1001)
    assert safefs.read_regular(str(big), 1001) == b"x" * 1001
    with pytest.raises(safefs.UnsafeFile, match="larger than 1000 bytes"):
        safefs.read_regular(str(big), 1000)


def test_write_replaces_a_link_instead_of_writing_through_it(tmp_path):
    mine = tmp_path / "results.txt"
    mine.write_text("my results")
    link = tmp_path / "report.xml"
    link.symlink_to(mine)
    safefs.write_atomic(str(link), b"<testsuites/>")
    assert mine.read_text() == "my results"
    assert not link.is_symlink() and link.read_bytes() == b"<testsuites/>"


@pytest.mark.parametrize("target", ["/dev/full", "/dev/stdout", "/dev/null"])
def test_write_never_replaces_a_system_node(target):
    before = os.lstat(target)
    with pytest.raises(safefs.UnsafeFile):
        safefs.write_atomic(target, b"x")
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)


@pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="no writable /dev/shm here")
def test_dev_shm_takes_files_and_a_link_from_it_into_dev_does_not(tmp_path):
    """/dev/shm is a tmpfs for regular files (the default snapshot directory without XDG_RUNTIME_DIR); a directory
    there that is a link to /dev itself is still /dev."""
    import tempfile

    shm = tempfile.mkdtemp(dir="/dev/shm", prefix="devctl-test-")
    try:
        safefs.write_atomic(os.path.join(shm, "1234.json"), b"{}")
        assert open(os.path.join(shm, "1234.json"), "rb").read() == b"{}"
        os.symlink("/dev", os.path.join(shm, "dev"))
        with pytest.raises(safefs.UnsafeFile, match="/dev, /proc or /sys"):
            safefs.write_atomic(os.path.join(shm, "dev", "devctl-test-new"), b"x")
    finally:
        for name in os.listdir(shm):
            os.unlink(os.path.join(shm, name))
        os.rmdir(shm)


def test_dot_dot_after_a_link_is_resolved_as_the_kernel_does(tmp_path):
    """`l/../stdout` with `l -> /dev/pts` is /dev/stdout to the kernel, whatever the text says."""
    (tmp_path / "l").symlink_to("/dev/pts")
    with pytest.raises(safefs.UnsafeFile, match="/dev, /proc or /sys"):
        safefs.check_writable(str(tmp_path / "l" / ".." / "devctl-test-new"))
    (tmp_path / "d").mkdir()
    (tmp_path / "m").symlink_to(tmp_path / "d" / "sub", target_is_directory=True)
    (tmp_path / "d" / "sub").mkdir()
    safefs.write_atomic(str(tmp_path / "m" / ".." / "out.txt"), b"x")  # m/.. is d, not tmp_path
    assert (tmp_path / "d" / "out.txt").read_bytes() == b"x" and not (tmp_path / "out.txt").exists()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    old = tmp_path / "report.xml"
    old.write_text("old report")

    def full(fd, data):  # what a full disk answers
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space left"):
        safefs.write_atomic(str(old), b"new report")
    monkeypatch.undo()
    assert old.read_text() == "old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.xml"]


def test_a_written_file_follows_the_umask(tmp_path):
    mask = os.umask(0o077)
    try:
        safefs.write_atomic(str(tmp_path / "f"), b"x")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o600


def test_paths_resolve_inside_the_root(tmp_path):
    root = tmp_path / "host"
    (root / "sys" / "class").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc" / "release").write_text("host's")
    (root / "sys" / "class" / "abs").symlink_to("/etc/release")  # the host's /etc, not ours
    (root / "sys" / "class" / "escape").symlink_to("../../../../../../etc")
    (root / "sys" / "class" / "loop").symlink_to("loop")
    assert safefs.within(str(root), "/sys/class/abs") == str(root / "etc" / "release")
    assert safefs.within(str(root), "/sys/class/escape/release") == str(root / "etc" / "release")
    assert safefs.within(str(root), "/sys/class/loop") is None
    assert safefs.within(str(root), "/../../etc/passwd") is None  # clamped at the root, then missing


def test_a_private_directory_is_not_a_link(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "devctl-0"
    link.symlink_to(real)
    assert safefs.private_directory_problem(str(real)) is None
    assert "symbolic link" in safefs.private_directory_problem(str(link))
    with pytest.raises(OSError):
        safefs.open_private_directory(str(link))
    os.close(safefs.open_private_directory(str(real)))
    real.chmod(0o755)
    assert "0755" in safefs.private_directory_problem(str(real))


def test_truncate_gives_the_head_of_a_larger_file_and_still_refuses_a_fifo(tmp_path):
    big = tmp_path / "cmdline"
    big.write_bytes(b"java\0" + b"-Dx=y\0" * 50_000)  # a command line longer than any cap devctl uses
    assert safefs.read_regular(str(big), 5, truncate=True) == b"java\0"
    assert safefs.read_regular(str(big), 1 << 20, truncate=True) == big.read_bytes()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(safefs.UnsafeFile, match="FIFO"):
        safefs.read_regular(str(fifo), 5, truncate=True)


def test_within_with_a_resolved_root_gives_the_same_answers(tmp_path):
    real = tmp_path / "real"
    (real / "sys" / "devices" / "pci0000:00" / "0000:18:00.0").mkdir(parents=True)
    (real / "sys" / "bus").mkdir()
    (real / "sys" / "bus" / "gpu").symlink_to("../devices/pci0000:00/0000:18:00.0")
    (real / "sys" / "bus" / "abs").symlink_to("/sys/devices/pci0000:00")
    (real / "fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(real / "fifo")
    link = tmp_path / "host"
    link.symlink_to(real)  # a host root given through a link
    for path in ("/sys/bus/gpu", "/sys/bus/abs/0000:18:00.0", "/sys/bus/../../../sys", "/fifo", "/fifo/x", "/missing"):
        expected = safefs.within(str(link), path)
        assert safefs.within(str(real), path, root_is_resolved=True) == expected, path
    assert safefs.within(str(link), "/sys/bus/gpu") == str(real / "sys" / "devices" / "pci0000:00" / "0000:18:00.0")
    assert safefs.within(str(link), "/fifo/x") is None  # a FIFO is no directory to walk through


# ---- the directories on the way to a written file (issue 23) -----------------------------------------------
#
# A link on the way is followed only when it and the directory holding it are owned by root or by us; a
# directory is passed through only when no one else may write it, or when it is sticky. Ownership is real here
# (chown as root); tests/test_output_paths.py replays the same with a second user planting for real.

OTHER = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to another user")


def _victim(tmp_path):
    home = tmp_path / "victim"
    home.mkdir()
    (home / "secret.txt").write_text("victim's")
    return home


@as_root
def test_a_link_another_user_owns_on_the_way_is_not_followed(tmp_path):
    home = _victim(tmp_path)
    (tmp_path / "mdir").symlink_to(home)
    os.lchown(tmp_path / "mdir", OTHER, OTHER)
    for call in (safefs.check_writable, lambda p: safefs.write_atomic(p, b"gzip")):
        with pytest.raises(safefs.UnsafeFile, match=f"{tmp_path}/mdir is a symbolic link owned by uid {OTHER}"):
            call(str(tmp_path / "mdir" / "secret.txt"))
    assert (home / "secret.txt").read_text() == "victim's" and os.listdir(home) == ["secret.txt"]


@as_root
def test_our_link_in_a_directory_another_user_owns_is_not_followed(tmp_path):
    """Moved or hard-linked there by that user: whose link it is says nothing about who put it there."""
    home = _victim(tmp_path)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "mdir").symlink_to(home)
    os.chown(theirs, OTHER, OTHER)
    with pytest.raises(safefs.UnsafeFile, match=f"in a directory of uid {OTHER}"):
        safefs.write_atomic(str(theirs / "mdir" / "secret.txt"), b"x")
    safefs.write_atomic(str(theirs / "new.txt"), b"x")  # their directory itself may hold our file
    assert (home / "secret.txt").read_text() == "victim's"


def test_a_directory_others_may_write_is_passed_through_only_when_sticky(tmp_path):
    shared = tmp_path / "shared"
    (shared / "sub").mkdir(parents=True)
    shared.chmod(0o777)
    with pytest.raises(safefs.UnsafeFile, match=r"may be changed by all users \(mode 0777.*not sticky"):
        safefs.write_atomic(str(shared / "sub" / "out.txt"), b"x")
    safefs.write_atomic(str(shared / "out.txt"), b"x")  # the last directory is not passed through
    shared.chmod(0o1777)
    safefs.write_atomic(str(shared / "sub" / "out.txt"), b"x")
    assert (shared / "sub" / "out.txt").read_bytes() == b"x"


@as_root
def test_a_group_writable_directory_is_ours_only_when_the_group_is(tmp_path):
    import grp
    import pwd

    shared = tmp_path / "shared"
    (shared / "sub").mkdir(parents=True)
    shared.chmod(0o775)
    os.chown(shared, 0, 4243)  # a group with other members, or none we know
    with pytest.raises(safefs.UnsafeFile, match="may be changed by group 4243"):
        safefs.check_writable(str(shared / "sub" / "out.txt"))
    os.chown(shared, 0, os.getegid())  # a user private group (umask 002 makes every directory 0775)
    me = pwd.getpwuid(os.geteuid()).pw_name
    if all(m == me for m in grp.getgrgid(os.getegid()).gr_mem):
        safefs.check_writable(str(shared / "sub" / "out.txt"))


@as_root
def test_a_swap_after_the_check_is_refused_when_the_file_is_written(tmp_path):
    home = _victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    path = str(out / "secret.txt")
    safefs.check_writable(path)  # what the CLI says before any work
    out.rename(tmp_path / "moved")
    out.symlink_to(home)
    os.lchown(out, OTHER, OTHER)
    with pytest.raises(safefs.UnsafeFile, match="symbolic link owned by uid"):
        safefs.write_atomic(path, b"x")
    assert (home / "secret.txt").read_text() == "victim's"


def test_the_file_goes_into_the_directory_that_was_checked_whatever_is_renamed_meanwhile(tmp_path, monkeypatch):
    """The temporary file is created and renamed under the directory's descriptor: a link put at the
    directory's name between the check and the write is never written through."""
    home = _victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    checked = safefs._check_target

    def swap_then_check(*args):
        checked(*args)
        out.rename(tmp_path / "moved")
        out.symlink_to(home)

    monkeypatch.setattr(safefs, "_check_target", swap_then_check)
    safefs.write_atomic(str(out / "secret.txt"), b"new")
    assert (home / "secret.txt").read_text() == "victim's" and os.listdir(home) == ["secret.txt"]
    assert (tmp_path / "moved" / "secret.txt").read_bytes() == b"new"
    assert os.listdir(tmp_path / "moved") == ["secret.txt"]  # the temporary file renamed, not left


def test_path_errors_name_the_component(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(FileNotFoundError, match=f"directory {tmp_path}/missing does not exist"):
        safefs.check_writable(str(tmp_path / "missing" / "out.txt"))
    with pytest.raises(NotADirectoryError, match=f"{tmp_path}/file is not a directory"):
        safefs.check_writable(str(tmp_path / "file" / "out.txt"))
    with pytest.raises(OSError, match="more than 40 symbolic links"):
        safefs.check_writable(str(tmp_path / "loop" / "out.txt"))
    with pytest.raises(safefs.UnsafeFile, match="ends with '/'"):
        safefs.check_writable(str(tmp_path / "file") + "/")
    for directory in (str(tmp_path), str(tmp_path) + "/", str(tmp_path / "."), "/"):
        with pytest.raises(safefs.UnsafeFile, match="a directory"):
            safefs.check_writable(directory)


def test_a_relative_path_is_walked_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "l").symlink_to("a/b")
    monkeypatch.chdir(tmp_path / "a")
    safefs.write_atomic("b/../b/one.txt", b"1")
    safefs.write_atomic("../l/two.txt", b"2")
    safefs.write_atomic("three.txt", b"3")
    assert sorted(os.listdir(tmp_path / "a" / "b")) == ["one.txt", "two.txt"]
    assert (tmp_path / "a" / "three.txt").read_bytes() == b"3"
