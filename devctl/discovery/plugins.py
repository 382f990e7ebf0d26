"""Which JAX plugins this Python would load, found the way JAX finds them but without running them.

Mirrors `jax._src.xla_bridge.discover_pjrt_plugins` and
`register_pjrt_plugin_factories_from_env` (jax-internals.md §1.2, §1.3, §7):
the `jax_plugins` namespace package, the `jax_plugins` entry-point group,
PJRT_NAMES_AND_LIBRARY_PATHS, and libtpu. Nothing here imports a plugin
module or libtpu, or calls `initialize()`: the CUDA plugin's initialize loads
CUDA and calls cuInit, and `import libtpu` rewrites TPU_LIBRARY_PATH.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import pkgutil
import sys
from collections.abc import Mapping
from typing import Literal

from devctl.model.plugins import PluginEntry, PluginSource, PluginStatus

NAMESPACE = "jax_plugins"
ENV_VAR = "PJRT_NAMES_AND_LIBRARY_PATHS"
TPU_ENV_VAR = "TPU_LIBRARY_PATH"
DEFAULT_TIMEOUT_S = 20.0

# The library each known plugin package ships (jax-internals.md §7), in preference order.
KNOWN_LIBRARY_NAMES = (
    "xla_cuda_plugin.so",
    "xla_rocm_plugin.so",
    "xla_oneapi_plugin.so",
    "pjrt_plugin_metal_14.dylib",
    "pjrt_plugin_xpu.so",
)
_LIBRARY_SUFFIXES = (".so", ".dylib")

_ELF_MAGIC = b"\x7fELF"
_ELF_TYPE_SHARED = 3  # ET_DYN
_MACHO_MAGICS = {
    bytes.fromhex(m) for m in ("feedface", "cefaedfe", "feedfacf", "cffaedfe", "cafebabe", "bebafeca")
}

# JAX's own words, so users can match them against their logs.
MODULE_MISSING_TEXT = "Jax plugin configuration error: Plugin module {} does not exist"
JSON_WITHOUT_LIBRARY_PATH_TEXT = 'PJRT plugin config file should contain "library_path" field.'


# ------------------------------------------------------------------ packages


def find_plugin_packages(*, environ: Mapping[str, str] | None = None) -> list[PluginEntry]:
    """Plugin modules from the namespace scan and the entry points, then libtpu."""
    environ = os.environ if environ is None else environ
    sources: dict[str, set[PluginSource]] = {}
    for module in _namespace_modules():
        sources.setdefault(module, set()).add(PluginSource.NAMESPACE)
    entry_point_dists: dict[str, importlib.metadata.Distribution] = {}
    for ep in _entry_points():
        sources.setdefault(ep.value, set()).add(PluginSource.ENTRY_POINT)
        dist = getattr(ep, "dist", None)  # None for entry points not read from an installed distribution
        if dist is not None:
            entry_point_dists.setdefault(ep.value, dist)
    owners = _DistributionIndex()
    entries = [
        _package_entry(module, _merge_sources(found), entry_point_dists.get(module), owners)
        for module, found in sorted(sources.items())
    ]
    return entries + _libtpu_entries(environ, owners)


def _namespace_modules() -> list[str]:
    locations = _namespace_locations()
    return [name for _, name, _ in pkgutil.iter_modules(locations, NAMESPACE + ".")] if locations else []


def _namespace_locations() -> list[str]:
    # find_spec of a top-level name locates it without running it.
    loaded = sys.modules.get(NAMESPACE)
    if loaded is not None:
        return list(getattr(loaded, "__path__", []))
    try:
        spec = importlib.util.find_spec(NAMESPACE)
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec else []


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=NAMESPACE))


def _merge_sources(found: set[PluginSource]) -> PluginSource:
    if len(found) > 1:
        return PluginSource.NAMESPACE_AND_ENTRY_POINT
    return next(iter(found))


def _find_module_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """Locate `a.b.c` without importing `a` or `a.b`, whose __init__ would run (and may be a plugin's)."""
    first, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(first) if first else None
    except (ImportError, ValueError):
        return None
    prefix = first
    for part in rest:
        # Misses packages that extend __path__ at import time; importing them is what we must avoid.
        if spec is None or not spec.submodule_search_locations:
            return None
        prefix = f"{prefix}.{part}"
        spec = importlib.machinery.PathFinder.find_spec(prefix, list(spec.submodule_search_locations))
    return spec


def _package_entry(
    module: str,
    source: PluginSource,
    ep_dist: importlib.metadata.Distribution | None,
    owners: _DistributionIndex,
) -> PluginEntry:
    short = module.rsplit(".", 1)[-1]
    spec = _find_module_spec(module)
    if spec is None:
        dist_name, dist_version = _dist_name_version(ep_dist)
        return PluginEntry(
            name=short,
            source=source,
            status=PluginStatus.MODULE_MISSING,
            module=module,
            distribution=dist_name,
            distribution_version=dist_version,
            error=MODULE_MISSING_TEXT.format(module),
        )
    directory = _module_directory(spec)
    dist_name, dist_version = _dist_name_version(ep_dist) if ep_dist else owners.owner_of(directory or spec.origin)
    notes: list[str] = []
    if dist_name is None:
        notes.append("no installed distribution lists this module (a directory on sys.path?)")
    library_path, status, error = _locate_library(directory, spec)
    if library_path:
        status, error = check_library_file(library_path)
    return PluginEntry(
        name=short,
        source=source,
        status=status,
        module=module,
        distribution=dist_name,
        distribution_version=dist_version,
        directory=directory,
        library_path=library_path,
        error=error,
        notes=tuple(notes),
    )


def _module_directory(spec: importlib.machinery.ModuleSpec) -> str | None:
    locations = list(spec.submodule_search_locations or [])  # empty for a single-file module
    return locations[0] if locations else None


def _locate_library(
    directory: str | None, spec: importlib.machinery.ModuleSpec
) -> tuple[str | None, PluginStatus, str | None]:
    if directory is None:
        where = spec.origin or spec.name
        return None, PluginStatus.NO_LIBRARY, f"{where} is a single-file module, not a package that ships a library"
    try:
        names = set(os.listdir(directory))
    except OSError as exc:
        return None, PluginStatus.UNREADABLE, f"cannot list {directory}: {exc.strerror}"
    for known in KNOWN_LIBRARY_NAMES:
        if known in names:
            return os.path.join(directory, known), PluginStatus.OK, None
    candidates = sorted(n for n in names if _is_plugin_library_name(n))
    if len(candidates) == 1:
        return os.path.join(directory, candidates[0]), PluginStatus.OK, None
    if not candidates:
        why = f"no shared library in {directory}; the plugin may locate one in initialize(), which devctl does not run"
    else:
        why = f"several shared libraries in {directory} and none has a known name: {', '.join(candidates)}"
    return None, PluginStatus.NO_LIBRARY, why


def _is_plugin_library_name(name: str) -> bool:
    # Python extension modules (foo.cpython-311-x86_64-linux-gnu.so, foo.abi3.so) are not PJRT libraries.
    if ".cpython-" in name or ".abi3." in name or ".pypy" in name:
        return False
    return name.endswith(_LIBRARY_SUFFIXES)


def _libtpu_entries(environ: Mapping[str, str], owners: _DistributionIndex) -> list[PluginEntry]:
    """libtpu has no jax_plugins entry point: TPU_LIBRARY_PATH, and the installed libtpu package."""
    found: list[tuple[str, str | None, str]] = []  # (path, module, where it came from)
    env_path = environ.get(TPU_ENV_VAR)
    if env_path:
        found.append((env_path, None, f"from {TPU_ENV_VAR}"))
    package_path = _libtpu_package_library()
    if package_path:
        if env_path and os.path.realpath(env_path) == os.path.realpath(package_path):
            found[0] = (env_path, "libtpu", f"from {TPU_ENV_VAR}, which names the libtpu package's library")
        else:
            found.append((package_path, "libtpu", "from the libtpu package"))
    return [_libtpu_entry(path, module, origin, owners) for path, module, origin in found]


def _libtpu_entry(path: str, module: str | None, origin: str, owners: _DistributionIndex) -> PluginEntry:
    status, error = check_library_file(path)
    dist_name, dist_version = owners.owner_of(path)
    return PluginEntry(
        name="libtpu",
        source=PluginSource.LIBTPU,
        status=status,
        module=module,
        distribution=dist_name,
        distribution_version=dist_version,
        directory=os.path.dirname(path),
        library_path=path,
        error=error,
        notes=(origin,),
    )


def _libtpu_package_library() -> str | None:
    # Never `import libtpu`: its __init__ sets TPU_LIBRARY_PATH in this process.
    try:
        spec = importlib.util.find_spec("libtpu")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = os.path.join(location, "libtpu.so")
        if os.path.exists(candidate):
            return candidate
    return None


class _DistributionIndex:
    """Which installed distribution lists a file, built on first use from every RECORD."""

    def __init__(self) -> None:
        self._by_path: dict[str, tuple[str, str | None]] | None = None

    def owner_of(self, path: str | None) -> tuple[str | None, str | None]:
        if not path:
            return None, None
        if self._by_path is None:
            self._by_path = self._build()
        return self._by_path.get(os.path.realpath(path), (None, None))

    @staticmethod
    def _build() -> dict[str, tuple[str, str | None]]:
        # Keys are a distribution's top-level entries and their children (jax_plugins/xla_cuda12,
        # libtpu/libtpu.so): enough to map a plugin directory or library without storing every file.
        index: dict[str, tuple[str, str | None]] = {}
        for dist in importlib.metadata.distributions():
            name, version = _dist_name_version(dist)
            if name is None:
                continue
            try:
                files = dist.files or []
            except Exception:  # a broken RECORD must not break discovery
                continue
            for f in files:
                parts = f.parts
                if len(parts) >= 2 and parts[0] in (NAMESPACE, "libtpu"):
                    key = os.path.realpath(str(dist.locate_file(os.path.join(parts[0], parts[1]))))
                    index.setdefault(key, (name, version))
        return index


def _dist_name_version(dist: importlib.metadata.Distribution | None) -> tuple[str | None, str | None]:
    if dist is None:
        return None, None
    name = dist.metadata["Name"] if dist.metadata else None
    return name, dist.version


# ----------------------------------------------------------- env variable


def parse_pjrt_env(value: str | None) -> list[PluginEntry]:
    """PJRT_NAMES_AND_LIBRARY_PATHS, item by item, split exactly as JAX splits it."""
    if not value:
        return []
    entries = [_env_item(item, value) for item in value.split(",")]
    return _mark_overridden(entries)


def _env_item(item: str, whole: str) -> PluginEntry:
    parts = item.split(os.pathsep)
    if len(parts) != 2:
        # JAX logs this and skips the item; an empty item (a stray comma) lands here too.
        why = "empty item (a stray comma?)" if not item else f"expected NAME{os.pathsep}PATH"
        return PluginEntry(
            name=item,
            source=PluginSource.ENV,
            status=PluginStatus.MALFORMED_ITEM,
            error=f"invalid value {item!r} in env var {ENV_VAR} {whole!r}: {why}; JAX skips it",
        )
    name, path = parts
    notes = ("empty plugin name",) if not name else ()
    if path.endswith(".json"):
        return _env_json_item(name, path, notes)
    status, error = check_library_file(path)
    return PluginEntry(
        name=name, source=PluginSource.ENV, status=status, library_path=path, error=error, notes=notes
    )


def _env_json_item(name: str, config_path: str, notes: tuple[str, ...]) -> PluginEntry:
    config, status, error = _read_json_config(config_path)
    fields: dict = {}
    if config is not None:
        if "create_option" in config and "create_options" not in config:
            # JAX's docstring says create_option, its code reads create_options.
            notes += ('config has "create_option" but JAX reads "create_options": these options are ignored',)
        status, error, fields = _json_config_library(config_path, config)
    return PluginEntry(
        name=name,
        source=PluginSource.ENV,
        status=status,
        config_path=config_path,
        error=error,
        notes=notes,
        **fields,
    )


def _read_json_config(config_path: str) -> tuple[dict | None, PluginStatus, str | None]:
    try:
        with open(config_path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None, PluginStatus.FILE_MISSING, f"plugin config {config_path} does not exist"
    except OSError as exc:
        return None, PluginStatus.UNREADABLE, f"cannot read plugin config {config_path}: {exc.strerror}"
    except UnicodeDecodeError:
        return None, PluginStatus.INVALID_JSON, f"plugin config {config_path} is not UTF-8 text"
    try:
        config = json.loads(text)
    except ValueError as exc:
        return None, PluginStatus.INVALID_JSON, f"plugin config {config_path} is not valid JSON: {exc}"
    if not isinstance(config, dict):
        kind = type(config).__name__
        return None, PluginStatus.INVALID_JSON, f"plugin config {config_path} holds a JSON {kind}, not an object"
    return config, PluginStatus.OK, None


def _json_config_library(config_path: str, config: dict) -> tuple[PluginStatus, str | None, dict]:
    if "library_path" not in config:
        return PluginStatus.JSON_WITHOUT_LIBRARY_PATH, f"{config_path}: {JSON_WITHOUT_LIBRARY_PATH_TEXT}", {}
    library_path = config["library_path"]
    if not isinstance(library_path, str):
        kind = type(library_path).__name__
        return PluginStatus.JSON_WITHOUT_LIBRARY_PATH, f"{config_path}: library_path is a JSON {kind}, not a string", {}
    status, error = check_library_file(library_path)
    return status, error, {"library_path": library_path, "create_options": config.get("create_options")}


def _mark_overridden(entries: list[PluginEntry]) -> list[PluginEntry]:
    """JAX builds a dict from the items, so the last item with a name wins."""
    from dataclasses import replace

    last = {e.name: i for i, e in enumerate(entries) if e.status is not PluginStatus.MALFORMED_ITEM}
    return [
        replace(e, notes=e.notes + ("overridden by a later item with the same name",))
        if e.status is not PluginStatus.MALFORMED_ITEM and last[e.name] != i
        else e
        for i, e in enumerate(entries)
    ]


# ------------------------------------------------------------ file checks


def check_library_file(path: str) -> tuple[PluginStatus, str | None]:
    """Is `path` a readable shared library? Judged by its header, not its name."""
    if not path:
        return PluginStatus.FILE_MISSING, "empty library path"
    if not os.path.exists(path):
        return PluginStatus.FILE_MISSING, f"{path} does not exist"
    if os.path.isdir(path):
        return PluginStatus.NOT_SHARED_LIBRARY, f"{path} is a directory"
    try:
        with open(path, "rb") as f:
            header = f.read(20)
    except OSError as exc:
        return PluginStatus.UNREADABLE, f"cannot read {path}: {exc.strerror}"
    if header[:4] == _ELF_MAGIC:
        if _elf_type(header) != _ELF_TYPE_SHARED:
            return PluginStatus.NOT_SHARED_LIBRARY, f"{path} is an ELF file but not a shared object"
        return PluginStatus.OK, None
    if header[:4] in _MACHO_MAGICS:
        return PluginStatus.OK, None
    return PluginStatus.NOT_SHARED_LIBRARY, f"{path} is not an ELF or Mach-O shared library"


def _elf_type(header: bytes) -> int | None:
    if len(header) < 18:
        return None
    byteorder: Literal["little", "big"] = "little" if header[5] == 1 else "big"  # EI_DATA: 1 little-endian, 2 big-endian
    return int.from_bytes(header[16:18], byteorder)


# The words of a plugin's initialize() that stops when JAX_PLATFORMS leaves its platform out (jax-cuda12-plugin
# 0.10.2 and 0.12's: "Platforms cpu were explicitly requested and do not include CUDA"; 0.6.2's has none).
_HONOURS_JAX_PLATFORMS = "jax_platforms"
_SOURCE_CAP = 1 << 20


def honours_jax_platforms(module: str) -> bool | None:
    """Whether the installed plugin module's initialize() reads JAX_PLATFORMS (and so JAX_PLATFORMS=cpu silences
    its failure), from its own source, located without importing it; None where its source cannot be read."""
    from devctl.safefs import read_regular

    spec = _find_module_spec(module)
    origin = getattr(spec, "origin", None) if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return None
    try:
        source = read_regular(origin, _SOURCE_CAP, follow_symlinks=True, truncate=True)
    except OSError:
        return None
    return _HONOURS_JAX_PLATFORMS.encode() in source
