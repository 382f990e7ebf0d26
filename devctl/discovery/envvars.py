"""The environment variables that change what JAX sees or how it uses a device, explained per value.

What jaxlib accepts for its GPU client variables is read from the installed jaxlib's own source
(xla_client.generate_pjrt_gpu_plugin_options), never imported: the accepted set changes between
releases (jaxlib 0.10.2 rejects `address`), and discovery never imports jax or jaxlib.
"""

from __future__ import annotations

import ast
import os
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Mapping

from devctl.model.env import EnvVar
from devctl.safefs import read_regular

KNOWN_PLATFORM_NAMES = ("cpu", "cuda", "rocm", "tpu", "gpu", "metal", "oneapi", "sycl", "xpu", "proxy", "interpreter")
_FALSE = ("false", "False", "0")
ALLOCATOR = "XLA_PYTHON_CLIENT_ALLOCATOR"
FRACTION = "XLA_CLIENT_MEM_FRACTION"
OLD_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION"
# xla_client.py is about 18 kB; anything far bigger is not the file we expect.
_SOURCE_MAX_BYTES = 1 << 20
_OPTIONS_FUNCTION = "generate_pjrt_gpu_plugin_options"
_STR_METHODS = ("lower", "upper", "casefold", "strip", "lstrip", "rstrip")


@dataclass(frozen=True)
class JaxlibRules:
    """What generate_pjrt_gpu_plugin_options() does with the environment."""

    allocators: tuple[str, ...]  # accepted names, compared after `normalise`
    numbers: dict[str, tuple[str, bool]]  # variable -> ("int" | "float", an empty value is skipped)
    both_fractions_raise: bool  # XLA_CLIENT_MEM_FRACTION and the deprecated name both set: ValueError
    source: str  # whose rules, for messages: "jaxlib 0.10.2"
    origin: str = ""  # the file read, or why none could be
    normalise: tuple[str, ...] = ("lower",)  # str methods jaxlib applies to the allocator's value, in order


# jaxlib 0.10.2's generate_pjrt_gpu_plugin_options(), used when the installed source cannot be read.
FALLBACK_RULES = JaxlibRules(
    allocators=("default", "platform", "bfc", "cuda_async", "vmm"),
    numbers={
        FRACTION: ("float", True),
        OLD_FRACTION: ("float", True),
        "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB": ("int", True),
        "XLA_PYTHON_CLIENT_ABORT_COLLECTIVES_ON_FAILURE": ("int", False),
        "XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT": ("int", False),
    },
    both_fractions_raise=True,
    source="jaxlib 0.10.2, as built into devctl",
)


