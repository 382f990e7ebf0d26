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
from types import SimpleNamespace

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


# ---- the busy history (issue 25) ----------------------------------------------------------------------------
#
# The live view's sparkline of how busy each device was, driven with samples whose busy-ness is chosen: NVML is
# faked at its boundary (tests/test_gpm.py's FakeGpm: GPU 0 an H200 with GPM, GPU 1 without), read by the real
# BusyReader and matched to devices by the real collector (MemstatsSampler._with_busy), on the 8-GPU node of
# the goldens; GPUs 2-7 are ones NVML gives no busy-ness for.

_BLOCKS = "▁▂▃▄▅▆▇█"


class _BusySamples:
    """Snapshots of the 8-GPU node whose GPU 0 has GPM's SM active at `sm` percent and GPU 1 (no GPM) NVML's
    utilization at `util` percent; None: that GPU gives no figure in that sample (GPM refuses it, NVML's
    utilization fails)."""

    def __init__(self, monkeypatch):
        import pynvml
        from golden_reports import memstats_gpu8
        from gpm_fake import H200_MATMUL, FakeGpm

        from devctl.collect.memstats import MemstatsSampler
        from devctl.discovery.gpm import BusyReader

        self.pynvml, self.base, self.matmul = pynvml, memstats_gpu8(), H200_MATMUL
        self.fake = FakeGpm(monkeypatch)
        self.sampler = MemstatsSampler(device_filter=None, timeout_s=10)
        self.sampler.busy = BusyReader(window_s=0.01)
        self.util: float | None = 0.0
        monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", self._rates)

    def _rates(self, handle):
        if handle == "h1" and self.util is None:
            raise self.pynvml.NVMLError_Unknown()
        return SimpleNamespace(gpu=self.util if handle == "h1" else 50, memory=10)

    def snapshot(self, sm: float | None, util: float | None, *, drop: tuple[str, ...] = ()):
        import dataclasses

        self.fake.figures["h0"] = {**self.matmul, "NVML_GPM_METRIC_SM_UTIL": sm} if sm is not None else {}
        self.util = util
        problems: list[str] = []
        devices = self.sampler._with_busy([d for d in self.base.devices if d.key not in drop], problems)
        return dataclasses.replace(self.base, devices=devices, processes=[], problems=problems)


def _cells(lines, header: str = "busy history", width: int = 16) -> dict[str, str]:
    """Each device row's cell of the column `header`, as drawn (`width` cells from where its header starts)."""
    text = [str(line) for line in lines]
    head = next(i for i, line in enumerate(text) if header in line and re.search(r"\bdevice\b", line))
    at = text[head].index(header)
    cells = {}
    for line in text[head + 1 :]:
        if line.startswith("├"):  # a boxed table's rule under its header
            continue
        key = re.search(r"(cuda|tpu-chip|cpu|nvml):\d+", line)
        if key is None or not line.lstrip("│ ").startswith(key.group(0)):
            break
        cells[key.group(0)] = line[at : at + width]
    return cells


def _frame(view, snapshot, n: int, width: int = 200, height: int = 60) -> list[str]:
    return [str(line) for line in view.lines(snapshot, 1.0, n, width, height)]


def test_busy_history_rises_and_falls_on_one_scale_for_every_device(monkeypatch):
    from devctl.render.memstats import WatchView

    samples = _BusySamples(monkeypatch)
    view = WatchView()
    sm = [0, 15, 30, 45, 60, 75, 90, 100, 80, 55, 30, 5]
    for n, value in enumerate(sm, 1):
        snapshot = samples.snapshot(value, 50)
        view.add(snapshot)
        frame = _frame(view, snapshot, n)
    cells = _cells(frame)
    gpm, util = cells["cuda:0"], cells["cuda:1"]
    assert len(gpm) == len(util) == 16
    # GPM's SM active, the figure the busy column leads with: up to a full block at 100%, then down.
    heights = [_BLOCKS.index(c) for c in gpm.strip()]
    assert heights == [min(7, int(8 * v / 100)) for v in sm], gpm
    assert heights[:8] == sorted(heights[:8]) and heights[7:] == sorted(heights[7:], reverse=True)
    assert gpm.strip()[7] == "█" and gpm.strip()[0] == "▁"
    # NVML's utilization at a steady 50% is half height, not scaled up to the tallest cell of its row.
    assert util.strip() == "▅" * len(sm)
    # GPUs NVML gives no busy-ness for show a dash, never a row of zeros.
    assert {cells[f"cuda:{i}"].strip() for i in range(2, 8)} == {"-"}
    legend = [line for line in frame if line.startswith("busy history:")]
    assert legend == ["busy history: SM active % (GPM), NVML utilization % (no GPM), last 16 samples, ▁ 0 to █ 100%, · no figure"]
    # The busy column's own figures are unchanged beside it.
    assert re.search(r"cuda:0 .* 5/63/13 ", next(line for line in frame if line.startswith("cuda:0")))


