"""Expectations for `devctl check`: flags over a `[tool.devctl.check]` table over the defaults.

The table comes from --config FILE, or else from the first pyproject.toml found
from the current directory upward (as ruff and pytest find theirs). Every bad
key or value is a UsageError naming the file, the key and what is accepted.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devctl.checks import CHECK_NAMES
from devctl.errors import UsageError
from devctl.model.health import Expectations
from devctl.units import parse_rate_gbps, parse_size

TABLE = "tool.devctl.check"
KEYS = ("platform", "min-devices", "device-kind", "min-memory", "min-h2d", "timeout", "only", "skip", "strict")


@dataclass(frozen=True)
class CheckOptions:
    expectations: Expectations
    names: list[str]  # checks to run, in order
    strict: bool
    config_path: str | None  # where the table came from, if anywhere


@dataclass(frozen=True)
class Flags:
    """The command line as typed; None where a flag was not given."""

    platform: list[str] | None = None
    min_devices: str | None = None
    device_kind: str | None = None
    min_memory: str | None = None
    min_h2d: str | None = None
    timeout: str | None = None
    only: list[str] | None = None
    skip: list[str] | None = None
    strict: bool | None = None
    config: str | None = None


def resolve(flags: Flags, cwd: str | None = None) -> CheckOptions:
    from devctl.checks.runner import select
    from devctl.discovery.envvars import check_platforms
    from devctl.probe.runner import check_timeout
    from devctl.probe.runner import DEFAULT_TIMEOUT_S

    table, where = load_table(flags.config, cwd)
    file_values = {key: _from_file(key, value, where) for key, value in table.items()}
    sources = {key: where for key in file_values}

    def pick(key: str, flag_value: Any, parse) -> Any:
        if flag_value is not None:
            sources[key] = "flag"
            return parse(flag_value)
        return file_values.get(key)

    platforms = pick("platform", flags.platform or None, check_platforms)
    expectations = Expectations(
        platforms=tuple(platforms) if platforms else None,
        min_devices=pick("min-devices", flags.min_devices, lambda v: _positive_int(v, "--min-devices")),
        device_kind=pick("device-kind", flags.device_kind, lambda v: _kind(v, "--device-kind")),
        min_memory_bytes=pick("min-memory", flags.min_memory, lambda v: _size(v, "--min-memory")),
        min_h2d_gbps=pick("min-h2d", flags.min_h2d, lambda v: _rate(v, "--min-h2d")),
        timeout_s=pick("timeout", flags.timeout, check_timeout) or DEFAULT_TIMEOUT_S,
        sources={k: v for k, v in sources.items() if k not in ("only", "skip", "strict")},
    )
    only = pick("only", flags.only or None, lambda v: _names(v, "--only"))
    skip = pick("skip", flags.skip or None, lambda v: _names(v, "--skip")) or []
    strict = bool(pick("strict", flags.strict, bool))
    names = select(only, skip)
    if not names:
        raise UsageError("--only and --skip leave no check to run")
    return CheckOptions(expectations, names, strict, where)


# ---- where the table comes from -------------------------------------------------------------------


def load_table(config: str | None, cwd: str | None = None) -> tuple[dict[str, Any], str | None]:
    """The [tool.devctl.check] table and the file it came from; ({}, None) when there is none."""
    if config is not None:
        path = Path(config)
        if not path.is_file():
            raise UsageError(f"--config {config!r} is not a file")
        doc = _read_toml(path)
        # A dedicated file may hold the keys at the top level or in the same table as pyproject.toml.
        table = _dig(doc, TABLE.split(".")) if "tool" in doc else doc
        return _as_table(table, path), str(path)
    found = find_pyproject(Path(cwd or os.getcwd()))
    if found is None:
        return {}, None
    table = _dig(_read_toml(found), TABLE.split("."))
    if table is None:
        return {}, None
    return _as_table(table, found), str(found)


def find_pyproject(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _read_toml(path: Path) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path} is not valid TOML: {e}") from None


def _dig(doc: dict, keys: list[str]) -> Any:
    for key in keys:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def _as_table(table: Any, path: Path) -> dict[str, Any]:
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise UsageError(f"[{TABLE}] in {path} must be a table")
    unknown = [k for k in table if k not in KEYS]
    if unknown:
        raise UsageError(f"unknown key {unknown[0]!r} in [{TABLE}] of {path}; accepted: {', '.join(KEYS)}")
    return table


# ---- values -------------------------------------------------------------------------------------


def _from_file(key: str, value: Any, where: str | None) -> Any:
    """A config value parsed as its flag would be, with errors naming the file and key."""
    from devctl.discovery.envvars import check_platforms

    label = f"{key} in [{TABLE}] of {where}"
    try:
        if key == "platform":
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise UsageError(f"{label} must be a platform name or a list of them, got {value!r}")
            return check_platforms(items)
        if key == "min-devices":
            return _positive_int(value, label)
        if key == "device-kind":
            return _kind(value, label)
        if key == "min-memory":
            return _size(value, label)
        if key == "min-h2d":
            return _rate(value, label)
        if key == "timeout":
            return _timeout(value, label)
        if key in ("only", "skip"):
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise UsageError(f"{label} must be a list of check names, got {value!r}")
            return _names(items, label)
        if key == "strict":
            if not isinstance(value, bool):
                raise UsageError(f"{label} must be true or false, got {value!r}")
            return value
    except UsageError as e:
        if label in str(e):
            raise
        # check_platforms speaks of --platform; say where the value really came from.
        raise UsageError(f"{label}: {str(e).replace('--platform ', '')}") from None
    raise AssertionError(key)


def _positive_int(value: Any, label: str) -> int:
    if isinstance(value, bool):
        raise UsageError(f"{label} must be a whole number >= 1, got {value!r}")
    try:
        n = int(value) if isinstance(value, (int, str)) else None
    except ValueError:
        n = None
    if n is None or n < 1 or (isinstance(value, str) and not value.strip().isdigit()):
        raise UsageError(f"{label} must be a whole number >= 1, got {value!r}")
    return n


def _kind(value: Any, label: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{label} must be a non-empty device kind such as H100 or 'TPU v5', got {value!r}")
    return value.strip()


def _size(value: Any, label: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    try:
        n = parse_size(value) if isinstance(value, str) else 0
    except ValueError:
        n = 0
    if n <= 0:
        raise UsageError(f"{label} must be a size such as 40GiB, 16G or 512M, got {value!r}")
    return n


def _rate(value: Any, label: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        rate = float(value)
    else:
        try:
            rate = parse_rate_gbps(value) if isinstance(value, str) else 0.0
        except ValueError:
            rate = 0.0
    if not (rate > 0 and math.isfinite(rate)):
        raise UsageError(f"{label} must be a rate in GB/s such as 10GB/s, got {value!r}")
    return rate


def _timeout(value: Any, label: str) -> float:
    from devctl.probe.runner import MAX_TIMEOUT_S

    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_TIMEOUT_S
    if not ok:
        raise UsageError(f"{label} must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {value!r}")
    return float(value)


def _names(items: list[str], label: str) -> list[str]:
    names = [n.strip() for item in items for n in item.split(",") if n.strip()]
    for n in names:
        if n not in CHECK_NAMES:
            raise UsageError(f"unknown check {n!r} for {label}; checks: {', '.join(CHECK_NAMES)}")
    return names
