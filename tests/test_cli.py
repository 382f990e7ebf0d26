"""The command line as a user meets it: help, version, exit codes, one-line errors, fast start, completions."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, assert_usage_error, devctl_env, run_devctl

# grpc and google (protobuf): the tpu-metrics extra, imported only to ask a TPU process for its metrics.
HEAVY = ("jax", "jaxlib", "numpy", "pynvml", "grpc", "google")


def _imported_modules(env_extra: dict[str, str], *args: str) -> set[str]:
    """Modules a fresh interpreter has imported after running devctl with `args` (exit is intercepted)."""
    code = (
        "import sys, atexit\n"
        "atexit.register(lambda: sys.__stderr__.write('MODULES:' + ','.join(sorted(sys.modules)) + '\\n'))\n"
        "sys.argv = ['devctl'] + sys.argv[1:]\n"
        "from devctl.cli.entry import main\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, *args], env=devctl_env(**env_extra), capture_output=True, text=True, timeout=60)
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES:"))
    return set(line[len("MODULES:") :].split(","))


@pytest.mark.parametrize("args", [["--help"], ["list", "--help"], ["bench", "--help"], ["memstats", "--help"], ["--version"]])
@pytest.mark.parametrize("cache", ["cached", "typer"])
def test_help_imports_nothing_heavy(args, cache):
    modules = _imported_modules({"DEVCTL_NO_HELP_CACHE": "1"} if cache == "typer" else {}, *args)
    loaded = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert not loaded, f"`devctl {' '.join(args)}` imported {loaded[:5]}"


def _tab(shell: str, line: str) -> dict[str, str]:
    """The environment a completion script gives devctl for TAB at the end of `line` (devctl.cli.completion)."""
    return {"_DEVCTL_COMPLETE": shell, "_DEVCTL_COMPLETE_LINE": line, "_DEVCTL_COMPLETE_WORDBREAKS": "\"'><=;|&(:"}


@pytest.mark.parametrize(
    "line", ["devctl li", "devctl ", "devctl memstats --device ", "devctl check --only versions,", "devctl bench transfer --direction "]
)
def test_completion_request_imports_nothing_heavy(line):
    modules = _imported_modules(_tab("bash", line))
    assert not [m for m in modules if m.split(".")[0] in HEAVY]


def test_completion_answers_commands():
    proc = run_devctl(env=devctl_env(**_tab("bash", "devctl pl")))
    assert proc.returncode == 0 and proc.stdout == "plain\tplugins\n", proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "shell,line,expected",
    [
        ("bash", "devctl list --j", "plain\t--json\n"),
        ("bash", "devctl bench ", "plain\ttransfer\n"),
        ("zsh", "devctl bench transfer --dir", "plain\t--direction\t"),
        ("fish", "devctl check --on", "plain\t--only\t"),
        ("zsh", "devctl mem", "plain\tmemstats\t"),
        ("fish", "devctl bench transfer --direction h", "plain\th2d\thost to device\n"),
        ("bash", "devctl check --only=ver", "plain\tversions\n"),  # readline replaces only what follows `=`
        ("zsh", "devctl check --only=ver", "plain\t--only=versions\n"),
        ("bash", "devctl memstats -d cpu:0,nv", "partial\t0,nvml:\n"),  # ... and only what follows `:`
        ("fish", "devctl check --config ", "file\t\n"),
        ("zsh", "devctl list --host-root /", "dir\t/\n"),
    ],
)
def test_completion_answers_options_of_the_command_typed(shell, line, expected):
    # A TAB press builds only the command already typed: its options and their values must all still be offered.
    proc = run_devctl(env=devctl_env(**_tab(shell, line)))
    assert proc.returncode == 0 and expected in proc.stdout, proc.stdout + proc.stderr


def test_completion_request_of_another_protocol_is_one_line_exit_2():
    # typer's protocol (a script installed from an older devctl): say what to do instead of printing nothing.
    proc = run_devctl(env=devctl_env(_DEVCTL_COMPLETE="complete_bash", COMP_WORDS="devctl li", COMP_CWORD="1"))
    assert_usage_error(proc, "complete_bash", "devctl completion SHELL --install")
    assert proc.stderr.startswith("devctl: error: ")


@pytest.mark.parametrize("args", [["--show-completion"], ["--show-completion", "zsh"], ["--install-completion"]])
def test_typers_completion_options_are_gone(args):
    # One install method, the README's: typer's options would edit ~/.bashrc or print bash's script for zsh.
    proc = run_devctl(*args)
    assert_usage_error(proc, args[0])
    assert proc.stderr.startswith("devctl: error: No such option: ")


def test_completion_scripts_and_cached_help_are_current():
    from devctl.cli.generated import stale

    diffs = stale(ROOT / "completions")
    assert not diffs, "".join(diffs) + "\nRun `python -m devctl.cli.generated --update` and commit the files."


@pytest.mark.parametrize("columns", [50, 80, 200])
def test_root_help_fits_the_terminal_whole_words_nothing_cut(columns):
    """`devctl --help` is laid out for the terminal it is shown in (it was typer's at 94 columns: words split at
    80, summaries cut with `...` at 200), and says what typer knows: every command with its whole summary."""
    import json

    data = json.loads((ROOT / "devctl" / "cli" / "root_help.json").read_text())
    proc = run_devctl("--help", env=devctl_env(COLUMNS=str(columns)))
    assert proc.returncode == 0 and "..." not in proc.stdout.split("\n", 1)[1], proc.stdout  # the usage line's [ARGS]... aside
    lines = proc.stdout.splitlines()
    assert all(len(line) <= columns for line in lines), [line for line in lines if len(line) > columns]
    flat = " ".join(proc.stdout.split())
    for name, summary in data["commands"] + data["options"]:
        assert f"{name} {summary}" in flat, (name, summary)  # each wrapped at word boundaries, nothing dropped
    # The same commands and options typer itself shows.
    typer_says = run_devctl("--help", env=devctl_env(DEVCTL_NO_HELP_CACHE="1", COLUMNS="200", TERM="dumb")).stdout
    for name, _ in data["commands"]:
        assert f" {name} " in typer_says, name
    assert "-h, --help" in proc.stdout and "--version" in proc.stdout


def test_version():
    from devctl import __version__

    proc = run_devctl("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"devctl {__version__}"


@pytest.mark.parametrize("args,commands", [([], ["list", "memstats", "bench"]), (["bench"], ["transfer"])])
def test_no_command_shows_the_help_as_a_usage_error(args, commands):
    proc = run_devctl(*args)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0].startswith(f"Usage: devctl {' '.join(args)}".rstrip() + " [OPTIONS] COMMAND")
    listed = {ln.split()[0] for ln in lines[lines.index("Commands:") + 1 :] if ln.startswith("  ")}
    assert set(commands) <= listed


def test_command_help_needs_only_that_command():
    # `devctl X` builds only command X; its help and usage must be the whole truth anyway.
    for args, usage in ((["list", "--help"], "Usage: devctl list [OPTIONS]"), (["bench", "transfer", "--help"], "Usage: devctl bench transfer [OPTIONS]")):
        proc = run_devctl(*args)
        assert proc.returncode == 0 and proc.stdout.startswith(usage), proc.stdout[:200] + proc.stderr


@pytest.mark.parametrize(
    "args,needles",
    [
        (["list", "--timeout", "0"], ["--timeout", "0"]),
        (["list", "--timeout", "-3"], ["--timeout", "-3"]),
        (["list", "--timeout", "61"], ["--timeout", "61"]),
        (["list", "--timeout", "soon"], ["--timeout", "soon"]),
        (["list", "--platform", "quantum"], ["quantum", "cpu"]),
        (["list", "--host-root", "/does/not/exist"], ["/does/not/exist"]),
        (["list", "--host-root", "/usr/share"], ["/usr/share", "sys"]),
        (["list", "--bogus"], ["--bogus"]),
        (["frobnicate"], ["frobnicate"]),
        (["plugins", "--timeout", "0"], ["--timeout"]),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needles):
    assert_usage_error(run_devctl(*args), *needles)


@pytest.mark.parametrize(
    "args,needles",
    [
        # typer's parser: a bad value, an unknown option, a missing value, an unknown command
        (["bench", "transfer", "--repeats", "x"], ["'x'", "(see devctl bench transfer --help)"]),
        (["bench", "transfer", "--bogus"], ["--bogus", "(see devctl bench transfer --help)"]),
        (["bench", "transfer", "--repeats"], ["--repeats", "(see devctl bench transfer --help)"]),
        (["memstats", "-n"], ["-n", "(see devctl memstats --help)"]),
        (["check", "--only"], ["--only", "(see devctl check --help)"]),
        (["bench", "frob"], ["frob", "(see devctl bench --help)"]),
        (["--bogus"], ["--bogus", "(see devctl --help)"]),
        # devctl's own checks (DevctlError)
        (["bench", "transfer", "--direction", "up"], ["'up'", "h2d"]),
        (["check", "--only", "nope"], ["'nope'", "versions"]),
        (["list", "--json", "--csv"], ["--json", "--csv"]),
    ],
)
def test_every_error_line_starts_devctl_error(args, needles):
    # Whoever found the fault, typer's parser or devctl, the line starts the same (README: one line, exit 2).
    from devctl.cli.app import ERROR_PREFIX

    proc = run_devctl(*args)
    assert_usage_error(proc, *needles)
    assert proc.stderr.startswith(ERROR_PREFIX) and ERROR_PREFIX == "devctl: error: ", proc.stderr


def _command_paths() -> list[list[str]]:
    """Every command and group of the CLI, as the words that name it (`bench transfer`)."""
    import typer.main

    from devctl.cli.app import register

    def walk(command, path: list[str]):
        yield path
        if hasattr(command, "list_commands"):
            for name in command.list_commands(None):
                yield from walk(command.get_command(None, name), [*path, name])

    return [path for path in walk(typer.main.get_command(register()), []) if path]


def test_help_says_each_default_once():
    # "(default 1). [default: 1]": an option's help says its default in words or typer shows it, not both.
    import re

    paths = _command_paths()
    assert ["bench", "transfer"] in paths and ["check"] in paths
    for args in paths:
        proc = run_devctl(*args, "--help", env=devctl_env(COLUMNS="200", TERM="dumb"))
        assert proc.returncode == 0, proc.stderr
        entries: list[str] = []
        for row in proc.stdout.splitlines():
            if re.match(r"^  -", row):
                entries.append(row)
            elif entries and row.startswith("    "):
                entries[-1] += " " + row.strip()
        assert entries, proc.stdout
        for entry in entries:
            assert len(re.findall(r"\bdefault\b", entry, re.IGNORECASE)) <= 1, f"devctl {' '.join(args)} --help: {entry}"


def test_malformed_timeout_env_value_is_one_line_exit_2():
    proc = run_devctl("list", env=devctl_env(DEVCTL_TIMEOUT="forever"))
    assert_usage_error(proc, "forever")


def test_unwritable_stdout_is_not_a_traceback(tmp_path):
    # A closed pipe (`devctl env | head -0`) must not print a traceback.
    proc = subprocess.run(
        f"{sys.executable} -m devctl env | head -c 0",
        shell=True, env=devctl_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr


def test_debug_env_shows_traceback():
    proc = run_devctl("list", "--timeout", "0", env=devctl_env(DEVCTL_DEBUG="1"))
    assert "Traceback" in proc.stderr


def test_python_api_inventory_matches_list_json():
    code = "import json, devctl; from devctl.model import to_jsonable; print(json.dumps(to_jsonable(devctl.inventory())))"
    proc = subprocess.run([sys.executable, "-c", code], env=devctl_env(devices=3), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    import json

    from conftest import validate_schema

    doc = json.loads(proc.stdout)
    validate_schema(doc, "list")
    assert len([d for d in doc["devices"] if d["platform"] == "cpu"]) == 3


def test_list_with_bad_flags_leaves_no_probe_child_behind():
    # `devctl list` starts its probe child before parsing flags; a usage error must not orphan it.
    import uuid
    from pathlib import Path

    tag = uuid.uuid4().hex
    proc = run_devctl("list", "--platform", "quantum", env=devctl_env(DEVCTL_TEST_TAG=tag))
    assert proc.returncode == 2
    leftovers = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"DEVCTL_TEST_TAG={tag}".encode() in environ.read_bytes():
                leftovers.append(environ.parent.name)
        except OSError:
            continue
    assert not leftovers, f"probe children still running: {leftovers}"


# ---- the layers' rules for input and output ----------------------------------------------------------------

# Raising UsageError below cli/ would mean a flag string was parsed there. Input only the machine can refuse
# is InputRejected. Pending: the distributed probe still raises UsageError when JAX rejects the cluster flags.
USAGE_ERROR_PENDING: set[str] = set()


def test_usage_errors_are_raised_in_cli_only():
    import ast

    raising = set()
    for path in sorted((ROOT / "devctl").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if where.startswith("devctl/cli/") or where == "devctl/errors.py":
            continue
        tree = ast.parse(path.read_text(), where)
        if any(isinstance(node, ast.Name) and node.id == "UsageError" for node in ast.walk(tree)):
            raising.add(where)
    assert raising <= USAGE_ERROR_PENDING, f"UsageError below cli/: {sorted(raising - USAGE_ERROR_PENDING)}; raise InputRejected"
    assert raising == USAGE_ERROR_PENDING, f"no longer pending, take them off USAGE_ERROR_PENDING: {sorted(USAGE_ERROR_PENDING - raising)}"


def test_every_report_has_one_table_and_commands_print_through_emit():
    import importlib

    from devctl.render.emit import TABLES

    # Every command's document has a schema file; a publishing job's snapshot (devctl.publisher/1) is no command's.
    schemas = {p.name.removesuffix(".json") for p in (ROOT / "devctl" / "schemas").glob("*.json")} - {"publisher"}
    assert {s.removeprefix("devctl.").rsplit("/", 1)[0] for s in TABLES} == schemas
    for module, function in TABLES.values():
        assert callable(getattr(importlib.import_module(f"devctl.render.{module}"), function))
    # One JSON-or-table switch: no command writes a JSON document itself (memstats --watch streams JSON Lines).
    for path in (ROOT / "devctl" / "cli").glob("*.py"):
        assert "print_json(" not in path.read_text(), f"{path.name} prints JSON itself; hand the report to devctl.render.emit"
