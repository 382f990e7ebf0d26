"""Real PJRT-like shared libraries and real plugin packages for the plugin tests.

The libraries are built from one C source with the system compiler; a macro
picks the behaviour. Every function a safe probe must never call (Initialize,
Client_Create and the rest of the table) writes a marker file and aborts, so
a test that sees status "ok" and no marker proves it was not called.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

NEVER_CALL_MARKER_ENV = "DEVCTL_TEST_NEVER_CALL_MARKER"
ERROR_DESTROYED_MARKER_ENV = "DEVCTL_TEST_ERROR_DESTROYED_MARKER"
IMPORT_MARKER_ENV = "DEVCTL_TEST_IMPORT_MARKER"

# variant -> extra compiler flags
VARIANTS = {
    "good": [],  # 0.54, attributes, extension chain 20 -> 1 -> 9999
    "no_get_pjrt_api": ["-DNO_GET_PJRT_API"],
    "segfault": ["-DSEGFAULT"],
    "hang": ["-DHANG"],
    "tiny": ["-DAPI_STRUCT_SIZE=16"],
    "attributes_error": ["-DATTRIBUTES_ERROR"],
    "major_1": ["-DMAJOR=1"],
}

C_SOURCE = r"""
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef MAJOR
#define MAJOR 0
#endif

typedef struct Ext { size_t struct_size; int type; const struct Ext* next; } Ext;

typedef struct {
  size_t struct_size; void* extension_start; const char* name; size_t name_size; int type;
  union { const char* s; int64_t i; const int64_t* list; float f; bool b; };
  size_t value_size;
} NamedValue;

typedef struct { size_t struct_size; void* ext; const NamedValue* attributes; size_t num_attributes; } AttrArgs;
typedef struct { size_t struct_size; void* ext; void* error; } ErrorDestroyArgs;
typedef struct {
  size_t struct_size; void* ext; const void* error; const char* message; size_t message_size;
} ErrorMessageArgs;

typedef struct {
  size_t struct_size;
  const Ext* extension_start;
  struct { size_t struct_size; void* extension_start; int major; int minor; } version;
  void (*error_destroy)(ErrorDestroyArgs*);
  void (*error_message)(ErrorMessageArgs*);
  void* (*error_getcode)(void*);
  void* (*plugin_initialize)(void*);
  void* (*plugin_attributes)(AttrArgs*);
  void* (*rest[8])(void*);  /* PJRT_Event_*, PJRT_Client_Create, ... */
} Api;

static void touch(const char* env) {
  const char* path = getenv(env);
  if (path) { FILE* f = fopen(path, "w"); if (f) { fputs("called\n", f); fclose(f); } }
}

static void* never_call(void* args) { (void)args; touch("NEVER_CALL_ENV"); abort(); }

static const Ext ext3 = {sizeof(Ext), 9999, NULL};
static const Ext ext2 = {sizeof(Ext), 1, &ext3};
static const Ext ext1 = {sizeof(Ext), 20, &ext2};

static const int64_t stablehlo[] = {1, 2, 3};
static const NamedValue attrs[] = {
  {sizeof(NamedValue), NULL, "xla_version", 11, 1, {.i = 2}, 1},
  {sizeof(NamedValue), NULL, "stablehlo_current_version", 25, 2, {.list = stablehlo}, 3},
  {sizeof(NamedValue), NULL, "cuda_version", 12, 1, {.i = 12090}, 1},
  {sizeof(NamedValue), NULL, "platform_note", 13, 0, {.s = "hello devctl"}, 12},
  {sizeof(NamedValue), NULL, "scale", 5, 3, {.f = 1.5f}, 1},
  {sizeof(NamedValue), NULL, "experimental", 12, 4, {.b = true}, 1},
};

static int the_error;
static const char error_text[] = "UNIMPLEMENTED: attributes are not supported here";

