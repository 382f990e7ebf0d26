"""`devctl exporter`'s two loops: serving HTTP to any number of clients, and rewriting a textfile every interval.

The server is one event loop (selectors: epoll on Linux) in the main thread plus a small pool of daemon worker
threads. The loop accepts, reads each request head and writes each response without blocking, every connection
under deadlines of its own (READ_TIMEOUT_S to send a complete head, WRITE_TIMEOUT_S to take the response); only a
complete GET /metrics reaches a worker. So a client that connects and sends nothing, sends half a request, or
never reads its answer costs a socket and a few bytes until its deadline, never a worker or another client's
scrape (issue 23: with wsgiref's one-request-at-a-time server, one idle connection stopped every scrape and
SIGTERM waited for it to close). The pool is bounded (WORKERS), and so are the requests waiting for it
(MAX_PENDING: 503 beyond) and the open connections (the oldest one not being answered is closed for a new one).

SIGTERM, SIGINT and SIGHUP wake the loop through a socket pair and end it at once, whatever the clients and the
workers are doing: the workers and the collection's own threads are daemons, never waited for at exit.

Stdlib and prometheus_client only; no usage errors here (cli/exporter.py turns an OSError from bind() into one).
"""

from __future__ import annotations

import collections
import os
import queue
import re
import selectors
import socket
import stat
import threading
import time
from typing import Any, Callable

# A client has this long from its connect to send a complete request head (Prometheus sends it at once).
READ_TIMEOUT_S = 10.0
# ... and this long from the response being ready to take all of it.
WRITE_TIMEOUT_S = 30.0
# A request head larger than this is refused (431): Prometheus' is a few hundred bytes.
MAX_HEAD_BYTES = 16384
# Threads that answer GET /metrics (rendering holds the GIL; the collection is shared, see Exporter.shared).
WORKERS = 4
# Complete requests waiting for a worker; beyond, 503 at once rather than a queue without end.
MAX_PENDING = 64
# How often the loop looks for connections past their deadline (and the longest it sleeps).
TICK_S = 0.25

_LANDING = (
    b"<!DOCTYPE html>\n<html><head><title>devctl exporter</title></head>\n<body><h1>devctl exporter</h1>\n"
    b'<p>JAX-aware accelerator metrics for Prometheus: <a href="/metrics">/metrics</a></p></body></html>\n'
)


class Stop:
    """SIGTERM, SIGINT and SIGHUP set `signum` and `event` and wake the server's loop (`wake`); on leaving the
    `with`, the process exits as every devctl command does on a signal (128 + the signal). The handler never
    raises: raised inside a worker or a write, the exit could be caught and lost, or leave a file half done."""

    def __init__(self) -> None:
        self.signum = 0
        self.event = threading.Event()
        self.wake_socket: socket.socket | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Stop:
        import signal

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._previous[sig] = signal.signal(sig, self._stop)
        return self

    def _stop(self, signum: int, _frame: Any) -> None:
        self.signum = signum
        self.event.set()
        self.wake()

    def wake(self) -> None:
        if self.wake_socket is not None:
            try:
                self.wake_socket.send(b"\0")
            except OSError:  # the pair is full (already woken) or closed: nothing to do
                pass

    def __exit__(self, *exc: Any) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self.signum and exc[0] is None:
            raise SystemExit(128 + self.signum)


# ---- binding -------------------------------------------------------------------------------------------------


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address `host` resolves to (getaddrinfo: `0` is 0.0.0.0, `ip6-localhost` is
    ::1, `localhost` may be both), each at `port` (0: one free port, the same on every address). OSError when
    the name does not resolve, the port is in use, or no address can be bound."""
    infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, socket.IPPROTO_TCP, socket.AI_PASSIVE)
    addresses: list[tuple[int, tuple]] = []
    for info in infos:
        if info[0] in (socket.AF_INET, socket.AF_INET6) and (info[0], info[4][:2]) not in [(f, a[:2]) for f, a in addresses]:
            addresses.append((int(info[0]), info[4]))
    sockets: list[socket.socket] = []
    skipped: OSError | None = None
    try:
        for family, sockaddr in addresses:
            if sockets and sockaddr[1] == 0:
                sockaddr = (sockaddr[0], sockets[0].getsockname()[1], *sockaddr[2:])
            try:
                sockets.append(_listen(family, sockaddr, v6only=len(addresses) > 1))
            except OSError as e:
                import errno

                # A name's other family missing here (no IPv6 on this host) is not a failure while one address
                # is served; a port in use on any of them is.
                if e.errno == errno.EADDRINUSE or len(addresses) == 1:
                    raise
                skipped = e
        if not sockets:
            raise skipped or OSError(f"{host!r} resolves to no IPv4 or IPv6 address")
    except BaseException:
        for s in sockets:
            s.close()
        raise
    return sockets


def _listen(family: int, sockaddr: tuple, *, v6only: bool) -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and v6only:  # a name's :: and 0.0.0.0 side by side (else [::] is dual-stack)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind(sockaddr)
        s.listen(socket.SOMAXCONN)  # wsgiref's 5 overflowed under a burst of connects
        s.setblocking(False)
    except BaseException:
        s.close()
        raise
    return s


def url(sock: socket.socket, path: str = "/metrics") -> str:
    """Where a bound socket serves, as bound: `--listen 0:9479` is http://0.0.0.0:9479, a name its address."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}{path}" if sock.family == socket.AF_INET6 else f"http://{host}:{port}{path}"


