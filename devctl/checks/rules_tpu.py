"""The doctor's rules over TPUs: who holds the chips, libtpu, the device nodes, multi-host slices, transparent hugepages.

Each rule reads a Scene and yields Drafts (devctl.checks.scene); the order
they run in is devctl.checks.diagnosis.RULES.
"""

from __future__ import annotations

import os
from typing import Iterable

from devctl.checks.scene import Draft, Scene, Severity, few
from devctl.model.hardware import ProcessRef
from devctl.model.list_ import BackendStatus
from devctl.privilege import as_root, thp_fix


def _holders(s: Scene) -> dict[int, tuple[ProcessRef, list[str]]]:
    """pid -> (process, the TPU device nodes and lockfile it holds)."""
    tpu = s.hw.tpu
    held: dict[int, tuple[ProcessRef, list[str]]] = {}
    for chip in tpu.chips:
        for p in chip.holders:
            held.setdefault(p.pid, (p, []))[1].append(chip.device_path)
    if tpu.lockfile.state == "held":
        for p in tpu.lockfile.holders:
            held.setdefault(p.pid, (p, []))[1].append(tpu.lockfile.path)
    return held


def tpu_held(s: Scene) -> Iterable[Draft]:
    """Another live process has the chips or libtpu's lockfile open; or the lockfile outlived its process."""
    lock = s.hw.tpu.lockfile
    for pid, (p, paths) in sorted(_holders(s).items()):
        evidence = [f"pid {pid} ({p.command or '?'}, user {p.user or '?'}) has {', '.join(paths)} open"]
        tpu_row = next((b for b in s.inv.backends if b.platform == "tpu" and b.status is not BackendStatus.OK), None)
        if tpu_row is not None and tpu_row.error:
            evidence.append(f"so the tpu backend {tpu_row.status.value}: {tpu_row.error}")
        yield Draft(
            "tpu-held", evidence, ["tpu", "backends", "devices"],
            fix=f"stop it when it is safe (kill {pid}; {as_root(f'lsof -w {paths[0]}')} lists every holder); to share the chips set TPU_VISIBLE_CHIPS, TPU_CHIPS_PER_PROCESS_BOUNDS and TPU_PROCESS_BOUNDS",
            backends=s.tpu_rows(),
        )  # fmt: skip
    if lock.state == "stale" and s.hw.tpu.chips:
        # Judged by who holds it: nobody. libtpu writes it wherever it loads and leaves it after a clean exit
        # (0.0.52 does, on a machine without TPU too, where it stands for nothing). Beside chips JAX cannot start it
        # may be what libtpu refuses; beside a TPU backend that works it is only a leftover.
        named = f", and the pid it names ({lock.pid_in_file}) is not running" if lock.pid_in_file else ""
        works = s.ok("tpu")
        yield Draft(
            "tpu-stale-lockfile",
            [f"{lock.path} exists, no live process has it open or locked{named}"]
            + (["the tpu backend starts anyway: libtpu left it behind, and it blocks nothing"] if works else []),
            ["tpu"], fix=as_root(f"rm {lock.path}"), severity="info" if works else "warning",
        )  # fmt: skip


def libtpu_missing(s: Scene) -> Iterable[Draft]:
    """TPU_LIBRARY_PATH names no file, or chips are present and no libtpu is installed (unless a holder explains it)."""
    tpu = s.hw.tpu
    path = s.environ.get("TPU_LIBRARY_PATH")
    if path is not None and not os.path.exists(path):
        yield Draft(
            "libtpu-missing",
            [f"TPU_LIBRARY_PATH={path!r} does not exist (JAX: TPU_LIBRARY_PATH is set to a non-existent path)"],
            ["env", "tpu", "backends"],
            fix="point TPU_LIBRARY_PATH at an existing libtpu.so, or unset it and pip install -U \"jax[tpu]\"",
            severity="error" if tpu.chips else "warning",
            backends=s.tpu_rows(),
        )
    has_libtpu = any(p.role == "libtpu" and p.version for p in s.env.packages) or (path is not None and os.path.exists(path))
    if tpu.chips and not has_libtpu and not _holders(s) and not s.ok("tpu"):
        yield Draft(
            "libtpu-missing",
            [
                f"{len(tpu.chips)} TPU {'/'.join(tpu.versions)} chip(s) at {few([c.pci_address for c in tpu.chips])}, but no libtpu package is installed",
                "JAX says: A Google TPU may be present on this machine, but either a TPU-enabled jaxlib or libtpu is not installed.",
            ],
            ["tpu", "backends", "devices"],
            backends=s.tpu_rows(),
        )


def tpu_device_access(s: Scene) -> Iterable[Draft]:
    """A chip whose device node (or the vfio container node) is missing or not usable by this user."""
    for chip in s.hw.tpu.chips:
        if not chip.device_path_exists:
            why = f"{chip.device_path} does not exist"
        elif chip.accessible is False:
            why = f"{chip.device_path} is not readable and writable by this user"
        elif any(n.startswith("no /dev/vfio/vfio") for n in chip.notes):
            why = "/dev/vfio/vfio (the vfio container node) is missing"
        else:
            continue
        evidence = [f"TPU {chip.index} ({chip.version}, {chip.pci_address}): {why}"]
        yield Draft("tpu-device-permission", evidence, ["tpu", "backends", "devices"], backends=s.tpu_rows())


def multihost_slice_waiting(s: Scene) -> Iterable[Draft]:
    """A multi-host slice: TPU initialization waits for every host, and timed out if no other host ran the program."""
    hosts = [h for h in (s.environ.get("TPU_WORKER_HOSTNAMES") or "").split(",") if h.strip()]
    tpu_row = next((b for b in s.inv.backends if b.platform == "tpu"), None)
    timed_out = tpu_row is not None and tpu_row.status is BackendStatus.TIMEOUT
    if len(hosts) > 1 and (s.hw.tpu.chips or timed_out):
        evidence = [f"TPU_WORKER_HOSTNAMES lists {len(hosts)} hosts ({few(hosts)}): TPU initialization waits until every one runs the program"]
        if timed_out and tpu_row is not None:
            evidence.append(f"the tpu backend did not initialize: {tpu_row.error}")
        severity: Severity = "error" if timed_out else "warning"
        rows = s.tpu_rows() if timed_out else []  # waiting is how a slice starts: only the timeout is the tpu row's failure
        yield Draft("multihost-slice-waiting", evidence, ["backends", "tpu", "devices"], severity=severity, backends=rows)


def tpu_thp_off(s: Scene) -> Iterable[Draft]:
    """Transparent hugepages off on a TPU generation whose runtime JAX says needs them."""
    from devctl.checks.machine import THP_TPU_VERSIONS

    thp_versions = [v for v in s.hw.tpu.versions if v in THP_TPU_VERSIONS]
    host = s.inv.host
    if thp_versions and host.thp_enabled is False:
        yield Draft(
            "tpu-thp-off",
            [f"/sys/kernel/mm/transparent_hugepage/enabled is [{host.thp_mode}] on a TPU {', '.join(thp_versions)} host (JAX wants [always])"],
            ["host"], fix=thp_fix(), severity="warning",
        )  # fmt: skip
