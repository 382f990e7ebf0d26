"""Completion as a user meets it: bash, zsh and fish driven for real, with the scripts of completions/ and
with the script `devctl completion SHELL --install` writes.

bash and zsh run interactively on a pseudo-terminal: the line is typed, then TAB, then a key bound to print
the line (bash `bind -x`, a zle widget in zsh), so readline and zle split the words, call the script and
insert or list what it answers. fish answers `complete -C LINE` itself. The scripts are installed as the
README says where the shell allows it here: zsh and fish load them by name from $fpath and
$fish_complete_path; bash sources the file (bash-completion's loader is not installed on every machine).
Each test is skipped only where its shell is not installed.
"""

from __future__ import annotations

import os
import re
import select
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT

from devctl.cli.completion import FILES
from devctl.model.check import CHECK_NAMES

SHELLS = ("bash", "zsh", "fish")
WAIT_S = 60.0  # a loaded CI machine; a TAB press itself takes about 0.1 s


@dataclass
class Answer:
    listed: set[str]  # the candidates the shell listed (fish: all it offers)
    line: str | None  # the line after TAB (None for fish, which only lists)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A home with no shell configuration, and a `devctl` on PATH that is this tree's, run by this Python."""
    home = tmp_path_factory.mktemp("home")
    bin_dir = home / "bin"
    bin_dir.mkdir()
    devctl = bin_dir / "devctl"
    devctl.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m devctl "$@"\n')
    devctl.chmod(0o755)
    (home / "work").mkdir()
    return home


def _env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        "PATH": f"{home / 'bin'}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(home),
        "TERM": "dumb",
        "INPUTRC": "/dev/null",
        "PYTHONPATH": str(ROOT),
        "JAX_PLATFORMS": "none-at-all",  # were jax ever started by a TAB press, it would fail loudly
        **(extra or {}),
    }


def _need(shell: str) -> str:
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed: its completion cannot be driven here")
    return path


_BASH_SETUP = (
    "PS1='<P>'; source {script}; bind 'set show-all-if-ambiguous on'; bind 'set completion-query-items 0'; "
    "bind 'set page-completions off'; bind 'set completion-display-width 0'; bind 'set bell-style none'; "
    """bind -x '"\\C-t": printf "<L>%s</L>\\n" "$READLINE_LINE"'; echo REA''DY\n"""
)
_ZSH_SETUP = (
    "PS1='<P>'; fpath=({completions} $fpath); autoload -Uz compinit; compinit -u -D; setopt nolistambiguous nobeep; "
    """_mark() {{ zle -I; print -r -- "<L>$BUFFER</L>" }}; zle -N _mark; bindkey '^T' _mark; echo REA''DY\n"""
)
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f]")


