"""The `devctl` entry point: answers `devctl --help` from a generated file, everything else through typer.

Importing typer alone takes about 70 ms; the root help is the page people
open most, so it is served from `root_help.json` (what typer knows of the
root: its description, options and each command's summary, which
`python -m devctl.cli.generated --update` writes and a test keeps fresh),
laid out here for the terminal it is shown in: words wrapped whole, no
summary cut short, at 80 columns or 200.
"""

import os
import signal
import sys

HELP_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "root_help.json")
# Past this, lines are harder to read than to wrap (typer's own help stops at 100 too).
WIDEST = 120


def main() -> None:
    args = sys.argv[1:]
    if args and (args[0] == "--python" or args[0].startswith("--python=")):
        _run_under_another_python(args)
    if sys.argv[1:] in (["--help"], ["-h"]) and "DEVCTL_NO_HELP_CACHE" not in os.environ:
        try:
            with open(HELP_FILE, encoding="utf-8") as f:
                text = root_help(f.read(), _columns())
        except (OSError, ValueError, KeyError, TypeError):
            pass  # not generated (a source checkout mid-edit): typer renders it
        else:
            sys.stdout.write(text)
            sys.exit(0)
    # A CI timeout or a closed terminal sends TERM or HUP: unwind like Ctrl-C, so probe children are ended too.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    child = _probe_to_prestart(sys.argv[1:])
    if child:
        from devctl.probe.runner import prestart

        prestart(child)
    from devctl.cli.app import main as run

    run()


def _columns() -> int:
    """The terminal's width ($COLUMNS first, as shells and typer do); 80 where stdout is no terminal."""
    import shutil

    return max(40, min(WIDEST, shutil.get_terminal_size((80, 24)).columns))


def root_help(document: str, width: int) -> str:
    """`devctl --help` from root_help.json's data, wrapped at `width` on word boundaries with hanging indents."""
    import json
    import textwrap

    data = json.loads(document)

    # One column for the texts of both tables: two spaces before a name, two after the longest.
    left = max(len(name) for name, _ in data["options"] + data["commands"]) + 4

    def rows(pairs: list) -> list[str]:
        out = []
        for name, text in pairs:
            lines = textwrap.wrap(text, max(20, width - left), break_long_words=False, break_on_hyphens=False) or [""]
            out.append(f"  {name.ljust(left - 4)}  {lines[0]}".rstrip())
            out += [" " * left + line for line in lines[1:]]
        return out

    lines = [data["usage"], ""]
    lines += textwrap.wrap(data["description"], width, initial_indent="  ", subsequent_indent="  ", break_long_words=False)
    lines += ["", "Options:", *rows(data["options"]), "", "Commands:", *rows(data["commands"])]
    return "\n".join(lines) + "\n"


def _run_under_another_python(args: list[str]) -> None:
    """`devctl --python PATH COMMAND ...`: the rest run by that interpreter (devctl.cli.python_option)."""
    if args[0] == "--python":
        if len(args) < 2:
            sys.stderr.write("devctl: error: --python needs the path of a Python interpreter (e.g. .venv/bin/python)\n")
            sys.exit(2)
        python, rest = args[1], args[2:]
    else:
        python, rest = args[0].split("=", 1)[1], args[1:]
    from devctl.cli.python_option import Refused, run_under

    try:
        run_under(python, rest)
    except (Refused, OSError) as e:
        sys.stderr.write(f"devctl: error: {e}\n")
        sys.exit(2)


def _exit_on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def _probe_to_prestart(args: list[str]) -> str | None:
    """The probe child these arguments will need first, started before typer is even imported."""
    if not args or {"-h", "--help"} & set(args) or "_DEVCTL_COMPLETE" in os.environ:
        return None
    if args[0] in ("list", "memstats") and "--distributed" in args:
        return "devctl.probe.distributed"
    if args[0] in ("list", "memstats", "check", "doctor"):
        return "devctl.probe.backends"
    return None
