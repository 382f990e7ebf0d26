"""A device as the user names it (`--device`, `--src`, `--dst`): parsed once in cli/options.py, matched
against real devices only where they are known (the probe child, the memstats sampler)."""

from __future__ import annotations

from dataclasses import dataclass

# `devctl memstats` also shows devices JAX does not use, keyed by their physical view: a TPU chip on the
# PCI bus (tpu-chip:N) and an NVIDIA GPU as NVML numbers it (nvml:N). They are no JAX platform.
PHYSICAL_VIEWS = ("tpu-chip", "nvml")

# JAX names a CUDA or ROCm device's platform "gpu"; its client's platform says which. People type either.
_GPU_VENDORS = ("cuda", "rocm")


@dataclass(frozen=True)
class DeviceRef:
    """`N` (a JAX device id on whatever platform is there) or `platform:N`; the platform lower-cased."""

    id: int
    platform: str | None = None

    def __str__(self) -> str:
        return str(self.id) if self.platform is None else f"{self.platform}:{self.id}"

    def names(self, device_id: int, *platforms: str) -> bool:
        """Whether this is the device `device_id` known by these platform names (JAX's, and its client's)."""
        if device_id != self.id:
            return False
        if self.platform is None or self.platform in platforms:
            return True
        vendors = [p for p in platforms if p in _GPU_VENDORS]
        if self.platform == "gpu":
            return bool(vendors)
        # cuda:1 names JAX's gpu:1 unless the device is known to be the other vendor's.
        return self.platform in _GPU_VENDORS and "gpu" in platforms and not vendors