static void error_message(ErrorMessageArgs* a) { a->message = error_text; a->message_size = sizeof(error_text) - 1; }
static void error_destroy(ErrorDestroyArgs* a) { if (a->error == &the_error) touch("DESTROYED_ENV"); }

static void* plugin_attributes(AttrArgs* a) {
#ifdef ATTRIBUTES_ERROR
  (void)a;
  return &the_error;
#else
  a->attributes = attrs;
  a->num_attributes = sizeof(attrs) / sizeof(attrs[0]);
  return NULL;
#endif
}

#ifndef API_STRUCT_SIZE
#define API_STRUCT_SIZE sizeof(Api)
#endif

static const Api api = {
  API_STRUCT_SIZE,
  &ext1,
  {24, NULL, MAJOR, 54},
  error_destroy,
  error_message,
  never_call,
  never_call,
#if MAJOR == 0
  plugin_attributes,
#else
  (void* (*)(AttrArgs*))never_call,
#endif
  {never_call, never_call, never_call, never_call, never_call, never_call, never_call, never_call},
};

#ifndef NO_GET_PJRT_API
const Api* GetPjrtApi(void) {
#ifdef SEGFAULT
  *(volatile int*)0 = 1;
#endif
#ifdef HANG
  for (;;) sleep(1);
#endif
  return &api;
}
#else
int NotTheApi(void) { return 0; }
#endif
"""


def find_c_compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def build_pjrt_library(out_dir: Path, variant: str, compiler: str) -> Path:
    source = out_dir / "fake_pjrt.c"
    if not source.exists():
        text = C_SOURCE.replace('"NEVER_CALL_ENV"', f'"{NEVER_CALL_MARKER_ENV}"')
        source.write_text(text.replace('"DESTROYED_ENV"', f'"{ERROR_DESTROYED_MARKER_ENV}"'))
    out = out_dir / f"libfake_pjrt_{variant}.so"
    cmd = [compiler, "-shared", "-fPIC", "-O0", "-o", str(out), str(source), *VARIANTS[variant]]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="session")
def pjrt_libs(tmp_path_factory) -> dict[str, Path]:
    """Every variant in VARIANTS, built once per session: {variant: path}."""
    compiler = find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build test PJRT libraries")
    out_dir = tmp_path_factory.mktemp("pjrt_libs")
    return {variant: build_pjrt_library(out_dir, variant, compiler) for variant in VARIANTS}


# ------------------------------------------------------------ plugin packages

_BOOBY_TRAPPED_INIT = textwrap.dedent(
    f"""\
    import os
    _marker = os.environ.get({IMPORT_MARKER_ENV!r})
    if _marker:
        with open(_marker, "a") as f:
            f.write(__name__ + "\\n")
    raise RuntimeError("devctl must not import " + __name__)

    def initialize():
        raise RuntimeError("devctl must not call initialize()")
    """
)


def write_module_package(site: Path, dotted: str, libraries: dict[str, Path | bytes] | None = None) -> Path:
    """A package at site/<dotted path> whose __init__ records and refuses being imported."""
    directory = site.joinpath(*dotted.split("."))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "__init__.py").write_text(_BOOBY_TRAPPED_INIT)
    for name, content in (libraries or {}).items():
        target = directory / name
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            shutil.copyfile(content, target)
    return directory


def write_dist_info(
    site: Path,
    name: str,
    version: str,
    files: list[str],
    entry_points: dict[str, str] | None = None,
) -> Path:
    """A minimal installed-distribution record: METADATA, RECORD and optional [jax_plugins] entry points."""
    dist_info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    record = [f"{f},," for f in files] + [f"{dist_info.name}/{n},," for n in ("METADATA", "RECORD")]
    if entry_points:
        lines = ["[jax_plugins]"] + [f"{k} = {v}" for k, v in entry_points.items()]
        (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        record.append(f"{dist_info.name}/entry_points.txt,,")
    (dist_info / "RECORD").write_text("\n".join(record) + "\n")
    return dist_info
