"""Inside the job: its live arrays, largest first, with the line of the program that created each (JAX's own
allocation traceback, `jax.Array.traceback`, which `jax.profiler.device_memory_profile` reads too), and grouped by
that line. Computed only when asked (a `--top` request, or a job dying of RESOURCE_EXHAUSTED): a publisher that
nobody asks pays nothing for it. jax is imported inside functions only.
"""

from __future__ import annotations

import os
import time
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

# Requests taken in one tick (the rest wait for the next): twenty readers asking at once are answered together,
# from one look at the arrays.
MAX_REQUESTS_PER_TICK = 32
# Names looked at once and refused (not a request of this job, not a regular file of this user, not removable)
# are never looked at again; this many are remembered.
_REFUSED_KEPT = 1024
SWEEP_EVERY_S = 10.0  # how often the publisher sweeps orphaned --top files (devctl.discovery.holders)
ANSWER_UNREAD_S = 5.0  # at stop: an answer this old was not read by a reader that waits (it reads within 50 ms)
_COMMAND_WORDS, _COMMAND_WORD_CHARS = 256, 1000  # an answer is at most ANSWER_MAX_BYTES, whatever the argv


class _Request:
    __slots__ = ("token", "n", "pprof")

    def __init__(self, token: str, n: int, pprof: bool) -> None:
        self.token, self.n, self.pprof = token, n, pprof