@lru_cache(maxsize=1)
def jaxlib_rules() -> JaxlibRules:
    """The installed jaxlib's rules, or jaxlib 0.10.2's when its source cannot be read (origin says why)."""
    try:
        path = _xla_client_path()
        rules = rules_from_source(_read_capped(path, _SOURCE_MAX_BYTES))
    except (OSError, ValueError, SyntaxError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        reason = " ".join(str(e).split()) or type(e).__name__
        return JaxlibRules(**{**FALLBACK_RULES.__dict__, "origin": reason})
    return JaxlibRules(**{**rules.__dict__, "source": f"jaxlib {_jaxlib_version() or '?'}", "origin": path})


def _xla_client_path() -> str:
    import importlib.util

    try:
        # find_spec of a top-level name locates the package without importing it.
        spec = importlib.util.find_spec("jaxlib")
    except (ImportError, ValueError) as e:
        raise OSError(f"jaxlib cannot be located: {e}") from None
    if spec is None or not spec.origin:
        raise OSError("jaxlib is not installed")
    return os.path.join(os.path.dirname(spec.origin), "xla_client.py")


def _jaxlib_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return None


def _read_capped(path: str, cap: int) -> str:
    """A regular file's text, at most `cap` bytes; a FIFO, a device or an oversized file is refused, never waited on.
    Links are followed: site-packages are often links (Nix, Bazel, conda's pkgs)."""
    return read_regular(path, cap, follow_symlinks=True).decode("utf-8")

def rules_from_source(text: str) -> JaxlibRules:
    """The rules of generate_pjrt_gpu_plugin_options() in xla_client.py's text, from its syntax tree."""
    tree = ast.parse(text)
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == _OPTIONS_FUNCTION), None)
    if fn is None:
        raise ValueError(f"xla_client.py has no {_OPTIONS_FUNCTION}()")
    holds: dict[str, set[str]] = {}  # local name -> the variables whose value it may hold
    methods: dict[str, tuple[str, ...]] = {}  # variable -> str methods applied to its value where it is read
    # (name, value) of every `name = value`
    assigns = [
        (t.id, n.value)
        for n in ast.walk(fn) if isinstance(n, ast.Assign) and len(n.targets) == 1
        for t in n.targets if isinstance(t, ast.Name)
    ]  # fmt: skip
    for target, value in assigns:
        var, applied = _getenv(value)
        if var:
            holds.setdefault(target, set()).add(var)
            methods[var] = applied
    for _ in range(3):  # `memory_fraction = deprecated_memory_fraction`: aliases, a few levels deep
        for target, value in assigns:
            if isinstance(value, ast.Name) and value.id in holds:
                holds.setdefault(target, set()).update(holds[value.id])

    def variables(expr: ast.expr) -> set[str]:
        if isinstance(expr, ast.Name):
            return holds.get(expr.id, set())
        var, _ = _getenv(expr)
        return {var} if var else set()

    # int()/float() inside `if name:` never sees an empty value.
    guarded = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.If) and isinstance(n.test, ast.Name):
            guarded |= {(id(c), n.test.id) for b in n.body for c in ast.walk(b) if isinstance(c, ast.Call)}
    numbers: dict[str, tuple[str, bool]] = {}
    choices: dict[str, tuple[str, ...]] = {}
    # jaxlib 0.12 names its list first (`allowed_allocators = (...)`, then `not in allowed_allocators`).
    named_lists = {target: _strings(value) for target, value in assigns if _strings(value) is not None}
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("int", "float") and len(n.args) == 1:
            arg = n.args[0]
            skip_empty = isinstance(arg, ast.Name) and (id(n), arg.id) in guarded
            for var in variables(arg):
                kind, was_skipped = numbers.get(var, (n.func.id, True))
                numbers[var] = (kind, was_skipped and skip_empty)
        elif isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.In, ast.NotIn)):
            names = n.comparators[0]
            listed = named_lists.get(names.id) if isinstance(names, ast.Name) else _strings(names)
            if listed is not None:
                for var in variables(n.left):
                    choices[var] = listed
    allocators = choices.get(ALLOCATOR)
    if not allocators:
        raise ValueError(f"{_OPTIONS_FUNCTION}() has no allocator check devctl recognises")
    read = {v for vs in holds.values() for v in vs}
    return JaxlibRules(
        allocators=allocators,
        numbers=numbers,
        both_fractions_raise={FRACTION, OLD_FRACTION} <= read,
        source="",
        normalise=methods.get(ALLOCATOR, ()),
    )


def _strings(expr: ast.expr) -> tuple[str, ...] | None:
    """The strings of a literal tuple, list or set of strings; None for anything else."""
    if not isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        return None
    strings = tuple(e.value for e in expr.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return strings if len(strings) == len(expr.elts) else None


def _getenv(expr: ast.expr) -> tuple[str | None, tuple[str, ...]]:
    """('NAME', methods) for os.getenv('NAME', ...) or os.environ.get('NAME', ...), then argument-less str methods."""
    applied: list[str] = []
    while (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.args
        and expr.func.attr in _STR_METHODS
    ):  # fmt: skip
        applied.insert(0, expr.func.attr)
        expr = expr.func.value
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.args):
        return None, ()
    f = expr.func
    is_getenv = f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os"
    is_environ_get = f.attr == "get" and isinstance(f.value, ast.Attribute) and f.value.attr == "environ"
    first = expr.args[0]
    if (is_getenv or is_environ_get) and isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value, tuple(applied)
    return None, ()


