"""`devctl bench memory`: each device's memory bandwidth through a jitted copy, against its published peak and its
peers. Flags are checked here, before the probe child (devctl/probe/bench_memory.py) imports jax."""

from __future__ import annotations

from typing import Annotated, Optional

from devctl.cli.bench_options import Bench, BenchFlags, DeviceOpt, bench_options, parse_sizes, run_bench, sizes_option
from devctl.cli.options import parse_devices
from devctl.model import bench as c
from devctl.model import bench_memory as m

SizesOpt = Annotated[
    Optional[str],
    sizes_option(
        "Array sizes per device, e.g. 256M,1G (K, M, G are binary; KB, MB, GB decimal); each is read and written "
        "once per call. Default: 256M, 1G, 4G on accelerators, 64M, 256M, 1G on CPU (--quick: 256M). Sizes must leave "
        "the caches to measure memory; one the device cannot hold is skipped with a note."
    ),
]


@bench_options(Bench(m.GATE, c, "One size", verbose=True))
def memory(sizes: SizesOpt = None, device: DeviceOpt = None, *, flags: BenchFlags) -> None:
    """Each device's memory bandwidth (a jitted copy, read + write), against its roof (the published peak bandwidth) and its peers."""
    from devctl.collect.bench_memory import run_memory
    from devctl.render.bench_memory import progress_label

    devices = parse_devices("--device", device)
    counts = flags.counts()  # its errors come before --sizes'
    # A size no device of today holds (16T) is refused as a typo rather than planned and skipped.
    sizes_bytes = parse_sizes(sizes, "256M,1G", m.ELEMENT_BYTES, "bytes (one uint32)", 1 << 40) if sizes is not None else None
    opts = m.MemoryOptions(devices=devices, **counts, sizes_bytes=sizes_bytes)
    wrong = "some copies did not produce x + 1 (see the notes)"
    run_bench(flags, run_memory, opts, progress_label, "memory", wrong, comparisons=lambda r: [r.comparison])
