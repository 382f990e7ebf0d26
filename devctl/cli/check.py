"""`devctl check`: named health checks with exit codes, for CI pipelines and schedulers."""

from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from devctl.cli.options import (
    AllPrintOpt,
    CoordinatorOpt,
    DistributedOpt,
    HostRootOpt,
    JsonOpt,
    NumProcessesOpt,
    ProcessIdOpt,
    TimeoutOpt,
    check_host_root,
)
from devctl.errors import UsageError

# Same values as `devctl list --platform`, but here an expectation: it must initialize.
ExpectPlatformOpt = Annotated[
    Optional[list[str]],
    typer.Option("--platform", "-p", metavar="NAME", help="Expect this JAX platform to work (repeatable): cpu, cuda, rocm, tpu, gpu..."),
]


def check(
    json_out: JsonOpt = False,
    platform: ExpectPlatformOpt = None,
    min_devices: Annotated[Optional[str], typer.Option("--min-devices", metavar="N", help="Expect at least N devices.")] = None,
    device_kind: Annotated[
        Optional[str], typer.Option("--device-kind", metavar="KIND", help="Expect every device's kind to contain KIND, e.g. H100.")
    ] = None,
    min_memory: Annotated[
        Optional[str], typer.Option("--min-memory", metavar="SIZE", help="Expect bytes_limit >= SIZE per device, e.g. 40GiB.")
    ] = None,
    min_h2d: Annotated[
        Optional[str], typer.Option("--min-h2d", metavar="RATE", help="Expect host-to-device >= RATE per device, e.g. 10GB/s.")
    ] = None,
    timeout: TimeoutOpt = None,
    only: Annotated[
        Optional[list[str]], typer.Option("--only", metavar="NAME", help="Run only these checks (repeatable, or comma-separated).")
    ] = None,
    skip: Annotated[Optional[list[str]], typer.Option("--skip", metavar="NAME", help="Do not run these checks (repeatable, or comma-separated).")] = None,
    strict: Annotated[Optional[bool], typer.Option("--strict/--no-strict", help="Count warnings as failures.")] = None,
    config: Annotated[
        Optional[str],
        typer.Option("--config", metavar="FILE", help="Read expectations from FILE instead of [tool.devctl.check] in pyproject.toml."),
    ] = None,
    junit_xml: Annotated[Optional[str], typer.Option("--junit-xml", metavar="FILE", help="Also write a JUnit XML report to FILE.")] = None,
    host_root: HostRootOpt = "/",
    distributed: DistributedOpt = False,
    coordinator: CoordinatorOpt = None,
    num_processes: NumProcessesOpt = None,
    process_id: ProcessIdOpt = None,
    all_print: AllPrintOpt = False,
) -> None:
    """Health checks for CI: each check passes, warns, fails or skips; exit 1 when one fails.

    Checks: versions, plugins, backends, devices, compute, transfer, memory, bandwidth, nvml-health, host, tpu, env.
    Expectations come from the flags, over a [tool.devctl.check] table in the nearest pyproject.toml (or --config).
    Exit 0 when all pass (warnings allowed unless --strict), 1 when one fails, 2 on bad flags or config.
    """
    from devctl.checks.config import Flags, resolve

    options = resolve(
        Flags(
            platform=platform, min_devices=min_devices, device_kind=device_kind, min_memory=min_memory, min_h2d=min_h2d,
            timeout=timeout, only=only, skip=skip, strict=strict, config=config,
        )
    )  # fmt: skip
    root = check_host_root(host_root)
    from devctl.distributed import cluster_from_flags

    cluster = cluster_from_flags(distributed, coordinator, num_processes, process_id, all_print)
    if junit_xml is not None:
        ensure_writable(junit_xml, "--junit-xml")

    from devctl.checks.runner import check as run
    from devctl.render import health as render

    def run_here():
        with render.progress("running checks...") as update:
            return run(
                options.expectations, options.names, host_root=root, strict=options.strict,
                on_result=lambda r: update(f"checked {r.name}: {r.status.value}"),
            )  # fmt: skip

    if cluster is None:
        report = run_here()
    else:
        report = _check_cluster(cluster, run_here, options, all_print)
        if report is None:  # not process 0: process 0 reports for the whole cluster
            raise typer.Exit(0)

    if junit_xml is not None:
        with open(junit_xml, "w", encoding="utf-8") as f:
            f.write(render.junit_xml(report))
    if render.in_github_actions():
        render.github_annotations(report)
    if json_out:
        from devctl.model import to_jsonable
        from devctl.render.console import print_json

        print_json(to_jsonable(report))
    else:
        render.render_check(report)
    raise typer.Exit(report.exit_code)


def _check_cluster(cluster, run_here, options, all_print: bool):
    """Run the checks here, share the report through jax.distributed, merge every host's on process 0."""
    import time

    from devctl.checks.cluster import merge_reports
    from devctl.distributed import gather_reports
    from devctl.model import to_jsonable

    started = time.monotonic()
    reports = gather_reports(lambda: to_jsonable(run_here()), cluster, timeout_s=options.expectations.timeout_s, all_print=all_print)
    if reports is None:
        return None
    return merge_reports(reports, strict=options.strict, expectations=options.expectations, elapsed_s=time.monotonic() - started)


def ensure_writable(path: str, flag: str) -> None:
    """Fail before the checks run, not after: open the file for appending, and remove it if it was new."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a directory")
    existed = os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as e:
        raise UsageError(f"{flag} {path!r} cannot be written: {e.strerror or e}") from None
    if not existed:
        os.unlink(path)
