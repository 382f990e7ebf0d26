"""Rendering costs time in proportion to what is rendered (issue 23): one long unbroken word, a 700 KB post-mortem.

Before, `check --device-kind` of 100,000 characters took minutes: every cut of a word too long for its line
measured the whole rest of the word again, and every word added to a line measured the line again. No test
here asserts a wall time (benchmarks do that); each runs under a generous limit, so a quadratic renderer shows
as a failure instead of a hang, and asserts the output is all there and no longer than the input calls for.
"""

from __future__ import annotations

import io
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import time

import pytest
from conftest import devctl_env
from rich.cells import cell_len

from devctl.render.console import Column, message_lines, table_lines, wrap

LONG = 100_000
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


@pytest.fixture(autouse=True)
def hang_guard():
    """Each test is stopped after 120 s: a renderer that went quadratic again fails here instead of hanging the suite."""

    def stop(signum, frame):
        raise TimeoutError("rendering took more than 120 s: quadratic again?")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


CASES = {
    "one word": "x" * LONG,
    "wide characters": "漢" * LONG,
    "a path": "a/" * (LONG // 2),
    "dashes": "-" * LONG,
    "combining marks": "e\u0301" * (LONG // 2),
    "700 KB of words": "RESOURCE_EXHAUSTED: out of memory " * 20_000 + "E" * 300_000,
}


@pytest.mark.parametrize("width", [80, 100_000], ids=["terminal", "pipe"])
@pytest.mark.parametrize("case", list(CASES))
def test_wrap_of_a_huge_value_is_whole_and_fits(case, width):
    text = CASES[case]
    lines = wrap(text, width, indent="  result:   ")
    assert all(cell_len(line) <= width for line in lines)
    assert "".join(line[12:] if i else line[12:] for i, line in enumerate(lines)).replace(" ", "") == text.replace(" ", "")
    cells = cell_len(text)
    assert len(lines) <= cells // (width - 12) + cells // width + len(text.split()) // 2 + 2  # no blank or one-character lines


def test_a_table_with_a_huge_cell_is_whole_and_fits():
    columns = [Column("check"), Column("status"), Column("result", priority=2), Column("what to do", priority=3)]
    value = "device kind cpu, expected " + "z" * LONG
    lines = [str(line) for line in table_lines(columns, [["devices", "FAIL", value, "-"]], width=80, boxed=True)]
    assert all(cell_len(line) <= 80 for line in lines)
    assert sum(line.count("z") for line in lines) == LONG
    assert len(lines) < LONG // 60


def test_ordinary_text_still_breaks_where_people_expect():
    """What the golden files show, in small: between words, after a '/' or ',' in a long word, never in a leading '--'."""
    assert wrap("the quick brown fox jumps over the lazy dog", 16) == ["the quick brown", "fox jumps over", "the lazy dog"]
    assert wrap("see /usr/local/lib/python3.11/site-packages/jax for it", 24) == ["see /usr/local/lib/", "python3.11/site-", "packages/jax for it"]
    assert wrap("error: a,b,c,d,e,f,g,h", 12, hang="  ") == ["error: a,b,", "  c,d,e,f,g,", "  h"]
    assert wrap("set --xla_force_host_platform_device_count=8", 20) == ["set", "--xla_force_host_pla", "tform_device_count=8"]


def _on_terminal(argv: list[str], env: dict[str, str], columns: int = 80, timeout: float = 120) -> tuple[int, str]:
    """devctl with stdout and stderr on an 80-column pseudo-terminal, as a person sees it."""
    import fcntl
    import pty
    import termios

    env = {k: v for k, v in env.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "devctl", *argv], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        else:
            pytest.fail(f"devctl {argv[0]} did not finish in {timeout} s")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    return proc.returncode, ANSI.sub("", b"".join(chunks).decode(errors="replace"))


def test_check_with_a_100000_character_device_kind_renders_on_a_terminal_and_a_pipe(tmp_path):
    argv = ["check", "--only", "devices", "--device-kind", "x" * LONG]
    code, shown = _on_terminal(argv, devctl_env(1))
    assert code == 1, shown[-2000:]
    assert "Traceback" not in shown and "FAIL" in shown
    assert shown.count("x") >= LONG  # the whole value, wrapped
    assert all(cell_len(line) <= 80 for line in re.split(r"[\r\n]", shown))  # \r: the spinner redraws its line
    assert len(shown) < 4 * LONG
    piped = subprocess.run([sys.executable, "-m", "devctl", *argv], env=devctl_env(1), capture_output=True, text=True, timeout=120)
    assert piped.returncode == 1 and "Traceback" not in piped.stderr
    assert piped.stdout.count("x") >= LONG and len(piped.stdout) < 4 * LONG


def test_a_700_kb_postmortem_renders_on_a_terminal_and_a_pipe(tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    site = "train.py:" + "s" * 50_000
    doc = {
        "schema": "devctl.memstats.postmortem/1", "pid": 4242, "command": ["python3", "c" * 5000], "hostname": "h",
        "timestamp": time.time(), "error": "RESOURCE_EXHAUSTED: " + "E" * 150_000 + " out of memory" * 20_000,
        "requested_bytes": None, "requested_device": None, "devices": [{"device": "cpu:0", "memory_stats": {"bytes_in_use": 1, "bytes_limit": 2}}],
        "total_arrays": 6, "total_bytes": 21504,
        "arrays": [{"nbytes": 1024 * (i + 1), "shape": [256, i + 1], "dtype": "float32", "sharding": "x" * 200, "memory_kind": "device",
                    "devices": ["cpu:0"], "site": f"{site}{i}"} for i in range(6)],
        "sites": [{"site": f"{site}{i}", "arrays": 1, "nbytes": 1024 * (i + 1)} for i in range(6)],
    }  # fmt: skip
    raw = json.dumps(doc)
    assert 700_000 < len(raw) < 1 << 20
    (runtime / "4242-1700000000.postmortem.json").write_text(raw)
    env = devctl_env(1, DEVCTL_RUNTIME_DIR=str(runtime))
    code, shown = _on_terminal(["memstats", "--postmortem"], env)
    assert code == 0 and "Traceback" not in shown, shown[-2000:]
    assert "job 4242" in shown and all(cell_len(line) <= 80 for line in re.split(r"[\r\n]", shown))
    assert len(shown) < 2 * len(raw)
    piped = subprocess.run([sys.executable, "-m", "devctl", "memstats", "--postmortem"], env=env, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "job 4242" in piped.stdout and "Traceback" not in piped.stderr
    assert len(piped.stdout) < 2 * len(raw)


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_a_message_line_breaks_between_words_on_a_terminal_and_stays_whole_off_one(monkeypatch):
    """Issue 24: the terminal split `... s` / `o there is nothing to measure` at its edge."""
    line = "devctl: error: --sizes 0 leaves no transfer size, so there is nothing to measure; give sizes such as 4K,1M,1G"
    monkeypatch.setenv("COLUMNS", "40")
    wrapped = message_lines(line, _Stream(True)).split("\n")
    assert all(len(part) <= 40 for part in wrapped) and len(wrapped) > 1
    assert " ".join(part.strip() for part in wrapped) == line  # no word split, none lost
    assert message_lines(line, _Stream(False)) == line  # logs and grep get the one line
    assert message_lines("devctl: error: " + "x" * LONG, _Stream(True)).count("\n") <= LONG // 38 + 1
