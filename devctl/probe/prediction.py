"""What `import jax; jax.devices()` does in this environment, predicted from the backend probe's findings.

The probe initializes every backend on its own so that one failure does not hide
the rest; JAX does not. `xla_bridge.backends()` registers the plugins, then walks
its platforms in one order and gives up at the first failure it is not told to
ignore. This module replays that walk over the probe's results (jax 0.4.36-0.10
`xla_bridge.backends()`, reference/jax-internals.md §1.6), so devctl says what JAX
will do without running the user's program. tests/test_oracle.py compares every
prediction with real JAX under the same environment.
"""

from __future__ import annotations

from devctl.model.list_ import BackendInfo, BackendStatus, JaxOutcome
from devctl.model.xla_flags import xla_flags_failure

_ENDS_THE_PROCESS = (BackendStatus.CRASHED, BackendStatus.TIMEOUT, BackendStatus.EXITED)
_SUFFIX_NAMED = " (set JAX_PLATFORMS='' to automatically choose an available backend)"
_SUFFIX_UNSET = " (you may need to uninstall the failing plugin package, or set JAX_PLATFORMS=cpu to skip this backend.)"


def predict(
    plan: dict | None,
    raised: dict | None,
    backends: dict[str, BackendInfo],
    events: dict[str, dict],
    limited: bool,
) -> JaxOutcome:
    """Replay `backends()`.

    plan: the child's `plan` event (JAX's order, JAX_PLATFORMS); raised: its `jax_raises` event (a
    PJRT_NAMES_AND_LIBRARY_PATHS entry that failed); backends: every row the probe made, plugins
    included; events: each probed platform's raw event; limited: --platform kept some platforms unprobed.
    """
    jax_row = backends.get("jax")
    if jax_row is not None and jax_row.status is not BackendStatus.OK:
        if raised is not None and raised.get("stage") == "import":
            error = _text(raised.get("exception") or "Exception", raised.get("message") or "")
            return JaxOutcome("raises", error=error, culprit="jax")
        return _broken(jax_row, "jax")
    # Plugins load before any backend starts: one that kills or hangs the process does so in JAX too.
    for b in backends.values():
        if b.plugin and b.status in _ENDS_THE_PROCESS:
            return _broken(b, b.platform)
    if raised is not None:
        culprit = raised.get("culprit") or "PJRT_NAMES_AND_LIBRARY_PATHS"
        error = _text(raised.get("exception") or "Exception", raised.get("message") or "")
        return JaxOutcome("raises", error=error, culprit=culprit)
    if plan is None:
        return JaxOutcome("unknown", reason="the probe ended before JAX chose its backends")

    named = bool(plan.get("jax_platforms"))
    default, best = None, -1000
    for platform, priority, fail_quietly, installed in plan.get("order") or []:
        row, event = backends.get(platform), events.get(platform) or {}
        if platform == "cuda" and event.get("jax_skips"):
            continue  # JAX skips CUDA without a word when no NVIDIA device node exists
        if not installed and fail_quietly:
            continue  # jax<0.6's own GPU factory: fails quietly on every machine
        if row is None:
            if limited:
                return JaxOutcome("unknown", reason=f"--platform left {platform} unprobed, and JAX would start it")
            return JaxOutcome("unknown", reason=f"the probe has no result for {platform}")
        if row.status is BackendStatus.OK:
            if priority > best:
                default, best = platform, priority
            continue
        if row.status in _ENDS_THE_PROCESS:
            return _broken(row, platform)
        if fail_quietly:
            continue
        message = event.get("message", row.error or "")
        error = f"Unable to initialize backend '{platform}': {message}" + (_SUFFIX_NAMED if named else _SUFFIX_UNSET)
        return JaxOutcome("raises", error=_text("RuntimeError", error), culprit=platform)
    if default is None:
        # backends() ends in `assert _default_backend is not None` when it skipped everything.
        return JaxOutcome("raises", error=_text("AssertionError", ""), culprit="JAX_PLATFORMS" if named else None)
    count = backends[default].device_count
    return JaxOutcome("ok", default_backend=default, device_count=count)


def _broken(row: BackendInfo, culprit: str) -> JaxOutcome:
    result = {BackendStatus.CRASHED: "crashes", BackendStatus.TIMEOUT: "hangs", BackendStatus.EXITED: "exits"}.get(row.status, "raises")
    if xla_flags_failure(row.error or "") is not None:
        # XLA's flag parser ends the process at the first backend, whichever it is: exit 1, or an abort in older XLA.
        culprit = "XLA_FLAGS"
    return JaxOutcome(result, error=row.error, culprit=culprit)


def _text(exception: str, message: str) -> str:
    """An exception as `Type: message`, the way devctl and its oracle test both write it."""
    return f"{exception}: {message}" if message else exception
