"""`devctl list`: every device of every JAX backend, what failed and why, and what JAX leaves unused."""

from __future__ import annotations

from devctl.cli.options import (
    AllPrintOpt,
    CoordinatorOpt,
    DistributedOpt,
    HostRootOpt,
    JsonOpt,
    NumProcessesOpt,
    PlatformOpt,
    ProcessIdOpt,
    TimeoutOpt,
    check_host_root,
    check_timeout,
)
from devctl.discovery.envvars import check_platforms


def list_devices(
    json_out: JsonOpt = False,
    platform: PlatformOpt = None,
    timeout: TimeoutOpt = None,
    host_root: HostRootOpt = "/",
    distributed: DistributedOpt = False,
    coordinator: CoordinatorOpt = None,
    num_processes: NumProcessesOpt = None,
    process_id: ProcessIdOpt = None,
    all_print: AllPrintOpt = False,
) -> None:
    """List every device of every JAX backend, the backends that failed, and accelerators JAX does not use."""
    platforms = check_platforms(platform)
    timeout_s = check_timeout(timeout)
    root = check_host_root(host_root)
    from devctl.collect.distributed import cluster_from_flags

    cluster = cluster_from_flags(distributed, coordinator, num_processes, process_id, all_print)
    if cluster is not None:
        _list_cluster(json_out, platforms, timeout_s, root, cluster, all_print)
        return

    from devctl.collect.list_ import collect_inventory

    inv = collect_inventory(platforms=platforms, timeout_s=timeout_s, host_root=root)
    if json_out:
        from devctl.model import to_jsonable
        from devctl.render.console import print_json

        print_json(to_jsonable(inv))
    else:
        from devctl.render.list_ import render_inventory

        render_inventory(inv)
    if inv.jax_outcome is not None and inv.jax_outcome.fails:
        # The failure `list` exists to report: a program here would get no device from JAX.
        import typer

        from devctl.errors import ExitCode

        raise typer.Exit(ExitCode.FAILURE)


def _list_cluster(json_out, platforms, timeout_s, root, params, all_print) -> None:
    from devctl.collect.distributed import cluster_inventory

    report = cluster_inventory(params, platforms=platforms, timeout_s=timeout_s, host_root=root, all_print=all_print)
    if report is None:  # not process 0: it prints the cluster
        return
    from devctl.render.distributed import print_cluster

    print_cluster(report, json_out)
