"""devctl as the registry delivers it: the wheel built from this tree (its name, licence and completion scripts),
run from where pip installs it, and `devctl completion` printing and installing the scripts it ships."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from conftest import ROOT, assert_usage_error, devctl_env, run_devctl

from devctl.cli.completion import FILES, script
from devctl.version import DISTRIBUTION, __version__

SHELLS = tuple(FILES)


# ---- the wheel -----------------------------------------------------------------------------------------------


def _setuptools_can_build() -> bool:
    """Whether this interpreter's own setuptools builds the project (PEP 639 licence fields: 77 or newer)."""
    try:
        import setuptools
    except ImportError:
        return False
    return tuple(int(p) for p in re.findall(r"\d+", setuptools.__version__)[:2]) >= (77, 0)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip wheel` builds from a copy of this tree (the build writes build/ and *.egg-info next to
    its sources: never into a working tree others run from)."""
    work = tmp_path_factory.mktemp("build")
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "devctl", src / "devctl", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    isolation = [] if not _setuptools_can_build() else ["--no-build-isolation"]
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", *isolation, "-w", str(work / "out"), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and "satisfies the requirement setuptools" in proc.stdout + proc.stderr:
        pytest.skip("no setuptools>=77 here or on a reachable index: the wheel cannot be built")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = (work / "out").glob("*.whl")
    return built


def _dist_info(names: list[str]) -> str:
    (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    return info


def test_wheel_is_jax_devctl_with_its_licence(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = _dist_info(names)
        metadata = Parser().parsestr(z.read(f"{info}/METADATA").decode())
        licence = z.read(f"{info}/licenses/LICENSE").decode()
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    # Its own name on the registry (`devctl` there is another project), the version of devctl/version.py.
    assert metadata["Name"] == DISTRIBUTION == "jax-devctl"
    assert metadata["Version"] == __version__
    assert wheel.name.startswith(f"jax_devctl-{__version__}-")
    assert metadata["License-Expression"] == "Apache-2.0" and metadata.get_all("License-File") == ["LICENSE"]
    assert licence == (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence and "END OF TERMS AND CONDITIONS" in licence
    # The command and the import package keep their name.
    assert re.search(r"^devctl = devctl\.cli\.entry:main$", entry_points, re.M), entry_points
    assert "devctl/__init__.py" in names and "devctl/cli/root_help.json" in names


def test_wheel_ships_the_completion_scripts(wheel):
    with zipfile.ZipFile(wheel) as z:
        for shell, name in FILES.items():
            assert z.read(f"devctl/completions/{name}").decode() == script(shell)


def test_installed_wheel_prints_and_says_its_version(wheel, tmp_path):
    # Where pip puts it, with nothing of this tree on the path: the scripts come from the installed package.
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check", "-q", "--target", str(site), str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = {**devctl_env(), "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", f"import devctl, importlib.metadata as m; print(devctl.__file__); print(m.version({DISTRIBUTION!r}))"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert where.returncode == 0, where.stderr
    module, version = where.stdout.split()
    assert Path(module).is_relative_to(site) and version == __version__
    for shell, name in FILES.items():
        printed = subprocess.run([sys.executable, "-m", "devctl", "completion", shell], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout == (site / "devctl" / "completions" / name).read_text() == script(shell)


# ---- devctl completion SHELL --------------------------------------------------------------------------------


@pytest.mark.parametrize("shell", SHELLS)
def test_completion_prints_the_shipped_script(shell):
    proc = run_devctl("completion", shell)
    assert proc.returncode == 0, proc.stderr
    name = FILES[shell]
    assert proc.stdout == (ROOT / "devctl" / "completions" / name).read_text() == (ROOT / "completions" / name).read_text()
    assert proc.stdout.startswith("#compdef devctl\n" if shell == "zsh" else "# ")


@pytest.mark.parametrize("args,needles", [(["completion", "tcsh"], ["tcsh", "bash, zsh, fish"]), (["completion", ""], ["''"]), (["completion"], ["bash|zsh|fish"])])
def test_bad_shell_is_one_line_exit_2(args, needles, tmp_path):
    proc = run_devctl(*args, "--install", env=_home_env(tmp_path))
    assert_usage_error(proc, *needles)
    assert not any(tmp_path.iterdir()), "nothing is written for a shell devctl does not know"


def _home_env(home: Path, **extra: str) -> dict[str, str]:
    env = devctl_env(HOME=str(home), **extra)
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "BASH_COMPLETION_USER_DIR", "ZDOTDIR"):
        if name not in extra:
            env.pop(name, None)
    return env


WHERE = {
    "bash": ".local/share/bash-completion/completions/devctl",
    "zsh": ".zfunc/_devctl",
    "fish": ".config/fish/completions/devctl.fish",
}


@pytest.mark.parametrize("shell", SHELLS)
def test_install_writes_where_the_shell_looks(shell, tmp_path):
    proc = run_devctl("completion", shell, "--install", env=_home_env(tmp_path))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    path = tmp_path / WHERE[shell]
    assert path.read_text() == script(shell)
    assert oct(path.stat().st_mode & 0o777) == oct(0o644 & ~_umask())
    lines = proc.stdout.splitlines()
    assert lines[0] == f"wrote the {shell} completion for devctl to {path}"
    said = "\n".join(lines[1:])
    if shell == "bash":  # without the bash-completion package, the file is sourced
        assert f"source {path}" in said
    elif shell == "zsh":  # ~/.zfunc is on no $fpath by default
        assert "fpath=(~/.zfunc $fpath)" in said and "compinit" in said and "~/.zshrc" in said
    else:
        assert "nothing to add" in said
    again = run_devctl("completion", shell, "--install", env=_home_env(tmp_path))  # a second install replaces the first
    assert again.returncode == 0 and path.read_text() == script(shell)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name], "no temporary file left behind"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize(
    "shell,variables,where",
    [
        ("bash", {"XDG_DATA_HOME": "{home}/data"}, "data/bash-completion/completions/devctl"),
        ("bash", {"XDG_DATA_HOME": "relative/data"}, WHERE["bash"]),  # a relative XDG path is invalid: ignored
        ("bash", {"BASH_COMPLETION_USER_DIR": "{home}/bc:{home}/other"}, "bc/completions/devctl"),
        ("fish", {"XDG_CONFIG_HOME": "{home}/config"}, "config/fish/completions/devctl.fish"),
        ("zsh", {"XDG_CONFIG_HOME": "{home}/config", "ZDOTDIR": "{home}/zdot"}, WHERE["zsh"]),
    ],
)
def test_install_follows_the_shells_own_variables(shell, variables, where, tmp_path):
    env = _home_env(tmp_path, **{k: v.format(home=tmp_path) for k, v in variables.items()})
    proc = run_devctl("completion", shell, "--install", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / where).read_text() == script(shell)
    if "ZDOTDIR" in variables:
        assert f"{tmp_path}/zdot/.zshrc" in proc.stdout


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("dangling", [False, True])
def test_install_refuses_a_planted_symlink(shell, dangling, tmp_path):
    home = tmp_path / "home"
    path = home / WHERE[shell]
    path.parent.mkdir(parents=True)
    victim = tmp_path / "victim"
    if not dangling:
        victim.write_text("keep me\n")
    path.symlink_to(victim)
    proc = run_devctl("completion", shell, "--install", env=_home_env(home))
    # A long path is shown cut (devctl shows a value it was given in at most 100 characters): its start is enough.
    assert_usage_error(proc, str(path)[:60], "symbolic link", str(victim))
    assert proc.stdout == ""
    assert path.is_symlink() and os.readlink(path) == str(victim)
    assert victim.read_text() == "keep me\n" if not dangling else not victim.exists()
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_install_into_an_unwritable_place_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / ".zfunc"
    blocker.write_text("a file where the directory goes\n")
    proc = run_devctl("completion", "zsh", "--install", env=_home_env(tmp_path))
    assert_usage_error(proc, "zsh completion was not written", str(blocker / "_devctl"))
    assert blocker.read_text() == "a file where the directory goes\n"


# ---- the changelog ---------------------------------------------------------------------------------------------


def test_changelog_names_every_schema_version():
    # A `--json` reader upgrading needs to know when a document changed: each bump gets a line.
    import json

    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog\n") and "## [Unreleased]" in changelog
    current = sorted(json.loads(p.read_text())["properties"]["schema"]["const"] for p in (ROOT / "devctl" / "schemas").glob("*.json"))
    assert current and all(s.startswith("devctl.") for s in current)
    missing = [s for s in current if f"`{s}`" not in changelog]
    assert not missing, f"CHANGELOG.md does not name {missing}: add a line under the Unreleased release's Schemas"
