"""Read a PJRT library's API version and attributes without initializing it.

Child side: `python -m devctl.probe.pjrt_library '{"path": "..."}'` dlopens
the library, calls `GetPjrtApi()` and reads the `PJRT_Api` table under the
ABI guards of jax-internals.md §6.6. It never calls `PJRT_Plugin_Initialize`
(libtpu's takes /tmp/libtpu_lockfile and queries the metadata server) nor
`PJRT_Client_Create` (opens devices, preallocates memory).

Parent side: `introspect_libraries` runs one child per library, so a library
that segfaults or hangs costs its own row only.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from devctl.model.plugins import PjrtApiVersion, PjrtLibraryInfo, PluginStatus

_MODULE = "devctl.probe.pjrt_library"
_MAX_WORKERS = 4

# LP64 offsets into PJRT_Api (xla/pjrt/c/pjrt_c_api.h); fields are only appended.
_API_EXTENSION_START = 8
_API_VERSION = 16  # PJRT_Api_Version: struct_size@16, extension_start@24, major@32, minor@36
_API_VERSION_END = 40
_API_VERSION_STRUCT_MIN = 24
_API_ERROR_DESTROY = 40
_API_ERROR_MESSAGE = 48
_API_PLUGIN_ATTRIBUTES = 72
_PTR = 8

# PJRT_Extension_Base gained struct_size in 0.45; older chains have another layout.
_EXTENSION_BASE_MIN_MINOR = 45
_EXTENSION_BASE_SIZE = 24  # struct_size, type (int, padded), next
_EXTENSION_HOP_LIMIT = 64

# PJRT_NamedValue: struct_size, extension_start, name@16, name_size@24, type@32, value@40, value_size@48.
_NAMED_VALUE_SIZE = 56
_MAX_ATTRIBUTES = 256
_MAX_NAME_BYTES = 4096
_MAX_STRING_BYTES = 1 << 16
_MAX_LIST_ITEMS = 4096
_K_STRING, _K_INT64, _K_INT64_LIST, _K_FLOAT, _K_BOOL = range(5)


class _AttributesArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("attributes", ctypes.c_void_p),
        ("num_attributes", ctypes.c_size_t),
    ]


class _ErrorMessageArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("error", ctypes.c_void_p),
        ("message", ctypes.c_void_p),
        ("message_size", ctypes.c_size_t),
    ]


class _ErrorDestroyArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("error", ctypes.c_void_p),
    ]


# ---------------------------------------------------------------- child side


def _size_t(addr: int) -> int:
    return ctypes.c_size_t.from_address(addr).value


def _ptr(addr: int) -> int:
    return ctypes.c_void_p.from_address(addr).value or 0


def _int(addr: int) -> int:
    return ctypes.c_int.from_address(addr).value


def _text(addr: int, size: int, limit: int) -> str:
    return ctypes.string_at(addr, min(size, limit)).decode("utf-8", "replace") if addr else ""


class _Probe:
    """One library, read step by step; `info` is sent with every step so a crash keeps what was read."""

    def __init__(self, path: str, emit) -> None:
        self.path = path
        self.emit = emit
        self.info: dict = {
            "path": path,
            "status": PluginStatus.OK.value,
            "error": None,
            "pjrt_api_version": None,
            "struct_size": None,
            "attributes": {},
            "extension_types": [],
            "load_s": None,
            "notes": [],
        }

    def step(self, name: str) -> None:
        self.emit("step", step=name, info=self.info)

    def fail(self, status: PluginStatus, error: str) -> dict:
        self.info.update(status=status.value, error=error)
        return self.info

    def note(self, text: str) -> None:
        self.info["notes"].append(text)

    def run(self) -> dict:
        self.step("dlopen")
        started = time.perf_counter()
        try:
            # RTLD_LOCAL keeps the plugin's bundled XLA/absl symbols out of the global namespace.
            lib = ctypes.CDLL(self.path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as exc:
            return self.fail(PluginStatus.LOAD_FAILED, str(exc))
        self.info["load_s"] = time.perf_counter() - started
        try:
            get_api = lib.GetPjrtApi
        except AttributeError:
            return self.fail(PluginStatus.NO_GET_PJRT_API, f"GetPjrtApi not found in {self.path}")
        get_api.restype = ctypes.c_void_p
        get_api.argtypes = []
        self.step("GetPjrtApi()")
        api = get_api()
        if not api:
            return self.fail(PluginStatus.NULL_API, "GetPjrtApi() returned a null PJRT_Api pointer")
        self.step("reading PJRT_Api")
        self.read_api(api)
        return self.info

    def read_api(self, api: int) -> None:
        struct_size = _size_t(api)
        self.info["struct_size"] = struct_size
        version = self.read_version(api, struct_size)
        if version is None:
            return
        if version["major"] != 0:
            self.note(
                f"PJRT API major version {version['major']} is not 0: the table layout after the version "
                "is unknown, so extensions and attributes were not read"
            )
            return
        self.read_extensions(api, struct_size, version["minor"])
        self.read_attributes(api, struct_size)

    def read_version(self, api: int, struct_size: int) -> dict | None:
        if struct_size < _API_VERSION_END:
            self.note(f"PJRT_Api.struct_size is {struct_size}, under {_API_VERSION_END}: too small to hold the version")
            return None
        version_size = _size_t(api + _API_VERSION)
        if version_size < _API_VERSION_STRUCT_MIN:
            self.note(
                f"PJRT_Api_Version.struct_size is {version_size}, under {_API_VERSION_STRUCT_MIN}: version not read"
            )
            return None
        version = {"major": _int(api + _API_VERSION + 16), "minor": _int(api + _API_VERSION + 20)}
        self.info["pjrt_api_version"] = version
        return version

    def read_extensions(self, api: int, struct_size: int, minor: int) -> None:
        if struct_size < _API_EXTENSION_START + _PTR:
            return
        ext = _ptr(api + _API_EXTENSION_START)
        if ext and minor < _EXTENSION_BASE_MIN_MINOR:
            self.note(f"extension chain not read: its layout before PJRT API 0.{_EXTENSION_BASE_MIN_MINOR} differs")
            return
        self.step("extension chain")
        seen: set[int] = set()
        while ext:
            if ext in seen:
                self.note("extension chain loops back on itself; stopped")
                return
            if len(seen) >= _EXTENSION_HOP_LIMIT:
                self.note(f"extension chain longer than {_EXTENSION_HOP_LIMIT}; stopped")
                return
            seen.add(ext)
            ext_size = _size_t(ext)
            if ext_size < _EXTENSION_BASE_SIZE:
                self.note(f"extension with struct_size {ext_size}, under {_EXTENSION_BASE_SIZE}; chain not followed")
                return
            self.info["extension_types"].append(_int(ext + 8))
            ext = _ptr(ext + 16)

    def read_attributes(self, api: int, struct_size: int) -> None:
        if struct_size < _API_PLUGIN_ATTRIBUTES + _PTR:
            self.note(f"PJRT_Api.struct_size is {struct_size}: too small to hold PJRT_Plugin_Attributes")
            return
        fn_addr = _ptr(api + _API_PLUGIN_ATTRIBUTES)
        if not fn_addr:
            self.note("PJRT_Plugin_Attributes is null")
            return
        self.step("PJRT_Plugin_Attributes()")
        args = _AttributesArgs(struct_size=ctypes.sizeof(_AttributesArgs))
        fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_AttributesArgs))(fn_addr)
        error = fn(ctypes.byref(args))
        if error:
            self.note(f"PJRT_Plugin_Attributes failed: {self.error_text(api, struct_size, error)}")
            return
        self.decode_attributes(args.attributes or 0, args.num_attributes)

    def decode_attributes(self, array: int, count: int) -> None:
        if not count:
            return
        if not array:
            self.note(f"PJRT_Plugin_Attributes returned {count} attributes at a null pointer")
            return
        if count > _MAX_ATTRIBUTES:
            self.note(f"{count} attributes reported; read the first {_MAX_ATTRIBUTES}")
            count = _MAX_ATTRIBUTES
        # The plugin's own sizeof(PJRT_NamedValue) is the array stride; it may have grown.
        stride = _size_t(array)
        if stride < _NAMED_VALUE_SIZE:
            self.note(f"PJRT_NamedValue.struct_size is {stride}, under {_NAMED_VALUE_SIZE}: attributes not read")
            return
        for i in range(count):
            self.decode_named_value(array + i * stride)

    def decode_named_value(self, addr: int) -> None:
        name = _text(_ptr(addr + 16), _size_t(addr + 24), _MAX_NAME_BYTES)
        kind = _int(addr + 32)
        value_addr = addr + 40
        size = _size_t(addr + 48)
        value: str | int | float | bool | list[int]
        if kind == _K_STRING:
            value = _text(_ptr(value_addr), size, _MAX_STRING_BYTES)
        elif kind == _K_INT64:
            value = ctypes.c_int64.from_address(value_addr).value
        elif kind == _K_INT64_LIST:
            items = _ptr(value_addr)
            if size and not items:
                self.note(f"attribute {name!r}: list of {size} at a null pointer")
                return
            n = min(size, _MAX_LIST_ITEMS)
            value = list((ctypes.c_int64 * n).from_address(items)) if n else []
        elif kind == _K_FLOAT:
            value = ctypes.c_float.from_address(value_addr).value
        elif kind == _K_BOOL:
            value = ctypes.c_bool.from_address(value_addr).value
        else:
            self.note(f"attribute {name!r} has unknown PJRT_NamedValue type {kind}")
            return
        self.info["attributes"][name] = value

    def error_text(self, api: int, struct_size: int, error: int) -> str:
        """PJRT_Error_Message, then PJRT_Error_Destroy: the error is the caller's to free."""
        text = "(no PJRT_Error_Message in this API table)"
        if struct_size >= _API_ERROR_MESSAGE + _PTR and _ptr(api + _API_ERROR_MESSAGE):
            args = _ErrorMessageArgs(struct_size=ctypes.sizeof(_ErrorMessageArgs), error=error)
            ctypes.CFUNCTYPE(None, ctypes.POINTER(_ErrorMessageArgs))(_ptr(api + _API_ERROR_MESSAGE))(
                ctypes.byref(args)
            )
            text = _text(args.message or 0, args.message_size, _MAX_STRING_BYTES) or "(empty message)"
        if struct_size >= _API_ERROR_DESTROY + _PTR and _ptr(api + _API_ERROR_DESTROY):
            destroy = _ErrorDestroyArgs(struct_size=ctypes.sizeof(_ErrorDestroyArgs), error=error)
            ctypes.CFUNCTYPE(None, ctypes.POINTER(_ErrorDestroyArgs))(_ptr(api + _API_ERROR_DESTROY))(
                ctypes.byref(destroy)
            )
        return " ".join(text.split())


