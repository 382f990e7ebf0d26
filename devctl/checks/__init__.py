"""Named health checks for `devctl check` and `devctl doctor`: one module per group, one runner.

CHECK_NAMES is plain data so the CLI can validate --only/--skip without importing any check.
"""

from __future__ import annotations

# In the order they run and print: software first, then what JAX sees, then what it can do, then the machine.
CHECK_NAMES = (
    "versions",
    "plugins",
    "backends",
    "devices",
    "compute",
    "transfer",
    "memory",
    "bandwidth",
    "nvml-health",
    "host",
    "tpu",
    "env",
)
