"""`devctl memstats --distributed --top N`: every process asks the publishing jobs it sees for their largest arrays
(devctl.discovery.holders), and process 0 puts the answers together through JAX's distributed runtime."""

from __future__ import annotations

import socket
from typing import Any

from devctl.model.distributed import ClusterParams
from devctl.model.holders import FLEET_TOP_SCHEMA, FleetArray, FleetSite, FleetTopReport, ProcessTops, TopReport

# Each job answers at its next publish tick: a job that takes longer than this is a problem line, not a hang.
JOB_TIMEOUT_S = 5.0
MAX_QUESTIONS = 16  # jobs asked at once; a host runs a handful


def local_tops(n: int, timeout_s: float) -> dict[str, Any]:
    """This process's part: every publishing job's answer, and the jobs that did not answer. The jobs are asked
    all at once (each question has its own files): one stuck job costs its own wait, not everyone's."""
    from concurrent.futures import ThreadPoolExecutor

    from devctl.discovery.holders import request_top
    from devctl.discovery.publishers import read_publishers
    from devctl.errors import DevctlError
    from devctl.model import to_jsonable

    def ask(pid: int) -> tuple[dict[str, Any] | None, str | None]:
        try:
            top, _ = request_top(pid, n, pprof=False, timeout_s=min(timeout_s, JOB_TIMEOUT_S))
        except DevctlError as e:
            return None, f"job {pid}: {e}"
        return to_jsonable(top), None

    pids = [p.pid for p in read_publishers(remove_stale=False).publishers]
    tops, problems = [], []
    if pids:
        with ThreadPoolExecutor(max_workers=min(len(pids), MAX_QUESTIONS), thread_name_prefix="devctl-top") as pool:
            for top, problem in pool.map(ask, pids):  # in pid order
                if top is not None:
                    tops.append(top)
                if problem is not None:
                    problems.append(problem)
    return {"hostname": socket.gethostname(), "tops": tops, "problems": problems}


def cluster_tops(params: ClusterParams, n: int, *, timeout_s: float, all_print: bool = False) -> FleetTopReport | None:
    from devctl.collect.distributed import gather_reports

    reports = gather_reports(lambda: local_tops(n, timeout_s), params, timeout_s=timeout_s, all_print=all_print)
    if reports is None:
        return None
    return merge(reports, n)


def merge(reports: list[dict[str, Any]], n: int) -> FleetTopReport:
    """Every process's answers (list position = process index) as one report: the cluster's n largest arrays and
    its lines summed over every job."""
    from devctl.model import from_dict

    processes = []
    arrays: list[FleetArray] = []
    sites: dict[str | None, list[int]] = {}
    total_arrays = total_bytes = 0
    for index, doc in enumerate(reports):
        tops = tuple(from_dict(TopReport, t) for t in doc.get("tops") or [])
        processes.append(ProcessTops(index, doc.get("hostname") or "?", tops, tuple(doc.get("problems") or ())))
        for top in tops:
            total_arrays += top.total_arrays
            total_bytes += top.total_bytes
            arrays.extend(FleetArray(index, top.hostname, top.pid, a) for a in top.arrays)
            for s in top.sites:
                entry = sites.setdefault(s.site, [0, 0, 0])
                entry[0] += 1
                entry[1] += s.arrays
                entry[2] += s.nbytes
    arrays.sort(key=lambda a: -a.array.nbytes)
    merged = sorted((FleetSite(site, jobs, count, nbytes) for site, (jobs, count, nbytes) in sites.items()), key=lambda s: -s.nbytes)
    return FleetTopReport(FLEET_TOP_SCHEMA, tuple(processes), tuple(arrays[:n]), tuple(merged), total_arrays, total_bytes)