def _terminal(argv: list[str], setup: str, line: str, home: Path, extra: dict[str, str] | None = None) -> str:
    """Type `setup`, then `line`, TAB and Ctrl-T into an interactive shell; what it printed after the setup."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    # A new session and no job control: the shell's line editor needs only a terminal on its stdin and stdout.
    shell = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=_env(home, extra), cwd=home / "work", start_new_session=True)
    os.close(slave)
    seen = b""

    def read_until(marker: bytes) -> str:
        nonlocal seen
        deadline = time.monotonic() + WAIT_S
        while marker not in seen:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise AssertionError(f"the shell did not print {marker!r}; it printed: {seen.decode(errors='replace')!r}")
            try:
                seen += os.read(master, 65536)
            except OSError:  # the shell is gone
                raise AssertionError(f"the shell exited; it printed: {seen.decode(errors='replace')!r}") from None
        before, _, seen = seen.partition(marker)
        return before.decode(errors="replace")

    try:
        os.write(master, setup.encode())
        read_until(b"READY")
        read_until(b"<P>")
        os.write(master, line.encode() + b"\t\x14")
        return read_until(b"</L>")
    finally:
        shell.kill()
        shell.wait()
        os.close(master)


def _parse(output: str) -> Answer:
    """The listing (the lines between the typed line and the prompt drawn again) and the line after TAB."""
    text = _CONTROL.sub("", output.replace("\r\n", "\n").replace("\r", ""))
    body, _, line = text.rpartition("<L>")
    listed: set[str] = set()
    if "<P>" in body:
        for row in body.split("\n", 1)[1].rpartition("<P>")[0].splitlines():
            listed.update(row.split(" -- ")[0].split())  # zsh: `value -- help`, several values a row
    return Answer(listed, line)


def complete(shell: str, line: str, home: Path, *, script: Path | None = None, extra: dict[str, str] | None = None) -> Answer:
    """What `shell` does with TAB at the end of `line`, with `script` (default: completions/'s) loaded as the README says."""
    path = _need(shell)
    script = script or ROOT / "completions" / FILES[shell]
    if shell == "bash":
        return _parse(_terminal([path, "--norc", "--noprofile", "-i"], _BASH_SETUP.format(script=script), line, home, extra))
    if shell == "zsh":
        return _parse(_terminal([path, "-f", "-i"], _ZSH_SETUP.format(completions=script.parent), line, home, extra))
    command = f"set -g fish_complete_path {shlex.quote(str(script.parent))}; complete -C {shlex.quote(line)}"
    proc = subprocess.run([path, "--no-config", "-c", command], env=_env(home, extra), cwd=home / "work", capture_output=True, text=True, timeout=WAIT_S)
    assert proc.returncode == 0, proc.stderr
    return Answer({row.split("\t")[0] for row in proc.stdout.splitlines() if row}, None)


# ---- values: every fixed list, listed by every shell ------------------------------------------------------

COMMANDS = {"list", "plugins", "env", "memstats", "check", "doctor", "exporter", "bench", "completion"}
DIRECTIONS = {"h2d", "d2h", "d2d", "d2d-self", "all"}


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    "line,expected",
    [
        ("devctl ", COMMANDS),
        ("devctl bench transfer --direction ", DIRECTIONS),
        ("devctl bench transfer -d d2", {"d2h", "d2d", "d2d-self"}),
        ("devctl bench transfer --variants p", {"pageable", "pinned", "put"}),
        ("devctl check --skip ", set(CHECK_NAMES)),
        ("devctl check --only versions,", {f"versions,{n}" for n in CHECK_NAMES if n != "versions"}),
        ("devctl list --platform c", {"cpu", "cuda"}),
        ("devctl bench transfer --sizes 4K,1", {"4K,1K", "4K,1M", "4K,1G"}),
        ("devctl check --min-h2d 10", {"10GB/s", "10Gbit/s", "10MB/s", "10GiB/s"}),
        ("devctl check --min-memory 40", {"40GiB", "40MiB", "40TiB", "40GB", "40MB", "40TB"}),
        ("devctl list --p", {"--platform", "--process-id"}),
        ("devctl completion ", set(SHELLS)),  # a command's argument
        ("devctl completion fish ", {"--install", "--help"}),  # given: its options next
    ],
)
def test_values_are_listed(shell, line, expected, home):
    answer = complete(shell, line, home)
    assert answer.listed == expected, answer


@pytest.mark.parametrize("shell", SHELLS)
def test_devices_complete_to_platform_prefixes_without_starting_jax(shell, home):
    # Ids would need JAX to count the devices: a TAB press offers `all` and the platform prefixes only.
    memstats = complete(shell, "devctl memstats --device ", home).listed
    assert {"all", "cpu:", "cuda:", "rocm:", "tpu:", "tpu-chip:", "nvml:"} <= memstats
    assert not any(c[:1].isdigit() for c in memstats)
    bench = complete(shell, "devctl bench transfer --device ", home).listed
    assert {"all", "cpu:", "cuda:"} <= bench and "tpu-chip:" not in bench  # memstats alone shows what JAX does not use
    assert "all" not in complete(shell, "devctl bench transfer --src ", home).listed  # one device