class TopRequests:
    """The job's side of `devctl memstats --top` (files: devctl.discovery.holders), one per publisher, run in its
    thread after each snapshot.

    The most protected code of devctl: it runs inside the training job, on files other processes wrote. A request
    is taken (removed) before anything is done with it, and answered at most once whatever happens next (refused,
    damaged, its answer path unwritable, the disk full): nothing is ever retried. Its numbers are checked before
    use. One tick lists the directory once, takes at most MAX_REQUESTS_PER_TICK requests and computes the arrays
    (and the profile) at most once for all of them; a name it refused is not looked at again. When nobody asks
    a tick costs one listdir, and every SWEEP_EVERY_S a sweep of orphans (bounded)."""

    def __init__(self) -> None:
        self._refused: set[str] = set()
        self._next_sweep = 0.0
        self._started = False
        # What the job did, for tests and benchmarks: requests taken, answers written, arrays computed.
        self.taken = 0
        self.answered = 0
        self.computed = 0

    def tick(self, directory: str, pid: int) -> str | None:
        """Take and answer what waits in `directory`; an error for the job's next snapshot (naming each request it
        could not answer by its token, so that its reader stops waiting), or None."""
        from devctl.discovery.holders import legacy_paths, sweep_orphans
        from devctl.safefs import remove_own_file

        try:
            names = os.listdir(directory)
        except OSError:
            return None
        now = time.time()
        if not self._started:
            self._started = True
            for path in legacy_paths(directory, pid):  # left by an older devctl: never answered, never read
                remove_own_file(path)
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_EVERY_S
            sweep_orphans(directory, names, now=now)
        prefix = f"{pid}.top-request."
        waiting = [name for name in names if name.startswith(prefix) and name not in self._refused]
        if not waiting:
            return None
        errors: list[str] = []
        requests = []
        for name in waiting[:MAX_REQUESTS_PER_TICK]:
            try:
                request = self._take(directory, pid, name)
            except Exception as e:  # noqa: BLE001 - the request is gone or refused: said once, never retried
                errors.append(str(e) if isinstance(e, _Refused) else f"a --top request failed: {_why(e)}")
                continue
            if request is not None:
                requests.append(request)
        if requests:
            self._answer(directory, pid, requests, errors)
        if not errors:
            return None
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        return "; ".join(e[:300] for e in errors[:3]) + more  # a snapshot's error holds 1,000 characters

    def _refuse(self, name: str) -> None:
        if len(self._refused) >= _REFUSED_KEPT:
            self._refused.clear()  # names of requests gone long ago: one more look each costs one lstat
        self._refused.add(name)

    def _take(self, directory: str, pid: int, name: str) -> _Request | None:
        """The request `name`, removed; None when it was withdrawn, is not one, or its reader is gone; _Refused
        (naming its token) when it cannot be answered. Never opens anything but a regular file of this user."""
        import stat

        from devctl.discovery.holders import REQUEST_MAX_BYTES, REQUEST_NAME, answer_path, host_tag, pid_alive, pprof_path, token_reader
        from devctl.safefs import file_kind, read_regular, remove_own_file

        m = REQUEST_NAME.match(name)
        if m is None or int(m.group(1)) != pid:
            self._refuse(name)
            return None
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None  # withdrawn by its reader meanwhile
        except OSError:
            self._refuse(name)
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            self._refuse(name)  # a FIFO, a directory, a link, another user's: never opened, left as it is
            return None
        token = m.group(2)
        self.taken += 1
        try:
            raw = read_regular(path, REQUEST_MAX_BYTES)
        except OSError as e:
            raise _Refused(f"the --top request {token} was refused: {e.strerror or e}") from None
        finally:
            if not remove_own_file(path):
                self._refuse(name)  # taken all the same: never looked at again
        try:
            n, pprof = _parse_request(raw)
        except Exception as e:  # noqa: BLE001 - ValueError as a rule; whatever it is, the request is refused once
            raise _Refused(f"the --top request {token} was refused: {_why(e)}") from None
        reader, tag = token_reader(token)
        if tag == host_tag() and not pid_alive(reader):
            return None  # its reader is gone: nobody would read the answer
        for answer in (answer_path(directory, pid, token), pprof_path(directory, pid, token) if pprof else None):
            if answer is None:
                continue
            try:
                st = os.lstat(answer)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise _Refused(f"the --top request {token} was not answered: {os.path.basename(answer)}: {e.strerror or e}") from None
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                what = file_kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else f"owned by uid {st.st_uid}"
                raise _Refused(f"the --top request {token} was not answered: {os.path.basename(answer)} is {what}")
        return _Request(token, n, pprof)

    def _answer(self, directory: str, pid: int, requests: list[_Request], errors: list[str]) -> None:
        """Compute the arrays (and the profile) once, and write each request's answer: a failure costs that answer
        only, and is said."""
        import socket

        from devctl.discovery.holders import PPROF_MAX_BYTES, answer_path, pprof_path
        from devctl.model.holders import TOP_SCHEMA
        from devctl.safefs import remove_own_file, write_atomic

        started = time.thread_time()
        try:
            top = held(max(r.n for r in requests))
        except Exception as e:  # noqa: BLE001 - said once; the requests are gone
            errors.append(f"the --top requests {' '.join(r.token for r in requests)} failed: {_why(e)}")
            return
        self.computed += 1
        profile, note = None, None
        if any(r.pprof for r in requests):
            try:
                import jax

                profile = jax.profiler.device_memory_profile()
            except Exception as e:  # noqa: BLE001 - the answer says why; the job goes on
                note = f"the memory profile failed: {_why(e)}"[:300]
            if profile is not None and len(profile) > PPROF_MAX_BYTES:
                note, profile = f"the memory profile is {len(profile)} bytes, more than devctl reads ({PPROF_MAX_BYTES})", None
        command = [word[:_COMMAND_WORD_CHARS] for word in _argv()[:_COMMAND_WORDS]]
        common = {"schema": TOP_SCHEMA, "pid": pid, "command": command, "hostname": socket.gethostname()}
        for r in requests:
            profile_file = pprof_path(directory, pid, r.token)
            try:
                if r.pprof and profile is not None:
                    write_atomic(profile_file, profile, mode=0o600, sync=False)  # first: the answer says it is there
                doc = {
                    **common, "token": r.token, "timestamp": time.time(), "total_arrays": top["total_arrays"],
                    "total_bytes": top["total_bytes"], "arrays": top["arrays"][: r.n], "sites": top["sites"],
                    "note": note if r.pprof else None, "cost_s": round(time.thread_time() - started, 6),
                }  # fmt: skip
                write_atomic(answer_path(directory, pid, r.token), _fit(doc), mode=0o600, sync=False)
                self.answered += 1
            except Exception as e:  # noqa: BLE001 - a full disk, an answer path made unwritable: this answer only
                remove_own_file(profile_file)  # a profile without its answer is nobody's
                errors.append(f"the --top request {r.token} failed: {_why(e)}")

    def forget(self, directory: str, pid: int) -> None:
        """At stop: this job's requests (never answered now: their readers see the job go), the answers no reader
        will read (its reader is gone, or it waited no longer), and an older devctl's files of this pid. Regular
        files of this user only; post-mortems stay."""
        import stat

        from devctl.discovery.holders import ANSWER_NAME, REQUEST_NAME, host_tag, legacy_paths, pid_alive
        from devctl.safefs import remove_own_file

        for path in legacy_paths(directory, pid):
            remove_own_file(path)
        try:
            names = os.listdir(directory)
        except OSError:
            return
        now = time.time()
        for name in names:
            path = os.path.join(directory, name)
            if (m := REQUEST_NAME.match(name)) and int(m.group(1)) == pid:
                remove_own_file(path)
            elif (m := ANSWER_NAME.match(name)) and int(m.group(1)) == pid:
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                reader_gone = m.group(4) == host_tag() and not pid_alive(int(m.group(3)))
                if stat.S_ISREG(st.st_mode) and (reader_gone or now - st.st_mtime > ANSWER_UNREAD_S):
                    remove_own_file(path)


