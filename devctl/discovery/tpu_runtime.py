"""libtpu's own runtime metrics, asked of each TPU process: HBM used and total and duty cycle per chip.

Every process that runs libtpu serves `tpu.monitoring.runtime.RuntimeMetricService` over gRPC on localhost
(8431 for the first, or the port its environment gives it), whether or not the job was written to publish
anything. tpu-info asks only 8431, and gets the node's aggregate; devctl asks each holder's own port with
`skip_node_aggregation`, so each chip's figures belong to the process that holds it.

Where the port comes from, for one process, first match wins (its /proc/<pid>/environ, read capped and
without following a link; another user's is unreadable without root):
  1. `LIBTPU_INIT_ARGS=... --runtime_metric_service_port=N`: the flag libtpu itself parses;
  2. `TPU_RUNTIME_METRICS_PORTS=p0,p1,...`: one port per process of the host, the process's own picked by
     its place in `TPU_PROCESS_ADDRESSES` (the entry whose port is its `TPU_PROCESS_PORT`); one port alone
     is the process's;
  3. `TPU_PROCESS_ADDRESSES=local`: libtpu serves no metrics at all (tpu-info issue #9): nothing to ask;
  4. otherwise 8431, libtpu's default.

Asking never hangs devctl: every port is asked in its own daemon thread, each call with the time left of one
deadline, and the caller waits for the threads no longer than that deadline (a thread still waiting is left
behind, and cannot delay devctl's exit). A port nothing listens on answers at once (connection refused).

grpc and protobuf are the optional extra `tpu-metrics`, imported here only when there is a process to ask.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Literal

from devctl.hostroot import HostRoot
from devctl.safefs import read_regular

DEFAULT_PORT = 8431
TIMEOUT_S = 2.0
_ENVIRON_CAP = 1 << 20  # ARG_MAX-sized environments exist; the variables that matter are short
_GRACE_S = 0.25  # beyond the deadline, for a thread whose call has just failed to say so

HBM_USED = "tpu.runtime.hbm.memory.usage.bytes"
HBM_TOTAL = "tpu.runtime.hbm.memory.total.bytes"
DUTY_CYCLE = "tpu.runtime.tensorcore.dutycycle.percent"
HBM_UTILIZATION = "tpu.runtime.hbm.utilization.percent"  # newer libtpu only
# Asked in this order; the first two decide whether the service has anything for devctl.
METRICS = (HBM_USED, HBM_TOTAL, DUTY_CYCLE, HBM_UTILIZATION)

INSTALL_HINT = "TPU runtime metrics (HBM used, duty cycle) need grpcio and protobuf: pip install 'jax-devctl[tpu-metrics]'"

# The attribute that numbers a device: an integer `device-id` (older libtpu), or `device_ordinal` as a string
# of digits inside a key-value list (newer libtpu; tpu-info's metrics.py reads both).
_ORDINAL_KEYS = ("device-id", "device_id", "device_ordinal", "device-ordinal")
_PORT_FLAG = re.compile(r"--runtime_metric_service_port(?:=|\s+)(\d+)\b")


@dataclass(frozen=True)
class MetricsPort:
    """Where one process serves its runtime metrics, and how devctl knows."""

    pid: int
    port: int | None  # None: the process serves none (TPU_PROCESS_ADDRESSES=local)
    source: str  # the variable it came from, or "default"
    note: str | None = None  # a doubt about it: an unreadable environment, a guessed position
    # Whether the process itself listens on the port (its fds' sockets in its /proc/<pid>/net/tcp{,6});
    # None where that cannot be read. False: asking would get another process's figures, so it is not asked.
    listening: bool | None = None


@dataclass(frozen=True)
class PortAnswer:
    """What one port said: per metric, (device ordinal, value) in the service's own numbering."""

    port: int
    status: Literal["ok", "absent", "stalled", "error"]
    reason: str | None = None
    readings: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    unsupported: tuple[str, ...] = ()  # metrics this libtpu does not serve (NOT_FOUND, UNIMPLEMENTED)


