"""devctl: inspect and diagnose JAX/XLA accelerators.

Importing devctl is cheap: heavy modules (jax, numpy, pynvml) load only inside
the functions that need them.
"""

from devctl.version import __version__

__all__ = ["__version__", "inventory"]


def inventory(*, platforms=None, timeout_s=None, host_root="/"):
    """Everything `devctl list --json` reports, as a `devctl.model.list_.Inventory`.

    JAX backends are initialized in a child process, never in the caller's.
    """
    from devctl.collect.list_ import collect_inventory

    return collect_inventory(platforms=platforms, timeout_s=timeout_s, host_root=host_root)
