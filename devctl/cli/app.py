"""The `devctl` command: composition of the command modules and the one place errors become exit codes."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

import typer

from devctl.errors import DevctlError, ExitCode
from devctl.version import __version__

app = typer.Typer(
    name="devctl",
    help="Inspect and diagnose JAX/XLA accelerators: what the machine has, what JAX sees, and why not.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"devctl {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = None,
) -> None:
    """Inspect and diagnose JAX/XLA accelerators: what the machine has, what JAX sees, and why not."""


# Command name -> (module under devctl.cli, attribute): every module is named after its command, in every
# layer (cli/list_.py, collect/list_.py, model/list_.py, render/list_.py: `list` would shadow the builtin). `bench` is a group of its own.
COMMANDS = {
    "list": ("list_", "list_devices"),
    "plugins": ("plugins", "plugins"),
    "env": ("env", "env"),
    "memstats": ("memstats", "memstats"),
    "check": ("check", "check"),
    "doctor": ("doctor", "doctor"),
    "bench": ("bench", "bench_app"),
}
_registered: set[str] = set()


def register(names=None) -> typer.Typer:
    """Add commands to the app (all by default) and return it.

    `devctl list ...` needs only `list`: importing and building the other
    commands would cost every invocation tens of milliseconds, and every
    process of a cluster pays them at once.
    """
    import importlib

    for name in COMMANDS if names is None else names:
        if name in _registered:
            continue
        module, attr = COMMANDS[name]
        target = getattr(importlib.import_module(f"devctl.cli.{module}"), attr)
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name)
        else:
            app.command(name)(target)
        _registered.add(name)
    return app


def _commands_needed(args: list[str]) -> list[str] | None:
    """Only the command named first, when one is; None: all of them (the root's help, a misspelt command)."""
    if "_DEVCTL_COMPLETE" in os.environ:
        args = _completed_words()
    if args and args[0] in COMMANDS:
        return [args[0]]
    return None


def _completed_words() -> list[str]:
    """The words already typed after `devctl` in a TAB press (typer's bash, zsh and fish protocols)."""
    import shlex

    try:
        if "COMP_WORDS" in os.environ:  # bash: every word and the index of the one being completed
            return shlex.split(os.environ["COMP_WORDS"])[1 : int(os.environ.get("COMP_CWORD", "0"))]
        line = os.environ.get("_TYPER_COMPLETE_ARGS", "")  # zsh, fish: the line; its last word is unfinished
        words = shlex.split(line)[1:]
        return words if line.endswith(" ") else words[:-1]
    except ValueError:  # an open quote: let typer make sense of it
        return []


# A word of an error line longer than this is a value the user passed (a 100,000-character argument, a
# pasted file): it is cut, so the line stays one line a person can read.
_LONGEST_WORD = 200


def _one_line(message: str) -> str:
    return " ".join(_cut(word) for word in message.split())


def _cut(word: str) -> str:
    if len(word) <= _LONGEST_WORD:
        return word
    return f"{word[: _LONGEST_WORD // 2]}...({len(word)} characters)"


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app and map every outcome to an exit code and at most one error line."""
    debug = os.environ.get("DEVCTL_DEBUG") == "1"
    register(_commands_needed(sys.argv[1:] if argv is None else argv))
    try:
        # standalone_mode=False: typer returns typer.Exit's code instead of exiting itself.
        returned = app(args=argv, prog_name="devctl", standalone_mode=False)
        code = returned if isinstance(returned, int) else ExitCode.OK
    except DevctlError as e:
        if debug:
            raise
        sys.stderr.write(f"devctl: error: {_one_line(str(e))}\n")
        code = e.exit_code
    except BrokenPipeError:
        from devctl.render.console import reader_gone

        reader_gone()
    except KeyboardInterrupt:
        if debug:
            raise
        sys.stderr.write("devctl: interrupted\n")
        code = ExitCode.INTERRUPTED
    except typer.Exit as e:
        code = e.exit_code
    except Exception as e:
        # typer's own parse errors (unknown option, bad type) carry exit_code and format_message.
        if type(e).__name__ == "NoArgsIsHelpError" and hasattr(e, "format_message") and hasattr(e, "exit_code"):
            # `devctl` or `devctl bench` alone: the help, as click shows it
            sys.stderr.write(e.format_message().rstrip("\n") + "\n")
            code = e.exit_code
        elif hasattr(e, "format_message") and hasattr(e, "exit_code"):
            if debug:
                raise
            ctx = getattr(e, "ctx", None)
            where = ctx.command_path if ctx is not None else "devctl"
            sys.stderr.write(f"{where}: error: {_one_line(e.format_message())} (see {where} --help)\n")
            code = e.exit_code
        elif type(e).__name__ == "Abort":  # Ctrl-C while typer itself was prompting or parsing
            sys.stderr.write("devctl: interrupted\n")
            code = ExitCode.INTERRUPTED
        else:
            raise
    sys.exit(int(code) if isinstance(code, int) else 1)
