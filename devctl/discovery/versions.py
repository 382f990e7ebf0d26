"""Installed versions of jax, jaxlib, plugins and libtpu, read from package metadata, checked the way JAX checks them."""

from __future__ import annotations

import re
from importlib import metadata
from importlib.util import find_spec

from devctl.model.environment import PackageVersion, VersionFinding

_PLUGIN_RE = re.compile(r"^jax[-_](cuda\d+|rocm\d+|oneapi)[-_](plugin|pjrt)$")
_VERSION_PREFIX = re.compile(r"[0-9]+(?:\.[0-9]+)*")


def _parse(v: str) -> tuple[int, ...]:
    """JAX's own parse: the dotted numeric prefix of a PEP 440 version."""
    m = _VERSION_PREFIX.match(v)
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_packages() -> list[PackageVersion]:
    """The JAX stack as installed: jax, jaxlib, every jax plugin/pjrt package, libtpu, numpy, ml_dtypes."""
    found: dict[str, PackageVersion] = {}
    for dist in metadata.distributions():
        name = _norm(dist.metadata.get("Name") or "")
        if name in found or not name:
            continue
        role = _role(name)
        if role:
            found[name] = PackageVersion(name=name, version=dist.version, role=role)
    for required in ("jax", "jaxlib"):
        found.setdefault(required, PackageVersion(name=required, version=None, role=required))
    order = ["jax", "jaxlib", "plugin", "pjrt", "libtpu", "other"]
    return sorted(found.values(), key=lambda p: (order.index(p.role), p.name))


def _role(name: str) -> str | None:
    if name in ("jax", "jaxlib"):
        return name
    m = _PLUGIN_RE.match(name)
    if m:
        return m.group(2)
    if name in ("libtpu", "libtpu-nightly"):
        return "libtpu"
    if name in ("numpy", "ml-dtypes", "jax-tpu-embedding", "jax-metal", "intel-extension-for-openxla"):
        return "other"
    return None


def minimum_jaxlib_version() -> str | None:
    """`_minimum_jaxlib_version` from jax/version.py, read as text (importing jax would initialize nothing, but costs a second)."""
    spec = find_spec("jax")
    if not spec or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        try:
            with open(f"{location}/version.py", encoding="utf-8") as f:
                m = re.search(r"^_minimum_jaxlib_version\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
        except OSError:
            continue
        if m:
            return m.group(1)
    return None


def libtpu_pin(jax_version: str | None) -> str | None:
    """The libtpu version jax[tpu] pins, e.g. '0.0.42.*', from jax's metadata."""
    if not jax_version:
        return None
    try:
        requires = metadata.requires("jax") or []
    except metadata.PackageNotFoundError:
        return None
    for req in requires:
        m = re.match(r"^libtpu(?:-nightly)?\s*==\s*([^;\s]+)\s*;.*extra\s*==\s*['\"]tpu['\"]", req)
        if m:
            return m.group(1)
    return None


def check_versions(packages: list[PackageVersion], minimum_jaxlib: str | None, tpu_pin: str | None) -> list[VersionFinding]:
    """Findings for every combination JAX rejects (jaxlib too old or newer than jax, plugin != jaxlib) or that skews."""
    by_name = {p.name: p for p in packages}
    jax, jaxlib = by_name.get("jax"), by_name.get("jaxlib")
    findings: list[VersionFinding] = []
    if not jax or not jax.version:
        findings.append(VersionFinding("error", ["jax"], "jax is not installed", "pip install -U jax"))
    if not jaxlib or not jaxlib.version:
        findings.append(VersionFinding("error", ["jaxlib"], "jaxlib is not installed", "pip install -U jax jaxlib"))
    if not (jax and jax.version and jaxlib and jaxlib.version):
        return findings
    fix = f"pip install -U 'jax=={jax.version}' 'jaxlib=={jax.version}'"
    if minimum_jaxlib and _parse(jaxlib.version) < _parse(minimum_jaxlib):
        findings.append(
            VersionFinding(
                "error", ["jax", "jaxlib"],
                f"jaxlib is version {jaxlib.version}, but this version of jax requires version >= {minimum_jaxlib}.",
                fix,
            )
        )  # fmt: skip
    if _parse(jaxlib.version) > _parse(jax.version):
        findings.append(
            VersionFinding(
                "error", ["jax", "jaxlib"],
                f"jaxlib version {jaxlib.version} is newer than and incompatible with jax version {jax.version}.",
                fix,
            )
        )  # fmt: skip
    for p in packages:
        if p.role == "plugin" and p.version and "rocm" not in p.name and _parse(p.version) != _parse(jaxlib.version):
            # jaxlib/plugin_support.py::check_plugin_version: exact numeric equality, ROCm exempt.
            findings.append(
                VersionFinding(
                    "error", [p.name, "jaxlib"],
                    f"JAX plugin {p.name} version {p.version} is installed, but it is not compatible with the "
                    f"installed jaxlib version {jaxlib.version}, so it will not be used.",
                    f"pip install -U '{p.name}=={jaxlib.version}' or install the jax extra: pip install -U 'jax[{_extra(p.name)}]'",
                )
            )  # fmt: skip
        elif p.role == "pjrt" and p.version and _parse(p.version)[:3] != _parse(jaxlib.version)[:3]:
            findings.append(
                VersionFinding(
                    "error", [p.name, "jaxlib"],
                    f"{p.name} {p.version} was built for jaxlib {'.'.join(map(str, _parse(p.version)[:3]))}, "
                    f"but jaxlib {jaxlib.version} is installed: expect a PJRT API version mismatch or a crash at startup.",
                    f"pip install -U 'jax[{_extra(p.name)}]=={jax.version}'",
                )
            )  # fmt: skip
        elif p.role == "libtpu" and p.version and tpu_pin and not _matches_pin(p.version, tpu_pin):
            findings.append(
                VersionFinding(
                    "warning", [p.name, "jax"],
                    f"{p.name} {p.version} is installed, but jax {jax.version} pins libtpu=={tpu_pin}.",
                    f"pip install -U 'jax[tpu]=={jax.version}'",
                )
            )  # fmt: skip
    return findings


def _extra(name: str) -> str:
    m = _PLUGIN_RE.match(name)
    return m.group(1) if m else "cuda12"


def _matches_pin(version: str, pin: str) -> bool:
    if pin.endswith(".*"):
        return version == pin[:-2] or version.startswith(pin[:-1])
    return version == pin
