"""The files through which devctl asks a publishing job what holds its memory, and reads its post-mortems.

All live in the job's private snapshot directory (devctl.discovery.publishers: mode 0700, owned by the user,
never a link), beside its `<pid>.json`:

  <pid>.top-request               devctl asks: {"n": N, "token": T, "pprof": bool}
  <pid>.top.json                  the job answers within one publish interval (model.holders.TopReport + token)
  <pid>.top.pprof                 with "pprof": jax.profiler.device_memory_profile(), for the pprof tools
  <pid>-<time>.postmortem.json    a job that died of RESOURCE_EXHAUSTED (model.holders.PostMortem)

No socket, no signal: the job reads the request at its next tick. The names are not `<pid>.json`, so the
snapshot reader neither lists nor removes them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from typing import Any

from devctl.errors import InputRejected
from devctl.model.holders import (
    POSTMORTEM_MAX_BYTES,
    POSTMORTEM_SCHEMA,
    POSTMORTEMS_SCHEMA,
    TOP_SCHEMA,
    PostMortem,
    PostMortemReport,
    TopReport,
)

REQUEST_MAX_BYTES = 4096
ANSWER_MAX_BYTES = 8 << 20
PPROF_MAX_BYTES = 256 << 20
POSTMORTEM_NAME = re.compile(r"^([1-9][0-9]{0,6})-([0-9]{1,12})\.postmortem\.json$")
# How every post-mortem devctl writes begins (json.dumps with the schema first): what pruning checks before removing.
POSTMORTEM_PREFIX = b'{"schema": "' + POSTMORTEM_SCHEMA.encode() + b'"'


def request_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{pid}.top-request")


def answer_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{pid}.top.json")


def pprof_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{pid}.top.pprof")


def postmortem_path(directory: str, pid: int, when: float) -> str:
    return os.path.join(directory, f"{pid}-{int(when)}.postmortem.json")


# ---- the reader's side of --top ------------------------------------------------------------------


def request_top(pid: int, n: int, *, pprof: bool, timeout_s: float, directory: str | None = None) -> tuple[TopReport, bytes | None]:
    """Ask the publishing job `pid` for its `n` largest arrays (and its pprof profile), and wait for the answer.

    A pid that does not publish here, or a job that does not answer within `timeout_s`, is InputRejected (one
    line, exit 2); the request is then withdrawn."""
    from devctl.discovery.publishers import read_publishers
    from devctl.safefs import remove_own_file, write_atomic

    report = read_publishers(directory, remove_stale=False)
    snap = next((p for p in report.publishers if p.pid == pid), None)
    if snap is None or snap.path is None:
        jobs = ", ".join(str(p.pid) for p in report.publishers) or "none"
        raise InputRejected(f"--pid {pid} is not a publishing job here (jobs that publish: {jobs}); a job publishes with devctl.publish.publish()")
    folder = os.path.dirname(snap.path)
    token = secrets.token_hex(8)
    asked = request_path(folder, pid)
    write_atomic(asked, json.dumps({"n": n, "token": token, "pprof": pprof}).encode(), mode=0o600, sync=False)
    interval = snap.interval_s or 1.0
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            answer = _answer(folder, pid, token)
            if answer is not None:
                profile = _read(pprof_path(folder, pid), PPROF_MAX_BYTES) if pprof else None
                remove_own_file(answer_path(folder, pid))  # read: the job's answer to us, not left to pile up
                if pprof:
                    remove_own_file(pprof_path(folder, pid))
                if pprof and profile is None:
                    raise InputRejected(f"job {pid} answered without its memory profile: {answer.note or 'no profile file'}")
                return answer, profile
            time.sleep(min(0.05, interval / 4))
    finally:
        remove_own_file(asked)  # withdrawn, if the job has not answered (and removed) it
    raise InputRejected(
        f"job {pid} did not answer within {timeout_s:g} s (it publishes every {interval:g} s: is it stuck in a long "
        "call that holds the GIL?); give a longer --timeout"
    )


def _answer(folder: str, pid: int, token: str) -> TopReport | None:
    raw = _read(answer_path(folder, pid), ANSWER_MAX_BYTES)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None  # not ours yet (an older answer being replaced is never half-written: renamed whole)
    if not isinstance(doc, dict) or doc.get("token") != token:
        return None
    return decode(TopReport, doc, TOP_SCHEMA, answer_path(folder, pid))


def _read(path: str, cap: int) -> bytes | None:
    from devctl.safefs import read_regular

    try:
        return read_regular(path, cap)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise InputRejected(f"{path}: {e.strerror or e}") from None


def decode(cls: type, doc: Any, schema: str, path: str) -> Any:
    """A TopReport or PostMortem from the job's document; InputRejected naming the file when it is not one."""
    from devctl.model import from_dict

    if not isinstance(doc, dict) or doc.get("schema") != schema:
        raise InputRejected(f"{path} is not a {schema} document")
    try:
        value: Any = from_dict(cls, {k: v for k, v in doc.items() if k != "token"})
        _check(value)
    except (TypeError, ValueError, KeyError) as e:
        raise InputRejected(f"{path} is damaged: {e}") from None
    return value