class _Refused(Exception):
    """A request taken and not answered, with the line the job's snapshot says it in."""


def _parse_request(raw: bytes) -> tuple[int, bool]:
    """(n, pprof) of a request; ValueError saying what is wrong. Numbers are checked before use: `"n": Infinity`,
    1e400, -1, 2.5, a 4,000-digit number and true are refused, and nothing nests deeper than a request does."""
    import json

    from devctl.discovery.snapshot_format import nesting_too_deep
    from devctl.model.holders import MAX_TOP

    if nesting_too_deep(raw, 2):
        raise ValueError("it nests deeper than a request does")
    doc = json.loads(raw.decode("utf-8"), parse_constant=_not_a_number)
    if not isinstance(doc, dict):
        raise ValueError("it is not a JSON object")
    n, pprof = doc.get("n"), doc.get("pprof", False)
    if type(n) is not int or not 1 <= n <= MAX_TOP:
        raise ValueError(f"n is {_short(repr(n))[:40]}, not a whole number from 1 to {MAX_TOP}")
    if not isinstance(pprof, bool):
        raise ValueError(f"pprof is {_short(repr(pprof))[:40]}, not true or false")
    return n, pprof


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _fit(doc: dict[str, Any]) -> bytes:
    """The answer as JSON within ANSWER_MAX_BYTES: the largest arrays and lines that fit, whole, with a note."""
    import json

    from devctl.discovery.holders import ANSWER_MAX_BYTES

    data = json.dumps(doc).encode()
    shown = (len(doc["arrays"]), len(doc["sites"]))
    while len(data) > ANSWER_MAX_BYTES and (doc["sites"] or doc["arrays"]):
        key = "sites" if len(doc["sites"]) > 1 or not doc["arrays"] else "arrays"
        doc[key] = doc[key][: len(doc[key]) // 2]
        cut = f"cut to fit {ANSWER_MAX_BYTES} bytes: {len(doc['arrays'])} of {shown[0]} arrays, {len(doc['sites'])} of {shown[1]} lines"
        doc["note"] = f"{doc['note']}; {cut}" if doc.get("note") else cut
        data = json.dumps(doc).encode()
    if len(data) > ANSWER_MAX_BYTES:
        raise ValueError(f"the answer is {len(data)} bytes, more than {ANSWER_MAX_BYTES}")
    return data


def _why(e: BaseException) -> str:
    from devctl.publish.document import describe

    return describe(e)[:300]


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
        "command": _argv(),
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


def _argv() -> list[str]:
    """The job's command line as its snapshot gives it: orig_argv keeps the interpreter and its flags (`python -c`,
    `python -m pkg`), which sys.argv drops (`-c` alone), so every view names the job alike."""
    import sys

    return list(getattr(sys, "orig_argv", None) or sys.argv) or [sys.executable]
