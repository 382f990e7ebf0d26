"""Which Kubernetes pod and container a process runs in, from its /proc entries alone (the exporter's labels).

dcgm-exporter asks the kubelet's pod-resources API (a unix socket under /var/lib/kubelet) which pod holds each
GPU, and gets pod, namespace and container names. devctl does not talk to the kubelet; what a process's own
/proc entries give instead:

- /proc/<pid>/cgroup: under Kubernetes the cgroup path has the pod's UID and the container's runtime id
  (`/kubepods/burstable/pod<uid>/<id>` with the cgroupfs driver,
  `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope`
  with systemd's). No names: a cgroup knows neither the pod's name nor its namespace nor the container's name.
  Seen from inside a container with a cgroup namespace of its own (the default on cgroup v2) the path is `/`:
  nothing there.
- /proc/<pid>/environ, readable only by the process's own user or root (the kernel's ptrace rule; otherwise
  nothing is read): KUBERNETES_SERVICE_HOST is set in every pod's containers (that it runs under Kubernetes);
  POD_NAME and POD_NAMESPACE where the pod spec sets them from the downward API (`fieldRef: metadata.name`,
  `metadata.namespace`), the usual names; CONTAINER_NAME only where the spec sets it by hand (the downward API
  has no field for a container's name); HOSTNAME, which Kubernetes sets to the pod's name unless the spec gives
  `hostname` or the pod uses the node's network (`hostNetwork: true`: then it is the node's name; set POD_NAME).
- What is not available: a namespace without POD_NAMESPACE, a container's name without CONTAINER_NAME. The pod's
  UID joins kube-state-metrics' `kube_pod_info{uid}` for both.

Every read is a regular file under the host root, not through a link, capped; a value becomes a label only when
it is a valid Kubernetes name (DNS-1123), so nothing else the environment holds ever reaches a label.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from devctl.hostroot import HostRoot
from devctl.safefs import read_regular
from devctl.text import printable

CGROUP_CAP = 16 << 10  # a process's cgroup file: a line per v1 hierarchy, each a path; far below this
ENVIRON_CAP = 256 << 10  # a process's environment; one larger is read up to this (its first variables)
WANTED = ("KUBERNETES_SERVICE_HOST", "POD_NAME", "POD_NAMESPACE", "CONTAINER_NAME", "HOSTNAME")

# A pod UID as the kubelet writes it in a cgroup name: the API's UUID (dashes, or underscores under systemd),
# or a static pod's 32-hex config hash.
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})(?:\.slice)?$")
# A container's cgroup: the runtime's 64-hex id, bare (cgroupfs driver) or in a systemd scope named by runtime.
_CONTAINER = re.compile(r"^(?:(cri-containerd|containerd|crio|docker)-)?([0-9a-f]{64})(?:\.scope)?$")
# kube-state-metrics' container_id scheme for each runtime's scope prefix.
_SCHEME = {"cri-containerd": "containerd", "containerd": "containerd", "crio": "cri-o", "docker": "docker"}
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # pod names
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # namespaces, container names


@dataclass(frozen=True)
class PodRef:
    """What a process's cgroup and environment say of its pod; "" where they say nothing."""

    pod: str = ""
    namespace: str = ""
    container: str = ""
    pod_uid: str = ""
    container_id: str = ""  # the runtime's id, as kube-state-metrics writes it ("containerd://<64 hex>")

    def labels(self, *, container_id: bool) -> dict[str, str]:
        out = {"pod": self.pod, "namespace": self.namespace, "container": self.container, "pod_uid": self.pod_uid}
        if container_id:
            out["container_id"] = self.container_id
        return out


NO_POD = PodRef()


def parse_cgroup(text: str) -> tuple[str, str]:
    """(pod UID, container id) from a /proc/<pid>/cgroup text; "" for each that no kubepods path gives."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if "kubepods" not in path:
            continue
        parts = [p for p in path.split("/") if p]
        uid = next((m.group(1).replace("_", "-") for p in parts if (m := _POD_UID.search(p))), "")
        container = ""
        if parts and (m := _CONTAINER.match(parts[-1])):
            scheme = _SCHEME.get(m.group(1) or "")
            container = f"{scheme}://{m.group(2)}" if scheme else m.group(2)
        if uid:
            return uid, container
    return "", ""


def parse_environ(data: bytes) -> dict[str, str]:
    """The WANTED variables of a /proc/<pid>/environ (NUL-separated; a last entry cut by the cap is dropped)."""
    entries = data.split(b"\0")
    if data and not data.endswith(b"\0"):
        entries = entries[:-1]
    out: dict[str, str] = {}
    for entry in entries:
        key, sep, value = entry.partition(b"=")
        name = key.decode("ascii", "replace")
        if sep and name in WANTED:
            out[name] = value.decode("utf-8", "replace")
    return out


def pod_of(env: dict[str, str], cgroup: tuple[str, str], hostname: str | None = None) -> PodRef:
    """The pod a process's environment and cgroup describe; NO_POD when neither says Kubernetes."""
    uid, container_id = cgroup
    if not uid and "KUBERNETES_SERVICE_HOST" not in env:
        return NO_POD
    pod = _name(env.get("POD_NAME"), _DNS_SUBDOMAIN) or _name(env.get("HOSTNAME"), _DNS_SUBDOMAIN) or _name(hostname, _DNS_SUBDOMAIN)
    return PodRef(
        pod=pod,
        namespace=_name(env.get("POD_NAMESPACE"), _DNS_LABEL),
        container=_name(env.get("CONTAINER_NAME"), _DNS_LABEL),
        pod_uid=uid,
        container_id=container_id,
    )


