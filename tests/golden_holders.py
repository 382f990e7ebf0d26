"""Reports for the golden tables of what holds a job's memory: a training job on 8 H100s asked for its top arrays,
the post-mortem it left when it ran out of memory, and the same question asked of a 2-host cluster. Built from the
model's dataclasses with realistic figures; nothing here reads the machine or imports jax."""

from __future__ import annotations

from devctl.model.holders import (
    FLEET_TOP_SCHEMA,
    POSTMORTEM_SCHEMA,
    POSTMORTEMS_SCHEMA,
    TOP_SCHEMA,
    DeviceMemory,
    FleetArray,
    FleetSite,
    FleetTopReport,
    HeldArray,
    PostMortem,
    PostMortemReport,
    ProcessTops,
    SiteTotal,
    TopReport,
)

GIB, MIB = 1 << 30, 1 << 20
DEVICES = tuple(f"cuda:{i}" for i in range(8))
SHARDED = "NamedSharding(mesh=Mesh('data': 8), spec=PartitionSpec('data',), memory_kind=device)"


def _arrays() -> tuple[HeldArray, ...]:
    return (
        HeldArray(8 * GIB, (65536, 32768), "float32", SHARDED, "device", DEVICES, "train.py:88 (init_opt_state)"),
        HeldArray(8 * GIB, (65536, 32768), "float32", SHARDED, "device", DEVICES, "train.py:88 (init_opt_state)"),
        HeldArray(4 * GIB, (65536, 32768), "bfloat16", SHARDED, "device", DEVICES, "model.py:41 (init_params)"),
        HeldArray(2 * GIB, (16, 2048, 32768), "bfloat16", SHARDED, "device", DEVICES, "train.py:121 (train_step)"),
        HeldArray(512 * MIB, (8, 4096, 4096), "float32", "SingleDeviceSharding(device=CudaDevice(id=0), memory_kind=pinned_host)",
                  "pinned_host", ("cuda:0",), None),
    )  # fmt: skip


def _sites() -> tuple[SiteTotal, ...]:
    return (
        SiteTotal("train.py:88 (init_opt_state)", 24, 41 * GIB),
        SiteTotal("model.py:41 (init_params)", 12, 20 * GIB),
        SiteTotal("train.py:121 (train_step)", 3, 6 * GIB),
        SiteTotal(None, 1, 512 * MIB),
    )


def top_gpu8() -> TopReport:
    return TopReport(TOP_SCHEMA, 48213, ("python", "train.py", "--config", "llama-8b.yaml"), "dgx-h100-07", 1795593000.0,
                     40, int(67.5 * GIB), _arrays(), _sites(), 0.0213, None)  # fmt: skip


def postmortems_gpu8() -> PostMortemReport:
    stats = {"bytes_in_use": 78 * GIB, "bytes_limit": int(79.1 * GIB), "peak_bytes_in_use": 79 * GIB, "largest_free_block_bytes": 900 * MIB}
    pm = PostMortem(
        POSTMORTEM_SCHEMA, 48213, ("python", "train.py", "--config", "llama-8b.yaml"), "dgx-h100-07", 1795593000.0,
        "JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
        16 * GIB, None, tuple(DeviceMemory(d, stats) for d in DEVICES), 40, int(67.5 * GIB), _arrays(), _sites(),
        requested_exact=True, requested_scope="allocation", path="/run/user/1000/devctl/48213-1795593000.postmortem.json",
    )  # fmt: skip
    return PostMortemReport(POSTMORTEMS_SCHEMA, "/run/user/1000/devctl", (pm,), ("/run/user/1000/devctl/17-1.postmortem.json: is damaged: pid",))


def fleet_gpu2x8() -> FleetTopReport:
    tops = (top_gpu8(), TopReport(TOP_SCHEMA, 51877, ("python", "train.py", "--config", "llama-8b.yaml"), "dgx-h100-08", 1795593000.2,
                                  40, int(67.5 * GIB), _arrays(), _sites(), 0.0198, None))  # fmt: skip
    processes = (ProcessTops(0, "dgx-h100-07", (tops[0],)), ProcessTops(1, "dgx-h100-08", (tops[1],), ("job 51902: did not answer within 5 s",)))
    arrays = tuple(FleetArray(i, t.hostname, t.pid, a) for a in _arrays()[:2] for i, t in enumerate(tops))
    sites = tuple(FleetSite(s.site, 2, 2 * s.arrays, 2 * s.nbytes) for s in _sites())
    return FleetTopReport(FLEET_TOP_SCHEMA, processes, arrays, sites, 80, 135 * GIB)


VIEWS = {
    "memstats-top-gpu8": top_gpu8,
    "memstats-postmortem-gpu8": postmortems_gpu8,
    "memstats-top-cluster-gpu2x8": fleet_gpu2x8,
}
