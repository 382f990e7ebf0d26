"""The health child: does every device compute and move bytes correctly, and how fast does the host feed it?

One child serves the compute, transfer and bandwidth checks, so JAX starts once
for all three. The parent (`start_health_probe` + `run_health_probe`, no jax
import) starts it early, so it imports jax and numpy while the backend probe
runs, and sends its request once the backend probe is done: only platforms that
initialized there (set as jax_platforms before any backend starts), with the
plugins that broke the backend probe left out, so a hanging or crashing backend
cannot take the health child with it.

Events (child -> parent):
  phase  {kind, name}          before each step; the last unfinished one names a crash or hang
  trial  {DeviceTrial}         one compute or transfer verdict
  cell   {Cell}                the bench's h2d cells (emitted by devctl.probe.bench_transfer.Bench)
  bandwidth_error {error}      the bench could not run
  done   {devices}
"""

from __future__ import annotations

import os
import sys

from devctl.model import from_dict
from devctl.model.bench_transfer import Cell
from devctl.model.check import DeviceTrial, HealthProbeResult
from devctl.probe.backends import PJRT_ENV
from devctl.probe.runner import Child, collect, send_request, start_child

MODULE = "devctl.probe.health"

# 256x256 float32 matmul and a 1M-element sum: big enough to use the device's real kernels
# (tiling, tree reductions), small enough for every device in well under a second.
MATMUL_N = 256
SUM_N = 1 << 20
# Relative to the largest |numpy result|: float32 with precision="highest" lands near 1e-6;
# a flipped bit or a wrong kernel lands far above.
MATMUL_TOLERANCE = 1e-4
SUM_TOLERANCE = 1e-4
# An odd size, so a transfer that drops or pads the tail of a buffer does not pass by luck.
TRANSFER_BYTES = (1 << 20) + 13
# The bandwidth check's short bench run: one size, big enough to leave latency behind.
BANDWIDTH_BYTES = 64 << 20


def start_health_probe() -> Child:
    """Start the child now; it imports jax and numpy, then waits for run_health_probe (or cancel_health_probe)."""
    return start_child(MODULE, None)


def cancel_health_probe(child: Child) -> None:
    send_request(child, {"cancel": True})
    collect(child, timeout_s=10)


def run_health_probe(
    platforms: list[str],
    *,
    child: Child | None = None,
    skip_plugins: list[str],
    compute: bool,
    transfer: bool,
    bandwidth: bool,
    bandwidth_all_devices: bool = False,
    timeout_s: float,
) -> HealthProbeResult:
    """Run the child on `platforms` (all already known to initialize); never raises for a bad device.

    The h2d bandwidth run covers every device of the default platform when
    `bandwidth_all_devices`, else only its first device (a figure, not a verdict).
    """
    env = {}
    pjrt = [i for i in os.environ.get(PJRT_ENV, "").split(",") if i]
    if pjrt:
        env[PJRT_ENV] = ",".join(i for i in pjrt if i.split(os.pathsep)[0] not in skip_plugins)
    request = {
        "platforms": platforms,
        "env": env,
        "skip_plugins": skip_plugins,
        "compute": compute,
        "transfer": transfer,
        "bandwidth": bandwidth,
        "bandwidth_all_devices": bandwidth_all_devices,
    }
    started = child or start_child(MODULE, None)
    send_request(started, request)
    result = collect(started, timeout_s=timeout_s)
    trials = [_trial(e) for e in result.events if e.get("event") == "trial"]
    cells = [from_dict(Cell, e) for e in result.events if e.get("event") == "cell"]
    bw_error = next((e.get("error") for e in result.events if e.get("event") == "bandwidth_error"), None)
    done = result.last("done")
    failure = unfinished = None
    if done is None or not result.ok:
        phase = result.last("phase")
        unfinished = phase.get("kind") if phase else None
        failure = result.failure_text() + (f" while running {_describe(phase)}" if phase else "")
    devices = tuple(done.get("devices") or ()) if done else tuple(dict.fromkeys(t.device for t in trials if "->" not in t.device))
    return HealthProbeResult(
        platforms=tuple(platforms),
        devices=devices,
        trials=trials,
        h2d_cells=cells,
        bandwidth_error=bw_error,
        failure=failure,
        elapsed_s=result.elapsed_s,
        unfinished=unfinished,
    )


