"""JAX plugins as found on disk and what their PJRT libraries say about themselves."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Union

# A PJRT_NamedValue decoded: kString, kInt64, kInt64List, kFloat, kBool.
AttributeValue = Union[str, int, list[int], float, bool, None]


class PluginSource(str, enum.Enum):
    NAMESPACE = "namespace"  # a module under the jax_plugins namespace package
    ENTRY_POINT = "entry_point"  # advertised in the `jax_plugins` entry-point group
    NAMESPACE_AND_ENTRY_POINT = "namespace+entry_point"
    ENV = "env"  # PJRT_NAMES_AND_LIBRARY_PATHS
    LIBTPU = "libtpu"  # TPU_LIBRARY_PATH or the libtpu package


class PluginStatus(str, enum.Enum):
    """One word on what is wrong, from discovery or from the library probe."""

    OK = "ok"
    # discovery
    MODULE_MISSING = "module missing"
    NO_LIBRARY = "no library"
    MALFORMED_ITEM = "malformed item"
    FILE_MISSING = "file missing"
    NOT_SHARED_LIBRARY = "not a shared library"
    UNREADABLE = "unreadable"
    INVALID_JSON = "invalid json"
    JSON_WITHOUT_LIBRARY_PATH = "json without library_path"
    # library probe
    LOAD_FAILED = "load failed"
    NO_GET_PJRT_API = "no GetPjrtApi"
    NULL_API = "null api"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    PROBE_FAILED = "probe failed"


@dataclass(frozen=True)
class PjrtApiVersion:
    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


@dataclass(frozen=True)
class PjrtLibraryInfo:
    """What a PJRT library reports without being initialized (dlopen + GetPjrtApi only)."""

    path: str
    status: PluginStatus
    error: str | None = None
    pjrt_api_version: PjrtApiVersion | None = None
    struct_size: int | None = None  # PJRT_Api.struct_size: how much of the API table exists
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    extension_types: tuple[int, ...] = ()  # PJRT_Extension_Type ids in chain order
    load_s: float | None = None  # dlopen time in the probe child
    notes: tuple[str, ...] = ()  # what could not be read, and why


@dataclass(frozen=True)
class PluginEntry:
    """One plugin as discovery sees it: where it comes from and which library it names."""

    name: str
    source: PluginSource
    status: PluginStatus
    module: str | None = None  # e.g. jax_plugins.xla_cuda12; None for env and libtpu
    distribution: str | None = None  # the installed package that ships it
    distribution_version: str | None = None
    directory: str | None = None  # the plugin module's package directory
    library_path: str | None = None
    config_path: str | None = None  # the .json config named in PJRT_NAMES_AND_LIBRARY_PATHS
    create_options: dict[str, Any] | None = None
    error: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PluginReport:
    """A plugin with its library probed: one row of `devctl plugins`.

    `status` and `error` are discovery's when discovery found a problem,
    else the library probe's.
    """

    name: str
    source: PluginSource
    status: PluginStatus
    library_path: str | None
    pjrt_api_version: PjrtApiVersion | None
    attributes: dict[str, AttributeValue]
    error: str | None
    module: str | None = None
    distribution: str | None = None
    distribution_version: str | None = None
    config_path: str | None = None
    create_options: dict[str, Any] | None = None
    struct_size: int | None = None
    extension_types: tuple[int, ...] = ()
    load_s: float | None = None
    notes: tuple[str, ...] = ()

    @classmethod
    def from_parts(cls, entry: PluginEntry, library: PjrtLibraryInfo | None) -> PluginReport:
        notes = entry.notes
        if entry.status is not PluginStatus.OK or library is None:
            status, error = entry.status, entry.error
            if entry.status is PluginStatus.OK:
                notes += ("library not introspected",)
        else:
            status, error = library.status, library.error
            notes += library.notes
        return cls(
            name=entry.name,
            source=entry.source,
            status=status,
            library_path=entry.library_path,
            pjrt_api_version=library.pjrt_api_version if library else None,
            attributes=dict(library.attributes) if library else {},
            error=error,
            module=entry.module,
            distribution=entry.distribution,
            distribution_version=entry.distribution_version,
            config_path=entry.config_path,
            create_options=entry.create_options,
            struct_size=library.struct_size if library else None,
            extension_types=library.extension_types if library else (),
            load_s=library.load_s if library else None,
            notes=notes,
        )