# ---- serving -------------------------------------------------------------------------------------------------


class _Conn:
    __slots__ = ("sock", "head", "out", "sent", "deadline", "state")

    def __init__(self, sock: socket.socket, now: float):
        self.sock = sock
        self.head = bytearray()
        self.out = b""
        self.sent = 0
        self.deadline = now + READ_TIMEOUT_S
        self.state = "read"  # -> "work" (a worker has it) -> "write" -> "closed"


def serve(
    sockets: list[socket.socket],
    registry: Any,
    stop: Stop,
    *,
    say: Callable[[str], None] = lambda line: None,
    max_connections: int | None = None,
) -> None:
    """Serve /metrics (prometheus_client's exposition of `registry`, content negotiation and gzip included), a
    landing page at / and 404 elsewhere, until `stop` is signalled. `say` gets one line for a failed scrape."""
    from prometheus_client import make_wsgi_app

    app = make_wsgi_app(registry)
    limit = max_connections or _connection_limit()
    selector = selectors.DefaultSelector()
    wake_read, wake_write = socket.socketpair()
    for s in (wake_read, wake_write):
        s.setblocking(False)
    stop.wake_socket = wake_write
    conns: dict[socket.socket, _Conn] = {}  # in the order they were accepted: the oldest first
    work: queue.Queue[tuple[_Conn, str, str, dict[str, str]]] = queue.Queue(MAX_PENDING)
    answered: collections.deque[tuple[_Conn, bytes]] = collections.deque()  # from the workers to the loop

    def worker() -> None:
        while True:
            conn, method, target, headers = work.get()
            answered.append((conn, _metrics(app, method, target, headers, say)))
            stop.wake()

    for n in range(WORKERS):
        threading.Thread(target=worker, name=f"devctl-exporter-http-{n}", daemon=True).start()

    def close(conn: _Conn) -> None:
        if conn.state in ("read", "write"):
            selector.unregister(conn.sock)
        conn.state = "closed"
        conns.pop(conn.sock, None)
        try:
            conn.sock.close()
        except OSError:
            pass

    def answer(conn: _Conn, response: bytes) -> None:
        if conn.state == "read":
            selector.unregister(conn.sock)
        conn.out, conn.sent, conn.state = response, 0, "write"
        conn.deadline = time.monotonic() + WRITE_TIMEOUT_S
        selector.register(conn.sock, selectors.EVENT_WRITE, conn)
        send(conn)

    def accept(listener: socket.socket) -> None:
        for _ in range(64):  # a burst of connects is taken in slices, so the loop goes on serving the others
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EMFILE, ECONNABORTED: the next tick tries again
                return
            if len(conns) >= limit:
                oldest = next((c for c in conns.values() if c.state != "work"), None)
                if oldest is None:
                    sock.close()
                    continue
                close(oldest)
            sock.setblocking(False)
            conn = conns[sock] = _Conn(sock, time.monotonic())
            selector.register(sock, selectors.EVENT_READ, conn)

    def receive(conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            close(conn)
            return
        if not data:
            close(conn)
            return
        start = max(0, len(conn.head) - 3)
        conn.head += data
        end = _head_end(conn.head, start)
        if end < 0:
            if len(conn.head) > MAX_HEAD_BYTES:
                answer(conn, _response("431 Request Header Fields Too Large", b"request head too large\n"))
            return
        request = _parse(bytes(conn.head[:end]))
        if isinstance(request, bytes):
            answer(conn, request)
            return
        method, target, headers = request
        path = target.partition("?")[0]
        if path != "/metrics":
            answer(conn, _route(method, path))
            return
        if method not in ("GET", "HEAD"):
            answer(conn, _response("405 Method Not Allowed", b"use GET\n", [("Allow", "GET, HEAD")]))
            return
        try:  # the worker's answer is taken by this loop only, after the state below is set
            work.put_nowait((conn, method, target, headers))
        except queue.Full:
            answer(conn, _response("503 Service Unavailable", b"too many scrapes at once; try again\n", [("Retry-After", "1")]))
            return
        selector.unregister(conn.sock)
        conn.state = "work"

    def send(conn: _Conn) -> None:
        try:
            conn.sent += conn.sock.send(memoryview(conn.out)[conn.sent :])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # the client went away
            close(conn)
            return
        if conn.sent >= len(conn.out):
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            close(conn)

    for listener in sockets:
        listener.setblocking(False)
        selector.register(listener, selectors.EVENT_READ, None)
    selector.register(wake_read, selectors.EVENT_READ, wake_read)
    next_expiry = time.monotonic() + TICK_S
    try:
        while not stop.signum:
            for key, _events in selector.select(TICK_S):
                if stop.signum:
                    break
                if key.data is None:
                    accept(key.fileobj)  # type: ignore[arg-type]  # a listener
                elif key.data is wake_read:
                    try:
                        while wake_read.recv(4096):
                            pass
                    except OSError:
                        pass
                elif key.data.state == "read":
                    receive(key.data)
                elif key.data.state == "write":
                    send(key.data)
            while answered:
                conn, response = answered.popleft()
                if conn.state == "work":  # else closed meanwhile (evicted, or the loop is ending)
                    answer(conn, response)
            now = time.monotonic()
            if now >= next_expiry:
                next_expiry = now + TICK_S
                for conn in [c for c in conns.values() if c.state != "work" and c.deadline <= now]:
                    close(conn)  # silently, as Go's net/http does for a read or write timeout
    finally:
        stop.wake_socket = None
        for conn in list(conns.values()):
            close(conn)
        selector.close()
        wake_read.close()
        wake_write.close()


def _connection_limit() -> int:
    """Open connections at most: well inside the process's file limit (a few fds are the probe's, the sources')."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(16, min(10000, soft - 64))


def _head_end(head: bytearray, start: int) -> int:
    """Where the request head ends (its blank line), or -1: CRLF as HTTP says, bare LF as lenient servers take."""
    for mark in (b"\r\n\r\n", b"\n\n"):
        i = head.find(mark, start)
        if i >= 0:
            return i + len(mark)
    return -1


def _parse(head: bytes) -> tuple[str, str, dict[str, str]] | bytes:
    """(method, target, headers) of a request head, or the error response to send instead."""
    lines = head.decode("iso-8859-1").replace("\r\n", "\n").split("\n")
    words = lines[0].split()
    if len(words) != 3:
        return _response("400 Bad Request", b"expected: METHOD /path HTTP/1.1\n")
    method, target, version = words
    if not re.fullmatch(r"HTTP/1\.[01]", version):
        return _response("505 HTTP Version Not Supported", b"HTTP/1.0 and HTTP/1.1 only\n")
    if not target.startswith("/"):  # absolute-form, as a proxy sends it
        from urllib.parse import urlsplit

        parts = urlsplit(target)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return _response("400 Bad Request", b"malformed header line\n")
        headers[name.lower()] = value.strip()
    return method, target, headers


def _route(method: str, path: str) -> bytes:
    if path != "/":
        return _response("404 Not Found", b"not found: the metrics are at /metrics\n")
    if method not in ("GET", "HEAD"):
        return _response("405 Method Not Allowed", b"use GET\n", [("Allow", "GET, HEAD")])
    return _response("200 OK", _LANDING, [("Content-Type", "text/html; charset=utf-8")], head_only=method == "HEAD")


def _metrics(app: Callable, method: str, target: str, headers: dict[str, str], say: Callable[[str], None]) -> bytes:
    """prometheus_client's WSGI app run on one request (in a worker); a failure is a 500 and one line, never a
    dead worker."""
    path, _, query = target.partition("?")
    environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query, "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.version": (1, 0), "wsgi.url_scheme": "http", "wsgi.multithread": True, "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        **{"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()},
    }  # fmt: skip
    started: list[Any] = []
    try:
        body = b"".join(app(environ, lambda status, response_headers, exc_info=None: started.extend((status, response_headers))))
        status, response_headers = started
    except Exception as e:  # a bug while collecting or rendering: this scrape fails, the server goes on
        say(f"devctl exporter: a scrape failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
        return _response("500 Internal Server Error", b"collecting the metrics failed; see the exporter's stderr\n")
    return _response(status, body, response_headers, head_only=method == "HEAD")


def _response(status: str, body: bytes, headers: list[tuple[str, str]] | None = None, *, head_only: bool = False) -> bytes:
    from email.utils import formatdate

    headers = headers or [("Content-Type", "text/plain; charset=utf-8")]
    lines = [f"HTTP/1.1 {status}", f"Date: {formatdate(usegmt=True)}", *(f"{k}: {v}" for k, v in headers),
             f"Content-Length: {len(body)}", "Connection: close"]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n").encode("iso-8859-1") + (b"" if head_only else body)


# ---- the textfile --------------------------------------------------------------------------------------------

# write_atomic's temporary files: `.<name>.<8 characters of tempfile's alphabet>.tmp` beside the target.
_TEMP_NAME = r"\.{name}\.[a-z0-9_]{{8}}\.tmp"
# A temporary file this old is no write in progress (a write takes milliseconds), but one a kill left behind.
STALE_TEMP_S = 60.0


def write_every(path: str, interval_s: float, render: Callable[[], bytes], stop: Stop, say: Callable[[str], None]) -> None:
    """Replace `path` with render() every `interval_s` until `stop`. A failed write (a full disk, a quota, the
    file made a directory) keeps the old file and is retried next interval, said once when writes start
    failing and once when they work again. Stale temporary files of ours beside `path` are swept each time."""
    from devctl.safefs import write_atomic

    failures = 0
    while not stop.signum:
        started = time.monotonic()
        sweep_temp_files(path)
        data = _unless_stopped(render, stop)
        if data is None:
            return
        error = _unless_stopped(lambda: _try(write_atomic, path, data), stop)
        if error is None:
            return
        if error:
            failures += 1
            if failures == 1:
                say(f"devctl exporter: --textfile {path!r} was not written: {error}; the old file is kept; "
                    f"retrying every {interval_s:g} s (said again when a write succeeds)")  # fmt: skip
        elif failures:
            say(f"devctl exporter: --textfile {path!r} is written again, after {failures} failed write{'s' if failures > 1 else ''}")
            failures = 0
        stop.event.wait(max(0.0, interval_s - (time.monotonic() - started)))


def _try(write: Callable[[str, bytes], None], path: str, data: bytes) -> str:
    """'' when written, else why not (one line)."""
    try:
        write(path, data)
    except OSError as e:
        return str(e.strerror or e)
    return ""


def _unless_stopped(call: Callable[[], Any], stop: Stop) -> Any:
    """call()'s result, run in a daemon thread so that a signal ends the loop within a fraction of a second even
    while a source or a disk is slow; None when stopped first. Its exception, if any, is raised here."""
    box: list[tuple[bool, Any]] = []
    done = threading.Event()

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as e:  # handed to the loop's thread
            box.append((False, e))
        finally:
            done.set()

    threading.Thread(target=run, name="devctl-exporter-textfile", daemon=True).start()
    while not done.wait(0.1):
        if stop.signum:
            return None
    ok, value = box[0]
    if not ok:
        raise value
    return value


def sweep_temp_files(path: str, *, min_age_s: float = STALE_TEMP_S) -> list[str]:
    """Remove the temporary files a killed write of `path` left beside it; the names removed. Only what can be
    proved ours: write_atomic's name for `path`, a regular file (lstat: a link is never followed nor removed),
    owned by this user, untouched for `min_age_s` (not another writer's write in progress). Never raises."""
    directory = os.path.realpath(os.path.dirname(path) or ".")
    pattern = re.compile(_TEMP_NAME.format(name=re.escape(os.path.basename(path))))
    removed: list[str] = []
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return removed
    try:
        names = [e.name for e in os.scandir(fd) if pattern.fullmatch(e.name)]
        now = time.time()
        for name in names:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and now - st.st_mtime >= min_age_s:
                    os.unlink(name, dir_fd=fd)  # unlink never follows: a swap to a link since removes the link
                    removed.append(name)
            except OSError:
                continue
    except OSError:
        pass
    finally:
        os.close(fd)
    return removed