def _trial(e: dict) -> DeviceTrial:
    return DeviceTrial(
        test=e["test"],
        device=e["device"],
        platform=e["platform"],
        ok=bool(e["ok"]),
        rel_error=e.get("rel_error"),
        tolerance=e.get("tolerance"),
        size_bytes=e.get("size_bytes"),
        error=e.get("error"),
    )


def _describe(phase: dict) -> str:
    return "import jax" if phase.get("kind") == "import" else f"{phase.get('kind')} on {phase.get('name')}"


# ---------------------------------------------------------------- child side


def _child_main() -> None:
    from devctl.probe.channel import emit, read_request

    emit("phase", kind="import", name="jax")
    import jax
    import numpy as np

    # Read after the imports: the parent starts this child before it knows which platforms work.
    request = read_request()
    if request.get("cancel"):
        return
    os.environ.update(request.get("env") or {})
    # Only the platforms the backend probe initialized; nothing has started a backend yet, so this still applies.
    jax.config.update("jax_platforms", ",".join(request["platforms"]))
    skip = set(request.get("skip_plugins") or [])
    if skip:
        # The plugins that hung or crashed the backend probe must not run their initialize() here.
        from jax._src import xla_bridge as xb

        from devctl.probe.backends import instrument_plugin_discovery

        instrument_plugin_discovery(xb, lambda *a, **k: None, skip)

    devices = []
    for platform in request["platforms"]:
        emit("phase", kind="backend", name=platform)
        try:
            devices += list(jax.local_devices(backend=platform))
        except Exception as e:  # initialized in the backend probe, failed here: say so per platform
            emit("trial", test="init", device=platform, platform=platform, ok=False, error=_one_line(e))
    rng = np.random.default_rng(0)
    if request.get("compute"):
        _compute(jax, np, rng, devices, emit)
    if request.get("transfer"):
        _transfer(jax, np, rng, devices, emit)
    if request.get("bandwidth"):
        _bandwidth(jax, np, emit, all_devices=bool(request.get("bandwidth_all_devices")))
    emit("done", devices=[_name(d) for d in devices])


def _compute(jax, np, rng, devices, emit) -> None:
    import jax.numpy as jnp

    a = rng.standard_normal((MATMUL_N, MATMUL_N), dtype=np.float32)
    b = rng.standard_normal((MATMUL_N, MATMUL_N), dtype=np.float32)
    v = rng.random(SUM_N, dtype=np.float32)
    mm_ref = a.astype(np.float64) @ b.astype(np.float64)
    sum_ref = float(v.astype(np.float64).sum())
    # "highest": TPUs default to bfloat16 passes and Ampere+ GPUs to TF32, which would need a loose tolerance.
    matmul = jax.jit(lambda x, y: jnp.matmul(x, y, precision="highest"))
    total = jax.jit(jnp.sum)
    for d in devices:
        name = _name(d)
        emit("phase", kind="matmul", name=name)
        emit("trial", **compute_trial("matmul", d, lambda: _matmul_error(jax, np, matmul, a, b, mm_ref, d), MATMUL_TOLERANCE))
        emit("phase", kind="sum", name=name)
        emit("trial", **compute_trial("sum", d, lambda: _sum_error(jax, total, v, sum_ref, d), SUM_TOLERANCE))


def _matmul_error(jax, np, matmul, a, b, ref, d) -> float:
    out = matmul(jax.device_put(a, d), jax.device_put(b, d))
    _on(out, d)
    return matmul_error(np, out, ref)


def _sum_error(jax, total, v, ref, d) -> float:
    out = total(jax.device_put(v, d))
    _on(out, d)
    return sum_error(out, ref)


# The comparisons the compute and transfer verdicts rest on, each given what came back from the device. They are
# functions of their own so that a test can hand them a wrong result and see the check fail (tests/test_check.py:
# the device's real answer, corrupted, as bench collective's tests hand each collective a wrong block).


def matmul_error(np, out, ref) -> float:
    """How far the device's product `out` is from numpy's float64 `ref`, relative to the largest |ref|."""
    return float(np.max(np.abs(np.asarray(out, dtype=np.float64) - ref)) / np.max(np.abs(ref)))


def sum_error(out, ref: float) -> float:
    """How far the device's sum `out` is from numpy's float64 `ref`, relative to it."""
    return abs(float(out) - ref) / abs(ref)


