"""Initialize JAX backends in a child process and report each one, even when one of them kills the child.

Parent side (`probe_backends`, no jax import) runs the child; when the child
hangs or dies, the phase it last announced names the culprit, which is
skipped in a fresh child so the healthy backends are still listed.

Child side (`python -m devctl.probe.backends REQUEST`) instruments JAX's own
plugin discovery and initializes each backend separately with
`xla_bridge._init_backend`, the call `jax.devices()` makes for each platform.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the child imports this module too and needs none of the parent's machinery
    from devctl.model.list_ import BackendInfo, DeviceInfo, JaxOutcome
    from devctl.probe.runner import ChildResult

_MODULE = "devctl.probe.backends"
_MAX_ATTEMPTS = 8
PJRT_ENV = "PJRT_NAMES_AND_LIBRARY_PATHS"


@dataclass
class BackendsProbe:
    backends: list[BackendInfo] = field(default_factory=list)
    devices: list[DeviceInfo] = field(default_factory=list)
    jax_version: str | None = None
    jaxlib_version: str | None = None
    default_platform: str | None = None
    outcome: JaxOutcome | None = None
    elapsed_s: float = 0.0


def probe_backends(
    platforms: list[str] | None = None, *, timeout_s: float, memory_stats: bool = True, hold_off: dict[str, str] | None = None
) -> BackendsProbe:
    """Initialize every JAX backend (or only `platforms`) in child processes; never raises for a bad backend.

    `hold_off` names platforms not to touch at all, with the reason (a TPU another process holds).
    """
    from devctl.model.list_ import BackendInfo, BackendStatus, DeviceInfo
    from devctl.probe.prediction import predict
    from devctl.probe.runner import collect, run_child, send_request, take_prestarted

    result = BackendsProbe()
    by_platform: dict[str, BackendInfo] = {
        name: BackendInfo(platform=name, status=BackendStatus.SKIPPED, error=reason) for name, reason in (hold_off or {}).items()
    }
    devices: dict[str, list[DeviceInfo]] = {}
    events: dict[str, dict] = {}  # the raw event of each platform and plugin, for the prediction
    plan, raised = None, None
    skip_plugins: list[str] = []
    skip_platforms: list[str] = []
    env_items = _pjrt_env_items()
    started = time.monotonic()
    for _ in range(_MAX_ATTEMPTS):
        request = {
            "platforms": platforms,
            "skip_plugins": skip_plugins,
            "skip_platforms": skip_platforms + list(by_platform),
            "memory_stats": memory_stats,
        }
        env = {PJRT_ENV: ",".join(i for i in env_items if i.split(os.pathsep)[0] not in skip_plugins)} if env_items else None
        prestarted = take_prestarted(_MODULE) if not skip_plugins and not skip_platforms else None
        if prestarted is not None:
            send_request(prestarted, request)
            child = collect(prestarted, timeout_s=timeout_s)
        else:
            child = run_child(_MODULE, request, timeout_s=timeout_s, env=env)
        for event in child.events:
            kind = event.get("event")
            if kind == "versions":
                result.jax_version, result.jaxlib_version = event.get("jax"), event.get("jaxlib")
            elif kind == "backend":
                info = BackendInfo.from_event(event)
                if info.status is BackendStatus.SKIPPED and (by_platform.get(info.platform) or info).plugin:
                    continue  # not installed because its plugin failed: the plugin's row says why
                by_platform[info.platform] = info
                events[info.platform] = event
                devices[info.platform] = [DeviceInfo.from_event(d) for d in event.get("devices", [])]
            elif kind == "plugin" and event.get("status") != "ok":
                info = BackendInfo.from_plugin_event(event)
                by_platform[info.platform] = info
                events[info.platform] = event
            elif kind == "plan":
                plan = plan or event  # the first child's: a retry's plan lacks what was skipped
            elif kind == "jax_raises":
                raised = raised or event
        if child.last("done"):
            # Finished: a runtime that then crashes or hangs while the interpreter exits changes nothing.
            break
        culprit = _culprit(child)
        if culprit is None:  # died outside any backend: nothing more a retry can learn
            by_platform.setdefault("jax", _failed("jax", child, "while importing jax"))
            break
        kind, name = culprit
        if kind == "plugin":
            skip_plugins.append(name)
            entry = any(i.split(os.pathsep)[0] == name for i in env_items)
            by_platform[name] = _failed(name, child, f"while loading plugin {name}", plugin=name, source="env" if entry else None)
        else:
            skip_platforms.append(name)
            by_platform[name] = _failed(name, child, f"while initializing backend {name!r}")
    result.backends = list(by_platform.values())
    result.devices = [d for p in by_platform for d in devices.get(p, [])]
    result.outcome = predict(plan, raised, by_platform, events, limited=bool(platforms))
    # What jax.devices() would use: none when it raises, whatever each backend alone could do.
    result.default_platform = result.outcome.default_backend if result.outcome.result != "unknown" else default_platform(result.backends)
    result.elapsed_s = time.monotonic() - started
    return result


def default_platform(backends: list[BackendInfo]) -> str | None:
    """The backend jax.devices() would use: the working one with the highest priority (JAX_PLATFORMS order when set)."""
    from devctl.model.list_ import BackendStatus

    ok = [b for b in backends if b.status is BackendStatus.OK]
    return max(ok, key=lambda b: b.priority if b.priority is not None else -1).platform if ok else None


def _pjrt_env_items() -> list[str]:
    value = os.environ.get(PJRT_ENV, "")
    return [item for item in value.split(",") if item]


def _culprit(child: ChildResult) -> tuple[str, str] | None:
    """The plugin or platform the child announced last and never finished."""
    finished = {(e["event"], e.get("name") or e.get("platform")) for e in child.events if e.get("event") in ("plugin", "backend")}
    for event in reversed(child.events):
        if event.get("event") == "phase" and event.get("kind") in ("plugin", "backend"):
            key = (event["kind"], event["name"])
            return None if key in finished else key
    return None


def _failed(name: str, child: ChildResult, where: str, plugin: str | None = None, source: str | None = None) -> BackendInfo:
    from devctl.model.list_ import BackendInfo, BackendStatus
    from devctl.probe.runner import last_line

    status = BackendStatus.TIMEOUT if child.timed_out else BackendStatus.CRASHED
    if not child.timed_out and not child.signal_name:
        status = BackendStatus.EXITED if child.returncode else BackendStatus.FAILED
    from devctl.model.xla_flags import fatal_message

    detail = last_line(child.output_tail)
    error = f"{child.failure_text()} {where}"
    if detail and detail not in error and fatal_message(f"{child.output_head}\n{child.output_tail}") is None:
        error += f" (last output: {detail})"
    return BackendInfo(platform=name, status=status, error=error, init_s=child.elapsed_s, plugin=plugin, source=source)


# ---------------------------------------------------------------- child side


def _child_main() -> None:
    from devctl.probe.channel import emit, read_request

    emit("phase", kind="import", name="jax")
    try:
        import jax
        import jaxlib
        from jax._src import xla_bridge as xb
    except Exception as e:  # jax/jaxlib skew, a broken install: what every JAX program here gets first
        emit("jax_raises", stage="import", culprit="jax", error=describe_error(e), exception=type(e).__name__, message=str(e))
        raise

    # Read after importing jax: a prestarted child imports jax while the CLI is still parsing its flags.
    request = read_request()
    emit("versions", jax=jax.__version__, jaxlib=jaxlib.__version__)
    instrument_plugin_discovery(xb, emit, set(request.get("skip_plugins") or []))
    xb._discover_and_register_pjrt_plugins()
    emit("plan", order=jax_plan(xb), jax_platforms=_jax_platforms_value(xb))

    skip = set(request.get("skip_platforms") or [])
    default, best = None, None
    for platform, priority, quiet in platforms_to_try(xb, request.get("platforms")):
        if platform in skip:
            continue
        emit("phase", kind="backend", name=platform)
        if request.get("platforms") and platform not in xb._backend_factories:
            # Asked for with --platform, not by JAX_PLATFORMS: nothing JAX would raise, just nothing to list.
            event = {"platform": platform, "status": "skipped", "devices": [], "fail_quietly": quiet,
                     "error": f"no backend named {platform!r} is installed (installed: {', '.join(installed_factories(xb))})"}  # fmt: skip
        else:
            event = init_backend(xb, platform, quiet, request.get("memory_stats", True))
        event["priority"] = priority
        emit("backend", **event)
        if event["status"] == "ok" and (best is None or priority > best):
            default, best = platform, priority
    emit("done", default_platform=default)
    # Leave now: some runtimes abort or hang in their exit-time destructors, and nothing is left to say.
    from devctl.probe.channel import release_runtime

    release_runtime()  # what libtpu's exit handler would have undone
    os._exit(0)


def instrument_plugin_discovery(xb, emit, skip: set[str]) -> None:
    """Wrap JAX's plugin discovery so each plugin's import and initialize() is announced and timed."""
    import importlib
    import pkgutil
    from importlib.metadata import entry_points

    current: list[str] = []  # the packaged plugin whose initialize() is running
    env_done: dict[str, bool] = {}  # PJRT_NAMES_AND_LIBRARY_PATHS entry -> loaded, for those announced

    def discover_pjrt_plugins() -> None:
        names: set[str] = set()
        if xb.jax_plugins:
            names.update(n for _, n, _ in pkgutil.iter_modules(xb.jax_plugins.__path__, "jax_plugins."))
        names.update(ep.value for ep in entry_points(group="jax_plugins"))
        for name in sorted(names):
            short = name.rsplit(".", 1)[-1]
            if name in skip or short in skip:
                continue
            emit("phase", kind="plugin", name=short)
            t0 = time.perf_counter()
            current.append(short)
            try:
                importlib.import_module(name).initialize()
                status, error = "ok", None
            except BaseException as e:  # a plugin's own SystemExit must not end the probe
                status, error = "failed", f"{name}.initialize() raised {describe_error(e)}"
            finally:
                current.pop()
            emit("plugin", name=short, module=name, status=status, error=error, init_s=time.perf_counter() - t0)

    original_register = xb.register_plugin

    def register_plugin(plugin_name, *args, **kwargs):
        # Loading the library (dlopen + GetPjrtApi) happens here. Inside a packaged plugin's
        # initialize() the culprit is that package; otherwise it is a PJRT_NAMES_AND_LIBRARY_PATHS entry.
        if current:
            return original_register(plugin_name, *args, **kwargs)
        emit("phase", kind="plugin", name=plugin_name)
        try:
            out = original_register(plugin_name, *args, **kwargs)
        except Exception as e:
            env_done[plugin_name] = False
            emit("plugin", name=plugin_name, status="failed", source="env", error=describe_error(e))
            raise
        env_done[plugin_name] = True
        emit("plugin", name=plugin_name, status="ok", source="env")
        return out

    original_from_env = xb.register_pjrt_plugin_factories_from_env

    def register_pjrt_plugin_factories_from_env(*args, **kwargs):
        # Unlike a packaged plugin's, an entry's failure is not caught by JAX: it propagates out of
        # every jax.devices() call, whatever JAX_PLATFORMS says. Record it, then list what did register.
        try:
            return original_from_env(*args, **kwargs)
        except Exception as e:
            # The culprit is the first entry not yet loaded (a .json config fails before its library loads).
            names = list(xb._get_pjrt_plugin_names_and_library_paths(os.environ.get(PJRT_ENV, "")))
            culprit = next((n for n in names if not env_done.get(n)), PJRT_ENV)
            if culprit not in env_done:
                emit("plugin", name=culprit, status="failed", source="env", error=describe_error(e))
            emit("jax_raises", culprit=culprit, error=describe_error(e), exception=type(e).__name__, message=str(e))

    xb.discover_pjrt_plugins = discover_pjrt_plugins
    xb.register_plugin = register_plugin
    xb.register_pjrt_plugin_factories_from_env = register_pjrt_plugin_factories_from_env


def describe_error(e: BaseException, depth: int = 4) -> str:
    """`Type: message`, followed by its chained causes (a plugin's real reason is often the cause)."""
    text = f"{type(e).__name__}: {e}"
    seen = {id(e)}
    cause = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    while cause is not None and depth > 0 and id(cause) not in seen:
        seen.add(id(cause))
        text += f" <- caused by {type(cause).__name__}: {cause}"
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
        depth -= 1
    return text


def jax_plan(xb) -> list[list]:
    """[platform, priority, fail_quietly, installed] in the order `xla_bridge.backends()` tries them.

    Restated from its code; `installed` is False for jax<0.6's own GPU factories, which devctl does not probe.
    """
    installed = installed_factories(xb)
    jax_platforms = _jax_platforms_value(xb)
    if jax_platforms:
        names = [p for item in jax_platforms.split(",") for p in xb.expand_platform_alias(item)]
        return [[name, len(names) - i, False, True] for i, name in enumerate(names)]
    return [[name, r.priority, bool(r.fail_quietly), name in installed] for name, r in xb._backend_factories.items()]


def _jax_platforms_value(xb) -> str | None:
    try:
        return xb.config.jax_platforms.value
    except AttributeError:
        return os.environ.get("JAX_PLATFORMS") or None


def platforms_to_try(xb, requested: list[str] | None) -> list[tuple[str, int, bool]]:
    """(platform, priority, fail_quietly) in the order JAX would try them."""
    registered = installed_factories(xb)
    if requested:
        names = [p for r in requested for p in xb.expand_platform_alias(r)]
    elif os.environ.get("JAX_PLATFORMS"):
        # Split as JAX splits, on commas only: " tpu" is a platform no factory serves.
        names = [p for r in os.environ["JAX_PLATFORMS"].split(",") for p in xb.expand_platform_alias(r)]
    else:
        # Every factory, as JAX tries them: jax 0.12's IFRT proxy too (priority -1, never the default;
        # without JAX_BACKEND_TARGET it fails at once, quietly, and devctl says so quietly), and
        # jax<0.6's own CUDA/ROCm factories, which fail quietly on every jaxlib devctl supports.
        names = list(xb._backend_factories)
    # A platform the user named (JAX_PLATFORMS, --platform) must start: JAX raises instead of failing quietly.
    named = bool(requested or os.environ.get("JAX_PLATFORMS"))
    out = []
    ordered = list(dict.fromkeys(names))
    for index, name in enumerate(ordered):
        reg = registered.get(name) or xb._backend_factories.get(name)
        # As in JAX: a named list's order is its priority (the first is the default); otherwise the registration's.
        priority = len(ordered) - index if named else (reg.priority if reg else -1)
        out.append((name, priority, bool(reg and reg.fail_quietly and not named)))
    return sorted(out, key=lambda t: -t[1])


def installed_factories(xb) -> dict:
    """JAX's backend factories, less the CUDA and ROCm ones jax before 0.6 registers itself.

    Only a GPU build of jaxlib could serve those, and since jaxlib 0.4.35
    GPUs come only through plugins (CUDA and ROCm alike), which register with a
    PJRT C API: the built-in factory just fails (AttributeError) on every
    machine, so nothing is installed for that platform.
    """
    return {
        name: r
        for name, r in xb._backend_factories.items()
        if not (name in ("cuda", "rocm") and getattr(r, "c_api", None) is None)
    }


def init_backend(xb, platform: str, quiet: bool, memory_stats: bool) -> dict:
    from jax._src import hardware_utils

    event: dict = {"platform": platform, "fail_quietly": quiet, "devices": []}
    # JAX's order: the CUDA device-node test comes before the factory lookup.
    if platform == "cuda" and not hardware_utils.has_visible_nvidia_gpu():
        event.update(status="skipped", jax_skips=True, error="JAX skips CUDA: none of /dev/nvidia0, /dev/nvidiactl, /dev/dxg exists")
        return event
    installed = installed_factories(xb)
    if quiet and platform not in installed:
        # jax<0.6's own factory: JAX tries it and records why it fails; so does devctl, quietly.
        try:
            xb._init_backend(platform)
        except Exception as e:
            error = f"jax<0.6's built-in {platform} factory, which only a GPU jaxlib could serve: {describe_error(e)}"
            event.update(status="skipped", error=error, message=str(e))
            return event
    t0 = time.perf_counter()
    try:
        # A platform no factory serves raises here as in jax.devices(): "not in the list of known backends".
        client = xb._init_backend(platform)
    except Exception as e:
        event.update(status="failed", error=describe_error(e), message=str(e), init_s=time.perf_counter() - t0)
        return event
    event["init_s"] = time.perf_counter() - t0
    event["status"] = "ok"
    event["platform_version"] = getattr(client, "platform_version", None)
    event["runtime_type"] = getattr(client, "runtime_type", None)
    event["pjrt_c_api_version"] = pjrt_c_api_version(client)
    event["process_index"] = client.process_index()
    event["devices"] = [_device(d, client.process_index(), memory_stats) for d in client.devices()]
    return event


def pjrt_c_api_version(client) -> dict[str, int] | None:
    """The client's PJRT C API version; None when it is no C API client. jaxlib 0.12 gives its own CPU client
    (runtime pjrt_ifrt, no C API) the attributes too, as 0.0: no plugin has that version, it means "none"."""
    major = getattr(client, "pjrt_c_api_major_version", None)
    minor = getattr(client, "pjrt_c_api_minor_version", None)
    if major is None or (major, minor) == (0, 0):
        return None
    return {"major": major, "minor": minor}


_EXTRA_ATTRS = (
    "coords", "core_on_chip", "slice_index", "num_cores", "compute_capability", "core_count",
    "device_vendor", "pci_bus_id",
)  # fmt: skip


def _device(d, process_index: int, want_stats: bool) -> dict:
    local = d.process_index == process_index
    info: dict = {
        "id": d.id,
        "platform": d.platform,
        "device_kind": d.device_kind,
        "process_index": d.process_index,
        "local_hardware_id": _safe(lambda: d.local_hardware_id),
        "memory_kinds": _safe(lambda: [m.kind for m in d.addressable_memories()]) if local else None,
        "default_memory_kind": _safe(lambda: d.default_memory().kind) if local else None,
    }
    if local and want_stats:
        stats = _safe(d.memory_stats)
        info["memory_stats"] = {k: (None if v == -1 else v) for k, v in stats.items()} if isinstance(stats, dict) else None
    attrs = {}
    for name in _EXTRA_ATTRS:
        value = _safe(lambda: getattr(d, name, None))
        if value is not None:
            attrs[name] = list(value) if isinstance(value, tuple) else value
    if d.platform in ("gpu", "cuda") and "pci_bus_id" not in attrs and local:
        bus_id = cuda_pci_bus_id(info["local_hardware_id"])
        if bus_id:
            attrs["pci_bus_id"] = bus_id
    info["attributes"] = attrs
    return info


def cuda_pci_bus_id(ordinal: int | None) -> str | None:
    """The PCI bus id of CUDA device `ordinal`, asked of the driver API the CUDA client already initialized.

    JAX does not expose it, and it is the only key that matches a JAX device to
    its NVML GPU when CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER renumber them.
    """
    import ctypes

    if ordinal is None:
        return None
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        device = ctypes.c_int()
        buf = ctypes.create_string_buffer(64)
        if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), int(ordinal)):
            return None
        if cuda.cuDeviceGetPCIBusId(buf, 64, device):
            return None
        return buf.value.decode()
    except (OSError, AttributeError):
        return None


def _safe(fn):
    try:
        return fn()
    except Exception:
        return None


if __name__ == "__main__":
    _child_main()
