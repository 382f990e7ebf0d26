"""The live `memstats --watch` view as a person sees it: through a real pseudo-terminal of a given size.

The view is redrawn in place (rich's Live: the cursor goes back up and the lines are written again), so
what is checked is every line written: none wider than the terminal (a wider one would wrap and push the
view down a line at each refresh), and no more of them per sample than the window has rows.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest
from conftest import devctl_env

# CSI sequences (cursor moves, colours, erase) and OSC ones: what the terminal acts on and does not print.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


def _run_in_pty(argv: list[str], env: dict, columns: int, rows: int, until: str, timeout_s: float = 60) -> str:
    """What `argv` writes to a `columns` x `rows` terminal until `until` appears (then SIGINT), as text."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    data = b""
    deadline = time.monotonic() + timeout_s
    try:
        while until not in _ESCAPES.sub("", data.decode("utf-8", "replace")):
            if time.monotonic() > deadline:
                pytest.fail(f"no {until!r} within {timeout_s} s; the terminal shows:\n{data.decode('utf-8', 'replace')[-3000:]}")
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data += os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
        proc.send_signal(signal.SIGINT)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                data += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
    return data.decode("utf-8", "replace")


@pytest.mark.parametrize("columns,rows", [(80, 24), (200, 50), (60, 12)])
def test_live_view_fits_the_terminal(columns, rows, tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = devctl_env(devices=8, DEVCTL_RUNTIME_DIR=str(runtime))
    shown = _run_in_pty(
        [sys.executable, "-m", "devctl", "memstats", "--watch", "--interval", "0.3"], env, columns, rows, until="sample 3 at"
    )
    text = _ESCAPES.sub("", shown)
    assert "Traceback" not in text, text
    lines = [line for line in re.split(r"\r\n|\n|\r", text)]
    too_wide = [line for line in lines if len(line.rstrip()) > columns]
    assert not too_wide, f"lines wider than {columns} columns:\n" + "\n".join(too_wide)
    # Each redraw is one sample's view: from its "devctl memstats --watch: sample N" line to the next.
    frames = re.split(r"devctl memstats --watch: sample \d+ at", text)[1:]
    assert len(frames) >= 3
    for frame in frames[:-1]:
        drawn = [line for line in re.split(r"\r\n|\n|\r", frame) if line.strip()]
        assert len(drawn) <= rows - 1, f"a {rows}-row window shows {len(drawn)} lines:\n" + "\n".join(drawn)
    # Headers are whole words, as the view has them (never "histo" / "ry").
    assert re.search(r"\bdevice\b", text) and re.search(r"\bin use\b", text)


def _table_head(frame: str, title: str) -> tuple[str, ...] | None:
    """A table's header line and the rule above it (its column set and widths), as one frame drew them."""
    lines = [line.rstrip() for line in re.split(r"\r\n|\n|\r", frame)]
    if title not in lines:
        return None
    at = lines.index(title)
    for i in range(at + 1, len(lines)):
        if "│" in lines[i] or re.match(r"\s*(device|pid)\b", lines[i]):
            return tuple(lines[max(at + 1, i - 1): i + 1])
    return None


@pytest.mark.parametrize("columns,rows", [(80, 24), (200, 50)])
def test_watch_keeps_one_layout_for_its_first_12_frames(columns, rows, tmp_path):
    """Issue 24: columns never appear, vanish or change width while the terminal's size is the same; the history
    is as wide from the first frame as later; the footer is at most two lines; a job that exits is said so."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = devctl_env(devices=4, DEVCTL_RUNTIME_DIR=str(runtime))
    script = tmp_path / "job.py"
    script.write_text(
        "import sys, time, jax, jax.numpy as jnp\nfrom devctl.publish import publish\n"
        "x = jax.device_put(jnp.zeros(1 << 22, jnp.uint8), jax.devices()[1])\n"
        "publish(interval=0.2)\nprint('ready', flush=True)\ntime.sleep(float(sys.argv[1]))\n"
    )
    job = subprocess.Popen([sys.executable, str(script), "6"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "ready"
        threading.Thread(target=job.wait, daemon=True).start()  # reaped when it exits, as a shell would
        shown = _run_in_pty(
            [sys.executable, "-m", "devctl", "memstats", "--watch", "--interval", "0.5", "--leak-samples", "0"],
            env, columns, rows, until="sample 25 at", timeout_s=180,
        )  # fmt: skip
    finally:
        job.kill()
        job.wait()
    text = _ESCAPES.sub("", shown)
    assert "Traceback" not in text, text
    watched = re.split(r"devctl memstats --watch: sample \d+ at", text)[1:25]
    frames = watched[:12]  # the layout's promise is for the first 12; the job's exit may come after them on a busy machine
    assert len(frames) == 12
    heads = [_table_head(frame, "devices") for frame in frames]
    assert heads[0] is not None and "history" in heads[0][-1], frames[0]
    assert all(head == heads[0] for head in heads), "\n".join(" | ".join(h or ("(none)",)) for h in heads)
    processes = [h for h in (_table_head(frame, "processes") for frame in frames) if h is not None]
    assert processes and all(h == processes[0] for h in processes), processes
    for frame in frames:
        drawn = [line for line in re.split(r"\r\n|\n|\r", frame) if line.strip()]
        footer = next((drawn[i:] for i, line in enumerate(drawn) if line.startswith("headroom:")), [])
        assert 1 <= len(footer) <= 2, "\n".join(drawn)
    # The job exited mid-watch: its rows stay, said as exited, and the history of its device is not a wall of blocks.
    assert any("exited" in frame for frame in watched), watched[-1]


def test_a_job_caught_between_its_snapshot_and_its_exit_is_said_to_exit_and_its_rows_say_so(monkeypatch):
    """A job removes its snapshot at exit a moment before it is gone: first 'stopped publishing', then 'exited'."""
    from types import SimpleNamespace

    from devctl.collect.memstats import MemstatsSampler
    from devctl.discovery import procs

    alive = {4821: True}
    monkeypatch.setattr(procs, "pid_alive", lambda root, pid: alive.get(pid, False))
    sampler = MemstatsSampler(device_filter=None, timeout_s=10)
    assert sampler._jobs_gone([SimpleNamespace(pid=4821, command=["python", "train.py"])]) == []
    assert sampler._jobs_gone([]) == ["job 4821 (train.py) stopped publishing (its last snapshot is stale)"]
    assert sampler._jobs_gone([]) == []
    alive[4821] = False
    assert sampler._jobs_gone([]) == ["job 4821 (train.py) exited"]
    assert sampler._jobs_gone([]) == []
