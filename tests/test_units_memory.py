"""What a new JAX process can allocate on a device, and what a job can still get: the one figure `memstats`,
`--distributed`, `check --min-memory` and the exporter's headroom all use (devctl.model.memstats).

Built from the real H200 of reference/h200-observations.md (tests/fixtures/h200/memstats.json, devctl's own
document there): another process held 106 GiB of the 140 GiB; the allocator's bytes_limit said 104.9 GiB, devctl
said "headroom 104.9 GiB", and a second process could really allocate about 30 GiB (33 GiB failed). NVML is the
one boundary faked here (no GPU on this machine); the probe's devices and the publishers' snapshot files are the
real reader's inputs, as the document recorded them.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from devctl.model.memstats import job_headroom_bytes, usable_memory

GIB = 1 << 30
MIB = 1 << 20
H200 = json.loads((Path(__file__).parent / "fixtures" / "h200" / "memstats.json").read_text())


def test_usable_is_the_smaller_of_the_allocators_limit_and_the_drivers_free():
    assert usable_memory(100 * GIB, 30 * GIB) == (30 * GIB, "driver")
    assert usable_memory(60 * GIB, 79 * GIB) == (60 * GIB, "allocator")
    assert usable_memory(60 * GIB, None) == (60 * GIB, "allocator")  # no NVML: a TPU, a container without the driver library
    assert usable_memory(None, 79 * GIB) == (79 * GIB, "driver")  # an allocator that reports no statistics
    assert usable_memory(None, None) == (None, None)  # CPU


def test_a_jobs_headroom_is_bounded_by_what_the_driver_has_left():
    preallocated = {"bytes_limit": 100 * GIB, "peak_bytes_in_use": 70 * GIB, "bytes_in_use": 60 * GIB, "pool_bytes": 100 * GIB}
    assert job_headroom_bytes(preallocated, 1 * GIB) == 30 * GIB  # its pool is its own: the driver's free does not matter
    grows = {"bytes_limit": 100 * GIB, "peak_bytes_in_use": 20 * GIB, "bytes_in_use": 18 * GIB, "pool_bytes": 20 * GIB}
    assert job_headroom_bytes(grows, 5 * GIB) == 7 * GIB  # 2 GiB unused in its pool + 5 GiB the driver has left
    assert job_headroom_bytes(grows, None) == 80 * GIB
    assert job_headroom_bytes({"bytes_in_use": 10}, 5 * GIB) is None  # CPU: no limit, no peak
    assert job_headroom_bytes(None, None) is None


def _h200_sampler(monkeypatch, publisher_dir: str):
    """devctl memstats' sampler on the H200 of the fixture: the probe's devices and NVML's answer as recorded there."""
    from devctl.collect.memstats import MemstatsSampler
    from devctl.discovery import nvml
    from devctl.model.hardware import GpuProcess, NvidiaGpu, NvmlReport
    from devctl.model.list_ import DeviceInfo
    from devctl.probe.backends import BackendsProbe

    gpu, cpu = H200["devices"]
    driver, holder = gpu["driver"], H200["processes"][0]
    report = NvmlReport(
        "ok", None, "580.159.04", 13000, "13.0",
        (NvidiaGpu(0, driver["name"], driver["uuid"], "0000:00:06.0", driver["total_bytes"], driver["used_bytes"], driver["free_bytes"],
                   (9, 0), 5, 5, 5, 16, 16, 120.0, 700.0, 30),),
        processes=(GpuProcess(0, driver["uuid"], holder["pid"], holder["used_bytes"], "compute", holder["user"], holder["command"], True),),
    )  # fmt: skip
    monkeypatch.setattr(nvml, "nvml_report", lambda processes=False: report)
    sampler = MemstatsSampler(device_filter=None, timeout_s=30, publisher_dir=publisher_dir)
    sampler.probe = BackendsProbe(devices=[
        DeviceInfo(0, "gpu", "NVIDIA H200", 0, memory_stats=gpu["memory_stats"], attributes={"pci_bus_id": "0000:00:06.0"}),
        DeviceInfo(0, "cpu", "cpu", 0, memory_stats=None),
    ])  # fmt: skip
    return sampler


