"""`devctl exporter` against clients that stall and disks that fail (issue 23): real exporter processes, real
sockets, real signals, a real write limit. No test asserts on wall time: a timeout here is the bound for "not
hung", generous on purpose (the machine may be loaded)."""

from __future__ import annotations

import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import assert_usage_error, devctl_env, run_devctl

START_S = 180  # the exporter probes JAX once before it serves
BOUND_S = 60  # "not hung"


class Exporter:
    """`devctl exporter ARGS` in a process of its own, its stderr read line by line as it comes."""

    def __init__(self, *args: str, prefix: tuple[str, ...] = (), preexec_fn=None):
        self.proc = subprocess.Popen([*prefix, sys.executable, "-m", "devctl", "exporter", *args], env=devctl_env(1),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def said(self, pattern: str, timeout: float = START_S) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if m := re.search(pattern, line):
                    return m
            if self.proc.poll() is not None and not self._reader.is_alive():
                pytest.fail(f"the exporter exited {self.proc.returncode} before saying {pattern!r}: {self.lines}")
            time.sleep(0.1)
        pytest.fail(f"the exporter did not say {pattern!r} within {timeout} s: {self.lines}")

    def port(self) -> int:
        return int(self.said(r"serving http://\S+:(\d+)/metrics").group(1))

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Send `sig` and wait (BOUND_S at most) for the exit; its exit code."""
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(BOUND_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"the exporter did not end within {BOUND_S} s of signal {sig}")
        self._reader.join(10)
        assert not any("Traceback" in line for line in self.lines), self.lines
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def get(url: str, method: str = "GET", timeout: float = BOUND_S) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_stalled_clients_cost_only_their_own_connection_and_sigterm_ends_it_while_they_stay():
    exporter = Exporter("--listen", "127.0.0.1:0")
    stalls: list[socket.socket] = []
    try:
        port = exporter.port()
        url = f"http://127.0.0.1:{port}/metrics"
        assert get(url)[0] == 200
        for _ in range(500):  # connected, never a byte sent
            stalls.append(socket.create_connection(("127.0.0.1", port), timeout=BOUND_S))
        bare = socket.create_connection(("127.0.0.1", port), timeout=BOUND_S)
        bare.sendall(b"GET /metrics\r\n")  # a request line, and the head never ends
        half = socket.create_connection(("127.0.0.1", port), timeout=BOUND_S)
        half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: te")  # slowloris
        stalls += [bare, half]
        for _ in range(20):  # ask, and never read the answer
            deaf = socket.socket()
            deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
            deaf.settimeout(BOUND_S)
            deaf.connect(("127.0.0.1", port))
            deaf.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            stalls.append(deaf)
        # With all of them open, ordinary scrapes, several at once, are answered in full.
        results: list[tuple[int, bytes]] = []
        scrapers = [threading.Thread(target=lambda: results.append(get(url)[::2])) for _ in range(8)]
        for t in scrapers:
            t.start()
        for t in scrapers:
            t.join(BOUND_S * 2)
        assert len(results) == 8 and all(code == 200 and b"devctl_info{" in body for code, body in results), results
        # ... and SIGTERM ends the exporter while they are still open.
        assert exporter.proc.poll() is None
        assert exporter.stop() == 128 + signal.SIGTERM
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        exporter.kill()
        for s in stalls:
            s.close()


def test_a_scrape_in_progress_does_not_hold_up_sigint():
    exporter = Exporter("--listen", "127.0.0.1:0")
    try:
        port = exporter.port()
        waiting = socket.create_connection(("127.0.0.1", port), timeout=BOUND_S)
        waiting.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        assert exporter.stop(signal.SIGINT) == 128 + signal.SIGINT
        waiting.close()
    finally:
        exporter.kill()


def test_metrics_at_metrics_a_landing_page_at_root_404_elsewhere_and_the_address_said_as_bound():
    exporter = Exporter("--listen", "0:0")  # every interface, a free port
    try:
        m = exporter.said(r"serving (http://\S+/metrics)$")
        assert re.fullmatch(r"http://0\.0\.0\.0:\d+/metrics", m.group(1)), m.group(1)  # not http://0:PORT
        base = f"http://127.0.0.1:{exporter.port()}"
        code, headers, body = get(f"{base}/metrics")
        assert code == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4") and b"devctl_info{" in body
        code, headers, body = get(f"{base}/")
        assert code == 200 and headers["Content-Type"].startswith("text/html") and b'href="/metrics"' in body
        assert b"devctl_info" not in body
        for path in ("/healthz", "/metrics/", "/favicon.ico", "/metricsx"):
            code, _, body = get(f"{base}{path}")
            assert code == 404 and b"devctl_info" not in body, path
        code, headers, body = get(f"{base}/metrics", method="HEAD")
        assert code == 200 and body == b"" and int(headers["Content-Length"]) > 0
        assert get(f"{base}/metrics", method="POST")[0] == 405
        with socket.create_connection(("127.0.0.1", exporter.port()), timeout=BOUND_S) as s:
            s.sendall(b"NONSENSE\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 400 ")
        assert exporter.stop() == 128 + signal.SIGTERM
    finally:
        exporter.kill()


def test_an_ipv6_name_is_resolved_and_served(tmp_path):
    """`--listen ip6-localhost:0`: resolved with getaddrinfo, not refused. Where this host's /etc/hosts lacks the
    name, the exporter runs in a mount namespace whose /etc/hosts has it."""
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    prefix: tuple[str, ...] = ()
    try:
        socket.getaddrinfo("ip6-localhost", 0, socket.AF_INET6)
    except socket.gaierror:
        hosts = tmp_path / "hosts"
        hosts.write_text("127.0.0.1 localhost\n::1 ip6-localhost ip6-loopback\n")
        prefix = ("unshare", "--mount", "sh", "-c", f'mount --bind {hosts} /etc/hosts && exec "$@"', "sh")
        if subprocess.run([*prefix, "getent", "hosts", "ip6-localhost"], capture_output=True, timeout=30).returncode != 0:
            pytest.skip("ip6-localhost does not resolve here and no mount namespace can be made")
    exporter = Exporter("--listen", "ip6-localhost:0", prefix=prefix)
    try:
        m = exporter.said(r"serving http://\[::1\]:(\d+)/metrics")
        code, _, body = get(f"http://[::1]:{m.group(1)}/metrics")
        assert code == 200 and b"devctl_info{" in body
        assert exporter.stop() == 128 + signal.SIGTERM
    finally:
        exporter.kill()


def test_an_empty_listen_is_refused_not_the_default():
    assert_usage_error(run_devctl("exporter", "--listen", "", env=devctl_env(1)), "--listen", "empty")
    assert_usage_error(run_devctl("exporter", "--listen", ":9479", env=devctl_env(1)), "HOST:PORT")


def _ignore_sigxfsz() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past RLIMIT_FSIZE, write(2) fails (EFBIG) instead of killing


def test_textfile_survives_failed_writes_says_so_once_keeps_the_old_file_and_recovers(tmp_path):
    target = tmp_path / "devctl.prom"
    exporter = Exporter("--textfile", str(target), "--interval", "1", preexec_fn=_ignore_sigxfsz)
    pid = exporter.proc.pid
    try:
        deadline = time.monotonic() + START_S
        while not target.exists() and time.monotonic() < deadline:
            assert exporter.proc.poll() is None, exporter.lines
            time.sleep(0.2)
        assert target.exists(), exporter.lines
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (1024, hard))  # the disk is "full" for the metrics
        old = target.read_bytes()
        assert len(old) > 1024
        exporter.said(r"--textfile .* was not written: File too large; the old file is kept", BOUND_S)
        time.sleep(4)  # several more intervals, all failing
        assert exporter.proc.poll() is None, exporter.lines
        assert sum("was not written" in line for line in exporter.lines) == 1, exporter.lines  # said once
        assert target.read_bytes() == old
        assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temp file left by the failures
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, hard))
        exporter.said(r"--textfile .* is written again, after \d+ failed writes", BOUND_S)
        deadline = time.monotonic() + BOUND_S
        while target.read_bytes() == old and time.monotonic() < deadline:
            time.sleep(0.2)
        assert target.read_bytes() != old and b"devctl_info{" in target.read_bytes()
        assert exporter.stop() == 128 + signal.SIGTERM
        assert sum("was not written" in line for line in exporter.lines) == 1, exporter.lines
    finally:
        exporter.kill()


_KILLED_MID_WRITE = """
import os, signal, sys
from devctl import safefs
def killed(*args):
    os.kill(os.getpid(), signal.SIGKILL)
os.fsync = os.replace = os.rename = killed  # killed after the data, before the rename
safefs.write_atomic(sys.argv[1], b"x" * 4096)
"""


def test_textfile_sweeps_the_temp_file_a_killed_write_left_and_nothing_else(tmp_path):
    target = tmp_path / "devctl.prom"
    killed = subprocess.run([sys.executable, "-c", _KILLED_MID_WRITE, str(target)], env=devctl_env(1), timeout=60)
    assert killed.returncode == -signal.SIGKILL
    (stale,) = tmp_path.iterdir()  # write_atomic's own temporary file, as a SIGKILL leaves it
    old = time.time() - 3600
    os.utime(stale, (old, old))

    def planted(name: str, make) -> Path:
        p = tmp_path / name
        make(p)
        os.utime(p, (old, old), follow_symlinks=False)
        return p

    victim = tmp_path / "victim"
    victim.write_text("keep me")
    keep = [
        tmp_path / ".devctl.prom.abcd1234.tmp",  # fresh: another writer's write in progress
        planted(".devctl.prom.link0000.tmp", lambda p: p.symlink_to(victim)),  # a link: never followed nor removed
        planted(".devctl.prom.dir00000.tmp", lambda p: p.mkdir()),
        planted(".other.prom.abcd1234.tmp", lambda p: p.write_text("another file's")),
        planted(".devctl.prom.toolong99.tmp", lambda p: p.write_text("not write_atomic's name")),
        planted("devctl.prom.abcd1234.tmp", lambda p: p.write_text("no leading dot")),
    ]
    keep[0].write_text("in progress")
    soon = time.time() + 3600  # fresh however long the exporter takes to start
    os.utime(keep[0], (soon, soon))
    if os.geteuid() == 0:  # another user's file under our name: not ours to remove
        keep.append(planted(".devctl.prom.nobody00.tmp", lambda p: (p.write_text("theirs"), os.chown(p, 65534, 65534))))
    exporter = Exporter("--textfile", str(target), "--interval", "1")
    try:
        deadline = time.monotonic() + START_S
        while (stale.exists() or not target.exists()) and time.monotonic() < deadline:
            assert exporter.proc.poll() is None, exporter.lines
            time.sleep(0.2)
        assert not stale.exists() and target.exists()
        assert all(os.path.lexists(p) for p in keep), [p.name for p in keep if not os.path.lexists(p)]
        assert victim.read_text() == "keep me"
        assert exporter.stop() == 128 + signal.SIGTERM
    finally:
        exporter.kill()


def test_concurrent_scrapes_share_one_collection():
    from devctl.collect.exporter import Exporter as Source
    from devctl.model.exporter import Collection

    source = Source()
    calls: list[float] = []

    def collect(timeout_s: float) -> Collection:
        calls.append(timeout_s)
        time.sleep(0.3)  # a collection in progress when the others arrive
        return Collection()

    source.collect = collect  # type: ignore[method-assign]
    got: list[Collection] = []
    threads = [threading.Thread(target=lambda: got.append(source.shared(1.0, reuse_s=60))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND_S)
    assert len(got) == 8 and len(calls) == 1 and all(c is got[0] for c in got)
    assert source.shared(1.0, reuse_s=0) is not got[0] and len(calls) == 2  # an old one is collected afresh
