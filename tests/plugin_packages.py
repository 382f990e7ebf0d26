"""Real JAX plugin packages written to a directory that goes on PYTHONPATH.

Each is a `jax_plugins.<name>` module whose `initialize()` misbehaves in one
known way, as a broken or mismatched plugin does in the field.
"""

from __future__ import annotations

from pathlib import Path

BEHAVIOURS = {
    "raises": "raise RuntimeError('plugin exploded on purpose')",
    "hangs": "import time\n    while True:\n        time.sleep(1)",
    "segfaults": "import ctypes\n    ctypes.string_at(0)",
    "aborts": "import os\n    os.abort()",
}


def write_plugin(site: Path, name: str, behaviour: str) -> Path:
    """Write `jax_plugins/<name>/__init__.py` under `site` with the given misbehaviour in initialize()."""
    pkg = site / "jax_plugins" / name
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(f"def initialize():\n    {BEHAVIOURS[behaviour]}\n")
    return pkg
