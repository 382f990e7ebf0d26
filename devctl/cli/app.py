"""The `devctl` command: composition of the command modules and the one place errors become exit codes."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any, Optional

import typer

from devctl.cli import completion
from devctl.errors import DevctlError, ExitCode
from devctl.version import __version__

app = typer.Typer(
    name="devctl",
    help="Inspect and diagnose JAX/XLA accelerators: what the machine has, what JAX sees, and why not.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    # No --install-completion/--show-completion: typer's would edit ~/.bashrc, and print bash's script for
    # `--show-completion zsh`. Completion is devctl's own scripts, printed or installed by `devctl completion`,
    # and answered by devctl.cli.completion (main below), not by typer.
    add_completion=False,
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
    python: Annotated[
        Optional[str],
        typer.Option(
            "--python", metavar="PATH", autocompletion=completion.files,
            help="Run the command with another Python interpreter (a venv's, an image's) to inspect its JAX; give it first.",
        ),
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
    "exporter": ("exporter", "exporter"),
    "bench": ("bench", "bench_app"),
    "completion": ("completion", "completion_command"),
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
    if args and args[0] in COMMANDS:
        return [args[0]]
    return None


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
    """Entry point: run the app and map every outcome to an exit code and at most one error line.

    Every error line starts `devctl: error:`, whoever found the fault (typer's parser or devctl); a usage
    error of a subcommand ends with where its help is: `(see devctl bench transfer --help)`.
    """
    debug = os.environ.get("DEVCTL_DEBUG") == "1"
    instruction = os.environ.get(completion.COMPLETE_VAR)
    if instruction is not None:  # a TAB press (completions/*): it builds only the command on its line
        sys.exit(completion.respond(instruction))
    args = sys.argv[1:] if argv is None else argv
    register(_commands_needed(args))
    try:
        # standalone_mode=False: typer returns typer.Exit's code instead of exiting itself.
        returned = app(args=argv, prog_name="devctl", standalone_mode=False)
        code = returned if isinstance(returned, int) else ExitCode.OK
    except DevctlError as e:
        if debug:
            raise
        code = _error(str(e), e.exit_code)
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
            where = ctx.command_path if ctx is not None else _command_path(args)
            code = _error(f"{e.format_message().rstrip('.')} (see {where} --help)", e.exit_code)
        elif type(e).__name__ == "Abort":  # Ctrl-C while typer itself was prompting or parsing
            sys.stderr.write("devctl: interrupted\n")
            code = ExitCode.INTERRUPTED
        else:
            raise
    sys.exit(int(code) if isinstance(code, int) else 1)


def _command_path(args: list[str]) -> str:
    """`devctl bench transfer`, as far as `args` name commands: an option missing its value is reported
    by click's parser with no command attached."""
    import typer.main

    command: Any = typer.main.get_command(app)
    path = ["devctl"]
    for word in args:
        if word.startswith("-"):
            continue
        sub = command.get_command(None, word) if callable(getattr(command, "get_command", None)) else None
        if sub is None:
            break
        command, path = sub, [*path, word]
    return " ".join(path)


def _error(message: str, code: int) -> int:
    """The one error line: `devctl: error: ` and the message, on one line a person can read (on a terminal,
    broken between words at its edge; whole for logs and grep)."""
    from devctl.render.console import message_lines

    sys.stderr.write(message_lines(f"{ERROR_PREFIX}{_one_line(message)}") + "\n")
    return code


# What every error line starts with (tests/test_cli.py holds every path to it).
ERROR_PREFIX = "devctl: error: "
