"""JAX plugins as found on disk and what their PJRT libraries say about themselves."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from devctl.model import json_schema

# A PJRT_NamedValue decoded: kString, kInt64, kInt64List, kFloat, kBool.
AttributeValue = str | int | list[int] | float | bool | None


SCHEMA = "devctl.plugins/1"


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
class PjrtVerdict:
    """Whether jaxlib's plugin check (xla/pjrt/pjrt_api.cc InitializePjrtPlugin) lets a library's version through."""

    accepted: bool | None  # None: jaxlib's version or the library's could not be read
    reason: str  # when refused, jaxlib's own words
    refused_by_setting: bool = False  # refused in strict mode only: compatibility mode, jaxlib's default, takes it


@dataclass(frozen=True)
class FrameworkPjrt:
    """The PJRT C API version jaxlib was built with, and the rule its plugin check applies here.

    jaxlib exports neither; both are read from its plugin check's own answers in
    a child process (devctl.probe.framework_pjrt). The rule, from
    xla/pjrt/pjrt_api.cc: in compatibility mode a plugin needs the framework's
    major and a minor >= minimum_minor (no upper bound); in strict mode the
    exact version. ENABLE_PJRT_COMPATIBILITY unset means compatibility mode in
    every jaxlib measured (0.4.36 to 0.12); "false", "0" or an unparsable value
    means strict.
    """

    jaxlib_version: str | None
    pjrt_api_version: PjrtApiVersion | None  # PJRT_API_MAJOR.PJRT_API_MINOR compiled into jaxlib
    compatibility: bool | None  # the mode under this environment's ENABLE_PJRT_COMPATIBILITY
    minimum_minor: int | None  # kMinPjRtMinor, the oldest minor compatibility mode takes
    default_compatibility: bool | None  # the mode with ENABLE_PJRT_COMPATIBILITY unset
    setting: str | None  # ENABLE_PJRT_COMPATIBILITY as set here; None: unset
    error: str | None = None  # why part of this is unknown

    @property
    def mode(self) -> str:
        if self.compatibility is None:
            return "unknown mode"
        return f"compatibility mode (same major, minor >= {self.minimum_minor})" if self.compatibility else "strict mode (exact version)"

    def verdict(self, plugin: PjrtApiVersion | None) -> PjrtVerdict:
        """What jaxlib's check says of a library speaking `plugin`, in jaxlib's own words when it refuses."""
        fw = self.pjrt_api_version
        if plugin is None:
            return PjrtVerdict(None, "the library's PJRT C API version is unknown")
        if fw is None or self.compatibility is None or (self.compatibility and self.minimum_minor is None):
            return PjrtVerdict(None, f"jaxlib's own PJRT C API version or rule is unknown: {self.error or 'not measured'}")
        if self.compatibility:
            if plugin.major != fw.major:
                return PjrtVerdict(False, f"Mismatched PJRT plugin PJRT API major version ({plugin.major}) and framework PJRT API major version {fw.major}).")
            if plugin.minor < (self.minimum_minor or 0):
                return PjrtVerdict(False, f"Plugin PJRT API version {plugin} is older than the minimum supported version {fw.major}.{self.minimum_minor}")
            same = "jaxlib's own version" if plugin == fw else f"jaxlib speaks {fw}; {self.mode} takes it"
            return PjrtVerdict(True, f"accepted: {same}")
        if plugin != fw:
            takes = self.minimum_minor is not None and plugin.major == fw.major and plugin.minor >= self.minimum_minor
            return PjrtVerdict(False, f"Mismatched PJRT plugin PJRT API version ({plugin}) and framework PJRT API version {fw}).", takes)
        return PjrtVerdict(True, "accepted: jaxlib's own version (strict mode)")


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
    # Open on purpose: the client create options that config passes through to the plugin, whatever it chose.
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
    config_path: str | None = None  # the .json config named in PJRT_NAMES_AND_LIBRARY_PATHS
    create_options: dict[str, Any] | None = None  # from that config, as the plugin chose them (open on purpose)
    struct_size: int | None = None  # PJRT_Api.struct_size: how much of the API table exists
    extension_types: tuple[int, ...] = ()
    load_s: float | None = None
    notes: tuple[str, ...] = ()
    # jaxlib's own PJRT C API version beside the library's, and what jaxlib's plugin check says of it.
    framework_pjrt_api_version: PjrtApiVersion | None = None
    pjrt_accepted: bool | None = None  # jaxlib's plugin check lets the library's version through; None: unknown
    pjrt_check: str | None = None  # what jaxlib's plugin check says of it; jaxlib's own words when it refuses
    pjrt_refused_by_setting: bool = False  # refused only because ENABLE_PJRT_COMPATIBILITY turns jaxlib's compatibility mode off

    @classmethod
    def from_parts(cls, entry: PluginEntry, library: PjrtLibraryInfo | None, framework: FrameworkPjrt | None = None) -> PluginReport:
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
            **_judged(library.pjrt_api_version if library else None, framework),
        )


@dataclass(frozen=True)
class PluginsReport:
    """`devctl plugins`: every plugin JAX would consider, under its schema id."""

    schema: str = field(metadata=json_schema(const=SCHEMA))
    plugins: list[PluginReport]


def _judged(version: PjrtApiVersion | None, framework: FrameworkPjrt | None) -> dict[str, Any]:
    if framework is None or version is None:
        return {"framework_pjrt_api_version": framework.pjrt_api_version if framework else None}
    verdict = framework.verdict(version)
    return {
        "framework_pjrt_api_version": framework.pjrt_api_version,
        "pjrt_accepted": verdict.accepted,
        "pjrt_check": verdict.reason,
        "pjrt_refused_by_setting": verdict.refused_by_setting,
    }