def test_a_shared_h200_says_what_a_new_process_really_gets_and_who_holds_the_rest(monkeypatch, tmp_path):
    from devctl.render.memstats import device_table, summary_lines

    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    snap = _h200_sampler(monkeypatch, str(runtime)).sample()
    gpu = snap.devices[0]
    assert gpu.bytes_limit == 112_583_507_968  # the allocator's 104.9 GiB, as before
    assert (gpu.usable_bytes, gpu.usable_bound) == (36_940_414_976, "driver")  # what the driver had free: 34.4 GiB
    # The probe's own empty allocator is not the device's use: the driver's used memory is, and says so.
    assert (gpu.in_use_bytes, gpu.in_use_source, gpu.peak_bytes_in_use) == (113_814_405_120, "driver", None)
    assert (snap.headroom.min_bytes, snap.headroom.where, snap.headroom.bound) == (36_940_414_976, "gpu:0", "driver")

    columns, rows = device_table(snap)
    row = dict(zip([c.header for c in columns], rows[0]))
    assert (row["in use"], row["limit"], row["free"], row["usable"]) == ("106.0 GiB driver", "104.9 GiB", "34.4 GiB", "34.4 GiB")
    headroom = next(line for line in summary_lines(snap) if line.startswith("headroom:"))
    assert headroom == (
        "headroom: min 34.4 GiB at gpu:0, the driver's free memory (the allocator would give 104.9 GiB; "
        "pid 2392 (root) holds 105.4 GiB: job.py); a third of it (11.5 GiB) is a safe working-memory budget"
    )


def test_the_device_row_shows_what_the_publishing_job_holds(monkeypatch, tmp_path):
    """While a publishing job held 1.3 GiB, the row read `in use 0 B, peak 0 B`: the probe child's own allocator."""
    from devctl.model.publishers import SCHEMA

    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    held = 1300 * MIB
    stats = {"bytes_in_use": held, "peak_bytes_in_use": held + 64 * MIB, "bytes_limit": 112_583_507_968, "pool_bytes": 112_583_507_968}
    doc = {
        "schema": SCHEMA, "pid": os.getpid(), "process_create_time": None, "command": ["python3", "train.py"],
        "hostname": os.uname().nodename, "timestamp": time.time(), "interval_s": 1.0,
        "devices": [{"id": 0, "platform": "gpu", "device_kind": "NVIDIA H200", "process_index": 0, "live_bytes": held,
                     "live_arrays": 12, "memory_stats": stats}],
        "largest_arrays": [], "error": None,
    }  # fmt: skip
    (runtime / f"{os.getpid()}.json").write_text(json.dumps(doc))
    snap = _h200_sampler(monkeypatch, str(runtime)).sample()
    assert [p.pid for p in snap.publishers] == [os.getpid()]
    gpu = snap.devices[0]
    assert (gpu.in_use_bytes, gpu.in_use_source, gpu.peak_bytes_in_use) == (held, "jobs", held + 64 * MIB)
    job = next(p for p in snap.processes if p.source == "publisher")
    # It preallocated: its own pool bounds it, not the driver's free memory.
    assert job.headroom_bytes == 112_583_507_968 - held - 64 * MIB
    assert snap.headroom.bound == "driver"  # a new process still gets least


@pytest.mark.parametrize("limit, free, want", [(112_583_507_968, 36_940_414_976, 36_940_414_976), (60 * GIB, 79 * GIB, 60 * GIB)])
def test_distributed_list_devices_use_the_same_figure(limit, free, want):
    from devctl.collect.distributed import _list_devices

    payload = {"report": {
        "devices": [{"id": 0, "platform": "gpu", "device_kind": "NVIDIA H200", "process_index": 0, "memory_stats": {"bytes_limit": limit},
                     "nvml_gpu": {"index": 0, "name": None, "uuid": None, "pci_bus_id": None}}],
        "hardware": {"nvidia": {"gpus": [{"index": 0, "memory_free_bytes": free}]}},
    }}  # fmt: skip
    (device,) = _list_devices(payload, 0, "h200")
    assert (device.bytes_limit, device.usable_bytes, device.peak_bytes_in_use) == (limit, want, None)


