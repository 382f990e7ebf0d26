"""JAX as the oracle: what real JAX does under an environment, beside what devctl predicted for it.

`jax_truth(env)` runs `import jax; jax.devices()` in a fresh interpreter with
exactly that environment and records what happened: the default backend and
each backend's device count, the quiet failures JAX kept in `_backend_errors`,
the exception `jax.devices()` raised (and what a second call does: when a backend
failed after another started, JAX keeps the started one and the second call
returns its devices; a program still gets the exception first), the plugins its first call logged as broken, or that it crashed or
hung. `disagreements(prediction, truth)` lists every way devctl's `list --json`
says otherwise. The scenarios live in tests/test_oracle.py (light, in CI) and
tests/test_oracle_heavy.py (real multi-GB packages, `-m heavy`).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap

TRUTH_SCRIPT = textwrap.dedent(
    """
    import json, sys

    def text(e):
        return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__

    out = {}
    try:
        import jax
        from jax._src import xla_bridge as xb
    except BaseException as e:
        print(json.dumps({"result": "raises", "error": text(e), "stage": "import"}))
        sys.exit(0)
    try:
        devices = jax.devices()
    except Exception as e:
        out = {"result": "raises", "error": text(e)}
        # What the first call logged is what a program sees; a retry may log more (a plugin's
        # initialize() run again beside what it registered the first time).
        print("\\n" + SECOND_CALL, file=sys.stderr, flush=True)
        try:
            jax.devices()
            out["second_call"] = "ok"
        except Exception as again:
            out["second_call"] = text(again)
    else:
        backends = xb.backends()
        default = xb.get_backend()
        out = {
            "result": "ok",
            "default_backend": next(name for name, b in backends.items() if b is default),
            "device_count": len(devices),
            "backends": {name: len(b.devices()) for name, b in backends.items()},
            "backend_errors": dict(xb._backend_errors),
        }
    print(json.dumps(out), flush=True)
    """
)
SECOND_CALL = "--- devctl oracle: jax.devices() again ---"
TRUTH_SCRIPT = f"SECOND_CALL = {SECOND_CALL!r}\n" + TRUTH_SCRIPT

_PLUGIN_LOG = re.compile(
    r"Jax plugin configuration error: (?:Exception when calling (\S+)\.initialize\(\)|Plugin module (\S+) could not be loaded|Plugin module (\S+) does not exist)"
)


def jax_truth(env: dict[str, str], python: str = sys.executable, timeout: float = 60) -> dict:
    """What real JAX does under `env`: {"result": ok|raises|exits|crashes|hangs, ...}."""
    try:
        proc = subprocess.run([python, "-c", TRUTH_SCRIPT], env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return {"result": "hangs", "stderr": _text(e.stderr)}
    truth: dict = {}
    if proc.returncode < 0:
        truth = {"result": "crashes", "signal": signal.Signals(-proc.returncode).name}
    else:
        last = proc.stdout.strip().splitlines()[-1:] or [""]
        try:
            truth = json.loads(last[0])
        except json.JSONDecodeError:
            # No answer and no signal: the process ended itself (XLA's flag parser logs why and exits 1).
            truth = {"result": "exits" if proc.returncode > 0 else "crashes", "exit_code": proc.returncode}
    truth["stderr"] = proc.stderr
    first, _, again = proc.stderr.partition(SECOND_CALL)
    # The plugins the first jax.devices() logged as broken: what devctl predicts, and what a program sees.
    truth["broken_plugins"] = _broken_plugins(first)
    if again:
        truth["second_call_broken_plugins"] = _broken_plugins(again)
    return truth


def _broken_plugins(stderr: str) -> list[str]:
    return sorted({next(g for g in m.groups() if g) for m in _PLUGIN_LOG.finditer(stderr)})


def disagreements(predicted: dict, truth: dict) -> list[str]:
    """Every way devctl's `list --json` document disagrees with what JAX did."""
    out: list[str] = []
    outcome = predicted.get("jax_outcome") or {}
    if outcome.get("result") != truth["result"]:
        return [f"devctl predicts jax.devices() {outcome.get('result')} ({outcome.get('error') or outcome.get('reason')}); JAX {truth['result']}: {truth.get('error') or truth.get('signal') or ''}"]
    rows = {b["platform"]: b for b in predicted["backends"]}
    if truth["result"] == "exits":
        from devctl.model.xla_flags import fatal_message

        said = fatal_message(truth.get("stderr") or "")
        if said is None or said not in (outcome.get("error") or ""):
            out.append(f"JAX's process exited {truth['exit_code']} saying {said!r}; devctl says {outcome.get('error')!r}")
    if truth["result"] == "raises":
        if outcome.get("error") != truth["error"]:
            out.append(f"error: devctl says {outcome.get('error')!r}; JAX raised {truth['error']!r}")
    elif truth["result"] == "ok":
        if predicted.get("default_platform") != truth["default_backend"]:
            out.append(f"default backend: devctl {predicted.get('default_platform')}, JAX {truth['default_backend']}")
        if outcome.get("device_count") != truth["device_count"]:
            out.append(f"jax.devices(): devctl {outcome.get('device_count')} devices, JAX {truth['device_count']}")
        ok = {p: b["device_count"] for p, b in rows.items() if b["status"] == "ok"}
        if ok != truth["backends"]:
            out.append(f"working backends and device counts: devctl {ok}, JAX {truth['backends']}")
        for platform, error in truth["backend_errors"].items():
            row = rows.get(platform)
            if row is None or row["status"] == "ok" or error not in (row.get("error") or ""):
                out.append(f"JAX failed {platform} quietly with {error!r}; devctl says {row and (row['status'], row.get('error'))}")
    # Plugins JAX logged as broken are the ones devctl names as failed, by module.
    failed_modules = {b["plugin"] for b in rows.values() if b.get("plugin") and b["status"] != "ok" and b["plugin"].startswith("jax_plugins.")}
    if truth["result"] in ("ok", "raises") and set(truth["broken_plugins"]) != failed_modules:
        out.append(f"broken plugins: devctl {sorted(failed_modules)}, JAX logged {truth['broken_plugins']}")
    return out


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")
