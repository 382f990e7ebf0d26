"""The `devctl` entry point: answers `devctl --help` from a generated file, everything else through typer.

Importing typer alone takes about 70 ms; the root help is the page people
open most, so it is served from `root_help.txt`, which
`python -m devctl.cli.generated --update` writes from typer's own output and
a test keeps fresh.
"""

import os
import signal
import sys

HELP_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "root_help.txt")


def main() -> None:
    if sys.argv[1:] in (["--help"], ["-h"]) and "DEVCTL_NO_HELP_CACHE" not in os.environ:
        try:
            with open(HELP_FILE, encoding="utf-8") as f:
                sys.stdout.write(f.read())
            sys.exit(0)
        except OSError:
            pass  # not generated (a source checkout mid-edit): typer renders it
    # A CI timeout or a closed terminal sends TERM or HUP: unwind like Ctrl-C, so probe children are ended too.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    child = _probe_to_prestart(sys.argv[1:])
    if child:
        from devctl.probe.runner import prestart

        prestart(child)
    from devctl.cli.app import main as run

    run()


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
