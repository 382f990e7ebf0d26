"""Named health checks for `devctl check` and `devctl doctor`: one module per group, one runner.

CHECK_NAMES is plain data so the CLI can validate --only/--skip without importing any check.
"""

from __future__ import annotations

# In the order they run and print (the names are part of the --json documents, so the model owns them).
from devctl.model.check import CHECK_NAMES as CHECK_NAMES
