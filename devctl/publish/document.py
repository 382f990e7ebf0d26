"""The `devctl.publisher/1` document of this process now: who it is, its devices' allocator stats and live arrays.

build_snapshot never raises for JAX failures (they become the document's
`error`), and never initializes JAX's backends unless asked: the publisher
thread must not start them before the program's own jax.distributed or
platform choice. jax is imported inside the functions, never at import.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

from devctl.model.publishers import SCHEMA
from devctl.publish.live_arrays import ArrayCache, largest_arrays, live_usage


def build_snapshot(
    *,
    interval_s: float | None,
    top_k: int,
    initialize: bool,
    cache: ArrayCache | None,
    error: str | None = None,
) -> dict[str, Any]:
    """The `devctl.publisher/1` document for this process now. Never raises for JAX failures."""
    t0 = time.perf_counter()
    doc = _header(interval_s)
    errors = [error] if error else []
    try:
        if initialize or _backends_initialized():
            devices, largest = _device_view(top_k, cache)
            doc["devices"], doc["largest_arrays"] = devices, largest
        else:
            # Initializing backends from here would run before the program's
            # own jax.distributed.initialize() or platform choice, and break it.
            doc["backend_initialized"] = False
    except Exception as e:  # noqa: BLE001 - report, never raise into the user's program
        errors.append(f"reading devices failed: {describe(e)}")
    doc["snapshot_s"] = round(time.perf_counter() - t0, 6)
    doc["error"] = "; ".join(errors) if errors else None
    return doc


def _header(interval_s: float | None) -> dict[str, Any]:
    ident = _identity()
    return {
        "schema": SCHEMA,
        "pid": os.getpid(),
        "process_create_time": ident["process_create_time"],
        "command": ident["command"],
        "hostname": ident["hostname"],
        "timestamp": time.time(),
        "interval_s": interval_s,
        "jax_version": ident["jax_version"],
        "jaxlib_version": ident["jaxlib_version"],
        "backend_initialized": True,
        "devices": [],
        "largest_arrays": [],
    }


_IDENTITY: dict[str, Any] | None = None
_IDENTITY_PID: int | None = None


def _identity() -> dict[str, Any]:
    """What does not change during the process's life, computed once (again after a fork)."""
    global _IDENTITY, _IDENTITY_PID
    pid = os.getpid()
    if _IDENTITY is None or _IDENTITY_PID != pid:
        _IDENTITY = {
            "process_create_time": _create_time(),
            # orig_argv keeps the interpreter and its flags (`python -m pkg`), which argv drops.
            "command": list(getattr(sys, "orig_argv", None) or sys.argv),
            "hostname": socket.gethostname(),
            "jax_version": _version("jax"),
            "jaxlib_version": _version("jaxlib"),
        }
        _IDENTITY_PID = pid
    return _IDENTITY


def _create_time() -> float | None:
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # noqa: BLE001
        return None


def _version(module: str) -> str | None:
    try:
        if module == "jaxlib":
            import jaxlib.version

            return jaxlib.version.__version__
        import jax

        return jax.__version__
    except Exception:  # noqa: BLE001
        return None


def _backends_initialized() -> bool:
    try:
        from jax._src import xla_bridge
    except Exception:  # noqa: BLE001
        return True
    check = getattr(xla_bridge, "backends_are_initialized", None)
    if check is not None:
        return bool(check())
    return bool(getattr(xla_bridge, "_backends", True))


def _device_view(top_k: int, cache: ArrayCache | None) -> tuple[list[dict], list[dict]]:
    import jax

    devices = jax.local_devices()
    usage = live_usage(jax.live_arrays(), cache if cache is not None else ArrayCache())
    # memory_stats() after the scan: by then this thread holds no array references.
    out = []
    for d in devices:
        stats, stats_error = _memory_stats(d)
        live_bytes, live_count = usage.per_device.get(d.id, (0, 0))
        out.append(
            {
                "id": d.id,
                "platform": d.platform,
                "device_kind": d.device_kind,
                "process_index": d.process_index,
                "live_bytes": live_bytes,
                "live_arrays": live_count,
                "memory_stats": stats,
                "memory_stats_error": stats_error,
                "pci_bus_id": _pci_bus_id(d),
            }
        )
    return out, largest_arrays(usage.arrays, top_k)


_BUS_IDS: dict[tuple[int, int], str | None] = {}


def _pci_bus_id(device: Any) -> str | None:
    """A GPU's PCI bus id, asked once per device (of the driver the job's CUDA client already started); None
    for other devices and where the driver does not say."""
    if device.platform not in ("gpu", "cuda"):
        return None
    key = (os.getpid(), device.id)
    if key not in _BUS_IDS:
        from devctl.probe.backends import cuda_pci_bus_id

        try:
            found = getattr(device, "pci_bus_id", None) or cuda_pci_bus_id(device.local_hardware_id)
        except Exception:  # noqa: BLE001 - a device without local_hardware_id: unmatched, by name only
            found = None
        _BUS_IDS[key] = found if isinstance(found, str) else None
    return _BUS_IDS[key]


def _memory_stats(device: Any) -> tuple[dict[str, int | None] | None, str | None]:
    try:
        raw = device.memory_stats()
    except Exception as e:  # noqa: BLE001 - some plugins raise instead of returning None
        return None, describe(e)
    if raw is None:
        return None, None
    # -1 is how PJRT C-API plugins say "not set".
    return {str(k): (None if not isinstance(v, int) or v < 0 else int(v)) for k, v in raw.items()}, None


def encode(doc: dict[str, Any]) -> bytes:
    # Starts with SNAPSHOT_PREFIX ("schema" is the first key): how the reader knows a left-over temp file as ours.
    return json.dumps(doc, separators=(",", ":"), default=str).encode()


def describe(e: BaseException) -> str:
    """An exception in one line, for the document's `error`: its type and the first line of its message."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
