"""The README is a README: short, its tour what the code prints now, its links alive, its test command CI's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, ROOT / "SECURITY.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_reads_in_five_minutes():
    text = README.read_text()
    assert len(text.splitlines()) <= 250, len(text.splitlines())
    for case in ("doctor", "check", "memstats", "exporter"):  # the four "I want to" a newcomer arrives with
        assert re.search(rf"^\| .*\| `devctl {case}[ `]", text, re.M), case


def test_the_tour_is_what_devctl_prints_now():
    """Each block is a recorded real run (docs/tour/*.json) as the current renderers print it."""
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "tour.py"), "--check"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    blocks = re.findall(r"<!-- tour:([a-z-]+) -->\n```text\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 5 and all(body.count("\n") >= 5 for _, body in blocks), [name for name, _ in blocks]


def test_every_link_between_the_pages_leads_somewhere():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}, which is not there"


def test_the_readme_s_test_command_is_what_ci_runs():
    command = re.search(r"```sh\n(python3 -m venv \.venv && .*pytest.*)\n```", README.read_text()).group(1)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest" in command
    assert "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest" in ci
    assert "-n auto --dist loadscope" in command and "(-n auto --dist loadscope)" in ci
