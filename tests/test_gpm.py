"""How busy a GPU is: GPM counters where NVML has them, NVML's utilization (said as such) where not, per MIG instance.

NVML is tests/gpm_fake.py: pynvml's C calls replaced on the real module (as test_nvml_reads does), returning what GPM said of a bf16
matmul loop on a real H200 (reference/h200-observations.md, last section); the request structure handed to
nvmlGpmMetricsGet is pynvml's own ctypes one. The reads on a real GPU are the `gpu`-marked test at the end.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import devctl_env
from gpm_fake import FakeGpm

from devctl.discovery.gpm import BusyReader
from devctl.model import to_jsonable

MIB = 1 << 20


def test_gpm_gives_the_h200_figures_and_an_old_gpu_says_nvml_utilization(monkeypatch):
    fake = FakeGpm(monkeypatch)
    busy, reason = BusyReader(window_s=0.05).read()
    assert reason is None and sorted(busy) == [0, 1]
    h200, a100 = busy[0], busy[1]
    assert h200.source == "gpm" and h200.label.startswith("NVML GPM")
    c = h200.counters
    assert (c.sm_active_ratio, c.sm_occupancy_ratio, c.tensor_active_ratio, c.dram_active_ratio) == pytest.approx(
        (0.643, 0.0951, 0.6305, 0.1253)
    )
    assert c.gr_engine_active_ratio == pytest.approx(0.6981) and c.tensor_hmma_active_ratio == pytest.approx(0.6305)
    assert (c.pcie_tx_bytes_per_s, c.pcie_rx_bytes_per_s) == (2 * MIB, 3 * MIB)
    assert c.nvlink_tx_bytes_per_s is None and "not counted" in h200.unavailable["nvlink_tx_bytes_per_s"]
    assert h200.window_s is not None and h200.window_s >= 0.05  # two samples, the window apart
    assert (h200.kernel_active_ratio, h200.memory_active_ratio) == (0.78, 0.18)
    # NVML's own per-process samples of the last second, averaged per pid; "Not Found" (idle) is no process, no fault.
    assert [(p.pid, p.kernel_active_ratio, p.memory_active_ratio, p.samples) for p in h200.processes] == [
        (77, 0.02, 0.0, 1), (4242, 0.78, 0.18, 2)]
    assert h200.process_window_s == pytest.approx(1.0, abs=0.05)
    assert busy[1].processes == [] and "processes" not in busy[1].unavailable
    # No GPM: NVML's utilization, labelled as what it is, and no GPM figure made up.
    assert a100.source == "nvml-utilization" and a100.label == "NVML utilization: a kernel was running"
    assert a100.kernel_active_ratio == 0.78 and a100.window_s is None
    assert all(v is None for v in vars(a100.counters).values()) and "GPM" in a100.unavailable["counters"]
    assert fake.alive == {} and fake.calls["init"] == fake.calls["shutdown"] == 1
    json.dumps(to_jsonable(busy))


def test_a_watch_keeps_one_sample_per_gpu_and_measures_each_interval(monkeypatch):
    """After the first read, each read takes one sample and measures from the one before: no waiting."""
    fake = FakeGpm(monkeypatch)
    reader = BusyReader(window_s=0.05, keep=True)
    reader.read()
    assert fake.taken == 2 and len(fake.alive) == 1  # the H200's second sample, held for the next read
    time.sleep(0.1)
    busy, _ = reader.read()
    assert fake.taken == 3 and len(fake.alive) == 1
    assert busy[0].window_s >= 0.1 and busy[0].counters.tensor_active_ratio == pytest.approx(0.6305)
    busy, _ = reader.read()  # at once, as a watch at --interval 0.1 may: NVML refuses samples under 100 ms apart
    assert busy[0].window_s >= 0.11 and busy[0].source == "gpm"
    # Per-process samples since the read before: each sample counted once.
    assert fake.since[-2] > fake.since[-4] and busy[0].process_window_s < 1.0
    reader.close()
    assert fake.alive == {}


def test_mig_instances_each_get_their_counters(monkeypatch):
    fake = FakeGpm(monkeypatch, mig=True)
    busy, _ = BusyReader(window_s=0.01).read()
    mig = busy[2]
    assert mig.source == "gpm" and mig.counters.sm_active_ratio is None and "GPM could not take a sample" in mig.unavailable["counters"]
    assert [(m.gpu_instance_id, m.uuid) for m in mig.mig] == [(1, "MIG-mig0"), (2, "MIG-mig1")]
    assert mig.mig[0].counters.tensor_active_ratio == pytest.approx(0.6305)
    assert mig.mig[1].counters.tensor_active_ratio == pytest.approx(0.2938)
    assert mig.mig[1].counters.dram_active_ratio == pytest.approx(0.5529)
    assert busy[0].mig == [] and fake.alive == {}


def test_without_a_driver_busy_is_a_reason(monkeypatch):
    import pynvml

    def init():
        raise pynvml.NVMLError_DriverNotLoaded()

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    assert BusyReader().read() == ({}, "the NVIDIA kernel driver is not loaded")


def test_memstats_shows_busy_compactly_and_says_which_measure(monkeypatch):
    """GPM's SM/tensor/DRAM percentages in one cell; a GPU without GPM says 'util', and the legend says what that is."""
    import dataclasses

    from golden_reports import memstats_gpu8

    from devctl.render.memstats import busy_cell, busy_legend

    FakeGpm(monkeypatch, mig=True)
    busy, _ = BusyReader(window_s=0.01).read()
    snap = memstats_gpu8()
    devices = [dataclasses.replace(d, busy=busy.get(i)) for i, d in enumerate(snap.devices)]
    snap = dataclasses.replace(snap, devices=devices)
    assert [busy_cell(d) for d in devices[:4]] == ["64/63/13", "util 78", "MIG x2", "-"]
    legend = busy_legend(snap)
    assert "(GPM)" in legend and "NVML utilization, a kernel was running" in legend
    for d in devices[:3]:  # as --json writes them (the whole document is validated in test_schemas)
        json.dumps(to_jsonable(d.busy))


