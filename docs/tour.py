"""The README's tour: real runs of devctl, kept as their JSON documents (docs/tour/*.json), and the tables the
renderers print for them on an 80-column terminal, between markers in README.md.

    python docs/tour.py --record   # run the commands on this machine (their output is what it says), then --update
    python docs/tour.py --update   # rewrite README.md's blocks, and docs/images/*.svg, from the recorded documents
    python docs/tour.py --check    # exit 1 when a block differs from what the renderers print now

tests/test_readme.py runs --check, so a change of a table shows in the README or fails the suite, as the
completions do. The documents are what devctl printed with --json; a schema change needs --record again.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOUR = ROOT / "docs" / "tour"
README = ROOT / "README.md"
WIDTH = 80

# name -> (devctl's arguments, extra environment, how many lines of the table the README shows at most)
RUNS: dict[str, tuple[list[str], dict[str, str], int]] = {
    "list": (["list"], {}, 14),
    "doctor": (["doctor"], {"JAX_PLATFORMS": "cuda"}, 22),
    "memstats": (["memstats"], {}, 16),
    "check": (["check"], {}, 24),
    "bench-memory": (["bench", "memory", "--quick"], {}, 16),
}

# A job that publishes, for memstats to show: 4 CPU devices, some arrays on each.
_JOB = """
import time, jax, jax.numpy as jnp
from devctl.publish import publish
publish(0.2)
held = [jax.device_put(jnp.ones((4 << 20,), jnp.float32), d) for d in jax.devices() for _ in range(2)]
time.sleep(120)
"""


def _env(extra: dict[str, str]) -> dict[str, str]:
    """What a user has: no DEVCTL_* settings, four CPU devices (the machine this records on has no accelerator)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVCTL_", "JAX_", "XLA_"))}
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=4", PYTHONPATH=str(ROOT), **extra)
    return env


def record() -> None:
    import tempfile

    TOUR.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="devctl-tour-"))
    (work / "train.py").write_text(_JOB)
    job = subprocess.Popen([sys.executable, "train.py"], env=_env({}), cwd=work)
    try:
        time.sleep(15)  # its first snapshot
        for name, (args, extra, _) in RUNS.items():
            proc = subprocess.run([sys.executable, "-m", "devctl", *args, "--json"], env=_env(extra), capture_output=True, text=True, timeout=600)
            doc = json.loads(proc.stdout)
            (TOUR / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
            print(f"recorded {name} (exit {proc.returncode})")
    finally:
        job.kill()
        job.wait()
        import shutil

        shutil.rmtree(work, ignore_errors=True)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise io.UnsupportedOperation("fileno")


def _report(doc: dict):
    """The report a document is, as devctl's own classes (model.from_dict), found by its schema id."""
    from devctl.model import bench_memory, check, doctor, from_dict, list_, memstats

    classes = {
        list_.SCHEMA: list_.Inventory,
        doctor.DOCTOR_SCHEMA: doctor.DoctorReport,
        memstats.SCHEMA: memstats.MemSnapshot,
        check.CHECK_SCHEMA: check.CheckReport,
        bench_memory.SCHEMA: bench_memory.MemoryReport,
    }
    return from_dict(classes[doc["schema"]], doc)


def _printed(name: str, colour: bool) -> str:
    """What devctl prints for `name`'s document on an 80-column terminal, with or without colour."""
    from devctl.render import console
    from devctl.render.emit import emit

    doc = json.loads((TOUR / f"{name}.json").read_text())
    saved = {k: os.environ.get(k) for k in ("COLUMNS", "NO_COLOR", "TERM", "FORCE_COLOR", "LINES")}
    screen, stdout = _Terminal(), sys.stdout
    os.environ.update(COLUMNS=str(WIDTH), TERM="xterm-256color")
    for k in ("FORCE_COLOR", "LINES", "NO_COLOR"):
        os.environ.pop(k, None)
    if not colour:
        os.environ["NO_COLOR"] = "1"
    sys.stdout = screen
    console._console.cache_clear()
    try:
        emit(_report(doc), json_out=False)
    finally:
        sys.stdout = stdout
        console._console.cache_clear()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return screen.getvalue()


def render(name: str) -> list[str]:
    """What `name`'s table looks like on an 80-column terminal without colour, cut to the lines the README shows."""
    lines = [line.rstrip() for line in _printed(name, colour=False).rstrip("\n").split("\n")]
    most = RUNS[name][2]
    return lines if len(lines) <= most else lines[: most - 1] + [f"... ({len(lines) - most + 1} more lines)"]


# The pictures: the same runs in colour, as SVG (rich's export), for where people would rather look than read.
PICTURES = ("memstats", "bench-memory")
IMAGES = ROOT / "docs" / "images"


def picture(name: str) -> str:
    from rich.console import Console
    from rich.text import Text

    args = RUNS[name][0]
    screen = Console(record=True, width=WIDTH, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    screen.print(Text.from_ansi(_printed(name, colour=True).rstrip("\n")))
    return screen.export_svg(title=f"devctl {' '.join(args)}")


def _block(name: str) -> str:
    args, extra, _ = RUNS[name]
    shown = " ".join(f"{k}={v}" for k, v in extra.items())
    command = f"$ {shown + ' ' if shown else ''}devctl {' '.join(args)}"
    return f"<!-- tour:{name} -->\n```text\n{command}\n" + "\n".join(render(name)) + "\n```\n<!-- /tour -->"


def updated(text: str) -> str:
    """README.md's text with every tour block rendered afresh."""
    import re

    def one(m: re.Match) -> str:
        return _block(m.group(1))

    return re.sub(r"<!-- tour:([a-z-]+) -->\n.*?<!-- /tour -->", one, text, flags=re.S)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--update", action="store_true")
    parser.add_argument("--check", action="store_true")
    opts = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if opts.record:
        record()
    text = README.read_text()
    fresh = updated(text)
    if opts.check:
        # The pictures are not compared: their bytes depend on rich's version as much as on devctl's tables.
        if fresh != text:
            import difflib

            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), fresh.splitlines(True), "README.md", "rendered now"))
            print("\nREADME.md's tour is stale: python docs/tour.py --update")
            return 1
        return 0
    if fresh != text:
        README.write_text(fresh)
        print("README.md updated")
    IMAGES.mkdir(exist_ok=True)
    for path, svg in ((IMAGES / f"{name}.svg", picture(name)) for name in PICTURES):
        if not path.exists() or path.read_text() != svg:
            path.write_text(svg)
            print(f"{path.relative_to(ROOT)} updated")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