def process_pod(root: HostRoot, pid: int, *, argv: tuple[str, ...] | None = None, hostname: str | None = None) -> PodRef:
    """The pod of the process `pid` of the root's /proc. With `argv`, only when that process's command line is
    `argv` (publisher_pid finds a publisher's)."""
    if argv is not None and not _runs(root, pid, argv):
        return NO_POD
    cgroup = _read(root, f"/proc/{pid}/cgroup", CGROUP_CAP)
    environ = _read(root, f"/proc/{pid}/environ", ENVIRON_CAP)
    return pod_of(parse_environ(environ or b""), parse_cgroup((cgroup or b"").decode("utf-8", "replace")), hostname)


class PublisherPids:
    """Where a publisher is in the root's /proc. A snapshot holds the pid of the job's own pid namespace: seen
    from the host (an exporter on the node, or a DaemonSet with hostPID) a job in a pod is another pid, and at
    its snapshot's pid runs some other process or none. The kernel lists a process's pid in each namespace it
    is in (NSpid in /proc/<pid>/status, innermost last), so the job is the process whose innermost pid is the
    snapshot's and whose command line is the snapshot's. /proc is scanned only for a publisher not found at
    its own pid, at most once per collection, and what was found is remembered (and checked) across them."""

    MAX_SCAN = 1 << 16  # /proc entries looked at in one scan

    def __init__(self, root: HostRoot) -> None:
        self.root = root
        self._known: dict[tuple[int, tuple[str, ...]], int] = {}
        self._inner: dict[int, list[int]] | None = None  # innermost pid -> pids here, this collection

    def new_collection(self) -> None:
        self._inner = None

    def find(self, pid: int, argv: tuple[str, ...]) -> int | None:
        """The pid here of the process a snapshot names, or None where it is not to be seen."""
        if _runs(self.root, pid, argv):
            return pid
        known = self._known.get((pid, argv))
        if known is not None and _runs(self.root, known, argv):
            return known
        self._known.pop((pid, argv), None)
        found = [p for p in self._index().get(pid, []) if _runs(self.root, p, argv)]
        if len(found) != 1:  # two pods' jobs with one pid and one command line: not said which is which
            return None
        self._known[(pid, argv)] = found[0]
        return found[0]

    def _index(self) -> dict[int, list[int]]:
        if self._inner is None:
            self._inner = {}
            for name in self.root.listdir("/proc")[: self.MAX_SCAN]:
                if not name.isdigit():
                    continue
                status = _read(self.root, f"/proc/{name}/status", 4096) or b""
                m = re.search(rb"^NSpid:\s+([0-9\s]+)$", status, re.MULTILINE)
                levels = m.group(1).split() if m else []
                if len(levels) > 1:
                    self._inner.setdefault(int(levels[-1]), []).append(int(name))
        return self._inner


def _runs(root: HostRoot, pid: int, argv: tuple[str, ...]) -> bool:
    """Whether /proc/<pid>/cmdline starts with `argv` as a snapshot holds it (each word made printable and cut
    at 4096 characters, at most so many words: snapshot_format's bounds)."""
    data = _read(root, f"/proc/{pid}/cmdline", 1 << 20)
    if not data or not argv:
        return False
    words = data.removesuffix(b"\0").split(b"\0")[: len(argv)]
    return tuple(printable(w.decode("utf-8", "replace"), 4096) for w in words) == argv


def _read(root: HostRoot, absolute: str, cap: int) -> bytes | None:
    """A /proc file's first `cap` bytes: a regular file reached through no link at all, or None (absent, not
    permitted, a link, a FIFO). The kernel's /proc has no link on these paths; a host root's tree with one was
    planted, and HostRoot.local would follow it inside the root."""
    local = root.local(absolute)
    if local is None:
        return None
    if not root.is_real and local != os.path.join(os.path.realpath(root.root), absolute.lstrip("/")):
        return None
    try:
        return read_regular(local, cap, follow_symlinks=False, truncate=True)
    except OSError:
        return None


def _name(value: str | None, pattern: re.Pattern[str]) -> str:
    return value if value and pattern.match(value) else ""
