"""`devctl bench collective`: every flag validated here, in the CLI process, before the probe child
(devctl/probe/collective.py) imports jax and measures. Registered on the `bench` group by devctl/cli/bench.py.
Only light modules are imported at the top: `devctl --help` must not pay for jax.
"""

from __future__ import annotations

import re
from typing import Annotated, Optional

import typer

from devctl.cli import completion
from devctl.cli.bench_options import WatchdogOpt, parse_sizes, sizes_option
from devctl.cli.cluster import cluster_options
from devctl.cli.gate import BaselineOpt, MaxRegressionOpt, check_gate, finish
from devctl.cli.options import CsvOpt, JsonOpt, check_count, check_output_format, check_seconds, check_timeout, choose, shown, split_list
from devctl.errors import UsageError
from devctl.model import bench_collective as m
from devctl.model.distributed import ClusterParams

Option = typer.Option
CollectiveOpt = Annotated[
    Optional[list[str]],
    Option(
        "--collective", "-c", metavar="NAME", autocompletion=completion.names(lambda: (*m.COLLECTIVES, "all")),
        help=f"{', '.join(m.COLLECTIVES)} or all (the default); repeatable or comma-separated.",
    ),
]  # fmt: skip
SizesOpt = Annotated[
    Optional[str],
    sizes_option(
        "Per device, as nccl-tests counts them (all-gather: its output; reduce-scatter: its input), e.g. 1K,1M,64M. "
        "Default: 1K to 256M in powers of 4, each collective stopping where one cell would take over "
        f"{m.SWEEP_CELL_CAP_S:g} s (the note says where)."
    ),
]
QuickOpt = Annotated[bool, Option("--quick", help="Two sizes and a short budget: a smoke test in seconds.")]
DtypeOpt = Annotated[
    Optional[list[str]], Option("--dtype", metavar="NAME", autocompletion=completion.names(lambda: m.DTYPES), help=f"{', '.join(m.DTYPES)} (default float32); repeatable or comma-separated.")
]
MeshOpt = Annotated[
    Optional[str],
    Option(
        "--mesh",
        metavar="AXES",
        help="Named axes, e.g. data=2,model=4, multiplying to the device count; each axis is measured on its own. "
        "Default: one axis over every device; with --distributed, one within each process and one across them.",
    ),
]
AllPairsOpt = Annotated[bool, Option("--all-pairs", help="Also ppermute between every ordered pair of each axis: a link matrix.")]
RepeatsOpt = Annotated[Optional[int], Option("--repeats", metavar="N", help=f"Timed calls per cell, at least (default {m.DEFAULT_REPEATS}).")]
WarmupsOpt = Annotated[Optional[int], Option("--warmups", metavar="N", help=f"Untimed calls first (default {m.DEFAULT_WARMUPS}).")]
BudgetOpt = Annotated[
    Optional[float],
    Option("--budget", metavar="SECONDS", help=f"Timed seconds per cell: small sizes take more samples within it (default {m.DEFAULT_BUDGET_S:g})."),
]

_AXIS = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")


@cluster_options
def collective(
    collective_names: CollectiveOpt = None,
    sizes: SizesOpt = None,
    quick: QuickOpt = False,
    dtype: DtypeOpt = None,
    mesh: MeshOpt = None,
    all_pairs: AllPairsOpt = False,
    repeats: RepeatsOpt = None,
    warmups: WarmupsOpt = None,
    budget: BudgetOpt = None,
    baseline: BaselineOpt = None,
    max_regression: MaxRegressionOpt = None,
    timeout: WatchdogOpt = None,
    json_out: JsonOpt = False,
    csv_out: CsvOpt = False,
    *,
    cluster: ClusterParams | None,
    all_print: bool,
) -> None:
    """Collective bandwidth over a mesh of devices (psum, all-gather, psum_scatter, all-to-all, ppermute), with nccl-tests' bus bandwidth."""
    check_output_format(json_out, csv_out)
    timeout_s = check_timeout(timeout)
    opts = build_options(collective_names, sizes, quick, dtype, mesh, all_pairs, repeats, warmups, budget)
    request = check_gate(baseline, max_regression, m.GATE)
    if cluster is not None:
        from dataclasses import replace

        opts = replace(opts, cluster={
            "coordinator": cluster.coordinator, "num_processes": cluster.num_processes,
            "process_id": cluster.process_id, "timeout_s": timeout_s,
        })  # fmt: skip
    from devctl.collect.bench_collective import run_collective
    from devctl.render.bench import Progress
    from devctl.render.bench_collective import progress_label

    with Progress(progress_label) as progress:
        report = run_collective(opts, timeout_s, on_event=progress.on_event)
    if cluster is not None and not all_print and report.environment.get("process_index", 0) != 0:
        return  # process 0 prints the cluster's figures
    from devctl.collect.gate import judged
    from devctl.render import emit

    report = judged(report, request, m.GATE)
    emit(report, json_out, csv_out=csv_out)
    wrong = any(c.verified is False for c in report.results)
    finish(report, m.GATE, failures=["collective verification failed: some results were wrong (see the notes)"] if wrong else [])


# ---- validation (no jax here) ------------------------------------------------------------------


def build_options(names, sizes, quick, dtype, mesh, all_pairs, repeats, warmups, budget) -> m.CollectiveOptions:  # fmt: skip
    return m.CollectiveOptions(
        collectives=parse_collectives(names),
        sizes_bytes=parse_sizes(sizes) if sizes is not None else None,
        dtypes=parse_dtypes(dtype),
        mesh=parse_mesh(mesh),
        all_pairs=all_pairs,
        repeats=check_count("--repeats", repeats, m.QUICK_REPEATS if quick else m.DEFAULT_REPEATS, low=1, high=10_000),
        warmups=check_count("--warmups", warmups, m.QUICK_WARMUPS if quick else m.DEFAULT_WARMUPS, low=0, high=10_000),
        budget_s=check_seconds("--budget", budget, m.QUICK_BUDGET_S if quick else m.DEFAULT_BUDGET_S),
        quick=quick,
    )


def parse_collectives(items: list[str] | None) -> tuple[str, ...]:
    return choose("--collective", items, m.COLLECTIVES, m.COLLECTIVES)


def parse_dtypes(items: list[str] | None) -> tuple[str, ...]:
    return choose("--dtype", items, m.DTYPES, ("float32",), allow_all=False)


def parse_mesh(text: str | None) -> tuple[tuple[str, int], ...] | None:
    """`data=2,model=4` as ((name, size), ...); whether it multiplies to the device count is the child's to say."""
    if text is None:
        return None
    axes: list[tuple[str, int]] = []
    for part in split_list("--mesh", [text], "named axes such as data=2,model=4"):
        name, sep, size = part.partition("=")
        name, size = name.strip(), size.strip()
        if not sep or not _AXIS.fullmatch(name) or not (size.isascii() and size.isdigit() and len(size) <= 6):
            raise UsageError(f"--mesh: {shown(part)} is not NAME=SIZE (a name of letters, digits and _, a whole number), e.g. data=2,model=4")
        if int(size) < 1:
            raise UsageError(f"--mesh: axis {name!r} has size {size}; a size is at least 1")
        if any(name == a for a, _ in axes):
            raise UsageError(f"--mesh names axis {name!r} twice")
        axes.append((name, int(size)))
    return tuple(axes)

