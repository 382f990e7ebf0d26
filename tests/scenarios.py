"""Cached virtual environments with real JAX releases from the registry, for the heavy oracle scenarios.

`scenario_python(name, steps)` returns the interpreter of a venv under
$DEVCTL_SCENARIO_CACHE/<name> (default /root/.cache/devctl-scenarios/<name>)
whose packages are exactly what the pip install `steps` put there, one
`pip install` per step (a step is a list of pip arguments, so a skew can be made
with `--no-deps`; a step that starts with "uninstall" runs `pip uninstall -y` instead,
to apply a fix that says so), after devctl's own runtime dependencies. devctl itself is not
installed: the tests run it from the checkout through PYTHONPATH.

A venv is built once and rebuilt only when its steps or its interpreter change
(their hash is kept in the venv, in `.devctl-scenario.json`). A directory under
the cache root that this module did not build (another engineer's venv) is
never touched. When the registry cannot be reached and the venv is not already
built, `scenario_python` returns None and the test skips.

The venvs the heavy scenarios use are listed in VENVS; build them ahead of a run with

    python tests/scenarios.py build [NAME ...]     # all of them by default
    python tests/scenarios.py sizes
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

CACHE_ENV = "DEVCTL_SCENARIO_CACHE"
DEFAULT_CACHE = Path("/root/.cache/devctl-scenarios")


def _runtime_deps() -> list[str]:
    """devctl's runtime dependencies as pyproject.toml declares them, less jax/jaxlib, which each scenario
    chooses itself, and those whose marker excludes the scenarios' Pythons (tomli)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    return [d for d in project["dependencies"] if not re.match(r"(jax|jaxlib)\b", d) and ";" not in d]


RUNTIME_DEPS = _runtime_deps()
STAMP = ".devctl-scenario.json"  # written when a build finishes: its hash, steps, timing
BUILDING = ".devctl-scenario-building"  # present while this module builds the venv (or when a build died)
PIP_TIMEOUT = 3600  # seconds for one pip step: the CUDA wheels are several GB

_NETWORK_ERRORS = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|"
    r"Name or service not known|Network is unreachable|ProxyError|Read timed out|ConnectTimeout|"
    r"Max retries exceeded|Could not fetch URL"
)


class ScenarioBuildError(RuntimeError):
    """pip could reach the registry but could not build the venv (say a version it does not serve)."""


@dataclass(frozen=True)
class Venv:
    steps: list[list[str]]
    python: str = "python3.11"
    note: str = ""
    extra: dict = field(default_factory=dict)


