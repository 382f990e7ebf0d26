"""`devctl list`: every device of every JAX backend, what failed and why, and what JAX leaves unused."""

from __future__ import annotations

from devctl.cli.cluster import cluster_options
from devctl.cli.options import (
    CsvOpt,
    HostRootOpt,
    JsonOpt,
    PlatformOpt,
    TimeoutOpt,
    check_host_root,
    check_output_format,
    check_platforms,
    check_timeout,
)
from devctl.model.distributed import ClusterParams


@cluster_options
def list_devices(
    json_out: JsonOpt = False,
    platform: PlatformOpt = None,
    timeout: TimeoutOpt = None,
    host_root: HostRootOpt = "/",
    csv_out: CsvOpt = False,
    *,
    cluster: ClusterParams | None,
    all_print: bool,
) -> None:
    """List every device of every JAX backend, the backends that failed, and accelerators JAX does not use."""
    check_output_format(json_out, csv_out)
    platforms = check_platforms(platform)
    timeout_s = check_timeout(timeout)
    root = check_host_root(host_root)
    from devctl.render import emit

    if cluster is not None:
        from devctl.collect.distributed import cluster_inventory

        report = cluster_inventory(cluster, platforms=platforms, timeout_s=timeout_s, host_root=root, all_print=all_print)
        if report is not None:  # None: not process 0, which prints the cluster
            emit(report, json_out, csv_out=csv_out)
        return

    from devctl.collect.list_ import collect_inventory

    inv = collect_inventory(platforms=platforms, timeout_s=timeout_s, host_root=root)
    emit(inv, json_out, csv_out=csv_out)
    if (inv.jax_outcome is not None and inv.jax_outcome.fails) or inv.missing_platforms:
        # The failure `list` exists to report: a program here would get no device from JAX, or none of the
        # platform --platform asked for (the rule check applies to an expected platform).
        import typer

        from devctl.errors import ExitCode

        raise typer.Exit(ExitCode.FAILURE)