# ---- a real GPU ------------------------------------------------------------------------------------------

MATMUL_LOOP = textwrap.dedent(
    """
    import sys, time
    import jax, jax.numpy as jnp
    x = jnp.ones((8192, 8192), jnp.bfloat16)
    f = jax.jit(lambda a: (a @ a) * 0.5)
    y = f(x).block_until_ready()
    print("ready", flush=True)
    end = time.time() + float(sys.argv[1])
    while time.time() < end:
        for _ in range(20):
            y = f(y)
        y.block_until_ready()
    """
)


@pytest.mark.gpu
def test_gpm_sees_the_tensor_cores_of_a_real_matmul_loop(tmp_path):
    """A bf16 matmul loop keeps the tensor cores busy: GPM must say more than 30% (an H200 said 63%)."""
    script = tmp_path / "loop.py"
    script.write_text(MATMUL_LOOP)
    env = devctl_env(devices=1, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    env.pop("XLA_FLAGS", None)
    job = subprocess.Popen([sys.executable, str(script), "60"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "ready"
        busy, reason = BusyReader(window_s=1.0).read()
        assert reason is None and busy, reason
        gpm = [b for b in busy.values() if b.source == "gpm"]
        if not gpm:
            pytest.skip(f"no GPM on this GPU: {[b.unavailable for b in busy.values()]}")
        best = max((b.counters.tensor_active_ratio or 0.0) for b in gpm)
        assert best > 0.30, [to_jsonable(b) for b in gpm]
    finally:
        job.kill()
        job.wait()


def test_the_sampler_gives_each_nvidia_device_its_busy_and_the_csv_log_carries_it(monkeypatch):
    """memstats' collector matches busy-ness to devices by NVML index; devices NVML does not see get none."""
    from golden_reports import memstats_gpu8

    from devctl.collect.memstats import MemstatsSampler
    from devctl.render.memstats import csv_rows

    FakeGpm(monkeypatch)
    sampler = MemstatsSampler(device_filter=None, timeout_s=10)
    sampler.busy = BusyReader(window_s=0.01)
    snap = memstats_gpu8()
    problems: list[str] = []
    devices = sampler._with_busy([d if i < 2 else dataclasses.replace(d, driver=None, busy=None) for i, d in enumerate(snap.devices)], problems)
    assert problems == []
    assert [d.busy.source if d.busy else None for d in devices[:3]] == ["gpm", "nvml-utilization", None]
    header, rows = csv_rows(dataclasses.replace(snap, devices=devices))
    first = dict(zip(header, rows[0]))
    assert (first["busy_source"], first["tensor_active_ratio"], first["kernel_active_ratio"]) == ("gpm", pytest.approx(0.6305), 0.78)
    assert dict(zip(header, rows[2]))["busy_source"] is None


def test_gpm_that_gives_nothing_falls_back_to_nvml_utilization_and_says_why(monkeypatch):
    import pynvml

    fake = FakeGpm(monkeypatch)

    def refuse(handle, sample):
        raise pynvml.NVMLError_NoPermission()

    monkeypatch.setattr(pynvml, "nvmlGpmSampleGet", refuse)
    busy, _ = BusyReader(window_s=0.01).read()
    assert busy[0].source == "nvml-utilization" and busy[0].label == "NVML utilization: a kernel was running"
    assert busy[0].kernel_active_ratio == 0.78 and "no permission" in busy[0].unavailable["counters"]
    assert fake.alive == {}
