"""The `devctl` command: composition of the command modules and the one place errors become exit codes."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

import typer

from devctl import __version__
from devctl.errors import DevctlError, ExitCode

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


def _register() -> None:
    from devctl.cli import bench, check, doctor, env, inventory, memstats, plugins

    app.command("list")(inventory.list_devices)
    app.command("plugins")(plugins.plugins)
    app.command("env")(env.env)
    app.command("memstats")(memstats.memstats)
    app.command("check")(check.check)
    app.command("doctor")(doctor.doctor)
    app.add_typer(bench.bench_app, name="bench")


_register()


def _one_line(message: str) -> str:
    return " ".join(message.split())


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app and map every outcome to an exit code and at most one error line."""
    debug = os.environ.get("DEVCTL_DEBUG") == "1"
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
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):
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
