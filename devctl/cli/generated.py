"""Regenerate or check the files generated from the CLI: completions/*, devctl/completions/* (the same
scripts, as package data: `devctl completion SHELL` prints them from an installed wheel) and
devctl/cli/root_help.txt.

    python -m devctl.cli.generated --update   # rewrite them
    python -m devctl.cli.generated --check    # exit 1 with a diff when stale

The completion scripts are devctl.cli.completion's: each hands the command line
to devctl on a TAB press, and devctl answers from the CLI's own options (building
only the command typed, never importing jax). The root help is typer's own
`devctl --help` at 100 columns, served by devctl.cli.entry without importing typer.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

from devctl.cli.completion import FILES, PACKAGE_DIR


def generate(shell: str) -> str:
    from devctl.cli.completion import script

    return script(shell)


def root_help() -> str:
    env = {**os.environ, "DEVCTL_NO_HELP_CACHE": "1", "COLUMNS": "100", "TERM": "dumb"}
    env.pop("NO_COLOR", None)
    proc = subprocess.run([sys.executable, "-m", "devctl", "--help"], env=env, capture_output=True, text=True, check=True)
    return proc.stdout


def artifacts(completions_dir: Path) -> dict[Path, str]:
    """Every generated file and what the CLI generates for it now."""
    files = {directory / name: generate(shell) for directory in (completions_dir, Path(PACKAGE_DIR)) for shell, name in FILES.items()}
    files[Path(__file__).resolve().parent / "root_help.txt"] = root_help()
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
