"""`devctl list`: every device of every JAX backend, what failed and why, and what JAX leaves unused."""

from __future__ import annotations

from devctl.cli.options import HostRootOpt, JsonOpt, PlatformOpt, TimeoutOpt, check_host_root, check_platforms, check_timeout


def list_devices(
    json_out: JsonOpt = False,
    platform: PlatformOpt = None,
    timeout: TimeoutOpt = None,
    host_root: HostRootOpt = "/",
) -> None:
    """List every device of every JAX backend, the backends that failed, and accelerators JAX does not use."""
    platforms = check_platforms(platform)
    timeout_s = check_timeout(timeout)
    root = check_host_root(host_root)

    from devctl.inventory import collect_inventory

    inv = collect_inventory(platforms=platforms, timeout_s=timeout_s, host_root=root)
    if json_out:
        from devctl.model import to_jsonable
        from devctl.render.console import print_json

        print_json(to_jsonable(inv))
    else:
        from devctl.render.inventory import render_inventory

        render_inventory(inv)
