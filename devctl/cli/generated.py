"""Regenerate or check the files generated from the CLI: completions/*, devctl/completions/* (the same
scripts, as package data: `devctl completion SHELL` prints them from an installed wheel) and
devctl/cli/root_help.json.

    python -m devctl.cli.generated --update   # rewrite them
    python -m devctl.cli.generated --check    # exit 1 with a diff when stale

The completion scripts are devctl.cli.completion's: each hands the command line
to devctl on a TAB press, and devctl answers from the CLI's own options (building
only the command typed, never importing jax). The root help is what typer knows of the root
(its options, each command's summary) as data, laid out by devctl.cli.entry for the terminal without
importing typer.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any

from devctl.cli.completion import FILES, PACKAGE_DIR


def generate(shell: str) -> str:
    from devctl.cli.completion import script

    return script(shell)


def root_help() -> str:
    """What typer knows of the root, as data (devctl.cli.entry lays it out for the terminal): its usage line,
    description, options and each command's summary (the first sentence of its help, never cut short)."""
    import json

    import typer

    from devctl.cli.app import register

    group: Any = typer.main.get_command(register())  # a click Group: its commands by name
    ctx = group.context_class(group, info_name="devctl", **group.context_settings)  # typer's own click (it vendors one)
    options = []
    for param in group.get_params(ctx):
        if param.param_type_name == "option" and not getattr(param, "hidden", False):
            names = [*param.opts, *param.secondary_opts]
            names.sort(key=lambda n: (n.startswith("--"), n))  # -h before --help, as typer shows them
            metavar = "" if getattr(param, "is_flag", False) or not param.metavar else f" {param.metavar}"
            options.append([", ".join(names) + metavar, getattr(param, "help", None) or ""])
    commands = [[name, group.get_command(ctx, name).get_short_help_str(limit=10**6)] for name in group.list_commands(ctx)]
    data = {
        "usage": f"Usage: devctl {' '.join(group.collect_usage_pieces(ctx))}",
        "description": group.help or "",
        "options": options,
        "commands": commands,
    }
    return json.dumps(data, indent=1) + "\n"


def artifacts(completions_dir: Path) -> dict[Path, str]:
    """Every generated file and what the CLI generates for it now."""
    files = {directory / name: generate(shell) for directory in (completions_dir, Path(PACKAGE_DIR)) for shell, name in FILES.items()}
    files[Path(__file__).resolve().parent / "root_help.json"] = root_help()
    return files


def stale(completions_dir: Path) -> list[str]:
    """Unified diffs of every generated file that differs from what the CLI generates now."""
    diffs = []
    for path, fresh in artifacts(completions_dir).items():
        current = path.read_text() if path.exists() else ""
        if current != fresh:
            diffs.append("".join(difflib.unified_diff(current.splitlines(True), fresh.splitlines(True), str(path), f"{path.name} (regenerated)")))
    return diffs


def main() -> int:
    completions_dir = Path(__file__).resolve().parents[2] / "completions"
    if "--update" in sys.argv:
        for path, fresh in artifacts(completions_dir).items():
            path.parent.mkdir(exist_ok=True)
            path.write_text(fresh)
        return 0
    diffs = stale(completions_dir)
    for d in diffs:
        sys.stdout.write(d)
    if diffs:
        sys.stdout.write("generated files are stale: run `python -m devctl.cli.generated --update` and commit them.\n")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