def _check(value: Any) -> None:
    """Figures that were not measured (negative sizes, a shape of strings) make a document damaged, not data."""
    from devctl.text import printable

    for a in value.arrays:
        if not isinstance(a.nbytes, int) or a.nbytes < 0 or not all(isinstance(d, int) and d >= 0 for d in a.shape):
            raise ValueError(f"an array with nbytes {printable(repr(a.nbytes), 40)} and shape {printable(repr(a.shape), 80)}")
    if not isinstance(value.total_bytes, int) or value.total_bytes < 0:
        raise ValueError(f"total_bytes {printable(repr(value.total_bytes), 40)}")
    for name in ("requested_bytes", "free_bytes", "capacity_bytes"):  # a post-mortem's
        n = getattr(value, name, None)
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
            raise ValueError(f"{name} {printable(repr(n), 40)}")


# ---- post-mortems -------------------------------------------------------------------------------


def read_postmortems(pid: int | None = None, directory: str | None = None) -> PostMortemReport:
    """Every post-mortem in the snapshot directories (of job `pid` only, when given), newest first; a damaged or
    foreign file is a problem line, never removed."""
    from devctl.discovery.publishers import read_publishers
    from devctl.safefs import open_private_directory, private_directory_problem, read_regular
    from devctl.text import printable

    report = read_publishers(directory, remove_stale=False)
    found: list[PostMortem] = []
    problems: list[str] = []
    for folder in report.directories:
        if private_directory_problem(folder):
            continue  # read_publishers said why, for the snapshots
        try:
            fd = open_private_directory(folder)
        except OSError:
            continue
        try:
            names = sorted((n for n in os.listdir(fd) if (m := POSTMORTEM_NAME.match(n)) and (pid is None or int(m.group(1)) == pid)), reverse=True)
            for name in names[:100]:
                path = os.path.join(folder, name)
                try:
                    doc = json.loads(read_regular(name, POSTMORTEM_MAX_BYTES, dir_fd=fd))
                    pm = decode(PostMortem, doc, POSTMORTEM_SCHEMA, path)
                except (OSError, ValueError, InputRejected) as e:
                    problems.append(printable(f"{path}: {e}", 500))
                    continue
                found.append(_with_request(_with_path(pm, path)))
        finally:
            os.close(fd)
    found.sort(key=lambda p: -p.timestamp)
    return PostMortemReport(POSTMORTEMS_SCHEMA, report.directory, tuple(found), tuple(problems))


def _with_path(pm: PostMortem, path: str) -> PostMortem:
    from dataclasses import replace

    return replace(pm, path=path)


def _with_request(pm: PostMortem) -> PostMortem:
    """A post-mortem of an older devctl (no requested_exact: it read only "allocat... N bytes") with the request
    read again from its error (devctl.model.oom), as a newer publisher records it. The device is named only where
    the job's GPUs were gpu:0 to gpu:N-1 (one process: JAX's id is then the local ordinal the message names)."""
    from dataclasses import replace

    from devctl.model.oom import parse_oom

    if pm.requested_exact is not None:
        return pm  # the publisher read it, with the job's devices at hand
    found = parse_oom(pm.error)
    if found.requested_bytes is None:
        return pm
    device = pm.requested_device
    if device is None and found.device_ordinal is not None:
        gpus = {d.device for d in pm.devices if d.device.partition(":")[0] in ("gpu", "cuda", "rocm")}
        platforms = {g.partition(":")[0] for g in gpus}
        if len(platforms) == 1 and gpus == {f"{next(iter(platforms))}:{i}" for i in range(len(gpus))} and found.device_ordinal < len(gpus):
            device = f"{next(iter(platforms))}:{found.device_ordinal}"
    return replace(
        pm, requested_bytes=found.requested_bytes, requested_device=device, requested_exact=found.exact, requested_scope=found.scope,
        requested_memory=found.memory, free_bytes=found.free_bytes, capacity_bytes=found.capacity_bytes,
    )  # fmt: skip
