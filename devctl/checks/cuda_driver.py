"""The verdict on the NVIDIA driver against the CUDA runtime wheel: can this driver run the CUDA that JAX brings?"""

from __future__ import annotations

from devctl.discovery.cuda_wheels import parse_version
from devctl.model.hardware import DriverFinding

# The driver branches each CUDA major needs, for the hint.
_DRIVER_HINT = (
    "update the NVIDIA driver (>= 525 for CUDA 12, >= 580 for CUDA 13), "
    "or install CUDA wheels no newer than the driver"
)


def check_driver_vs_runtime(driver_cuda_version: int | None, runtime_version: str | None) -> DriverFinding | None:
    """A finding when the driver supports an older CUDA than the runtime wheel; None when fine or unknown.

    Same-major gaps often still run (CUDA minor-version compatibility) but break
    PTX JIT and slow compilation (failure-modes.md #11), so they are warnings.
    """
    runtime = parse_version(runtime_version)
    if driver_cuda_version is None or runtime is None:
        return None
    driver = (driver_cuda_version // 1000, driver_cuda_version % 1000 // 10)
    wanted = (runtime + (0,))[:2]
    if driver >= wanted:
        return None
    driver_text, wanted_text = f"{driver[0]}.{driver[1]}", f"{wanted[0]}.{wanted[1]}"
    if driver[0] < wanted[0]:
        return DriverFinding(
            code="cuda-driver-too-old",
            severity="error",
            message=(
                f"the NVIDIA driver supports CUDA {driver_text}, "
                f"older than the CUDA {wanted_text} runtime wheel ({runtime_version})"
            ),
            hint=_DRIVER_HINT,
        )
    return DriverFinding(
        code="cuda-driver-older-than-runtime",
        severity="warning",
        message=(
            f"the NVIDIA driver supports CUDA {driver_text}, older than the CUDA {wanted_text} runtime wheel "
            f"({runtime_version}); minor-version compatibility may run it, but PTX from newer ptxas fails to load"
        ),
        hint=_DRIVER_HINT,
    )
