"""`devctl exporter`: JAX-aware accelerator metrics for Prometheus, served on /metrics or written to a textfile for
node-exporter. Flags are checked here before anything is probed; prometheus_client is imported only when the
exporter runs (never for --help or completion)."""

from __future__ import annotations

import errno
import ipaddress
import sys
from typing import Annotated, Optional

import typer

from devctl.cli import completion
from devctl.cli.options import HostRootOpt, check_host_root, check_output_path, check_timeout, shown
from devctl.errors import UsageError
from devctl.model.exporter import DEFAULT_LISTEN, DEFAULT_SCRAPE_TIMEOUT_S

ListenOpt = Annotated[
    Optional[str],
    typer.Option(
        "--listen",
        metavar="HOST:PORT",
        help=f"Serve /metrics here (default {DEFAULT_LISTEN}: this host only). 0.0.0.0:PORT or [::]:PORT serves every "
        "interface: the metrics name your jobs' programs (and pods, pids and commands where asked). A name serves each of its addresses; port 0 a free "
        "port, said on stderr.",
    ),
]
TextfileOpt = Annotated[
    Optional[str],
    typer.Option(
        "--textfile",
        metavar="PATH",
        autocompletion=completion.files,
        help="Instead of serving, write the metrics to PATH every --interval seconds, replaced whole (node-exporter's "
        "textfile collector reads *.prom).",
    ),
]
IntervalOpt = Annotated[Optional[float], typer.Option("--interval", metavar="SECONDS", help="With --textfile: seconds between writes (default 15, at least 1).")]
PerProcessOpt = Annotated[
    bool,
    typer.Option(
        "--per-process",
        help="A series per process (a pid label), not per program and device, and NVML's per-process GPU memory "
        "(host pids). Off by default: every restart starts new series.",
    ),
]
CommandLabelOpt = Annotated[
    bool,
    typer.Option(
        "--command-label",
        help="Add each process's full command line (at most 200 characters) as a command label. Off by default: a "
        "command line can carry secrets, and each new one starts new series.",
    ),
]
OnceOpt = Annotated[bool, typer.Option("--once", help="Print one collection on stdout and exit.")]
TimeoutOpt = Annotated[
    Optional[str],
    typer.Option(
        "--timeout", metavar="SECONDS",
        help=f"Bound on each scrape's sources (default {DEFAULT_SCRAPE_TIMEOUT_S:g}) and on the probe at start (at most 60).",
    ),
]  # fmt: skip

DEFAULT_INTERVAL_S = 15.0


def exporter(
    listen: ListenOpt = None,
    textfile: TextfileOpt = None,
    interval: IntervalOpt = None,
    per_process: PerProcessOpt = False,
    once: OnceOpt = False,
    timeout: TimeoutOpt = None,
    command_label: CommandLabelOpt = False,
    host_root: HostRootOpt = "/",
) -> None:
    """Prometheus metrics: every publishing job's allocator, the driver's view (NVML), TPU chips, the host."""
    if textfile is not None and listen is not None:
        raise UsageError("--textfile writes a file instead of serving: give --textfile or --listen, not both")
    if once and (textfile is not None or listen is not None):
        raise UsageError("--once prints one collection on stdout: not with --listen or --textfile")
    if interval is not None and textfile is None:
        raise UsageError("--interval needs --textfile PATH (a server is scraped at Prometheus' own interval)")
    interval_s = check_interval(interval)
    address = parse_listen(listen if listen is not None else DEFAULT_LISTEN)
    if textfile is not None:
        check_output_path("--textfile", textfile)
    timeout_s = check_timeout(timeout) if timeout is not None else DEFAULT_SCRAPE_TIMEOUT_S
    root = check_host_root(host_root)

    from prometheus_client import CollectorRegistry, generate_latest

    from devctl.collect import exporter_server
    from devctl.collect.exporter import Exporter

    # --once: GPM over a one-shot window; else each scrape's figures cover the time since the previous one.
    source = Exporter(host_root=root, per_process=per_process, command_label=command_label, probe_timeout_s=max(timeout_s, 30.0), keep_busy=not once)
    sockets = [] if once or textfile is not None else _bind(address)  # a port in use is said before probing
    try:
        source.start()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(Collector(source, timeout_s))
        if once:
            sys.stdout.write(generate_latest(registry).decode("utf-8"))
            return
        with exporter_server.Stop() as stop:
            if textfile is not None:
                exporter_server.write_every(textfile, interval_s, lambda: generate_latest(registry), stop, _say)
            else:
                _say("devctl exporter: serving " + ", ".join(exporter_server.url(s) for s in sockets))
                exporter_server.serve(sockets, registry, stop, say=_say)
    finally:  # a source stuck in a driver call is a daemon thread: it does not hold up the exit
        for s in sockets:
            s.close()
        source.close()


class Collector:
    """A prometheus_client collector: each scrape gets a fresh collection (devctl.collect.exporter, bounded by
    `timeout_s`, shared by the scrapes that arrive together) rendered as metric families (devctl.render.prometheus)."""

    def __init__(self, exporter, timeout_s: float):
        self.exporter, self.timeout_s = exporter, timeout_s

    def describe(self) -> list:
        return []  # registering must not collect

    def collect(self):
        from devctl.render.prometheus import families

        yield from families(self.exporter.shared(self.timeout_s))


def check_interval(value: float | None) -> float:
    if value is None:
        return DEFAULT_INTERVAL_S
    if not (1 <= value <= 86400):  # NaN fails this too
        raise UsageError(f"--interval must be between 1 and 86400 seconds, got {value:g}")
    return value


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT: the address to bind, as given (a name is resolved by the bind, not here). Port 0
    is a free port, said when serving."""
    if not text:
        raise UsageError("--listen is empty; give HOST:PORT (e.g. 127.0.0.1:9479, [::1]:9479, 0.0.0.0:9479)")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdigit() or not (0 <= int(port) <= 65535):
        raise UsageError(f"--listen {shown(text)} is not HOST:PORT (e.g. 127.0.0.1:9479, [::1]:9479, 0.0.0.0:9479)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise UsageError(f"--listen {shown(text)}: {shown(host)} is not an IPv6 address") from None
    elif ":" in host:
        raise UsageError(f"--listen {shown(text)}: write an IPv6 address in brackets, e.g. [::1]:{port}")
    return host, int(port)


def _bind(address: tuple[str, int]) -> list:
    """Listening sockets where the user said (a name: each of its addresses; never more); a name that does not
    resolve, a port in use or an address not here: exit 2."""
    import socket

    from devctl.collect.exporter_server import bind

    host, port = address
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        return bind(host, port)
    except socket.gaierror as e:
        raise UsageError(f"--listen {shown(where)}: {shown(host)} does not resolve to an address ({e.strerror or e})") from None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise UsageError(f"--listen {where}: the port is in use (another exporter?); give another with --listen HOST:PORT") from None
        raise UsageError(f"--listen {where}: cannot listen there: {e.strerror or e}") from None


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