@dataclass(frozen=True)
class EnvFix:
    """An environment change that settles a finding: variables to set, variables to unset."""

    set: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()

    def apply(self, environ: Mapping[str, str]) -> dict[str, str]:
        new = {k: v for k, v in environ.items() if k not in self.unset}
        new.update(self.set)
        return new

    def shell(self) -> str:
        parts = [f"export {k}={shlex.quote(v)}" for k, v in self.set.items()] + [f"unset {k}" for k in self.unset]
        return "; ".join(parts)

    def to_json(self) -> dict:
        return {"set": dict(self.set), "unset": list(self.unset)}


@dataclass(frozen=True)
class Assessment:
    """One variable: what its value does, and what is wrong with it, how badly, and the fix."""

    name: str
    value: str
    meaning: str
    problem: str | None = None
    severity: str | None = None  # "error": JAX fails or leaves the GPU unused; "warning": ignored, deprecated or odd
    remedy: str | None = None
    fix: EnvFix | None = None  # None: no environment change alone settles it

    def env_var(self) -> EnvVar:
        return EnvVar(name=self.name, value=self.value, meaning=self.meaning, problem=self.problem)


_ALLOCATOR_MEANINGS = {
    "platform": "allocate exactly what is needed and free on release (slow, no fragmentation; memory_stats may be None)",
    "bfc": "JAX's BFC pool allocator (the default)",
    "default": "JAX's default allocator (BFC)",
    "cuda_async": "CUDA's stream-ordered allocator (cudaMallocAsync)",
    "vmm": "virtual-memory-management allocator",
    "address": "address allocator",
}
_MEANINGS = {
    "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB": "MiB of GPU memory reserved for collectives",
    "XLA_PYTHON_CLIENT_ABORT_COLLECTIVES_ON_FAILURE": "collectives abort when a peer process fails",
    "XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT": "JAX uses the TFRT GPU client",
}
# jaxlib reads these with bool(int(...)): a word people write instead of 0/1 has an obvious fix.
_ZERO_ONE = ("XLA_PYTHON_CLIENT_ABORT_COLLECTIVES_ON_FAILURE", "XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT")
_WORDS = {"true": "1", "yes": "1", "on": "1", "false": "0", "no": "0", "off": "0"}
# The CUDA/ROCm plugin's initialize() calls generate_pjrt_gpu_plugin_options(); jax only logs what it raises.
_AT_CLIENT = "jaxlib raises ValueError in the GPU plugin's initialize(), so JAX logs 'Jax plugin configuration error' and has no GPU backend"


def _assess_allocator(value: str, rules: JaxlibRules) -> Assessment:
    allowed = ", ".join(rules.allocators)
    name = value
    for method in rules.normalise:  # as jaxlib does: 0.10.2 lower()s it
        name = getattr(str, method)(name)
    if name in rules.allocators:
        return Assessment(ALLOCATOR, value, _ALLOCATOR_MEANINGS.get(name, "an allocator this jaxlib accepts"))
    what = "empty, which jaxlib reads as an allocator name" if value == "" else f"{value!r} is not an allocator name"
    return Assessment(
        ALLOCATOR, value, "unsupported",
        f"{what}: must be one of {allowed} (per {rules.source}); {_AT_CLIENT}", "error",
        f"unset {ALLOCATOR} (JAX then uses its default, bfc) or set one of {allowed}",
        EnvFix(unset=(ALLOCATOR,)),
    )  # fmt: skip


def _fraction_problem(f: float) -> str | None:
    if 0 < f <= 1:
        return None
    if f > 1:
        return f"{f:g} is outside (0, 1]: more than the GPU has, meaningful only with unified memory (TF_FORCE_UNIFIED_MEMORY=1)"
    return f"{f:g} is outside (0, 1]: it leaves JAX's allocator no GPU memory"


