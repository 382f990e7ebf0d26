"""The child's side of the event pipe: one JSON object per line.

Events go to a dedicated file descriptor, not stdout, because plugins and
XLA print to stdout and stderr freely.
"""

from __future__ import annotations

import json
import os
import sys

FD_ENV = "DEVCTL_PROBE_FD"
_out = None


def _stream():
    global _out
    if _out is None:
        fd = os.environ.get(FD_ENV)
        _out = os.fdopen(int(fd), "w", buffering=1) if fd else sys.stdout
    return _out


def emit(event: str, /, **data) -> None:
    """Send one event to the parent, flushed at once (the parent may kill us next)."""
    stream = _stream()
    stream.write(json.dumps({"event": event, **data}, default=str) + "\n")
    stream.flush()


def read_request() -> dict:
    """The task's parameters: JSON in argv[1], or on stdin when argv[1] is "-" (a child started before its request)."""
    if len(sys.argv) < 2:
        return {}
    if sys.argv[1] == "-":
        return json.loads(sys.stdin.read() or "{}")
    return json.loads(sys.argv[1])