def test_busy_history_is_as_wide_from_the_first_sample_and_holds_only_the_last_16(monkeypatch):
    from devctl.render.memstats import WatchView

    samples = _BusySamples(monkeypatch)
    view = WatchView()
    heads: list[str] = []
    rows: list[str] = []
    for n in range(1, 41):
        snapshot = samples.snapshot(100 if n % 2 else 0, 0)
        view.add(snapshot)
        frame = _frame(view, snapshot, n)
        heads.append(next(line for line in frame if line.startswith("device ")))
        rows.append(next(line for line in frame if line.startswith("cuda:0")))
        if n == 1:
            assert _cells(frame)["cuda:0"] == " " * 15 + "█"  # padded to its width from the start
    assert "busy history" in heads[0] and all(h == heads[0] for h in heads), "the columns moved as the history grew"
    assert len({len(row) for row in rows}) == 1
    # The last 16 of 40 samples (odd ones 100%, even ones 0%), the newest (sample 40) on the right.
    assert _cells(frame)["cuda:0"] == "█▁" * 8
    assert all(len(h) == 16 for h in view.busy_history.values()) and len(view.busy_history) == 8


def test_busy_history_of_a_sample_without_a_figure_is_a_dot_and_of_a_device_gone_and_back_a_gap(monkeypatch):
    from devctl.render.memstats import WatchView

    samples = _BusySamples(monkeypatch)
    view = WatchView()
    steps = [
        samples.snapshot(100, 100),
        # GPM gave nothing for GPU 0 (its busy column falls back to NVML's utilization, 50%: not its row's
        # measure, so a gap rather than a jump), and NVML's utilization failed on GPU 1
        samples.snapshot(None, None),
        samples.snapshot(100, 100, drop=("cuda:1",)),  # GPU 1 gone from the sample (lost, then found again)
        samples.snapshot(100, 100),
    ]
    for n, snapshot in enumerate(steps, 1):
        view.add(snapshot)
        frame = _frame(view, snapshot, n)
        if n == 2:
            assert re.search(r"^cuda:0 .* util 50 ", "\n".join(frame), re.M)
        if n == 3:
            assert "cuda:1" not in _cells(frame)
    cells = _cells(frame)
    assert cells["cuda:0"].strip() == "█·██" and cells["cuda:1"].strip() == "█··█", cells
    # A device gone for longer than its history is forgotten: the view holds no key it cannot show.
    for n in range(5, 5 + 17):
        view.add(samples.snapshot(50, 50, drop=("cuda:1",)))
    assert "cuda:1" not in view.busy_history and len(view.busy_history) == 7
    # Its memory history and peak as well (12 samples long): nothing of a departed device outlives what it shows.
    assert "cuda:1" not in view.history and "cuda:1" not in view.peaks and len(view.history) == 7
    view.add(samples.snapshot(50, 50))
    assert _cells(_frame(view, samples.snapshot(50, 50), 23))["cuda:1"].strip() == "▅"


def test_busy_history_gives_way_at_narrow_widths_and_short_windows(monkeypatch):
    from rich.cells import cell_len

    from devctl.render.memstats import WatchView

    samples = _BusySamples(monkeypatch)
    for width, height in [(200, 50), (100, 30), (80, 24), (60, 24), (40, 12), (80, 8)]:
        view = WatchView()
        for n in range(1, 4):
            snapshot = samples.snapshot(30 * n, 50)
            view.add(snapshot)
            frame = _frame(view, snapshot, n, width, height)
            assert all(cell_len(line) <= width for line in frame), (width, frame)
            assert len(frame) <= height - 1, (width, height, frame)
        head = next((line for line in frame if line.startswith("device ")), "")
        legend = [line for line in frame if line.startswith("busy history:")]
        if width >= 80:
            # At 80 columns the sparkline stays and the three figures beside it give way (as `busy` at 100).
            assert "busy history" in head and _cells(frame)["cuda:0"].strip() == "▃▅█"
            assert bool(re.search(r"SM/TC/DRAM %|\bbusy\b(?! history)", head)) == (width >= 100)
        else:
            assert "busy history" not in head
        # What the sparkline plots is said wherever it is shown, and only there.
        assert bool(legend) == ("busy history" in head and height > 8), (width, height, frame)