def grpc_available() -> bool:
    """Whether the `tpu-metrics` extra is installed (grpc is imported, which only asking needs anyway)."""
    try:
        import google.protobuf  # noqa: F401
        import grpc  # noqa: F401
    except ImportError:
        return False
    return True


def process_environ(root: HostRoot, pid: int) -> dict[str, str] | None:
    """The process's environment as it started, or None when it cannot be read (another user's, gone)."""
    # The directory is resolved inside the root, the file itself never through a link (O_NOFOLLOW).
    directory = root.local(f"/proc/{pid}")
    if directory is None:
        return None
    try:
        raw = read_regular(os.path.join(directory, "environ"), _ENVIRON_CAP, follow_symlinks=False, truncate=True)
    except OSError:
        return None
    out = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            out[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def metrics_port(root: HostRoot, pid: int) -> MetricsPort:
    """The port the process serves its metrics on, checked against the ports it listens on where devctl can
    see them: a port another process holds would give that process's figures under this one's pid."""
    env = process_environ(root, pid)
    if env is None:
        chosen = MetricsPort(pid, DEFAULT_PORT, "default", f"pid {pid}'s environment is unreadable (another user's process?); asked libtpu's default port")
    else:
        chosen = port_from_environ(pid, env)
    if chosen.port is None:
        return chosen
    listening = listening_ports(root, pid)
    if listening is None:
        return chosen
    if chosen.port in listening:
        # A port picked from several is no longer a guess once the process is seen listening on it.
        return replace(chosen, listening=True, note=None if chosen.source == "TPU_RUNTIME_METRICS_PORTS" else chosen.note)
    listed = [int(p) for p in (env or {}).get("TPU_RUNTIME_METRICS_PORTS", "").split(",") if _valid_port(p.strip())]
    ours = [p for p in listed if p in listening]
    if len(ours) == 1:
        return MetricsPort(pid, ours[0], "TPU_RUNTIME_METRICS_PORTS", None, True)
    return replace(chosen, listening=False)


def listening_ports(root: HostRoot, pid: int) -> set[int] | None:
    """The TCP ports the process listens on: its sockets (socket:[inode] among its fds) that its network
    namespace's /proc/<pid>/net/tcp and tcp6 list in state LISTEN. None when its fds or those tables
    cannot be read (another user's process, a host tree without them)."""
    from devctl.discovery.procs import fd_targets

    try:
        targets = fd_targets(root, pid)
    except ProcessLookupError:
        return None
    if targets is None:
        return None
    inodes = {t[8:-1] for t in targets if t.startswith("socket:[") and t.endswith("]")}
    tables = [root.read_text(f"/proc/{pid}/net/{name}", limit=1 << 22) for name in ("tcp", "tcp6")]
    if all(t is None for t in tables):
        return None
    ports = set()
    for table in tables:
        for line in (table or "").splitlines()[1:]:
            # "0: 0100007F:20EF 00000000:0000 0A ... uid timeout inode ...": 0A is LISTEN.
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and fields[9] in inodes:
                try:
                    ports.add(int(fields[1].rpartition(":")[2], 16))
                except ValueError:
                    continue
    return ports


def port_from_environ(pid: int, env: dict[str, str]) -> MetricsPort:
    m = _PORT_FLAG.search(env.get("LIBTPU_INIT_ARGS", ""))
    if m and _valid_port(m.group(1)):
        return MetricsPort(pid, int(m.group(1)), "LIBTPU_INIT_ARGS")
    addresses = env.get("TPU_PROCESS_ADDRESSES", "").strip()
    ports = [int(p) for p in env.get("TPU_RUNTIME_METRICS_PORTS", "").split(",") if _valid_port(p.strip())]
    if addresses == "local":
        return MetricsPort(pid, None, "TPU_PROCESS_ADDRESSES", "TPU_PROCESS_ADDRESSES=local: libtpu serves no runtime metrics then")
    if len(ports) == 1:
        return MetricsPort(pid, ports[0], "TPU_RUNTIME_METRICS_PORTS")
    if ports:
        own = env.get("TPU_PROCESS_PORT", "").strip()
        peers = [a.strip().rpartition(":")[2] for a in addresses.split(",")] if addresses else []
        if own and own in peers and peers.index(own) < len(ports):
            return MetricsPort(pid, ports[peers.index(own)], "TPU_RUNTIME_METRICS_PORTS")
        return MetricsPort(
            pid, ports[0], "TPU_RUNTIME_METRICS_PORTS",
            f"TPU_RUNTIME_METRICS_PORTS lists {len(ports)} ports and TPU_PROCESS_ADDRESSES/TPU_PROCESS_PORT do not say which is pid {pid}'s; asked the first",
        )  # fmt: skip
    return MetricsPort(pid, DEFAULT_PORT, "default")


def _valid_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and 0 < int(text) < 65536


def ask_ports(ports: list[int], timeout_s: float = TIMEOUT_S) -> dict[int, PortAnswer]:
    """Each port's answer, all asked at once; at most about `timeout_s` in all, whatever the servers do.
    Needs grpc (grpc_available())."""
    import grpc  # noqa: F401  (fail here, in the caller's thread, if the extra is missing)

    deadline = time.monotonic() + timeout_s
    answers: dict[int, PortAnswer] = {}
    threads = []
    for port in dict.fromkeys(ports):
        t = threading.Thread(target=_ask_into, args=(port, deadline, timeout_s, answers), name=f"devctl-tpu-metrics-{port}", daemon=True)
        t.start()
        threads.append((port, t))
    for port, t in threads:
        t.join(max(0.0, deadline + _GRACE_S - time.monotonic()))
    out = {}
    for port, _ in threads:
        # Read once: a thread left behind may still write its own entry later; nobody reads it then.
        answer = answers.get(port)
        out[port] = answer or PortAnswer(port, "stalled", f"localhost:{port} did not answer in {timeout_s:g} s")
    return out


def _ask_into(port: int, deadline: float, timeout_s: float, answers: dict[int, PortAnswer]) -> None:
    try:
        answers[port] = ask_port(port, deadline, timeout_s)
    except Exception as e:  # a thread's exception would only be printed; say it as the port's answer
        answers[port] = PortAnswer(port, "error", f"localhost:{port}: {type(e).__name__}: {e}")


def ask_port(port: int, deadline: float, timeout_s: float) -> PortAnswer:
    import grpc

    from devctl.discovery.tpu_proto import tpu_metric_service_pb2 as pb
    from devctl.discovery.tpu_proto import tpu_metric_service_pb2_grpc as pb_grpc

    readings: dict[str, list[tuple[int, float]]] = {}
    unsupported: list[str] = []
    # Local credentials, as tpu-info uses against libtpu: no TLS, and only to a loopback peer.
    channel = grpc.secure_channel(f"localhost:{port}", grpc.local_channel_credentials())
    try:
        stub = pb_grpc.RuntimeMetricServiceStub(channel)
        for name in METRICS:
            left = deadline - time.monotonic()
            if left <= 0:
                return PortAnswer(port, "stalled", f"localhost:{port} did not answer in {timeout_s:g} s", readings, tuple(unsupported))
            try:
                response = stub.GetRuntimeMetric(pb.MetricRequest(metric_name=name, skip_node_aggregation=True), timeout=left)
            except grpc.RpcError as e:
                code = e.code() if callable(getattr(e, "code", None)) else None
                if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INVALID_ARGUMENT):
                    unsupported.append(name)
                    continue
                if code == grpc.StatusCode.UNAVAILABLE:
                    return PortAnswer(port, "absent", f"nothing serves TPU runtime metrics on localhost:{port}")
                if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    return PortAnswer(port, "stalled", f"localhost:{port} did not answer in {timeout_s:g} s", readings, tuple(unsupported))
                details = e.details() if callable(getattr(e, "details", None)) else str(e)
                return PortAnswer(port, "error", f"localhost:{port}: {getattr(code, 'name', code)}: {details}", readings, tuple(unsupported))
            readings[name] = _readings(response.metric.metrics)
    finally:
        channel.close()
    if HBM_USED not in readings and HBM_TOTAL not in readings and DUTY_CYCLE not in readings:
        return PortAnswer(port, "error", f"localhost:{port} serves none of {HBM_USED}, {HBM_TOTAL}, {DUTY_CYCLE}", readings, tuple(unsupported))
    return PortAnswer(port, "ok", None, readings, tuple(unsupported))


