"""Inside the job: its live arrays, largest first, with the line of the program that created each (JAX's own
allocation traceback, `jax.Array.traceback`, which `jax.profiler.device_memory_profile` reads too), and grouped by
that line. Computed only when asked (a `--top` request, or a job dying of RESOURCE_EXHAUSTED): a publisher that
nobody asks pays nothing for it. jax is imported inside functions only.
"""

from __future__ import annotations

import os
from collections.abc import Container, Sequence
from typing import Any

from devctl.model.holders import MAX_SITES

# A sharding as JAX prints it can list every device: kept to this many characters.
_SHARDING_CHARS = 200


def held(n: int) -> dict[str, Any]:
    """{"total_arrays", "total_bytes", "arrays": the n largest, "sites": every array grouped by site}, as the
    model.holders records have them."""
    import jax

    own, libraries = _library_dirs()
    arrays, in_flight = [], set()
    for x in jax.live_arrays():
        state = _buffer_state(x)
        if state == "in flight":
            in_flight.add(id(x))
        if state != "none":
            arrays.append(x)
    arrays = _without_aliases(arrays, in_flight)
    # (bytes, site, array), largest first.
    facts = sorted(((int(x.nbytes), _site(x, own, libraries), x) for x in arrays), key=lambda f: -f[0])
    sites: dict[str | None, list[int]] = {}
    for nbytes, site, _ in facts:
        total = sites.setdefault(site, [0, 0])
        total[0] += 1
        total[1] += nbytes
    top = [_describe(x, nbytes, site) for nbytes, site, x in facts[:n]]
    by_size = sorted(sites.items(), key=lambda kv: -kv[1][1])
    grouped = [{"site": site, "arrays": a, "nbytes": b} for site, (a, b) in by_size]
    return {
        "total_arrays": len(facts),
        "total_bytes": sum(f[0] for f in facts),
        "arrays": top,
        "sites": grouped[:MAX_SITES],
    }


def _buffer_state(x: Any) -> str:
    """What the array holds. "held": its buffers exist; "in flight": its computation has not finished (its
    buffers are reserved; asking more would wait for it); "none": nothing, though jax.live_arrays() lists it:
    deleted (donated, or x.delete()), or its asynchronous computation failed. On a GPU the output of an
    allocation that ran out of memory is such an array: the object exists from dispatch, its buffer never did.

    Never blocks: a ready array's block_until_ready() returns at once, or raises the error its computation
    ended with (is_ready() is True for both; is_deleted() False for both)."""
    try:
        if x.is_deleted():
            return "none"
        if not x.is_ready():
            return "in flight"
        x.block_until_ready()
    except Exception:  # noqa: BLE001 - the computation's own error (JaxRuntimeError), or deleted meanwhile
        return "none"
    return "held"


def _describe(x: Any, nbytes: int, site: str | None) -> dict[str, Any]:
    sharding = x.sharding
    devices = sorted(sharding.device_set, key=lambda d: (d.platform, d.id))
    return {
        "nbytes": nbytes,
        "shape": [int(d) for d in x.shape],
        "dtype": str(x.dtype),
        "sharding": _short(repr(sharding)),
        "memory_kind": getattr(sharding, "memory_kind", None),
        "devices": [f"{d.platform}:{d.id}" for d in devices],
        "site": site,
    }


def _short(text: str) -> str:
    return text if len(text) <= _SHARDING_CHARS else text[: _SHARDING_CHARS - 1] + "…"