JAX = "0.10.2"  # the release the light scenarios (tests/.venv) use
VENVS: dict[str, Venv] = {
    "cuda12-0.10.2": Venv([[f"jax[cuda12]=={JAX}"]], note="the CUDA 12 extra on a machine without a GPU"),
    "cuda13-0.10.2": Venv([[f"jax[cuda13]=={JAX}"]], note="the CUDA 13 extra on a machine without a GPU"),
    "tpu-0.10.2": Venv([[f"jax[tpu]=={JAX}"]], note="libtpu on a machine without a TPU"),
    "rocm7-0.10.2": Venv(
        [[f"jax=={JAX}", f"jaxlib=={JAX}", f"jax-rocm7-plugin=={JAX}", f"jax-rocm7-pjrt=={JAX}"]],
        note="the ROCm 7 plugin on a machine without an AMD GPU",
    ),
    "skew-cuda12-plugin-0.9.2": Venv(
        [[f"jax[cuda12]=={JAX}"], ["--no-deps", "jax-cuda12-plugin==0.9.2", "jax-cuda12-pjrt==0.9.2"]],
        note="jax/jaxlib 0.10.2 with the CUDA 12 plugin left at 0.9.2",
    ),
    "skew-jaxlib-newer": Venv(
        [["jax==0.9.2"], ["--no-deps", f"jaxlib=={JAX}"]],
        note="jaxlib 0.10.2 under jax 0.9.2",
    ),
    "jaxlib-missing": Venv(
        [["--no-deps", f"jax=={JAX}"], ["ml_dtypes", "numpy", "opt_einsum", "scipy"]],
        note="jax without jaxlib: `import jax` raises",
    ),
    "cuda12-plugin-without-pjrt": Venv(
        [[f"jax[cuda12]=={JAX}"], ["uninstall", "jax-cuda12-pjrt"]], note="jax-cuda12-plugin without jax-cuda12-pjrt (pip check flags it)"
    ),
    "cuda12-pjrt-without-plugin": Venv(
        [[f"jax[cuda12]=={JAX}"], ["uninstall", "jax-cuda12-plugin"]], note="jax-cuda12-pjrt without jax-cuda12-plugin"
    ),
    "jax-0.4.36": Venv([["jax==0.4.36", "jaxlib==0.4.36"]], note="the oldest jax devctl supports, CPU"),
    "jax-0.4.36-cuda12": Venv([["jax[cuda12]==0.4.36"]], note="the oldest supported jax with its CUDA 12 extra"),
    "py312-jax-0.12": Venv([["jax==0.12.0.1", "jaxlib==0.12.0.1"]], python="python3.12", note="the newest jax on Python 3.12"),
    "py312-jax-0.12-cuda13": Venv(
        [["jax[cuda13]==0.12.0.1"]], python="python3.12", note="the newest jax with its CUDA 13 extra on Python 3.12, without a GPU"
    ),
    "py310-jax-0.6.2-cuda12": Venv(
        [["jax[cuda12]==0.6.2"]], python="python3.10", note="jax 0.6.2 with its CUDA 12 extra on Python 3.10, without a GPU"
    ),
}


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def resolve_python(python: str) -> str | None:
    """An interpreter by path or name; pyenv's versions are searched when the name is not on PATH."""
    candidates = [python] if os.sep in python else [shutil.which(python) or ""]
    home = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates += sorted(glob.glob(str(home / "versions" / "*" / "bin" / Path(python).name)), reverse=True)
    for candidate in candidates:
        if not candidate:
            continue
        try:
            out = subprocess.run([candidate, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()  # through a pyenv shim, the real interpreter
    return None


def _version(python: str) -> str:
    return subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True, check=True).stdout.strip()


def steps_hash(steps: list[list[str]], python_version: str) -> str:
    document = json.dumps({"python": python_version, "runtime": RUNTIME_DEPS, "steps": steps}, sort_keys=True)
    return hashlib.sha256(document.encode()).hexdigest()


def read_stamp(venv: Path) -> dict | None:
    try:
        return json.loads((venv / STAMP).read_text())
    except (OSError, ValueError):
        return None


def index_url() -> str:
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        try:
            url = subprocess.run(
                [sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            url = ""
    return url or "https://pypi.org/simple"


def registry_reachable(timeout: float = 15) -> bool:
    url = index_url().rstrip("/") + "/pip/"
    if url.startswith("file:"):
        return Path(url[len("file://"):]).exists()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status < 500
    except Exception:
        return False


@contextlib.contextmanager
def _lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # another pytest process building the same venv: wait for it
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def scenario_python(name: str, steps: list[list[str]], python: str = "python3.11") -> Path | None:
    """The interpreter of the cached venv `name` built with `steps`; None when the registry cannot be reached.

    Raises ScenarioBuildError when pip fails for another reason, or when `name` is a directory this
    module did not build (it is left alone).
    """
    interpreter = resolve_python(python)
    if interpreter is None:
        raise ScenarioBuildError(f"no {python} interpreter on this machine")
    venv = cache_root() / name
    bin_python = venv / "bin" / "python"
    want = steps_hash(steps, _version(interpreter))
    ready = lambda: (read_stamp(venv) or {}).get("hash") == want and bin_python.exists() and not (venv / BUILDING).exists()  # noqa: E731
    if ready():
        return bin_python
    with _lock(cache_root() / f".{name}.lock"):
        if ready():  # built by another process while this one waited
            return bin_python
        if venv.exists() and read_stamp(venv) is None and not (venv / BUILDING).exists():
            raise ScenarioBuildError(f"{venv} exists and was not built by tests/scenarios.py; it is left alone: use another name")
        if not registry_reachable():
            return None
        _build(venv, interpreter, steps, want)
    return bin_python


def remove(name: str) -> None:
    """Remove the venv `name` if this module built it (stamped): a fix's venv, once its check is done, so a heavy
    run holds only the scenarios' own venvs on disk (each CUDA one is 5 GB)."""
    venv = cache_root() / name
    if venv.is_dir() and not venv.is_symlink() and read_stamp(venv) is not None:
        shutil.rmtree(venv, ignore_errors=True)


def _build(venv: Path, interpreter: str, steps: list[list[str]], digest: str) -> None:
    if venv.exists():
        shutil.rmtree(venv)  # ours (stamped or a build that died): its steps changed
    venv.mkdir(parents=True)
    (venv / BUILDING).write_text(str(os.getpid()))
    started = time.monotonic()
    subprocess.run([interpreter, "-m", "venv", str(venv)], check=True, capture_output=True, text=True)
    python = str(venv / "bin" / "python")
    log = venv / "build.log"
    timings = []
    for step in [RUNTIME_DEPS, *steps]:
        t0 = time.monotonic()
        if step[:1] == ["uninstall"]:  # applying a fix that says `pip uninstall ...`
            cmd = [python, "-m", "pip", "uninstall", "-y", "-q", *step[1:]]
        else:
            cmd = [python, "-m", "pip", "install", "-q", "--no-input", *step]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT)
        with open(log, "a") as handle:
            handle.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-3000:]
            if _NETWORK_ERRORS.search(tail) and not registry_reachable():
                raise ScenarioBuildError(f"the registry went away while building {venv.name}:\n{tail}")
            raise ScenarioBuildError(f"pip install {' '.join(step)} failed for {venv.name}:\n{tail}")
        timings.append({"step": step, "seconds": round(time.monotonic() - t0, 1)})
    frozen = subprocess.run([python, "-m", "pip", "freeze"], capture_output=True, text=True).stdout.splitlines()
    stamp = {
        "hash": digest,
        "python": interpreter,
        "steps": steps,
        "runtime": RUNTIME_DEPS,
        "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.monotonic() - started, 1),
        "timings": timings,
        "packages": [line for line in frozen if re.match(r"(?i)(jax|libtpu|nvidia|typer|rich)", line)],
    }
    (venv / STAMP).write_text(json.dumps(stamp, indent=2))
    (venv / BUILDING).unlink()


def venv_size(path: Path) -> int:
    """Bytes on disk under `path`, symlinks not followed."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
    return total


def get(name: str) -> Path | None:
    """The interpreter of one of VENVS, built if needed."""
    venv = VENVS[name]
    return scenario_python(name, venv.steps, venv.python)


def _main(argv: list[str]) -> int:
    command, names = (argv[0] if argv else "build"), argv[1:] or list(VENVS)
    failed = 0
    for name in names:
        if command == "build":
            t0 = time.monotonic()
            try:
                python = get(name)
            except ScenarioBuildError as e:
                print(f"{name}: FAILED {e}", flush=True)
                failed += 1
                continue
            if python is None:
                print(f"{name}: skipped, the registry cannot be reached", flush=True)
                continue
            print(f"{name}: ready in {time.monotonic() - t0:.0f} s, {venv_size(cache_root() / name) / 2**30:.2f} GiB", flush=True)
        elif command == "sizes":
            stamp = read_stamp(cache_root() / name) or {}
            size = venv_size(cache_root() / name) if (cache_root() / name).exists() else 0
            print(f"{name}\t{size / 2**30:.2f} GiB\tbuilt {stamp.get('built', '-')} in {stamp.get('seconds', '-')} s")
        else:
            print(f"usage: {argv and sys.argv[0]} build|sizes [NAME ...]", file=sys.stderr)
            return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
