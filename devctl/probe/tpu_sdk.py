"""TensorCore utilization per core from libtpu's SDK (`libtpu.sdk.tpumonitoring`), in a child process.

The one figure libtpu's runtime metrics service does not serve: the SDK reads it from the host's TPU daemon
(tpunetd, `libtpu.tpunetd.VBARControl/GetHostMetrics` on 127.0.0.1:8353, seen with strace and a sniffing
server against libtpu 0.0.42.1; its proto is not public, so devctl does not speak it itself). tpu-info calls
the SDK in its own process, and once segfaulted there (tpu-info issue #8): devctl asks in a child, with
`TPU_SKIP_MDS_QUERY=1` (off a Cloud TPU VM libtpu otherwise retries the metadata server for minutes) and
`TPU_LOG_DIR` in a private temporary directory removed afterwards, bounded by a timeout.

Child side: `python -m devctl.probe.tpu_sdk '{}'` emits `result` with `tensorcore_util` (percent per core,
in the daemon's order). Parent side: `ask_tensorcore_util`. libtpu is found without importing it
(`import libtpu` sets TPU_LIBRARY_PATH in the importing process).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Literal

_MODULE = "devctl.probe.tpu_sdk"
TIMEOUT_S = 15.0  # importing libtpu's SDK took 0.5 s, a first get_metric 2 s, on a CPU-only host


@dataclass(frozen=True)
class SdkAnswer:
    status: Literal["ok", "no-libtpu", "no-data", "timeout", "crashed", "error"]
    values: list[float] = field(default_factory=list)  # percent per TensorCore, in the daemon's order
    reason: str | None = None


def libtpu_installed() -> bool:
    from importlib.util import find_spec

    try:
        return find_spec("libtpu") is not None
    except (ImportError, ValueError):
        return False


def ask_tensorcore_util(timeout_s: float = TIMEOUT_S) -> SdkAnswer:
    """The SDK's tensorcore_util, from a child; never raises, never outlasts `timeout_s` by much."""
    import shutil
    import tempfile

    from devctl.probe.runner import run_child

    if not libtpu_installed():
        return SdkAnswer("no-libtpu", reason="libtpu is not installed (pip install 'jax[tpu]')")
    logs = tempfile.mkdtemp(prefix="devctl-tpu-sdk-")  # mode 0700: libtpu's glog files are nobody else's
    try:
        result = run_child(_MODULE, {}, timeout_s=timeout_s, env={"TPU_SKIP_MDS_QUERY": "1", "TPU_LOG_DIR": logs})
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    final = result.last("result")
    if final is not None:
        if final.get("error"):
            return SdkAnswer("error", reason=f"libtpu.sdk: {final['error']}")
        values = [v for v in final.get("tensorcore_util") or [] if isinstance(v, (int, float))]
        if not values:
            return SdkAnswer("no-data", reason="libtpu.sdk has no TensorCore utilization (the host's TPU daemon, 127.0.0.1:8353, gave none)")
        return SdkAnswer("ok", [float(v) for v in values])
    if result.timed_out:
        return SdkAnswer("timeout", reason=f"libtpu.sdk did not answer in {timeout_s:g} s; its child was killed")
    if result.signal_name:
        return SdkAnswer("crashed", reason=f"libtpu.sdk killed its child with {result.signal_name}")
    return SdkAnswer("error", reason=f"libtpu.sdk's child {result.failure_text()}")


def _percent(text) -> float | None:
    """One core's figure: the SDK gives strings such as '20.00' (or '20.00%')."""
    try:
        value = float(str(text).strip().rstrip("%"))
    except ValueError:
        return None
    return value if 0.0 <= value <= 100.0 else None


def _child_main() -> None:
    from devctl.probe import channel

    channel.read_request()
    try:
        from libtpu.sdk import tpumonitoring

        data = tpumonitoring.get_metric("tensorcore_util").data()
        values = [_percent(v) for v in data or ()]
        channel.emit("result", tensorcore_util=[v for v in values if v is not None])
    except Exception as exc:  # an SDK that raises is an answer too
        channel.emit("result", error=f"{type(exc).__name__}: {exc}")
    sys.stdout.flush()
    sys.stderr.flush()
    channel.release_runtime()
    os._exit(0)  # no exit-time destructors of libtpu's: a crash there must not undo the answer


if __name__ == "__main__":
    _child_main()
