"""XLA_FLAGS as XLA's own flag parser judges it, read from what the parser prints before it ends the process.

XLA parses XLA_FLAGS once per process, when the first backend starts. An unknown flag, or a value its type does
not take, makes it log `F... Unknown flag in XLA_FLAGS: --xla_no_such_flag=1` or `E... Couldn't interpret value
abc for flag xla_force_host_platform_device_count.` and end the process with status 1 inside jax.devices(): there
is no exception to catch (jaxlib 0.10.2 and 0.12 alike; 0.4.36's XLA aborts instead, SIGABRT). Pure stdlib: the probe's parent, `devctl env` and the
advice read the same words.
"""

from __future__ import annotations

import re

_UNKNOWN = re.compile(r"Unknown flags? in XLA_FLAGS: (?P<flags>[^\n]+)")
_VALUE = re.compile(r"Couldn't interpret value (?P<value>.*?) for flag (?P<flag>\w+)\.?(?:\s|$)")
# A fatal log line: `F1127 14:33:09.495308   14840 parse_flags_from_env.cc:234] message` (glog), or older XLA's
# `2026-11-27 15:45:22.408902: F external/xla/xla/parse_flags_from_env.cc:212] message`.
_FATAL = re.compile(r"^(?:F\d{4} [\d:.]+\s+\d+ |\d{4}-\d\d-\d\d [\d:.]+: F )\S+\] (?P<message>.+)$", re.MULTILINE)


def xla_flags_failure(text: str) -> str | None:
    """XLA's words for the XLA_FLAGS it refused, from a process's output; None when it refused none."""
    m = _VALUE.search(text)
    if m is not None:
        return f"Couldn't interpret value {m.group('value')} for flag {m.group('flag')}"
    m = _UNKNOWN.search(text)
    if m is not None:
        return f"Unknown flag in XLA_FLAGS: {m.group('flags').strip()}"
    return None


def fatal_message(text: str) -> str | None:
    """Why XLA ended the process, in its words: a refused flag first, else its last fatal (F) log line."""
    refused = xla_flags_failure(text)
    if refused is not None:
        return refused
    found = _FATAL.findall(text)
    return found[-1].strip() if found else None


def refused_flags(failure: str, value: str) -> list[str]:
    """The items of XLA_FLAGS (`value`) that XLA's `failure` names."""
    items = value.split()
    m = _VALUE.search(failure)
    if m is not None:
        flag = m.group("flag")
        return [i for i in items if i.lstrip("-").split("=", 1)[0] == flag]
    m = _UNKNOWN.search(failure)
    if m is not None:
        named = set(m.group("flags").split())
        return [i for i in items if i in named]
    return []


def without(value: str, refused: list[str]) -> str | None:
    """XLA_FLAGS without the refused items; None when nothing is left (unset it)."""
    kept = [i for i in value.split() if i not in refused]
    return " ".join(kept) or None