def _assess_number(name: str, value: str, environ: Mapping[str, str], rules: JaxlibRules) -> Assessment:
    kind, skips_empty = rules.numbers[name]
    if value == "" and skips_empty:
        return Assessment(name, value, "empty: JAX ignores it")
    try:
        number = int(value) if kind == "int" else float(value)
    except ValueError:
        words = "an integer" if kind == "int" else "a number"
        invalid = f"{value!r} is not {words} (jaxlib reads it with {kind}()); {_AT_CLIENT}"
        if name in _ZERO_ONE and value.strip().lower() in _WORDS:
            fixed = _WORDS[value.strip().lower()]
            return Assessment(name, value, "unsupported", invalid, "error", f"export {name}={fixed}", EnvFix(set={name: fixed}))
        if name == OLD_FRACTION:
            remedy = f"unset {OLD_FRACTION}; to cap JAX's GPU memory set {FRACTION} to a number in (0, 1] instead"
        else:
            remedy = f"unset {name} (JAX then uses its default) or set {words}"
        return Assessment(name, value, "unsupported", invalid, "error", remedy, EnvFix(unset=(name,)))

    if name in (FRACTION, OLD_FRACTION):
        meaning = f"JAX's GPU memory pool: {number:.0%} of each GPU's memory" if 0 < number <= 1 else f"fraction {number:g}"
        problem = _fraction_problem(number)
        if name == FRACTION:
            return Assessment(name, value, meaning, problem, "warning" if problem else None,
                              f"set a number in (0, 1], e.g. {FRACTION}=0.75" if problem else None)  # fmt: skip
        if rules.both_fractions_raise and environ.get(FRACTION, ""):
            both = f"both {FRACTION} and the deprecated {OLD_FRACTION} are set: {_AT_CLIENT}"
            return Assessment(name, value, meaning, both, "error",
                              f"unset {OLD_FRACTION} ({FRACTION}={environ[FRACTION]} stays)", EnvFix(unset=(OLD_FRACTION,)))  # fmt: skip
        # Deprecated but read: the new name with the user's own value changes nothing else.
        rename = EnvFix(set={FRACTION: value}, unset=(OLD_FRACTION,))
        deprecated = f"deprecated: use {FRACTION}" + (f"; {problem}" if problem else "")
        return Assessment(name, value, meaning, deprecated, "warning", f"rename it, keeping the value: {rename.shell()}", rename)
    if name == "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB":
        if number < 0:
            return Assessment(name, value, f"{number} {_MEANINGS[name]}", f"{number} is negative: no memory can be reserved", "warning",
                              f"unset {name}, or set a size in MiB", EnvFix(unset=(name,)))  # fmt: skip
        return Assessment(name, value, f"{number} {_MEANINGS[name]}")
    if name in _ZERO_ONE:
        return Assessment(name, value, _MEANINGS[name] if number else f"off ({_MEANINGS[name]} when 1)")
    return Assessment(name, value, f"read by jaxlib as {kind} {number}")


def _platforms(v: str) -> tuple[str, str | None]:
    names = [n.strip() for n in v.split(",") if n.strip()]
    unknown = [n for n in names if n.lower() not in KNOWN_PLATFORM_NAMES]
    problem = f"unknown platform name(s) {', '.join(unknown)}: JAX will fail to start them" if unknown else None
    if not names:
        return "empty: JAX chooses backends by priority", None
    return f"only {', '.join(names)}; {names[0]} is the default, and every listed platform must initialize or JAX raises", problem


def _preallocate(v: str) -> tuple[str, str | None]:
    if v in _FALSE:
        return "no GPU preallocation: memory is allocated on demand (more fragmentation, less held)", None
    return "GPU preallocation on (any value but false/0): JAX takes 75% of GPU memory, or MEM_FRACTION, at start", None


