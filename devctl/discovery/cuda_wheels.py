"""The NVIDIA CUDA wheels (nvidia-*) installed beside JAX, each against the minimum JAX accepts.

Read from package metadata only: nothing here loads libcudart, so the CUDA
runtime version is the wheel's, not the library's. Requirements and versions
are parsed with `packaging`, as pip parses them.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from devctl.discovery.versions import metadata_name
from devctl.model.hardware import CudaWheel

Release = tuple[int, ...]

# JAX's own floors (jax_plugins/cuda/__init__.py _check_cuda_versions, jax-internals.md §3.1),
# as (release, where it comes from). cuDNN and cuFFT floors are "what JAX was built
# against", known only from the installed plugin's requirements.
_JAX_MINIMUMS: dict[str, tuple[Release, str]] = {
    "cuda_runtime": ((12, 1), "JAX's CUDA runtime minimum 12010"),
    "cublas": ((12, 1), "JAX's cuBLAS minimum 120100"),
    "cusparse": ((12, 1), "JAX's cuSPARSE minimum 12100"),
    # JAX asks for cuPTI API version 18, which CUDA 12.0 introduced (mapping unverified).
    "cupti": ((12, 0), "JAX's cuPTI API minimum 18 (CUDA 12.0)"),
}
# Distributions that carry JAX's declared nvidia-* requirements (names canonical).
_JAX_CUDA_DISTS = re.compile(r"jax-cuda\d+-(?:plugin|pjrt)|jaxlib|jax")
# Components whose own version major is the CUDA major (cuFFT, cuDNN, NCCL number differently).
_VERSION_IS_CUDA = {"cuda_runtime", "cublas", "cupti", "nvcc", "nvrtc", "nvjitlink"}
_NOT_CUDA = {"nvidia-ml-py", "nvidia-ml-py3"}  # NVML bindings, not CUDA libraries
_CUDA_SUFFIX = re.compile(r"-cu(\d+)$")  # "nvidia-cublas-cu12": the CUDA major is part of the name
_FLOOR_OPERATORS = (">=", "~=", "==", "===", ">")


def parse_version(text: str | None) -> Release | None:
    """The numeric release of a version: '12.4.127' -> (12, 4, 127), '13.0.0rc1' -> (13, 0, 0); None if not PEP 440.

    Pre-release and local parts are dropped: JAX compares CUDA versions by their numbers only.
    """
    try:
        return Version(text or "").release
    except InvalidVersion:
        return None


def cuda_wheels(paths: list[str] | None = None) -> list[CudaWheel]:
    """Installed nvidia-* CUDA distributions, each checked against what JAX accepts.

    `paths` replaces sys.path for the search (tests point it at a fake site directory).
    """
    dists = _distributions(paths)
    declared = _declared_bounds(dists)
    wheels = []
    for name, dist in dists.items():
        if name.startswith("nvidia-") and name not in _NOT_CUDA:
            wheels.append(_wheel(dist, name, declared.get(name)))
    return wheels


def cuda_runtime_version(wheels: Iterable[CudaWheel]) -> str | None:
    """The newest installed CUDA runtime wheel's version, e.g. '12.4.127'."""
    runtimes = [(release, w.version) for w in wheels if w.component == "cuda_runtime" and (release := parse_version(w.version))]
    return max(runtimes, key=lambda r: _padded(r[0]))[1] if runtimes else None


def _distributions(paths: list[str] | None) -> dict[str, importlib.metadata.Distribution]:
    """{canonical name: distribution}, sorted by name; the first on the path wins, as for imports."""
    dists = importlib.metadata.distributions(path=paths) if paths is not None else importlib.metadata.distributions()
    seen: dict[str, importlib.metadata.Distribution] = {}
    for dist in dists:
        name = canonicalize_name(metadata_name(dist) or "")
        if name:
            seen.setdefault(name, dist)
    return dict(sorted(seen.items()))


@dataclass(frozen=True)
class _Bounds:
    floor: Release | None
    ceiling: Release | None  # exclusive, from "<"
    source: str