def _readings(metrics) -> list[tuple[int, float]]:
    """(ordinal, value) per device, sorted; a device the service does not number, or a value that is no
    number, is left out."""
    out = {}
    for m in metrics:
        ordinal = _ordinal(m.attribute)
        value = _value(m)
        if ordinal is not None and value is not None:
            out[ordinal] = value
    return sorted(out.items())


def _ordinal(attribute) -> int | None:
    candidates = [attribute]
    if attribute.value.WhichOneof("attr") == "kvlist_attr":
        candidates += list(attribute.value.kvlist_attr.attributes)
    for a in candidates:
        if a.key not in _ORDINAL_KEYS:
            continue
        kind = a.value.WhichOneof("attr")
        if kind == "int_attr" and a.value.int_attr >= 0:
            return int(a.value.int_attr)
        if kind == "string_attr" and a.value.string_attr.strip().isascii() and a.value.string_attr.strip().isdigit():
            return int(a.value.string_attr.strip())
    return None


def _value(metric) -> float | None:
    measure = metric.WhichOneof("measure")
    if measure not in ("gauge", "counter"):
        return None
    holder = getattr(metric, measure)
    kind = holder.WhichOneof("value")
    if kind in ("as_int", "as_double"):
        return getattr(holder, kind)
    return None


