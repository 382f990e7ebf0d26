"""Publish this JAX process's memory view so `devctl memstats` can show it from outside.

`Device.memory_stats()` and `jax.live_arrays()` answer only inside the process
that owns the devices. Call this from a training script:

    from devctl.publish import publish
    publish(interval=1.0)
    ...  # train as usual; `devctl memstats` now lists this job

(`devctl.monitor.publish`, the name earlier releases documented, is the same function.)

A daemon thread writes `<pid>.json` (schema `devctl.publisher/1`) atomically
into a per-user directory (mode 0700; see devctl.discovery.publishers) every
interval, and removes it when the process exits. A directory that is a
symbolic link, not ours or open to others is refused (a warning, nothing
written); a file of that name that devctl did not write is never replaced, and
only the file this publisher wrote is ever removed. The document:

    {
      "schema": "devctl.publisher/1",
      "pid": 1234, "process_create_time": 1700000000.12,
      "command": ["python", "train.py", "--lr", "3e-4"],  # sys.orig_argv: the full command line
      "hostname": "node-1",
      "timestamp": 1700000123.45,         # unix seconds
      "interval_s": 1.0,                  # null for a one-off snapshot()
      "jax_version": "0.10.2", "jaxlib_version": "0.10.2",
      "backend_initialized": true,        # false: JAX not started yet, devices is []
      "devices": [
        {"id": 0, "platform": "gpu", "device_kind": "NVIDIA H100 80GB HBM3", "process_index": 0,
         "live_bytes": 123456,            # bytes (shape x itemsize) of live array shards here, replicas on each device
         "live_arrays": 17,               # arrays with a shard here (one array counts once per device)
         "memory_stats": {"bytes_in_use": 1, "bytes_limit": 2, "...": null},  # -1 -> null; null on CPU
         "memory_stats_error": null,
         "pci_bus_id": "00000000:18:00.0"}  # GPUs: what matches the device to the machine's GPU; null elsewhere
      ],
      "largest_arrays": [
        {"shape": [4096, 4096], "dtype": "float32", "nbytes": 67108864,  # the whole array
         "local_bytes": 67108864,         # what this process holds of it, replicas included
         "devices": [0, 1, 2, 3]}
      ],
      "snapshot_s": 0.0004,               # wall time the publisher spent building this snapshot
      "error": null                       # what failed since the last snapshot, if anything
    }

`import devctl.publish` does not import jax; publish() and snapshot() do.

The thread, its file and the process hooks are devctl.publish.publisher; the
document is built by devctl.publish.document, and the live-array accounting
(each device buffer counted once, without creating array objects) is
devctl.publish.live_arrays.
"""

# THREAD_NAME too: the name a program (or a test) finds the publisher thread by.
from devctl.publish.publisher import (  # noqa: F401
    THREAD_NAME,
    Publisher,
    current,
    publish,
    snapshot,
    stop,
)

__all__ = ["Publisher", "publish", "snapshot", "stop", "current"]
