"""`devctl bench collective`: every flag validated here, before the probe child (devctl/probe/bench_collective.py) imports jax."""

from __future__ import annotations

import re
from typing import Annotated, Optional

import typer

from devctl.cli import completion
from devctl.cli.bench_options import Bench, BenchFlags, bench_options, parse_sizes, run_bench, sizes_option
from devctl.cli.cluster import cluster_options
from devctl.cli.options import DTYPE_NAMES, choose, renamed, shown, split_list
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
DtypeOpt = Annotated[
    Optional[list[str]], Option("--dtype", metavar="NAME", autocompletion=completion.names(lambda: m.DTYPES), help=f"{', '.join(m.DTYPES)} (or bf16, f32, f16, i32, i8; default float32); repeatable or comma-separated.")
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
_AXIS = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")


BENCH = Bench(m.GATE, m, "Two sizes", seconds="budget_s", seconds_help="Timed seconds per cell: small sizes take more samples within it", most=10_000, verbose=True)


@cluster_options
@bench_options(BENCH)
def collective(
    collective_names: CollectiveOpt = None,
    sizes: SizesOpt = None,
    dtype: DtypeOpt = None,
    mesh: MeshOpt = None,
    all_pairs: AllPairsOpt = False,
    *,
    flags: BenchFlags,
    cluster: ClusterParams | None,
    all_print: bool,
) -> None:
    """Collective bandwidth over a mesh of devices (psum, all-gather, psum_scatter, all-to-all, ppermute), with nccl-tests' bus bandwidth."""
    dtypes = choose("--dtype", renamed(dtype, DTYPE_NAMES), m.DTYPES, ("float32",), allow_all=False)
    # At least one element of the widest dtype asked, at most 1T a device (nothing holds more).
    widest = max(dtypes, key=m.DTYPE_BYTES.__getitem__)
    opts = m.CollectiveOptions(
        collectives=choose("--collective", collective_names, m.COLLECTIVES, m.COLLECTIVES),
        sizes_bytes=parse_sizes(sizes, "1K,1M,64M", m.DTYPE_BYTES[widest], f"bytes (one {widest} element)", 1 << 40) if sizes is not None else None,
        dtypes=dtypes,
        mesh=parse_mesh(mesh),
        all_pairs=all_pairs,
        **flags.counts(),
    )
    if cluster is not None:
        from dataclasses import replace

        opts = replace(opts, cluster={
            "coordinator": cluster.coordinator, "num_processes": cluster.num_processes,
            "process_id": cluster.process_id, "timeout_s": flags.timeout_s,
        })  # fmt: skip
    from devctl.collect.bench_collective import run_collective
    from devctl.render.bench_collective import progress_label

    def prints(report: m.CollectiveReport) -> bool:  # with --distributed, process 0 prints the cluster's figures
        return cluster is None or all_print or report.environment.get("process_index", 0) == 0

    wrong = "some results were wrong (see the notes)"
    run_bench(flags, run_collective, opts, progress_label, "collective", wrong, prints=prints)


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

