"""The facts every bench child reports about each jax device, the memory free on it and on the host, and the
software around it."""

from __future__ import annotations

from devctl.model.bench import BenchDevice


def device_name(dev) -> str:
    platform_name = getattr(getattr(dev, "client", None), "platform", None) or dev.platform
    return f"{platform_name}:{dev.id}"


def memory_kinds(dev) -> tuple[str, ...]:
    try:
        return tuple(mem.kind for mem in dev.addressable_memories())
    except Exception:
        return ()


def device_stats(dev) -> dict:
    try:
        return dev.memory_stats() or {}
    except Exception:
        return {}


def device_free_bytes(dev) -> int | None:
    if dev.platform == "cpu":
        return None  # CPU devices report no memory of their own; the host check covers them
    st = device_stats(dev)
    limit = st.get("bytes_limit")
    if not limit:
        return None
    return max(int(limit) - int(st.get("bytes_in_use", 0)), 0)


def device_info(dev) -> BenchDevice:
    limit = device_stats(dev).get("bytes_limit")
    return BenchDevice(
        id=dev.id,
        name=device_name(dev),
        platform=dev.platform,
        device_kind=dev.device_kind,
        memory_kinds=memory_kinds(dev),
        bytes_limit=int(limit) if limit else None,
    )


def dist_version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


def host_available_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return None