def _tpu_library_path(v: str) -> tuple[str, str | None]:
    if not os.path.exists(v):
        return "libtpu to load", f"{v} does not exist; JAX warns and falls back to the libtpu package"
    return "libtpu to load instead of the libtpu package's", None


def _cuda_visible(v: str) -> tuple[str, str | None]:
    if v.strip() in ("", "-1", "none", "NoDevFiles"):
        return "hides every GPU from CUDA", None
    return f"CUDA sees only GPU(s) {v}, renumbered from 0", None


def _const(meaning: str, problem: str | None = None) -> Callable[[str], tuple[str, str | None]]:
    return lambda _v: (meaning, problem)


_EXPLAIN: dict[str, Callable[[str], tuple[str, str | None]]] = {
    "JAX_PLATFORMS": _platforms,
    "JAX_PLATFORM_NAME": _const("deprecated single-platform selector", "deprecated: use JAX_PLATFORMS"),
    "JAX_BACKEND_TARGET": _const("remote backend address (IFRT proxy / Pathways)"),
    "PJRT_NAMES_AND_LIBRARY_PATHS": _const("extra PJRT plugins name:path[,...] (see devctl plugins)"),
    "JAX_CUDA_VISIBLE_DEVICES": _const(
        "nothing: JAX never reads this variable",
        "has no effect; use CUDA_VISIBLE_DEVICES, JAX_LOCAL_DEVICE_IDS or jax.config.update('jax_cuda_visible_devices', ...)",
    ),
    "CUDA_VISIBLE_DEVICES": _cuda_visible,
    "HIP_VISIBLE_DEVICES": _cuda_visible,
    "ROCR_VISIBLE_DEVICES": _cuda_visible,
    "CUDA_DEVICE_ORDER": _const("CUDA device numbering order (PCI_BUS_ID matches nvidia-smi)"),
    "XLA_PYTHON_CLIENT_PREALLOCATE": _preallocate,
    "TF_GPU_ALLOCATOR": _const("TensorFlow-style allocator choice (cuda_malloc_async)"),
    "JAX_SKIP_CUDA_CONSTRAINTS_CHECK": _const("skips the CUDA library version checks at plugin start"),
    "ENABLE_PJRT_COMPATIBILITY": _const("relaxes the plugin/framework PJRT API version check to same major"),
    "XLA_FLAGS": _const("XLA compiler and runtime flags"),
    "TF_CPP_MIN_LOG_LEVEL": _const("C++ log level (0 shows the PJRT version lines)"),
    "CUDA_ROOT": _const("where XLA looks for ptxas and libdevice"),
    "LD_LIBRARY_PATH": _const("searched before the pip CUDA wheels: an old CUDA here shadows them"),
    "TPU_LIBRARY_PATH": _tpu_library_path,
    "JAX_FORCE_TPU_INIT": _const("forces Cloud TPU setup even with no chips found"),
    "TPU_SKIP_MDS_QUERY": _const("libtpu does not query the GCE metadata server"),
    "LIBTPU_INIT_ARGS": _const("flags passed to libtpu"),
    "ALLOW_MULTIPLE_LIBTPU_LOAD": _const("lets several processes load libtpu at once"),
    "TPU_VISIBLE_CHIPS": _const("chips this process uses"),
    "TPU_VISIBLE_DEVICES": _const("chips this process uses"),
    "TPU_CHIPS_PER_PROCESS_BOUNDS": _const("chips per process (several processes per host)"),
    "TPU_PROCESS_BOUNDS": _const("process grid on the host"),
    "TPU_ACCELERATOR_TYPE": _const("TPU slice type"),
    "TPU_WORKER_ID": _const("this host's index in the slice"),
    "TPU_WORKER_HOSTNAMES": _const("hosts of the slice"),
    "JAX_COORDINATOR_ADDRESS": _const("jax.distributed coordinator host:port (the process count and index still come from a launcher)"),
    "JAX_COORDINATOR_PORT": _const("jax.distributed coordinator port, on the host a launcher names (jax 0.8.1 and later)"),
    "JAX_COORDINATOR_BIND_ADDRESS": _const("where process 0's jax.distributed service listens"),
    "JAX_LOCAL_DEVICE_IDS": _const("jax.distributed: the local devices this process uses"),
    # Often set by hand, never read by JAX (0.4.36 to 0.10 checked): the cluster then looks unconfigured.
    "JAX_NUM_PROCESSES": _const("not read by JAX", "JAX does not read it: pass num_processes to jax.distributed.initialize (devctl: --num-processes)"),
    "JAX_PROCESS_ID": _const("not read by JAX", "JAX does not read it: pass process_id to jax.distributed.initialize (devctl: --process-id)"),
    "NCCL_DEBUG": _const("NCCL logging"),
    "NCCL_SHM_DISABLE": _const("NCCL does not use /dev/shm"),
}


