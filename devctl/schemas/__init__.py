"""JSON Schemas of every `--json` document, shipped with the package."""

from __future__ import annotations

import json
from importlib import resources


def load_schema(name: str) -> dict:
    """The schema of `devctl.<name>/N` documents, e.g. load_schema("list")."""
    return json.loads(resources.files(__package__).joinpath(f"{name}.json").read_text())
