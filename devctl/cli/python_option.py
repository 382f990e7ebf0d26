"""`devctl --python PATH COMMAND ...`: the command run by another interpreter, so one installed devctl inspects
any venv's or container image's JAX (as `pip --python` and `pipdeptree --python` do).

devctl itself, and the packages it needs (pure Python, and psutil's abi3 library), are put on that
interpreter's path through a directory of links in the user's cache; what the interpreter inspects (jax,
jaxlib, plugins, libtpu, the CUDA wheels) is its own, never devctl's: those are not linked. Every probe child
then starts from that interpreter too (they inherit the path), and `devctl env` says which one it was.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from importlib import metadata

# What devctl imports outside its probe children: its dependencies, each with the packages it requires.
DEPENDENCIES = ("typer", "rich", "psutil", "nvidia-ml-py", "packaging")
OLDEST = (3, 10)


class Refused(Exception):
    """The interpreter cannot be used: one line for the user."""


def run_under(python: str, args: list[str]) -> None:
    """Replace this process by `python -m devctl ARGS` with devctl on its path; raises Refused."""
    path = os.path.abspath(python)
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise Refused(f"--python {python}: not an executable file (give a Python interpreter, e.g. .venv/bin/python)")
    try:
        said = subprocess.run([path, "-c", "import sys; print('%d %d' % sys.version_info[:2])"], capture_output=True, text=True, timeout=30)
        version = tuple(int(n) for n in said.stdout.split())
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        raise Refused(f"--python {python}: it does not run as a Python interpreter ({e.__class__.__name__})") from None
    if said.returncode != 0 or len(version) != 2:
        raise Refused(f"--python {python}: it does not run as a Python interpreter")
    if version < OLDEST:
        raise Refused(f"--python {python}: Python {version[0]}.{version[1]}; devctl needs {OLDEST[0]}.{OLDEST[1]} or newer")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (links_directory(), env.get("PYTHONPATH")) if p)
    os.execve(path, [path, "-m", "devctl", *args], env)


def links_directory() -> str:
    """A directory of links to devctl and its dependencies, kept in the user's cache (one per set of versions)."""
    tops = _top_levels()
    digest = hashlib.sha256(repr(sorted(tops.items())).encode()).hexdigest()[:16]
    cache = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):  # unset, or relative: the XDG default
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    base = os.path.join(cache, "devctl", "python-path")
    os.makedirs(base, mode=0o700, exist_ok=True)
    if os.path.islink(base) or not _owned(base):
        raise Refused(f"--python: {base} is not this user's own directory: not used")
    target = os.path.join(base, digest)
    if not os.path.lexists(target):
        import tempfile

        staging = tempfile.mkdtemp(prefix=".links-", dir=base)
        for name, source in tops.items():
            os.symlink(source, os.path.join(staging, name))
        try:
            os.rename(staging, target)
        except OSError:  # another devctl made it meanwhile: checked below like any other
            import shutil

            shutil.rmtree(staging, ignore_errors=True)
    if os.path.islink(target) or not os.path.isdir(target) or not _owned(target):
        raise Refused(f"--python: {target} is not this user's own directory: not used")
    return target


def _owned(path: str) -> bool:
    st = os.lstat(path)
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _top_levels() -> dict[str, str]:
    """Import name -> its file or directory, for devctl and every distribution it needs (not jax's)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the devctl package
    tops = {"devctl": here}
    for dist in _required():
        names = (dist.read_text("top_level.txt") or "").split()
        files = [str(f) for f in dist.files or ()]
        if not names:
            names = sorted({f.split("/")[0].removesuffix(".py") for f in files if not f.startswith("..") and ".dist-info" not in f.split("/")[0]})
        for name in names:
            if name in ("__pycache__", "bin", "example") or not name.isidentifier():
                continue
            for candidate in (name, f"{name}.py", *[f for f in files if re.fullmatch(rf"{re.escape(name)}\..*\.so", f)]):
                source = str(dist.locate_file(candidate))
                if os.path.exists(source):
                    tops[os.path.basename(source)] = source
                    break
    return tops


def _required() -> list[metadata.Distribution]:
    """DEPENDENCIES and what they require (no extras), each once."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(DEPENDENCIES)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional one (colorama off Windows)
        seen[name] = dist
        for requirement in dist.requires or ():
            if "extra ==" not in requirement:
                todo.append(re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0])
    return list(seen.values())
