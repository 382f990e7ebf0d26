"""What holds a job's memory (`devctl memstats --pid PID --top N`) and the post-mortems jobs left
(`devctl memstats --postmortem`), as tables that fit the terminal: the arrays, then the same bytes by the line of
the program that created them."""

from __future__ import annotations

from typing import Any

from devctl.model.holders import FleetTopReport, HeldArray, PostMortem, PostMortemReport, SiteTotal, TopReport, requested_text
from devctl.units import counted, format_bytes


def _array_rows(arrays: tuple[HeldArray, ...]) -> list[list[str]]:
    return [
        [format_bytes(a.nbytes), shape_text(a.shape), a.dtype, devices_text(a.devices), a.memory_kind or "-",
         a.site or "(no traceback)", a.sharding]
        for a in arrays
    ]  # fmt: skip


def _largest(n: int) -> str:
    """A title over the N largest arrays: 'the 5 largest', and 'the largest' for one."""
    return "the largest" if n == 1 else f"the {n} largest"


def shape_text(shape) -> str:
    """A shape as Python and JAX print it: `(16777216,)`, `(2, 3)`, `()` for a scalar."""
    return str(tuple(shape))


def devices_text(devices: tuple[str, ...]) -> str:
    """'cuda:0-7' for eight consecutive devices of one platform, 'cpu:0,2' otherwise."""
    by_platform: dict[str, list[int]] = {}
    others = []
    for d in devices:
        platform, _, index = d.partition(":")
        if index.isdigit():
            by_platform.setdefault(platform, []).append(int(index))
        else:
            others.append(d)
    parts = []
    for platform, ids in by_platform.items():
        ids.sort()
        if len(ids) > 2 and ids == list(range(ids[0], ids[-1] + 1)):
            parts.append(f"{platform}:{ids[0]}-{ids[-1]}")
        else:
            parts.append(f"{platform}:" + ",".join(map(str, ids)))
    return ",".join(parts + others)


def _array_columns():
    from devctl.render.console import Column

    return [
        Column("bytes", justify="right"),
        Column("shape"),
        Column("dtype"),
        Column("devices", priority=2),
        Column("memory kind", priority=4, short="kind", once=True),
        Column("allocated at", priority=1, short="site"),
        Column("sharding", priority=5, detail=False),  # long: in --json whole, left out of a narrow table
    ]


def _site_rows(sites: tuple[SiteTotal, ...]) -> list[list[str]]:
    return [[s.site or "(no traceback)", str(s.arrays), format_bytes(s.nbytes)] for s in sites]


def _site_columns():
    from devctl.render.console import Column

    return [Column("allocated at"), Column("arrays", justify="right"), Column("bytes", justify="right")]


def render_top(report: TopReport) -> None:
    from devctl.render.console import print_table, say
    from devctl.text import program_name

    job = program_name(report.command)
    say(f"job {report.pid} ({job}) on {report.hostname}: {counted(report.total_arrays, 'live array')}, {format_bytes(report.total_bytes)}")
    print_table(_array_columns(), _array_rows(report.arrays), title=_largest(len(report.arrays)))
    print_table(_site_columns(), _site_rows(report.sites[:20]), title="by the line that created them")
    if len(report.sites) > 20:
        say(f"(and {counted(len(report.sites) - 20, 'more line')}; --json has them all)")
    if report.note:
        say(f"note: {report.note}")
    say(f"answered by the job in {report.cost_s * 1000:.1f} ms of its CPU")


def render_postmortems(report: PostMortemReport) -> None:
    from devctl.render.console import say

    if not report.postmortems:
        say(f"no post-mortem in {report.directory}: no publishing job has died of RESOURCE_EXHAUSTED here")
    for pm in report.postmortems[:3]:
        _postmortem(pm)
    if len(report.postmortems) > 3:
        say(f"(and {counted(len(report.postmortems) - 3, 'older post-mortem')}; --json has them all)")
    for problem in report.problems:
        say(f"problem: {problem}")


def _postmortem(pm: PostMortem) -> None:
    import time

    from devctl.render.console import print_table, say
    from devctl.text import printable, program_name

    try:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(pm.timestamp))
    except (OverflowError, OSError, ValueError):  # the reader refuses such a time; a report built elsewhere may not
        when = "an unknown time"
    asked = f", {text}" if (text := requested_text(pm)) else ""
    say(f"job {pm.pid} ({program_name(pm.command)}) ran out of memory at {when}{asked}")
    say(f"error: {printable(pm.error, 1000)}", hang="  ")
    for d in pm.devices:
        stats = d.memory_stats or {}
        if stats:
            say(f"{d.device}: {format_bytes(stats.get('bytes_in_use'))} in use of {format_bytes(stats.get('bytes_limit'))}, "
                f"peak {format_bytes(stats.get('peak_bytes_in_use'))}", indent="  ")  # fmt: skip
    say(f"it held {counted(pm.total_arrays, 'live array')}, {format_bytes(pm.total_bytes)}:")
    print_table(_array_columns(), _array_rows(pm.arrays[:10]))
    print_table(_site_columns(), _site_rows(pm.sites[:10]), title="by the line that created them")
    if pm.path:
        say(f"({pm.path})")


def render_fleet(report: FleetTopReport) -> None:
    from devctl.render.console import Column, print_table, say

    jobs = sum(len(p.tops) for p in report.processes)
    say(f"{counted(len(report.processes), 'process', 'processes')}, {counted(jobs, 'publishing job')}: "
        f"{counted(report.total_arrays, 'live array')}, {format_bytes(report.total_bytes)}")
    columns = [Column("host", priority=3), Column("process", justify="right", short="proc"), Column("pid", justify="right"), *_array_columns()]
    rows = [[a.hostname, str(a.process_index), str(a.pid), *row] for a, row in zip(report.arrays, _array_rows(tuple(a.array for a in report.arrays)))]
    print_table(columns, rows, title=f"{_largest(len(report.arrays))} in the cluster")
    site_columns = [Column("allocated at"), Column("jobs", justify="right"), Column("arrays", justify="right"), Column("bytes", justify="right")]
    print_table(site_columns, [[s.site or "(no traceback)", str(s.jobs), str(s.arrays), format_bytes(s.nbytes)] for s in report.sites[:20]],
                title="by the line that created them, over every job")  # fmt: skip
    for p in report.processes:
        for problem in p.problems:
            say(f"problem: process {p.process_index} ({p.hostname}): {problem}")


def csv_rows(report: Any) -> tuple[list[str], list[list]]:
    """One row per array (of the top list, of every post-mortem, or of the cluster's), raw bytes."""
    header = ["hostname", "process_index", "pid", "nbytes", "shape", "dtype", "devices", "memory_kind", "site", "sharding"]
    found: list[tuple[str, int | None, int, HeldArray]]
    if isinstance(report, FleetTopReport):
        found = [(a.hostname, a.process_index, a.pid, a.array) for a in report.arrays]
    else:
        reports = [report] if isinstance(report, TopReport) else list(report.postmortems)
        found = [(r.hostname, None, r.pid, a) for r in reports for a in r.arrays]
    rows = [[host, index, pid, a.nbytes, shape_text(a.shape), a.dtype, " ".join(a.devices), a.memory_kind, a.site, a.sharding]
            for host, index, pid, a in found]  # fmt: skip
    return header, rows