# ---- what TAB inserts: a space after a whole value, none after a prefix, file and directory names -------


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    "line,after",
    [
        ("devctl bench tr", "devctl bench transfer "),
        ("devctl check --on", "devctl check --only "),
        ("devctl bench transfer --direction h2", "devctl bench transfer --direction h2d "),
        ("devctl check --only=ver", "devctl check --only=versions "),  # bash cuts the word at `=`
        ("devctl memstats --device cu", "devctl memstats --device cuda:"),  # bash cuts at `:`; the id follows
        ("devctl memstats --device cpu:0,tpu-c", "devctl memstats --device cpu:0,tpu-chip:"),
        ("devctl check --min-memory 40Gi", "devctl check --min-memory 40GiB "),
        ("devctl bench transfer --max-regression 5", "devctl bench transfer --max-regression 5% "),
        ("devctl bench transfer --baseline {files}/base", "devctl bench transfer --baseline {files}/baseline.json "),
        ("devctl check --config {files}/pyp", "devctl check --config {files}/pyproject.toml "),
        ("devctl check --junit-xml={files}/rep", "devctl check --junit-xml={files}/report.xml "),
        ("devctl list --host-root {files}/ho", "devctl list --host-root {files}/host/"),  # not hosts.json: a directory
        ("devctl doctor --host-root={files}/ho", "devctl doctor --host-root={files}/host/"),
        ("devctl completion z", "devctl completion zsh "),
    ],
)
def test_tab_inserts(shell, line, after, home):
    files = home / "files"
    files.mkdir(exist_ok=True)
    for name in ("baseline.json", "pyproject.toml", "report.xml", "hosts.json"):
        (files / name).touch()
    (files / "host").mkdir(exist_ok=True)
    line, after = line.format(files=files), after.format(files=files)
    answer = complete(shell, line, home)
    if shell == "fish":  # fish lists the one candidate; it inserts it on a real TAB
        word = after.split(" ")[-2 if after.endswith(" ") else -1]
        assert answer.listed == {word}, answer
    else:
        assert answer.line == after, answer


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    "line",
    [
        "devctl bench transfer --repeats ",  # a number: no file names offered in its place
        "devctl memstats --interval ",
        "devctl memstats --device cuda:",  # the id: devctl does not start JAX to count devices
        "devctl frobnicate --",  # no such command
    ],
)
def test_nothing_is_offered_where_nothing_fits(shell, line, home):
    answer = complete(shell, line, home)
    assert not answer.listed, answer
    assert answer.line in (None, line), answer


# ---- what only this machine knows: the jobs publishing snapshots -------------------------------------------


@pytest.mark.parametrize("shell", SHELLS)
def test_pid_completes_to_the_publishing_jobs(shell, home, tmp_path):
    # `memstats --pid` names a job that publishes (devctl.publish); their snapshot files are named by pid.
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir(mode=0o700)
    for name in ("4242.json", "77.json", ".4242.json.x1.tmp", "notes.json", "0.json"):
        (snapshots / name).write_text("{}")
    extra = {"DEVCTL_RUNTIME_DIR": str(snapshots)}
    assert complete(shell, "devctl memstats --pid ", home, extra=extra).listed == {"4242", "77"}
    answer = complete(shell, "devctl memstats --pid 42", home, extra=extra)
    assert answer.listed == {"4242"} if shell == "fish" else answer.line == "devctl memstats --pid 4242 ", answer


# ---- the script as `devctl completion SHELL --install` puts it, loaded as it says ---------------------------


@pytest.mark.parametrize("shell", SHELLS)
def test_the_installed_script_completes(shell, tmp_path):
    _need(shell)
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "work").mkdir()
    devctl = home / "bin" / "devctl"
    devctl.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m devctl "$@"\n')
    devctl.chmod(0o755)
    proc = subprocess.run(["devctl", "completion", shell, "--install"], env=_env(home), capture_output=True, text=True, timeout=WAIT_S)
    assert proc.returncode == 0, proc.stderr
    installed = Path(proc.stdout.splitlines()[0].rpartition(" to ")[2])
    assert installed.is_file() and installed.is_relative_to(home), proc.stdout
    assert complete(shell, "devctl bench ", home, script=installed).listed == {"transfer", "collective", "memory", "matmul"}
    answer = complete(shell, "devctl completion ba", home, script=installed)
    assert answer.listed == {"bash"} if shell == "fish" else answer.line == "devctl completion bash ", answer


# ---- fast: neither printing a script nor a TAB press on the new paths starts anything heavy -----------------


@pytest.mark.parametrize(
    "args,env",
    [
        (["completion", "bash"], {}),
        (["completion", "--help"], {}),
        (["completion", "zsh", "--install"], {"HOME": "{tmp}"}),
        ([], {"_DEVCTL_COMPLETE": "bash", "_DEVCTL_COMPLETE_LINE": "devctl completion "}),
        ([], {"_DEVCTL_COMPLETE": "zsh", "_DEVCTL_COMPLETE_LINE": "devctl memstats --pid "}),
    ],
)
def test_completion_paths_import_nothing_heavy(args, env, tmp_path):
    from test_cli import HEAVY, _imported_modules

    modules = _imported_modules({k: v.format(tmp=tmp_path) for k, v in env.items()}, *args)
    assert not sorted(m for m in modules if m.split(".")[0] in HEAVY)
