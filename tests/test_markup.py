"""Data is never markup: strings with brackets reach the screen exactly as they are, through every renderer.

Paths, flags and package specs carry brackets (`--xla_dump_to=[/tmp/x]`,
`'jax[cuda12]==0.6.2'`); rich reads `[...]` as markup and drops it, turns it
into a style or a hyperlink, or raises MarkupError. Where the data can come
from outside (environment variables, PJRT_NAMES_AND_LIBRARY_PATHS, package
metadata) devctl runs as a real process, on a pipe and on a pseudo-terminal;
the rest is rendered from model objects onto a plain rich Console (markup on,
as rich's default), with and without a terminal.
"""

from __future__ import annotations

import ast
import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from importlib.metadata import version
from pathlib import Path

import pytest
from conftest import ROOT, devctl_env

BOLD = "[bold]x[/bold]"
PATH = "[/tmp/x]"
SPEC = "'jax[cuda12]==0.6.2'"
LINK = "[link=http://x]y"
PAYLOADS = (BOLD, PATH, SPEC, LINK)

_ANSI = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b\[[0-?]*[ -/]*[@-~]")


def visible(text: str) -> str:
    """What a person sees: colours, cursor moves and hyperlink escapes removed."""
    return _ANSI.sub("", text).replace("\r\n", "\n")


def assert_shown(out: str, *strings: str) -> None:
    assert "MarkupError" not in out and "Traceback" not in out, out
    for s in strings:
        assert s in out, f"{s!r} not shown exactly in:\n{out}"


# ---- real processes: data injected through the environment ----------------------------------------


def run_piped(args: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-m", "devctl", *args], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def run_on_terminal(args: list[str], env: dict[str, str], timeout: float = 120) -> str:
    """devctl with stdout and stderr on a pseudo-terminal: colour, boxes, spinners, hyperlinks all possible."""
    env = {k: v for k, v in env.items() if k != "NO_COLOR"}
    env.update(TERM="xterm-256color", COLUMNS="500", LINES="60")
    master, slave = pty.openpty()
    # Wide, so no cell folds: a value split over two lines would hide whether it survived.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 500, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "devctl", *args], stdin=slave, stdout=slave, stderr=slave, env=env)
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
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        else:
            pytest.fail(f"devctl {' '.join(args)} did not finish in {timeout} s")
    finally:
        os.close(master)
        proc.kill() if proc.poll() is None else None
        proc.wait(10)
    assert proc.returncode in (0, 1), b"".join(chunks).decode(errors="replace")
    return visible(b"".join(chunks).decode(errors="replace"))


RUNNERS = [pytest.param(run_piped, id="pipe"), pytest.param(run_on_terminal, id="terminal")]


def _site_with_skewed_cuda_pjrt(site: Path) -> str:
    """Package metadata of a jax-cuda12-pjrt built for another jaxlib: `devctl env` advises `pip install -U 'jax[cuda12-local]==...'`
    (the extra without the NVIDIA wheels, which are not installed here)."""
    d = site / "jax_cuda12_pjrt-0.6.2.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: jax-cuda12-pjrt\nVersion: 0.6.2\n")
    return f"pip install -U 'jax[cuda12-local]=={version('jax')}'"


@pytest.mark.parametrize("run", RUNNERS)
def test_env_shows_values_and_version_fixes_exactly(run, tmp_path):
    fix = _site_with_skewed_cuda_pjrt(tmp_path / "site")
    env = devctl_env(
        PYTHONPATH=f"{tmp_path / 'site'}{os.pathsep}{ROOT}",
        XLA_FLAGS="--xla_dump_to=[/tmp/x]", JAX_PLATFORMS="cpu,[bold]tpu", LIBTPU_INIT_ARGS=LINK,
        JAX_DEVCTL_MARKUP_TEST=BOLD, TPU_ACCELERATOR_TYPE=SPEC, XLA_PYTHON_CLIENT_ALLOCATOR=PATH,
    )  # fmt: skip
    out = run(["env"], env)
    assert_shown(out, "--xla_dump_to=[/tmp/x]", "cpu,[bold]tpu", LINK, BOLD, SPEC, PATH, fix)


@pytest.mark.parametrize("run", RUNNERS)
def test_list_and_plugins_show_a_bracketed_pjrt_entry_exactly(run):
    env = devctl_env(devices=1, PJRT_NAMES_AND_LIBRARY_PATHS=f"{BOLD}:/tmp/[x]/lib.so")
    assert_shown(run(["plugins"], env), BOLD, "/tmp/[x]/lib.so")
    assert_shown(run(["list", "--timeout", "60"], env), BOLD, "/tmp/[x]/lib.so")


@pytest.mark.parametrize("run", RUNNERS)
def test_check_and_doctor_show_bracketed_values_exactly(run):
    env = devctl_env(
        devices=1, XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB=LINK, XLA_PYTHON_CLIENT_ALLOCATOR=SPEC,
        PJRT_NAMES_AND_LIBRARY_PATHS=f"{BOLD}:/tmp/[x]/lib.so", TPU_LIBRARY_PATH="/tmp/[x]/libtpu.so",
    )  # fmt: skip
    out = run(["check", "--only", "env,plugins", "--timeout", "60"], env)
    assert_shown(out, LINK, SPEC, BOLD, "/tmp/[x]/lib.so", "/tmp/[x]/libtpu.so")
    assert_shown(run(["doctor", "--timeout", "60"], env), BOLD, "/tmp/[x]/lib.so", "/tmp/[x]/libtpu.so")


# ---- renderers fed model objects: data the environment cannot carry ---------------------------------


@pytest.fixture(params=[True, False], ids=["terminal", "no-terminal"])
def console(request, monkeypatch):
    """A plain rich Console (markup on, as rich's default) at width 200 in place of devctl's own."""
    from rich.console import Console

    import devctl.render.console as rc

    c = Console(file=io.StringIO(), width=200, force_terminal=request.param, color_system="truecolor" if request.param else None)
    monkeypatch.setattr(rc, "_console", lambda stderr: c)
    monkeypatch.setattr(rc, "stdout_is_terminal", lambda: request.param)  # boxes on a terminal, as devctl draws them
    return c


def shown(c) -> str:
    return visible(c.file.getvalue())


def test_environment_renderer(console):
    from devctl.collect.env import EnvironmentReport
    from devctl.model.env import EnvFinding, EnvVar, PackageVersion
    from devctl.model.hardware import CudaWheel
    from devctl.render.env import render_environment

    rep = EnvironmentReport(
        schema="devctl.env/1", devctl_version=BOLD, timestamp=0.0, hostname=PATH, python=LINK, python_executable=PATH,
        os=SPEC, packages=[PackageVersion(name=BOLD, version=LINK, role="other")],
        cuda_wheels=[CudaWheel(distribution=PATH, version=SPEC, component="x", cuda_major=12, minimum=None, minimum_source=None, verdict="too old")],
        nvidia_driver=LINK, nvidia_cuda_driver_version=BOLD,
        findings=[EnvFinding("error", [BOLD], f"{PATH} is skewed", f"pip install -U {SPEC}")],
        env=[EnvVar(name="XLA_FLAGS", value="--xla_dump_to=[/tmp/x]", meaning=LINK, problem=BOLD)], notes=[SPEC],
    )  # fmt: skip
    render_environment(rep)
    assert_shown(shown(console), *PAYLOADS, "--xla_dump_to=[/tmp/x]", f"pip install -U {SPEC}", f"{SPEC} (too old)")


def test_inventory_renderer(console):
    from devctl.collect.list_ import Inventory
    from devctl.model.list_ import (
        BackendInfo,
        BackendStatus,
        DeviceInfo,
        JaxOutcome,
        UnusedAccelerator,
    )
    from devctl.render.list_ import render_inventory

    inv = Inventory(
        schema="devctl.list/1", devctl_version="0", timestamp=0.0, hostname="h", jax_version=BOLD, jaxlib_version=LINK,
        default_platform="cpu",
        backends=[
            BackendInfo(platform="cpu", status=BackendStatus.OK, platform_version=PATH, init_s=0.001),
            BackendInfo(platform=BOLD, status=BackendStatus.FAILED, summary=f"cannot load {PATH}", hint=SPEC, code=LINK),
        ],
        devices=[DeviceInfo(id=0, platform="cpu", device_kind=SPEC, process_index=0, memory_kinds=[LINK], attributes={"pci_bus_id": BOLD})],
        unused_accelerators=[UnusedAccelerator(kind=BOLD, name=SPEC, location=PATH, reason=LINK)],
        plugins=[], host=None, hardware=None, elapsed_s=0.0,
        jax_outcome=JaxOutcome(result="raises", error=f"RuntimeError: {PATH}", code=BOLD, summary=LINK, fix=SPEC),
    )  # fmt: skip
    render_inventory(inv)
    assert_shown(shown(console), *PAYLOADS, f"cannot load {PATH}")


def test_plugins_renderer(console):
    from devctl.model.plugins import SCHEMA, PluginReport, PluginSource, PluginsReport, PluginStatus
    from devctl.render.plugins import render_plugins

    render_plugins(PluginsReport(SCHEMA, [
        PluginReport(name=BOLD, source=PluginSource.ENV, status=PluginStatus.FILE_MISSING, library_path="/tmp/[x]/lib.so",
                     pjrt_api_version=None, attributes={"k": LINK}, error=PATH, distribution=SPEC, notes=(LINK,)),
    ]))  # fmt: skip
    assert_shown(shown(console), BOLD, "/tmp/[x]/lib.so", f"k={LINK}", "file missing", PATH, SPEC, f"{BOLD}: {LINK}")


def test_check_renderer(console):
    from devctl.model.check import CheckReport, CheckResult, CheckStatus, Expectations
    from devctl.render.check import render_check

    results = [
        CheckResult(name=BOLD, status=CheckStatus.FAIL, message=f"{PATH} is missing", remediation=f"pip install -U {SPEC}"),
        CheckResult(name=LINK, status=CheckStatus.WARN, message=LINK, remediation=None),
    ]
    render_check(CheckReport("devctl.check/1", "0", 0.0, "h", "fail", False, Expectations(), results, {}, 0.1))
    assert_shown(shown(console), *PAYLOADS, f"{PATH} is missing", f"pip install -U {SPEC}")


def test_doctor_renderer(console):
    from devctl.model.doctor import DoctorFinding, DoctorReport, Overview
    from devctl.render.doctor import render_doctor

    finding = DoctorFinding(
        id="x", catalogue_number=None, title=BOLD, severity="error", evidence=[PATH], cause=LINK,
        fix=f"pip install -U {SPEC}", references=[LINK], code="DEVCTL_FR_X",
    )  # fmt: skip
    render_doctor(DoctorReport("devctl.doctor/1", "0", 0.0, "h", "problems", Overview([BOLD], [PATH], None, 0, []), [finding], [], 0.1))
    assert_shown(shown(console), *PAYLOADS, f"pip install -U {SPEC}")


def _snapshot():
    from devctl.model.memstats import (
        Headroom,
        HostMemory,
        MemDevice,
        MemProcess,
        MemSnapshot,
    )

    device = MemDevice(
        key=BOLD, source="jax", platform="cpu", id=0, device_kind=SPEC, memory_stats={"bytes_in_use": 40},
        bytes_limit=100, usable_bytes=100, usable_bound="allocator", in_use_bytes=40, in_use_source="jobs",
        peak_bytes_in_use=70, driver=None, hbm_bytes=None, status=LINK,
    )  # fmt: skip
    process = MemProcess(pid=7, source="publisher", user=PATH, command=f"python {SPEC}.py --out {PATH}", device=BOLD, used_bytes=40)
    return MemSnapshot(
        "devctl.memstats/2", 0.0, "h", [device], [process], [], Headroom(None, None, None, reason=LINK),
        HostMemory(*[None] * 7), problems=[SPEC], notes=[BOLD],
    )  # fmt: skip


def test_memstats_renderer(console):
    from devctl.render.memstats import render_snapshot

    render_snapshot(_snapshot())
    assert_shown(shown(console), *PAYLOADS, f"{SPEC}.py")  # the job's program: the table names it so


def test_memstats_watch_view(console):
    from devctl.render.memstats import WatchView, usage_bar

    snapshot = _snapshot()
    view = WatchView()
    view.add(snapshot)
    console.print(view.renderable(snapshot, 1.0, 1))
    bar = usage_bar(40, 100, 70, width=8)  # the live view's
    assert bar.startswith("[#")  # the bar itself looks like a markup tag
    assert_shown(shown(console), *PAYLOADS, bar)


def test_bench_transfer_renderer(console):
    from devctl.model.bench_transfer import Cell, PcieLink, Roofs, TransferReport, fastest_paths
    from devctl.render.bench_transfer import transfer_text

    devices = ("cpu:0", BOLD, PATH)
    # Three sizes: the chart too, whose series names are text from the cells.
    cells = [Cell("h2d", LINK, "single", size, "host", BOLD, samples=3, median_s=1e-3, p10_s=1e-3, p90_s=2e-3, gbps=size / 1e6, note=SPEC)
             for size in (4096, 1 << 16, 1 << 20)]  # fmt: skip
    # Three pairs at one size: the d2d matrix, whose headers are device names.
    cells += [Cell("d2d", "put", "single", 4096, s, d, samples=3, median_s=1e-3, gbps=1.0) for s in devices for d in devices if s != d]
    report = TransferReport(
        results=tuple(cells), roofs=Roofs(pcie=(PcieLink(device=PATH, reason=LINK),)), fastest=fastest_paths(cells),
        devices=(), environment={"sweep_note": SPEC},
    )  # fmt: skip
    transfer_text(report)
    out = shown(console)
    assert_shown(out, *PAYLOADS, f"host → {BOLD}", f"h2d {LINK} host → {BOLD}")
    matrix = out[out.index("d2d put GB/s") :]
    assert_shown(matrix, BOLD, PATH)


def test_distributed_renderer(console):
    from devctl.model.distributed import (
        ClusterDevice,
        ClusterFinding,
        ClusterHeadroom,
        ClusterReport,
        ProcessSummary,
    )
    from devctl.render.distributed import render_cluster

    process = ProcessSummary(0, PATH, 1, [SPEC], "cpu", BOLD, LINK, None, {}, SPEC, 1)
    device = ClusterDevice(0, PATH, BOLD, "cpu", 0, SPEC, 0, None, None, None, {})
    finding = ClusterFinding("version-mismatch", "warning", None, f"{PATH} differs", [0], [PATH], [BOLD], hint=LINK)
    report = ClusterReport(
        "devctl.list.distributed/2", "0", 0.0, LINK, 1, [process], [device], [finding],
        ClusterHeadroom(None, None, None, None, None, reason=BOLD), [], 0.0, None, None,
    )  # fmt: skip
    render_cluster(report)
    assert_shown(shown(console), *PAYLOADS, f"{PATH} differs ({LINK})")


# ---- no renderer can bypass the shared table -------------------------------------------------------


def test_every_table_and_progress_text_is_built_as_plain_text():
    offenders = []
    for path in sorted((ROOT / "devctl" / "render").glob("*.py")) + sorted((ROOT / "devctl" / "cli").glob("*.py")):
        if path.name == "console.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name == "Table":
                offenders.append(f"{path.name}:{node.lineno}: a bare rich Table (use render.console.data_table)")
            if name in ("TextColumn", "Status", "status") and not any(k.arg == "markup" for k in node.keywords):
                if not (node.args and isinstance(node.args[0], ast.Call) and getattr(node.args[0].func, "id", None) == "Text"):
                    offenders.append(f"{path.name}:{node.lineno}: {name}() parses its text as markup")
    assert not offenders, "\n".join(offenders)


def test_devctls_own_console_prints_brackets_verbatim(capsys):
    import devctl.render.console as rc

    rc._console.cache_clear()  # bind to pytest's captured stdout
    try:
        rc.out().print(f"{BOLD} {LINK} {PATH}")
    finally:
        rc._console.cache_clear()
    assert f"{BOLD} {LINK} {PATH}" in capsys.readouterr().out