def _child_main() -> None:
    from devctl.probe import channel

    path = channel.read_request()["path"]
    try:
        info = _Probe(path, channel.emit).run()
    except Exception as exc:  # a Python-side bug must still come back as a row
        info = {"path": path, "status": PluginStatus.PROBE_FAILED.value, "error": f"{type(exc).__name__}: {exc}"}
    channel.emit("result", info=info)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip exit-time C++ destructors: a plugin that crashes while unloading must not undo a good answer.
    channel.release_runtime()  # no runtime was initialized here, but every child leaves the same way
    os._exit(0)


# ---------------------------------------------------------------- parent side


def introspect_libraries(paths: list[str], timeout_s: float) -> dict[str, PjrtLibraryInfo]:
    """Probe each distinct library in its own child, a few at a time; keys are the given paths."""
    by_file: dict[str, list[str]] = {}
    for path in dict.fromkeys(paths):
        by_file.setdefault(os.path.realpath(path), []).append(path)
    if not by_file:
        return {}
    with ThreadPoolExecutor(max_workers=min(_MAX_WORKERS, len(by_file))) as pool:
        infos = pool.map(lambda group: introspect_library(group[0], timeout_s), by_file.values())
        return {path: _with_path(info, path) for group, info in zip(by_file.values(), infos) for path in group}