def test_the_exporters_headroom_is_the_same_figure():
    from devctl.collect.exporter import Exporter, _headroom
    from devctl.model.exporter import Sample

    exporter = Exporter()
    exporter.probed = [SimpleNamespace(key="gpu:0", platform="gpu", device_kind="NVIDIA H200", bytes_limit=112_583_507_968, driver={"index": 0})]
    free = Sample("devctl_gpu_memory_free_bytes", {"gpu": "0", "device": "gpu:0"}, 36_940_414_976.0)
    usable = exporter._usable([free], nvml_answered=True)
    assert [(s.name, s.labels["device"], s.value) for s in usable] == [("devctl_device_memory_usable_bytes", "gpu:0", 36_940_414_976.0)]
    assert exporter._usable([], nvml_answered=False) == []  # no driver answer this scrape: no figure, not the allocator's alone
    (headroom,) = _headroom([free, *usable])
    assert (headroom.labels, headroom.value) == ({"where": "gpu:0"}, 36_940_414_976.0)


def test_a_jobs_device_is_the_machines_gpu_of_its_pci_bus_id():
    """Eight jobs, each given one GPU with CUDA_VISIBLE_DEVICES, all call theirs gpu:0; a multi-host job's local
    GPUs are gpu:8-15. The PCI bus id the job publishes says which of this machine's GPUs each is."""
    from devctl.collect.memstats import MachineKeys, _jobs_by_device
    from devctl.model.list_ import DeviceInfo
    from devctl.model.publishers import PublishedDevice

    machine = MachineKeys([
        DeviceInfo(i, "gpu", "NVIDIA H100 80GB HBM3", 0, attributes={"pci_bus_id": bus})
        for i, bus in enumerate(("0000:18:00.0", "0000:2a:00.0"))
    ])  # fmt: skip

    def job(id: int, bus: str | None) -> PublishedDevice:
        return PublishedDevice(id, "gpu", "NVIDIA H100 80GB HBM3", 0, 1 << 30, 3, None, pci_bus_id=bus)

    assert machine.key(job(0, "00000000:2A:00.0")) == "gpu:1"  # the driver's spelling: 8-digit domain, upper case
    assert machine.key(job(9, "0000:18:00.0")) == "gpu:0"
    assert machine.key(job(1, None)) == "gpu:1"  # no bus id (not a GPU, an older publisher): its own name
    assert machine.key(job(5, "0000:99:00.0")) == "gpu:5"  # a GPU this machine's JAX does not see
    publishers = SimpleNamespace(publishers=[SimpleNamespace(devices=[job(0, "0000:18:00.0")]), SimpleNamespace(devices=[job(0, "0000:2a:00.0")])])
    assert {k: len(v) for k, v in _jobs_by_device(publishers, machine).items()} == {"gpu:0": 1, "gpu:1": 1}


def test_a_published_pci_bus_id_is_read_only_when_it_is_one():
    from devctl.discovery.snapshot_format import decode_snapshot
    from devctl.model.publishers import SCHEMA

    def doc(bus) -> bytes:
        device = {"id": 0, "platform": "gpu", "device_kind": "NVIDIA H200", "process_index": 0, "live_bytes": 0, "live_arrays": 0,
                  "memory_stats": None, "pci_bus_id": bus}  # fmt: skip
        return json.dumps({"schema": SCHEMA, "pid": os.getpid(), "command": ["python"], "hostname": "h", "timestamp": time.time(),
                           "interval_s": 1.0, "devices": [device], "largest_arrays": [], "error": None}).encode()  # fmt: skip

    snap, _ = decode_snapshot(doc("00000000:06:00.0"), path="p", now=time.time())
    assert snap is not None and snap.devices[0].pci_bus_id == "00000000:06:00.0"
    for bad in ("../../etc", "\x1b[31m", 6, "0000:06:00.9"):
        snap, reason = decode_snapshot(doc(bad), path="p", now=time.time())
        assert snap is None and "pci_bus_id" in (reason or ""), (bad, reason)