def _declared_bounds(dists: dict[str, importlib.metadata.Distribution]) -> dict[str, _Bounds]:
    """{nvidia dist: bounds} from the Requires-Dist of installed JAX packages (whatever extra they belong to)."""
    out: dict[str, _Bounds] = {}
    for owner, dist in dists.items():
        if not _JAX_CUDA_DISTS.fullmatch(owner):
            continue
        for text in dist.requires or []:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            target = canonicalize_name(req.name)
            if not target.startswith("nvidia-"):
                continue
            bounds = _bounds(req, f"{owner} {dist.version}")
            if bounds is not None and _binds_tighter(bounds, out.get(target)):
                out[target] = bounds
    return out


def _bounds(req: Requirement, owner: str) -> _Bounds | None:
    floors, ceilings = [], []
    for spec in req.specifier:
        release = parse_version(spec.version.removesuffix(".*"))  # "==12.*" pins the 12 series
        if release is None:
            continue
        if spec.operator in _FLOOR_OPERATORS:
            floors.append(release)
        elif spec.operator == "<":
            ceilings.append(release)
    if not floors and not ceilings:
        return None
    floor = max(floors, key=_padded) if floors else None
    ceiling = min(ceilings, key=_padded) if ceilings else None
    return _Bounds(floor, ceiling, f"{owner} requires {req.specifier}")


def _padded(release: Release) -> Release:
    return release + (0,) * (8 - len(release))


def _at_least(version: Release, floor: Release) -> bool:
    return _padded(version) >= _padded(floor)


def _binds_tighter(new: _Bounds, old: _Bounds | None) -> bool:
    # Several JAX packages (and extras) may pin the same wheel: the highest floor binds.
    if old is None or old.floor is None:
        return True
    return new.floor is not None and not _at_least(old.floor, new.floor)


def _component(name: str) -> tuple[str, int | None]:
    """'nvidia-cuda-runtime-cu12' -> ('cuda_runtime', 12); 'nvidia-cublas' -> ('cublas', None)."""
    base = name[len("nvidia-") :]
    m = _CUDA_SUFFIX.search(base)
    if m:
        base = base[: m.start()]
    if base.startswith("cuda-") and not base.startswith("cuda-runtime"):
        base = base[len("cuda-") :]  # nvidia-cuda-cupti -> cupti; keep cuda_runtime
    return base.replace("-", "_"), int(m.group(1)) if m else None


def _wheel(dist: importlib.metadata.Distribution, name: str, declared: _Bounds | None) -> CudaWheel:
    component, suffix_major = _component(name)
    version = dist.version
    parsed = parse_version(version)
    floor, source = _JAX_MINIMUMS.get(component, (None, None))
    ceiling = None
    if declared is not None:
        ceiling = declared.ceiling
        if declared.floor is not None and (floor is None or _at_least(declared.floor, floor)):
            floor, source = declared.floor, declared.source
        elif ceiling is not None:
            source = f"{source}; {declared.source}" if source else declared.source

    if floor is None and ceiling is None:
        verdict = "not checked"
    elif parsed is None:
        verdict = "unknown"
    elif floor is not None and not _at_least(parsed, floor):
        verdict = "too old"
    elif ceiling is not None and _at_least(parsed, ceiling):
        verdict = "too new"
    else:
        verdict = "ok"

    # cu13 wheels drop the suffix; their version's major is the CUDA major for toolkit parts.
    cuda_major = suffix_major
    if cuda_major is None and component in _VERSION_IS_CUDA and parsed:
        cuda_major = parsed[0]
    location = None
    try:
        location = str(dist.locate_file(""))
    except Exception:  # locate_file is optional on custom finders
        pass
    return CudaWheel(
        distribution=metadata_name(dist) or name,
        version=version,
        component=component,
        cuda_major=cuda_major,
        minimum=".".join(map(str, floor)) if floor else None,
        minimum_source=source if (floor or ceiling) else None,
        verdict=verdict,
        location=location,
    )