@dataclass(frozen=True)
class ChipFigures:
    """One chip's figures, from the readings of the process that holds it."""

    chip: int  # devctl's chip index
    hbm_used_bytes: int | None
    hbm_total_bytes: int | None
    duty_cycle_percent: float | None
    hbm_utilization_percent: float | None
    cores: int  # the service's devices (TensorCores) summed into this chip's memory


def attribute(answer: PortAnswer, chips: list[int], cores_per_chip: int) -> tuple[list[ChipFigures], str | None]:
    """The readings of one process's port, given to the chips it holds (devctl's indexes, ascending).

    The service numbers devices its own way (from 0 in the process, or the slice's global id), so the i-th
    device it reports is the i-th chip the process holds. Memory is per TensorCore: on a 2-core chip (v2, v3)
    2k and 2k+1 are chip k's cores, summed; duty cycle is per chip, or per core and then averaged.
    A count that fits neither gives no figures, and says so."""
    if not chips:
        return [], None
    per_chip: dict[str, list[list[float]]] = {}
    mismatched = []
    for name, readings in answer.readings.items():
        values = [v for _, v in readings]
        if not values:
            continue
        if len(values) == len(chips):
            per_chip[name] = [[v] for v in values]
        elif cores_per_chip > 1 and len(values) == len(chips) * cores_per_chip:
            per_chip[name] = [values[i * cores_per_chip : (i + 1) * cores_per_chip] for i in range(len(chips))]
        else:
            mismatched.append(f"{name} has {len(values)} devices")
    figures = []
    for i, chip in enumerate(chips):
        used, total = per_chip.get(HBM_USED), per_chip.get(HBM_TOTAL)
        duty, util = per_chip.get(DUTY_CYCLE), per_chip.get(HBM_UTILIZATION)
        figures.append(
            ChipFigures(
                chip=chip,
                hbm_used_bytes=int(sum(used[i])) if used else None,
                hbm_total_bytes=int(sum(total[i])) if total else None,
                duty_cycle_percent=sum(duty[i]) / len(duty[i]) if duty else None,
                hbm_utilization_percent=sum(util[i]) / len(util[i]) if util else None,
                cores=len(used[i]) if used else (len(total[i]) if total else cores_per_chip),
            )
        )
    note = None
    if mismatched:
        held = f"{len(chips)} chip{'s' if len(chips) != 1 else ''}" + (f" of {cores_per_chip} cores" if cores_per_chip > 1 else "")
        note = f"localhost:{answer.port}: {'; '.join(mismatched)} for the {held} its process holds: not attributed"
    return figures, note