def _library_dirs() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(JAX's and devctl's own directories, every library's): frames there are not the program's. A line in
    optax is not the line of train.py that holds the optimizer state."""
    import sysconfig

    import jax
    import jaxlib

    own = {os.path.dirname(jax.__file__), os.path.dirname(jaxlib.__file__), os.path.dirname(os.path.dirname(__file__))}
    libraries = {p for key in ("purelib", "platlib", "stdlib", "platstdlib") if (p := sysconfig.get_paths().get(key))}
    return tuple(os.path.join(d, "") for d in own), tuple(os.path.join(d, "") for d in libraries)


def _site(x: Any, own: tuple[str, ...], libraries: tuple[str, ...]) -> str | None:
    """The innermost frame of the array's creation that is the program's own; failing that, the innermost that
    is a library's and not JAX's or devctl's; None without a traceback (JAX records none when asked not to)."""
    tb = getattr(x, "traceback", None)
    frames = getattr(tb, "frames", None) if tb is not None else None
    if not frames:
        return None
    fallback = None
    for f in frames:  # innermost first
        name = f.file_name
        if not name.startswith(own) and not name.startswith(libraries):
            return f"{_where(name)}:{f.line_num} ({f.function_name})"
        if fallback is None and not name.startswith(own):
            fallback = f"{_where(name)}:{f.line_num} ({f.function_name})"
    return fallback


def _where(file_name: str) -> str:
    """A frame's file as a person reads it: relative to the working directory when below it."""
    try:
        rel = os.path.relpath(file_name)
    except ValueError:
        return file_name
    return rel if not rel.startswith("..") else file_name


def _without_aliases(arrays: list, in_flight: Container[int] = ()) -> list:
    """Every array once: a single-device array that is a shard of a multi-device one (a host fetch creates such
    objects, and jax.live_arrays() lists them beside their parents) is the parent's memory, not another array's.
    An array still in flight (ids in `in_flight`) is not matched: its buffer's pointer can wait for the computation
    to start, and its views come after it."""
    singles: dict[tuple[int, int], Any] = {}
    multi = []
    aliases: set[int] = set()
    for x in arrays:
        if id(x) in in_flight:
            continue
        devices = x.sharding.device_set
        if len(devices) == 1:
            try:
                key = (next(iter(devices)).id, x.unsafe_buffer_pointer())
            except Exception:  # noqa: BLE001 - a backend without pointers: nothing to match on
                continue
            if key in singles:  # two objects over one buffer (JAX makes such views): one array
                aliases.add(id(x))
            else:
                singles[key] = x
        else:
            multi.append(x)
    if not singles or not multi:
        return [x for x in arrays if id(x) not in aliases]
    for parent in multi:
        if id(parent) in in_flight:
            continue
        for shard in parent.addressable_shards:
            try:
                key = (shard.device.id, shard.data.unsafe_buffer_pointer())
            except Exception:  # noqa: BLE001
                continue
            if key in singles:
                aliases.add(id(singles[key]))
    return [x for x in arrays if id(x) not in aliases]


# ---- answering devctl, in the publisher's thread -----------------------------------------------------


def answer_request(directory: str, pid: int) -> bool:
    """Answer a `devctl memstats --top` request waiting in `directory`, if there is one; whether one was answered.
    The request is read as a regular file of this user (never a link), bounded; a malformed one is removed."""
    import json
    import socket
    import stat
    import sys
    import time

    from devctl.discovery.holders import REQUEST_MAX_BYTES, answer_path, pprof_path, request_path
    from devctl.model.holders import MAX_TOP, TOP_SCHEMA
    from devctl.safefs import read_regular, remove_own_file, write_atomic

    asked = request_path(directory, pid)
    try:
        st = os.lstat(asked)
    except OSError:
        return False  # nobody asked: the common case, one lstat a tick
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return False
    started = time.thread_time()
    try:
        request = json.loads(read_regular(asked, REQUEST_MAX_BYTES))
        n, token = int(request["n"]), str(request["token"])[:64]
        want_pprof = bool(request.get("pprof"))
    except (OSError, ValueError, KeyError, TypeError):
        remove_own_file(asked)
        return False
    note = None
    if want_pprof:
        try:
            import jax

            write_atomic(pprof_path(directory, pid), jax.profiler.device_memory_profile(), mode=0o600, sync=False)
        except Exception as e:  # noqa: BLE001 - the answer says why; the job goes on
            note = f"the memory profile failed: {type(e).__name__}: {e}"[:300]
    doc = {
        "schema": TOP_SCHEMA,
        "token": token,
        "pid": pid,
        "command": list(sys.argv) or [sys.executable],
        "hostname": socket.gethostname(),
        "timestamp": time.time(),
        **held(max(1, min(n, MAX_TOP))),
        "note": note,
    }
    doc["cost_s"] = round(time.thread_time() - started, 6)
    write_atomic(answer_path(directory, pid), json.dumps(doc).encode(), mode=0o600, sync=False)
    remove_own_file(asked)
    return True


def forget_requests(directory: str, pid: int) -> None:
    """At stop: this job's request, answer and profile files, which nobody will read now (regular files of this
    user only; post-mortems stay)."""
    from devctl.discovery.holders import answer_path, pprof_path, request_path
    from devctl.safefs import remove_own_file

    for path in (request_path(directory, pid), answer_path(directory, pid), pprof_path(directory, pid)):
        remove_own_file(path)


# ---- the post-mortem of a job that dies of RESOURCE_EXHAUSTED ----------------------------------------

_POSTMORTEM_TOP = 20
_installed = False


def install_oom_hook(directory_of) -> None:
    """Chain sys.excepthook and threading.excepthook: an uncaught exception whose chain says RESOURCE_EXHAUSTED
    leaves a post-mortem in the directory `directory_of()` names (None: not publishing), then goes on to the
    previous hook unchanged. Costs nothing until an exception reaches the top of a thread."""
    import sys
    import threading

    global _installed
    if _installed:
        return
    _installed = True
    previous, previous_thread = sys.excepthook, threading.excepthook

    def hook(kind, value, tb):
        _record(directory_of, value)
        previous(kind, value, tb)

    def thread_hook(args):
        _record(directory_of, args.exc_value)
        previous_thread(args)

    sys.excepthook = hook
    threading.excepthook = thread_hook


def is_out_of_memory(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 10:
        if "RESOURCE_EXHAUSTED" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _record(directory_of, exc: BaseException | None) -> None:
    try:
        directory = directory_of()
        if directory and exc is not None and is_out_of_memory(exc):
            write_postmortem(directory, exc)
    except Exception:  # noqa: BLE001 - a post-mortem must never hide the job's own error
        pass


def _chain_text(exc: BaseException | None) -> str:
    """The messages of the exception and of those it was raised from (a chained one may carry the allocator's own
    line, with the exact size), outermost first."""
    messages: list[str] = []
    while exc is not None and len(messages) < 10:
        messages.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(messages)


def requested(message: str, local_devices: Sequence[Any]) -> dict[str, Any]:
    """The post-mortem's request fields (model.holders.PostMortem) from the error's text (devctl.model.oom) and
    the job's local devices: the ordinal a GPU message names is the device of that local hardware id (CUDA's or
    ROCm's ordinal among the visible devices), failing that of that id; None where no GPU of the job matches."""
    from devctl.model.oom import parse_oom

    found = parse_oom(message)
    device = None
    if found.device_ordinal is not None:
        gpus = [d for d in local_devices if getattr(d, "platform", None) in ("gpu", "cuda", "rocm")]
        match = [d for d in gpus if getattr(d, "local_hardware_id", None) == found.device_ordinal] or [
            d for d in gpus if getattr(d, "id", None) == found.device_ordinal
        ]
        if len(match) == 1:
            device = f"{match[0].platform}:{match[0].id}"
    return {
        "requested_bytes": found.requested_bytes,
        "requested_device": device,
        "requested_exact": found.exact if found.requested_bytes is not None else None,
        "requested_scope": found.scope,
        "requested_memory": found.memory,
        "free_bytes": found.free_bytes,
        "capacity_bytes": found.capacity_bytes,
    }


def write_postmortem(directory: str, exc: BaseException) -> str:
    """Write what the job holds now, and what it asked for, as `<pid>-<time>.postmortem.json`; prune old ones."""
    import json
    import socket
    import sys
    import time

    import jax

    from devctl.discovery.holders import postmortem_path
    from devctl.model.holders import POSTMORTEM_MAX_BYTES, POSTMORTEM_SCHEMA
    from devctl.safefs import write_atomic

    message = str(exc)
    local = jax.local_devices()
    devices = []
    for d in local:
        try:
            stats = d.memory_stats()
        except Exception:  # noqa: BLE001
            stats = None
        devices.append({"device": f"{d.platform}:{d.id}", "memory_stats": {k: v for k, v in (stats or {}).items() if isinstance(v, int)} or None})
    now = time.time()
    doc = {
        "schema": POSTMORTEM_SCHEMA,
        "pid": os.getpid(),
        "command": list(sys.argv) or [sys.executable],
        "hostname": socket.gethostname(),
        "timestamp": now,
        "error": f"{type(exc).__name__}: {message}"[:500],
        **requested(_chain_text(exc), local),
        "devices": devices,
        **held(_POSTMORTEM_TOP),
    }
    data = json.dumps(doc).encode()
    while len(data) > POSTMORTEM_MAX_BYTES and (doc["sites"] or doc["arrays"]):  # keep the largest that fit, whole
        key = "sites" if len(doc["sites"]) > 1 or not doc["arrays"] else "arrays"
        doc[key] = doc[key][: len(doc[key]) // 2]
        data = json.dumps(doc).encode()
    path = postmortem_path(directory, os.getpid(), now)
    write_atomic(path, data, mode=0o600, sync=True)  # the job is about to die: on disk before it does
    prune_postmortems(directory, now)
    return path


def prune_postmortems(directory: str, now: float) -> None:
    """Keep the newest POSTMORTEMS_KEPT post-mortems of this user, none older than POSTMORTEM_MAX_AGE_S; a file
    named like one that devctl did not write (another schema, a link, another user's) is never removed."""
    import stat

    from devctl.discovery.holders import POSTMORTEM_NAME, POSTMORTEM_PREFIX
    from devctl.model.holders import POSTMORTEM_MAX_AGE_S, POSTMORTEMS_KEPT
    from devctl.safefs import remove_own_file

    try:
        names = [n for n in os.listdir(directory) if POSTMORTEM_NAME.match(n)]
    except OSError:
        return
    dated = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():  # never another user's, never a link
            dated.append((st.st_mtime, path))
    dated.sort(reverse=True)
    for i, (mtime, path) in enumerate(dated):
        if i >= POSTMORTEMS_KEPT or now - mtime > POSTMORTEM_MAX_AGE_S:
            remove_own_file(path, starts_with=POSTMORTEM_PREFIX)  # only what a devctl publisher wrote
