"""The `devctl` entry point: answers `devctl --help` from a generated file, everything else through typer.

Importing typer alone takes about 70 ms; the root help is the page people
open most, so it is served from `root_help.txt`, which
`python -m devctl.cli.generated --update` writes from typer's own output and
a test keeps fresh.
"""

import os
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
    if _probe_will_be_needed(sys.argv[1:]):
        from devctl.probe.runner import prestart

        prestart("devctl.probe.backends")
    from devctl.cli.app import main as run

    run()


def _probe_will_be_needed(args: list[str]) -> bool:
    """These commands always probe backends first: start that child before typer is even imported."""
    return (
        args[:1] in (["list"], ["memstats"], ["check"], ["doctor"])
        and not {"-h", "--help", "--distributed"} & set(args)
        and "_DEVCTL_COMPLETE" not in os.environ
    )