def introspect_library(path: str, timeout_s: float) -> PjrtLibraryInfo:
    from devctl.probe.runner import run_child

    result = run_child(_MODULE, {"path": path}, timeout_s=timeout_s)
    final = result.last("result")
    if final is not None:
        return _info_from_json(final["info"], path)
    last_step = result.last("step")
    stage = last_step["step"] if last_step else "start-up"
    partial = last_step["info"] if last_step else {"path": path}
    if result.timed_out:
        status, error = PluginStatus.TIMEOUT, f"no answer within {timeout_s:g} s during {stage}; killed"
    elif result.signal_name:
        status, error = PluginStatus.CRASHED, f"killed by {result.signal_name} during {stage}"
    else:
        status, error = PluginStatus.PROBE_FAILED, f"probe {result.failure_text()} during {stage}"
    return _info_from_json({**partial, "status": status.value, "error": error}, path)


def _with_path(info: PjrtLibraryInfo, path: str) -> PjrtLibraryInfo:
    from dataclasses import replace

    return info if info.path == path else replace(info, path=path)


def _info_from_json(data: dict, path: str) -> PjrtLibraryInfo:
    version = data.get("pjrt_api_version")
    return PjrtLibraryInfo(
        path=path,
        status=PluginStatus(data["status"]),
        error=data.get("error"),
        pjrt_api_version=PjrtApiVersion(version["major"], version["minor"]) if version else None,
        struct_size=data.get("struct_size"),
        attributes=dict(data.get("attributes") or {}),
        extension_types=tuple(data.get("extension_types") or ()),
        load_s=data.get("load_s"),
        notes=tuple(data.get("notes") or ()),
    )


if __name__ == "__main__":
    _child_main()
