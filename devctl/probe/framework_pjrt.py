"""jaxlib's own PJRT C API version, and the rule it applies to a plugin's, asked of jaxlib itself.

jaxlib exposes neither PJRT_API_MAJOR/MINOR nor its compatibility rule
(jax-internals.md §6.7: a plugin's version is readable only from a created
client, jaxlib's own nowhere). Its plugin check tells both in its answers
(xla/pjrt/pjrt_api.cc, InitializePjrtPlugin):

  strict:        "Mismatched PJRT plugin PJRT API version (0.0) and framework PJRT API version 0.112)."
  compatibility: "Plugin PJRT API version 0.0 is older than the minimum supported version 0.29"

Child side: `python -m devctl.probe.framework_pjrt` hands jaxlib a PJRT_Api
table that lives in the child's own memory and claims version 0.0 (no library
is opened), and asks jaxlib to initialize it: once with
ENABLE_PJRT_COMPATIBILITY=false (the answer names jaxlib's version), once
with it unset (jaxlib's default mode) and, when the user set it, once as set.
Version 0.0 is refused before PJRT_Plugin_Initialize in both modes; the
table's Initialize is a no-op should a future jaxlib take it. Only
jaxlib.xla_client is imported, never jax: this works where jax and jaxlib
reject each other. No device is touched and no client is created.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys

from devctl.model.plugins import FrameworkPjrt, PjrtApiVersion

_MODULE = "devctl.probe.framework_pjrt"
ENV = "ENABLE_PJRT_COMPATIBILITY"
DEFAULT_TIMEOUT_S = 20.0

_STRICT = re.compile(r"framework PJRT API version (\d+)\.(\d+)\)")
_COMPAT_MINIMUM = re.compile(r"older than the minimum supported version (\d+)\.(\d+)")
_COMPAT_MAJOR = re.compile(r"framework PJRT API major version (\d+)\)")

# LP64 PJRT_Api: struct_size@0, extension_start@8, pjrt_api_version {struct_size@16, extension_start@24,
# major@32, minor@36}, PJRT_Plugin_Initialize@64 (jax-internals.md §6.1).
_TABLE_BYTES = 4096
_VERSION_STRUCT_SIZE = 24
_keep: list = []  # the table and its callback must outlive every call into jaxlib


# ---------------------------------------------------------------- child side


def _fake_api():
    """A PyCapsule named "pjrt_c_api" around a zeroed PJRT_Api that claims version 0.0."""
    table = ctypes.create_string_buffer(_TABLE_BYTES)
    initialize = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda _args: None)
    ctypes.c_size_t.from_buffer(table, 0).value = _TABLE_BYTES
    ctypes.c_size_t.from_buffer(table, 16).value = _VERSION_STRUCT_SIZE
    ctypes.c_void_p.from_buffer(table, 64).value = ctypes.cast(initialize, ctypes.c_void_p).value
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    _keep.extend((table, initialize))
    return new(ctypes.addressof(table), b"pjrt_c_api", None)


def _ask(xla_client, name: str, setting: str | None) -> str:
    """jaxlib's answer to version 0.0 with ENABLE_PJRT_COMPATIBILITY as given (None: unset); "" when it accepts."""
    if setting is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = setting  # jaxlib reads it with getenv() at each check
    xla_client.load_pjrt_plugin_with_c_api(name, _fake_api())
    try:
        xla_client.initialize_pjrt_plugin(name)
    except Exception as exc:
        return str(exc)
    return ""


def _mode(answer: str) -> dict:
    if not answer:
        return {"compatibility": True, "minimum_minor": 0}  # a jaxlib that takes even 0.0
    m = _COMPAT_MINIMUM.search(answer)
    if m:
        return {"compatibility": True, "minimum_minor": int(m.group(2))}
    if _STRICT.search(answer):
        return {"compatibility": False, "minimum_minor": None}
    if _COMPAT_MAJOR.search(answer):  # a framework whose major is not 0: only compatibility mode says so
        return {"compatibility": True, "minimum_minor": None}
    return {"compatibility": None, "minimum_minor": None}


def measure() -> dict:
    """Run in the child: ask jaxlib, return what it said (plain JSON)."""
    user = os.environ.get(ENV)
    out: dict = {"setting": user, "answers": {}}
    try:
        from jaxlib import version as jaxlib_version
        from jaxlib import xla_client

        out["jaxlib_version"] = jaxlib_version.__version__
    except Exception as exc:
        out["error"] = f"jaxlib cannot be imported: {type(exc).__name__}: {exc}"
        return out
    if not hasattr(xla_client, "load_pjrt_plugin_with_c_api"):
        out["error"] = f"jaxlib {out['jaxlib_version']} has no load_pjrt_plugin_with_c_api to ask"
        return out
    try:
        strict = _ask(xla_client, "devctl_framework_strict", "false")
        default = _ask(xla_client, "devctl_framework_default", None)
        here = default if user is None else _ask(xla_client, "devctl_framework_here", user)
    except Exception as exc:
        out["error"] = f"jaxlib's plugin check could not be asked: {type(exc).__name__}: {exc}"
        return out
    finally:
        if user is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = user
    out["answers"] = {"strict": strict, "default": default, "here": here}
    m = _STRICT.search(strict)
    if m:
        out["pjrt_api_version"] = {"major": int(m.group(1)), "minor": int(m.group(2))}
    else:
        out["error"] = f"jaxlib's strict check did not name its version: {strict or 'it accepted 0.0'}"
    out["default"] = _mode(default)
    out["here"] = _mode(here)
    return out


def _child_main() -> None:
    from devctl.probe import channel

    channel.read_request()
    try:
        result = measure()
    except Exception as exc:  # a Python-side bug still comes back as an answer
        result = {"error": f"{type(exc).__name__}: {exc}"}
    channel.emit("result", framework=result)
    sys.stdout.flush()
    sys.stderr.flush()
    channel.release_runtime()
    os._exit(0)


# ---------------------------------------------------------------- parent side


def framework_pjrt(timeout_s: float = DEFAULT_TIMEOUT_S) -> FrameworkPjrt:
    """jaxlib's PJRT C API version and plugin rule, from a child process; unknown parts carry the reason."""
    from devctl.probe.runner import run_child

    result = run_child(_MODULE, {}, timeout_s=timeout_s)
    final = result.last("result")
    if final is None:
        return unknown(f"the jaxlib probe {result.failure_text()}")
    return from_json(final["framework"])


def unknown(reason: str) -> FrameworkPjrt:
    return FrameworkPjrt(
        jaxlib_version=None, pjrt_api_version=None, compatibility=None, minimum_minor=None,
        default_compatibility=None, setting=os.environ.get(ENV), error=reason,
    )  # fmt: skip


def from_json(data: dict) -> FrameworkPjrt:
    version = data.get("pjrt_api_version")
    here, default = data.get("here") or {}, data.get("default") or {}
    return FrameworkPjrt(
        jaxlib_version=data.get("jaxlib_version"),
        pjrt_api_version=PjrtApiVersion(version["major"], version["minor"]) if version else None,
        compatibility=here.get("compatibility"),
        minimum_minor=here.get("minimum_minor") if here.get("compatibility") else default.get("minimum_minor"),
        default_compatibility=default.get("compatibility"),
        setting=data.get("setting"),
        error=data.get("error"),
    )


if __name__ == "__main__":
    _child_main()