# Problems of these variables make JAX fail, not just misbehave (the jaxlib-read ones are judged from jaxlib's rules).
_FATAL = frozenset({"JAX_PLATFORMS"})
_REMEDIES = {
    "JAX_PLATFORMS": "list only installed platforms (devctl list shows them), or unset JAX_PLATFORMS",
    "TPU_LIBRARY_PATH": "point TPU_LIBRARY_PATH at an existing libtpu.so, or unset it and pip install -U 'jax[tpu]'",
    "JAX_PLATFORM_NAME": "use JAX_PLATFORMS instead, and unset JAX_PLATFORM_NAME",
    "JAX_CUDA_VISIBLE_DEVICES": "use CUDA_VISIBLE_DEVICES, and unset JAX_CUDA_VISIBLE_DEVICES",
}


# JAX's boolean configuration variables, read at import by jax._src.config.bool_env, and the values it takes.
JAX_BOOLEANS = frozenset({
    "JAX_ENABLE_X64", "JAX_DEBUG_NANS", "JAX_DEBUG_INFS", "JAX_DISABLE_JIT", "JAX_LOG_COMPILES", "JAX_ENABLE_CHECKS",
    "JAX_CHECK_TRACER_LEAKS", "JAX_EXPLAIN_CACHE_MISSES",
})  # fmt: skip
_TRUTH_VALUES = frozenset({"y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0"})


def assess_env(environ: Mapping[str, str] | None = None) -> list[Assessment]:
    """Every set variable that affects JAX's device behaviour, with what its value means, and every other JAX_*/XLA_* one."""
    environ = os.environ if environ is None else environ
    rules = jaxlib_rules()
    out = []
    for name in sorted(environ):
        value = environ[name]
        if name == ALLOCATOR:
            out.append(_assess_allocator(value, rules))
            continue
        if name in rules.numbers:
            out.append(_assess_number(name, value, environ, rules))
            continue
        if name in JAX_BOOLEANS and value.lower() not in _TRUTH_VALUES:
            # jax._src.config.bool_env raises ValueError at `import jax` (checks.advice: jax-env-invalid, the same fix).
            refused = f"{value!r} is no truth value: `import jax` raises ValueError (invalid truth value)"
            out.append(Assessment(name, value, "", refused, "error", f"unset {name}, or set it to true or false", EnvFix(unset=(name,))))
            continue
        explain = _EXPLAIN.get(name)
        if explain is None and not name.startswith(("JAX_", "XLA_", "PJRT_", "TPU_", "LIBTPU")):
            continue
        meaning, problem = explain(value) if explain else ("", None)
        if problem is None:
            out.append(Assessment(name, value, meaning))
        else:
            severity = "error" if name in _FATAL else "warning"
            out.append(Assessment(name, value, meaning, problem, severity, _REMEDIES.get(name, f"fix or unset {name}")))
    return out


def env_vars(environ: Mapping[str, str] | None = None) -> list[EnvVar]:
    """The variables of assess_env() as the report's model rows."""
    return [a.env_var() for a in assess_env(environ)]