def test_without_busy_figures_there_is_no_busy_history(monkeypatch):
    """A CPU host (and a GPU host whose NVML gives no busy-ness): no column of dashes, no legend."""
    import dataclasses

    from golden_reports import memstats_gpu8

    from devctl.render.memstats import WatchView

    snapshot = memstats_gpu8()
    snapshot = dataclasses.replace(snapshot, devices=[dataclasses.replace(d, busy=None) for d in snapshot.devices])
    view = WatchView()
    for n in range(1, 4):
        view.add(snapshot)
        frame = _frame(view, snapshot, n)
    assert not any("busy history" in line for line in frame), frame
    assert {len(h) for h in view.busy_history.values()} == {3} and not view.busy_kinds


def test_a_tpu_chip_s_busy_history_is_its_duty_cycle():
    import dataclasses

    from golden_reports import memstats_gpu8

    from devctl.model.memstats import MemDevice, TpuRuntimeChip
    from devctl.render.memstats import WatchView, busy_figure

    base = memstats_gpu8()

    def chips(duty: float | None):
        runtime = TpuRuntimeChip(pid=7, port=8431, hbm_used_bytes=1 << 30, hbm_total_bytes=16 << 30, duty_cycle_percent=duty,
                                 hbm_utilization_percent=None, cores=1)  # fmt: skip
        devices = [
            MemDevice(key=f"tpu-chip:{i}", source="tpu-pci", platform="tpu", id=None, device_kind="TPU v5 lite", memory_stats=None,
                      bytes_limit=None, usable_bytes=None, usable_bound=None, in_use_bytes=None, in_use_source=None,
                      peak_bytes_in_use=None, driver=None, hbm_bytes=16 << 30, status="held", runtime=runtime if i == 0 else None)
            for i in range(2)
        ]  # fmt: skip
        return dataclasses.replace(base, devices=devices, processes=[], problems=[])

    assert busy_figure(chips(float("nan")).devices[0]) == ("tpu", None) and busy_figure(chips(1.0).devices[1]) is None
    view = WatchView()
    for n, duty in enumerate([10.0, 50.0, None, 99.0], 1):
        view.add(chips(duty))
        frame = _frame(view, chips(duty), n)
    cells = _cells(frame)
    assert cells["tpu-chip:0"].strip() == "▁▅·█" and cells["tpu-chip:1"].strip() == "-"
    assert [line for line in frame if line.startswith("busy history:")] == [
        "busy history: duty cycle % (TPU), last 16 samples, ▁ 0 to █ 100%, · no figure"]


def test_the_watch_loop_draws_the_busy_history_live_and_plain_output_stays_a_log(monkeypatch):
    """cli's watch loop itself, on a terminal with NO_COLOR (rich's Live, no colour) and off one (every sample in
    full, as a log: the sparkline is the live view's)."""
    import io

    from devctl.cli.memstats import _watch
    from devctl.render import console

    samples = _BusySamples(monkeypatch)
    values = iter([40, 60, 80, 100, 20])

    class Sampler:  # cli's side of the collector: each refresh is the next of the chosen samples
        def sample(self):
            return samples.snapshot(next(values), 50)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

        def fileno(self) -> int:
            raise io.UnsupportedOperation("fileno")

    for tty in (True, False):
        screen = Terminal() if tty else io.StringIO()
        monkeypatch.setenv("COLUMNS", "120")
        monkeypatch.setenv("LINES", "40")
        monkeypatch.setenv("NO_COLOR", "1")
        monkeypatch.setattr(sys, "stdout", screen)
        console._console.cache_clear()
        values = iter([40, 60, 80, 100, 20])
        try:
            _watch(Sampler(), samples.snapshot(20, 50), 0.0, 6, "table")
        finally:
            console._console.cache_clear()
        shown = screen.getvalue()
        if not tty:
            # Off a terminal: each sample whole, its figures as they were, greppable; no sparkline in a log.
            assert "busy history" not in shown and not set(_BLOCKS) & set(shown)
            firsts = re.findall(r"^cuda:0 .*? (\d+)/63/13 ", shown, re.M)
            assert firsts == ["20", "40", "60", "80", "100", "20"], shown
            continue
        assert not re.search(r"\x1b\[[0-9;]*m", shown), "NO_COLOR: no colour or style reaches the screen"
        frames = re.split(r"devctl memstats --watch: sample \d+ at", _ESCAPES.sub("", shown))[1:]
        assert len(frames) >= 6  # Live draws its last frame again as it stops
        drawn = [_cells(re.split(r"\r\n|\n|\r", frame))["cuda:0"] for frame in frames[:6]]
        assert drawn[0] == " " * 15 + "▂" and drawn[-1] == " " * 10 + "▂▄▅▇█▂", drawn
        assert all(len(cell) == 16 for cell in drawn)
