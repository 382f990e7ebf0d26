"""XLA_FLAGS judged by XLA's own flag parser, in a child process.

XLA parses XLA_FLAGS when the first client is created, and ends the process on a flag it refuses
(devctl.model.xla_flags). The child creates jaxlib's CPU client and nothing else: no JAX backend, no plugin, no
accelerator is touched, so `devctl env` can ask while a job holds the GPU or the TPU.
"""

from __future__ import annotations

import os
import sys

_MODULE = "devctl.probe.xla_flags"


def refused(timeout_s: float) -> str | None:
    """XLA's words for what it refuses in this environment's XLA_FLAGS; None when it takes them, or cannot say."""
    from devctl.model.xla_flags import xla_flags_failure
    from devctl.probe.runner import run_child

    child = run_child(_MODULE, {}, timeout_s=timeout_s)
    if child.last("result") is not None or not child.returncode or child.returncode < 0:
        return None
    return xla_flags_failure(f"{child.output_head}\n{child.output_tail}")


def _child_main() -> None:
    from devctl.probe import channel

    channel.read_request()
    try:
        from jaxlib import xla_client

        xla_client.make_cpu_client()  # parses XLA_FLAGS, or ends this process saying why
        channel.emit("result", parsed=True)
    except Exception as exc:  # no such call in this jaxlib, or no jaxlib: nothing to say about the flags
        channel.emit("result", parsed=False, error=f"{type(exc).__name__}: {exc}"[:300])
    sys.stdout.flush()
    sys.stderr.flush()
    channel.release_runtime()
    os._exit(0)


if __name__ == "__main__":
    _child_main()