def compute_trial(test: str, d, measure, tolerance: float) -> dict:
    """The trial event of one compute test on device `d`: `measure()` runs it and returns its relative error
    (matmul_error, sum_error); an exception or an error above `tolerance` (NaN too) is a failure that says which."""
    base = {"test": test, "device": _name(d), "platform": d.platform, "tolerance": tolerance}
    try:
        err = measure()
    except Exception as e:
        return {**base, "ok": False, "error": _one_line(e)}
    ok = err <= tolerance  # NaN fails too
    out = {**base, "ok": ok, "rel_error": err if err == err else None}
    if not ok:
        out["error"] = f"result differs from numpy by {err:.3g} (relative), more than {tolerance:g}"
    return out


def _transfer(jax, np, rng, devices, emit) -> None:
    payload = rng.integers(0, 256, size=TRANSFER_BYTES, dtype=np.uint8)
    on_device = {}
    for d in devices:
        name = _name(d)
        emit("phase", kind="h2d-d2h", name=name)
        base = {"test": "h2d-d2h", "device": name, "platform": d.platform, "size_bytes": payload.nbytes}

        def there(d=d):
            # may_alias=False: a CPU device may otherwise adopt the numpy buffer, and nothing would move.
            x = jax.device_put(payload, d, may_alias=False)
            _on(x, d)
            back = np.asarray(x)
            on_device[d] = x  # arrived (right or wrong): the source of its d2d trials
            return back

        emit("trial", **transfer_trial(np, base, there, payload))
    for a, x in on_device.items():
        for b in on_device:
            if a is b or a.platform != b.platform:
                continue
            pair = f"{_name(a)}->{_name(b)}"
            emit("phase", kind="d2d", name=pair)
            base = {"test": "d2d", "device": pair, "platform": a.platform, "size_bytes": payload.nbytes}

            def moved(x=x, b=b):
                y = jax.device_put(x, b, may_alias=False)
                _on(y, b)
                return np.asarray(y)

            emit("trial", **transfer_trial(np, base, moved, payload))


def transfer_trial(np, base: dict, fetch, sent) -> dict:
    """The trial event of one transfer: `fetch()` moves the bytes and returns what came back (a numpy array),
    compared with `sent` byte for byte; an exception is a failure that says which."""
    try:
        ok, why = same_bytes(np, fetch(), sent)
    except Exception as e:
        ok, why = False, _one_line(e)
    return {**base, "ok": ok, **({"error": why} if why else {})}


def same_bytes(np, got, want) -> tuple[bool, str | None]:
    """Whether `got` holds exactly the bytes of `want`, else what differs: the count, or how many and where first."""
    got = got.reshape(-1)
    if got.shape != want.shape:
        return False, f"{got.size} bytes came back, {want.size} were sent"
    diff = np.flatnonzero(got != want)
    if diff.size:
        return False, f"{diff.size} of {want.size} bytes changed, first at offset {int(diff[0])}"
    return True, None


def _bandwidth(jax, np, emit, *, all_devices: bool) -> None:
    emit("phase", kind="bandwidth", name="h2d")
    try:
        # The bench's own method (fresh sources, warm-ups, verified bytes), cut to one size.
        from devctl.model.bench_transfer import TransferOptions
        from devctl.probe.bench_transfer import Bench

        opts = TransferOptions(
            directions=("h2d",),
            sizes_bytes=(BANDWIDTH_BYTES,),
            devices=() if all_devices else None,  # (): every local device; None: the first
            repeats=3,
            min_time_s=0.02,
            warmups=1,
        )
        bench = Bench(opts, jax, np)
        bench.resolve()
        bench.run()
    except Exception as e:
        emit("bandwidth_error", error=f"the transfer bench failed: {_one_line(e)}")


def _on(array, device) -> None:
    """A result that lives elsewhere than asked would pass the comparison and test nothing."""
    where = array.devices()
    if where != {device}:
        raise RuntimeError(f"result is on {sorted(map(_name, where))}, not on {_name(device)}")


def _name(d) -> str:
    return f"{d.platform}:{d.id}"


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}"[:500]


if __name__ == "__main__":
    _child_main()
    from devctl.probe.channel import release_runtime

    # Leave as the backend probe does: past the runtimes' exit-time destructors (some hang or abort),
    # undoing first what libtpu's exit handler would have undone.
    sys.stdout.flush()
    release_runtime()
    os._exit(0)
