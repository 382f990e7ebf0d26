"""`devctl check`: named health checks with exit codes, for CI pipelines and schedulers."""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from devctl.checks import CHECK_NAMES
from devctl.cli import completion
from devctl.cli.cluster import cluster_options
from devctl.cli.options import (
    CsvOpt,
    HostRootOpt,
    JsonOpt,
    TimeoutOpt,
    check_host_root,
    check_output_format,
    check_output_path,
    check_platforms,
    check_timeout,
    quoted,
    read_input_file,
    shown,
    split_list,
    write_output,
)
from devctl.errors import UsageError
from devctl.model.check import Expectations
from devctl.model.distributed import ClusterParams
from devctl.units import RATE_HELP, parse_rate_gbps, parse_size

# Same values as `devctl list --platform`, but here an expectation: it must initialize.
ExpectPlatformOpt = Annotated[
    Optional[list[str]],
    typer.Option("--platform", "-p", metavar="NAME", autocompletion=completion.platforms, help="Expect this JAX platform to work (repeatable): cpu, cuda, rocm, tpu, gpu..."),
]


@cluster_options
def check(
    json_out: JsonOpt = False,
    platform: ExpectPlatformOpt = None,
    min_devices: Annotated[Optional[str], typer.Option("--min-devices", metavar="N", help="Expect at least N devices.")] = None,
    device_kind: Annotated[
        Optional[str], typer.Option("--device-kind", metavar="KIND", help="Expect every device's kind to contain KIND, e.g. H100.")
    ] = None,
    min_memory: Annotated[
        Optional[str], typer.Option("--min-memory", metavar="SIZE", autocompletion=completion.memory_size, help="Expect a new JAX process to be able to allocate SIZE on every device (memstats' usable), e.g. 40GiB.")
    ] = None,
    min_h2d: Annotated[
        Optional[str], typer.Option("--min-h2d", metavar="RATE", autocompletion=completion.rate, help="Expect host-to-device >= RATE per device: 10GB/s (bytes), 80Gb/s (bits).")
    ] = None,
    min_memory_bw: Annotated[
        Optional[str],
        typer.Option("--min-memory-bw", metavar="RATE", autocompletion=completion.rate, help="Expect each device's memory bandwidth >= RATE (a jitted copy, as devctl bench memory measures it).")
    ] = None,
    min_tflops: Annotated[
        Optional[str],
        typer.Option("--min-tflops", metavar="TFLOPS", help="Expect each device's dense matmul >= TFLOPS TFLOP/s: bf16 on GPU and TPU, f32 on CPU (devctl bench matmul).")
    ] = None,
    min_busbw: Annotated[
        Optional[str],
        typer.Option("--min-busbw", metavar="RATE", autocompletion=completion.rate, help="Expect all-reduce bus bandwidth >= RATE over the local devices (nccl-tests' busbw; devctl bench collective).")
    ] = None,
    stragglers: Annotated[
        Optional[bool],
        typer.Option("--stragglers", help="Expect no straggler: every device's memory bandwidth and matmul throughput near its peers' (and every host's, with --distributed)."),
    ] = None,
    max_busy: Annotated[
        Optional[str],
        typer.Option(
            "--max-busy", metavar="PCT", autocompletion=completion.percent,
            help="Expect no accelerator busier than PCT before the checks start (nobody else is using it): GPM's SM active over 1 s, "
            "else NVML's utilization; a TPU chip's duty cycle. 10% or 2.5%; a bare number of 1 or more is a percentage.",
        ),
    ] = None,
    min_busy: Annotated[
        Optional[str],
        typer.Option(
            "--min-busy", metavar="PCT", autocompletion=completion.percent,
            help="Expect every accelerator at least PCT busy (the job that should keep it busy is running), measured as --max-busy is.",
        ),
    ] = None,
    timeout: TimeoutOpt = None,
    only: Annotated[
        Optional[list[str]], typer.Option("--only", metavar="NAME", autocompletion=completion.check_names, help="Run only these checks (repeatable, or comma-separated).")
    ] = None,
    skip: Annotated[Optional[list[str]], typer.Option("--skip", metavar="NAME", autocompletion=completion.check_names, help="Do not run these checks (repeatable, or comma-separated).")] = None,
    strict: Annotated[Optional[bool], typer.Option("--strict/--no-strict", help="Count warnings as failures.")] = None,
    config: Annotated[
        Optional[str],
        typer.Option("--config", metavar="FILE", autocompletion=completion.files, help="Read expectations from FILE instead of [tool.devctl.check] in pyproject.toml."),
    ] = None,
    junit_xml: Annotated[
        Optional[str],
        typer.Option(
            "--junit-xml",
            metavar="FILE",
            autocompletion=completion.files,
            help="Also write a JUnit XML report to FILE, replaced whole (a link there is replaced, not written through). "
            "'-' prints the XML on stdout instead of the table.",
        ),
    ] = None,
    host_root: HostRootOpt = "/",
    csv_out: CsvOpt = False,
    *,
    cluster: ClusterParams | None,
    all_print: bool,
) -> None:
    """Health checks for CI: each check passes, warns, fails or skips; exit 1 when one fails.

    Checks: versions, plugins, backends, devices, compute, transfer, memory, bandwidth, memory-bw, matmul, busbw,
    stragglers, busy, nvml-health, host, tpu, env. The four benchmarks (memory-bw, matmul, busbw, stragglers) and busy
    run only when their expectation is given. Expectations come from the flags, over a [tool.devctl.check] table in the nearest pyproject.toml (or --config).
    Rates: 10GB/s is gigabytes, 80Gb/s or 80Gbit/s gigabits, a bare number GB/s.
    Exit 0 when all pass (warnings allowed unless --strict), 1 when one fails, 2 on bad flags, config or output file.
    """
    options = resolve(
        Flags(
            platform=platform, min_devices=min_devices, device_kind=device_kind, min_memory=min_memory, min_h2d=min_h2d,
            min_memory_bw=min_memory_bw, min_tflops=min_tflops, min_busbw=min_busbw, stragglers=stragglers, max_busy=max_busy, min_busy=min_busy, timeout=timeout, only=only, skip=skip, strict=strict, config=config,
        )
    )  # fmt: skip
    root = check_host_root(host_root)
    check_output_format(json_out, csv_out)
    junit_to_stdout = junit_xml == "-"
    if junit_to_stdout and (json_out or csv_out):
        raise UsageError(f"--junit-xml - and {'--json' if json_out else '--csv'} would both write to stdout; give --junit-xml a file")
    if junit_xml is not None and not junit_to_stdout:
        check_output_path("--junit-xml", junit_xml)

    from devctl.collect.check import check as run
    from devctl.render import check as render
    from devctl.render import emit

    def run_here():
        with render.progress("running checks...") as update:
            return run(
                options.expectations, options.names, host_root=root, strict=options.strict,
                on_result=lambda r: update(f"checked {r.name}: {r.status.value}"),
            )  # fmt: skip

    if cluster is None:
        report = run_here()
    else:
        report = _check_cluster(cluster, run_here, options, all_print)
        if report is None:  # not process 0: process 0 reports for the whole cluster
            raise typer.Exit(0)

    if render.in_github_actions():
        render.github_annotations(report)
    if junit_to_stdout:
        sys.stdout.write(render.junit_xml(report))
        sys.stdout.flush()
    else:
        emit(report, json_out, csv_out=csv_out)
    if junit_xml is not None and not junit_to_stdout:
        # After the report is shown: a full disk costs the XML file (exit 2), not the verdicts.
        write_output("--junit-xml", junit_xml, render.junit_xml(report).encode("utf-8"))
    raise typer.Exit(report.exit_code)


def _check_cluster(cluster: ClusterParams, run_here, options, all_print: bool):
    """Run the checks here, share the report through jax.distributed, merge every host's on process 0."""
    import time

    from devctl.checks.cluster import merge_reports
    from devctl.collect.distributed import gather_reports
    from devctl.model import to_jsonable

    started = time.monotonic()
    reports = gather_reports(lambda: to_jsonable(run_here()), cluster, timeout_s=options.expectations.timeout_s, all_print=all_print)
    if reports is None:
        return None
    return merge_reports(reports, strict=options.strict, expectations=options.expectations, elapsed_s=time.monotonic() - started)


# ---- expectations: flags over a [tool.devctl.check] table over the defaults ------------------------
#
# The table comes from --config FILE, or else from the first pyproject.toml found from the current
# directory upward (as ruff and pytest find theirs). Every bad key or value is a UsageError naming the
# file, the key and what is accepted; the checks below get typed values only.

TABLE = "tool.devctl.check"
KEYS = (
    "platform", "min-devices", "device-kind", "min-memory", "min-h2d", "min-memory-bw", "min-tflops", "min-busbw",
    "stragglers", "max-busy", "min-busy", "timeout", "only", "skip", "strict",
)  # fmt: skip


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
    min_memory_bw: str | None = None
    min_tflops: str | None = None
    min_busbw: str | None = None
    stragglers: bool | None = None
    max_busy: str | None = None
    min_busy: str | None = None
    timeout: str | None = None
    only: list[str] | None = None
    skip: list[str] | None = None
    strict: bool | None = None
    config: str | None = None


def resolve(flags: Flags, cwd: str | None = None) -> CheckOptions:
    from devctl.collect.check import select
    from devctl.probe.runner import DEFAULT_TIMEOUT_S

    table, where = load_table(flags.config, cwd)
    file_values = {key: _from_file(key, value, where) for key, value in table.items()}
    sources = {key: where for key in file_values if where is not None}  # a table always comes from a file

    def pick(key: str, flag_value: Any, parse) -> Any:
        if flag_value is not None:
            sources[key] = "flag"
            return parse(flag_value)
        return file_values.get(key)

    platforms = pick("platform", flags.platform, check_platforms)
    expectations = Expectations(
        platforms=tuple(platforms) if platforms else None,
        min_devices=pick("min-devices", flags.min_devices, lambda v: _positive_int(v, "--min-devices")),
        device_kind=pick("device-kind", flags.device_kind, lambda v: _kind(v, "--device-kind")),
        min_memory_bytes=pick("min-memory", flags.min_memory, lambda v: _size(v, "--min-memory")),
        min_h2d_gbps=pick("min-h2d", flags.min_h2d, lambda v: _rate(v, "--min-h2d")),
        min_memory_bw_gbps=pick("min-memory-bw", flags.min_memory_bw, lambda v: _rate(v, "--min-memory-bw")),
        min_tflops=pick("min-tflops", flags.min_tflops, lambda v: _tflops(v, "--min-tflops")),
        min_busbw_gbps=pick("min-busbw", flags.min_busbw, lambda v: _rate(v, "--min-busbw")),
        stragglers=bool(pick("stragglers", flags.stragglers, bool)),
        max_busy_percent=pick("max-busy", flags.max_busy, lambda v: _percent(v, "--max-busy")),
        min_busy_percent=pick("min-busy", flags.min_busy, lambda v: _percent(v, "--min-busy")),
        timeout_s=pick("timeout", flags.timeout, check_timeout) or DEFAULT_TIMEOUT_S,
        sources={k: v for k, v in sources.items() if k not in ("only", "skip", "strict")},
    )
    only = pick("only", _flag_names("--only", flags.only), lambda v: v)
    skip = pick("skip", _flag_names("--skip", flags.skip), lambda v: v) or []
    strict = bool(pick("strict", flags.strict, bool))
    most, least = expectations.max_busy_percent, expectations.min_busy_percent
    if most is not None and least is not None and least > most:
        raise UsageError(f"--min-busy {least:g}% is above --max-busy {most:g}%: no accelerator can be both; lower --min-busy or raise --max-busy")
    names = select(only, skip)
    if not names:
        raise UsageError("--only and --skip leave no check to run")
    _check_expectations_are_checked(expectations, names)
    return CheckOptions(expectations, names, strict, where)


def _flag_names(flag: str, items: list[str] | None) -> list[str] | None:
    names = split_list(flag, items, f"check names: {', '.join(CHECK_NAMES)}")
    return None if names is None else _names(names, flag)


# An expectation and the one check that verifies it.
_CHECKED_BY = {
    "min-devices": "devices", "device-kind": "devices", "min-memory": "memory", "min-h2d": "bandwidth",
    "min-memory-bw": "memory-bw", "min-tflops": "matmul", "min-busbw": "busbw", "stragglers": "stragglers",
    "max-busy": "busy", "min-busy": "busy",
}  # fmt: skip


def _check_expectations_are_checked(expectations: Expectations, names: list[str]) -> None:
    """An expectation given as a flag whose check --only/--skip leave out would be silently ignored."""
    for key, check_name in _CHECKED_BY.items():
        if expectations.sources.get(key) == "flag" and check_name not in names:
            raise UsageError(
                f"--{key} is verified by the {check_name!r} check, which --only/--skip leave out; run {check_name!r} or drop --{key}"
            )


# ---- where the table comes from -------------------------------------------------------------------

# Far above any real pyproject.toml; small enough to parse at once.
CONFIG_CAP_BYTES = 1 << 20


def load_table(config: str | None, cwd: str | None = None) -> tuple[dict[str, Any], str | None]:
    """The [tool.devctl.check] table and the file it came from; ({}, None) when there is none."""
    if config is not None:
        if not config:
            raise UsageError("--config is empty; give the path of a TOML file")
        doc = _read_toml("--config", config)
        # A dedicated file may hold the keys at the top level or in the same table as pyproject.toml.
        table = _dig(doc, TABLE.split(".")) if "tool" in doc else doc
        return _as_table(table, config), config
    found = find_pyproject(Path(cwd or os.getcwd()))
    if found is None:
        return {}, None
    table = _dig(_read_toml("config file", str(found)), TABLE.split("."))
    if table is None:
        return {}, None
    return _as_table(table, str(found)), str(found)


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml from `start` upward. One that is there but is not a regular file (a FIFO,
    a directory) is returned too, so that reading it gives the error, rather than a parent's being used."""
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if os.path.exists(candidate):
            return candidate
    return None


def _read_toml(label: str, path: str) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    raw = read_input_file(label, path, CONFIG_CAP_BYTES)
    where = f"{label} {shown(path)}" if label.startswith("--") else shown(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{where} is not UTF-8 text (byte {e.start}), so not TOML") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where} is not valid TOML: {e}") from None
    except RecursionError:
        raise UsageError(f"{where} is not valid TOML: nested too deeply") from None


def _dig(doc: dict, keys: list[str]) -> Any:
    for key in keys:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def _as_table(table: Any, path: str) -> dict[str, Any]:
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
    label = f"{key} in [{TABLE}] of {where}"
    try:
        if key == "platform":
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise UsageError(f"{label} must be a platform name or a list of them, got {quoted(value)}")
            return check_platforms(items)
        if key == "min-devices":
            return _positive_int(value, label)
        if key == "device-kind":
            return _kind(value, label)
        if key == "min-memory":
            return _size(value, label)
        if key in ("min-h2d", "min-memory-bw", "min-busbw"):
            return _rate(value, label)
        if key == "min-tflops":
            return _tflops(value, label)
        if key in ("max-busy", "min-busy"):
            return _percent(value, label)
        if key == "timeout":
            return _timeout(value, label)
        if key in ("only", "skip"):
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise UsageError(f"{label} must be a list of check names, got {quoted(value)}")
            return _names(items, label)
        if key in ("strict", "stragglers"):
            if not isinstance(value, bool):
                raise UsageError(f"{label} must be true or false, got {quoted(value)}")
            return value
    except UsageError as e:
        if label in str(e):
            raise
        # check_platforms speaks of --platform; say where the value really came from.
        raise UsageError(f"{label}: {str(e).replace('--platform ', '')}") from None
    raise AssertionError(key)


def _positive_int(value: Any, label: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    # ASCII digits, and few of them: '²' passes str.isdigit(), and int() of 5000 digits raises.
    text = value.strip() if isinstance(value, str) else ""
    if not (text.isascii() and text.isdigit() and len(text) <= 18 and int(text) >= 1):
        raise UsageError(f"{label} must be a whole number >= 1, got {quoted(value)}")
    return int(text)


def _kind(value: Any, label: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{label} must be a non-empty device kind such as H100 or 'TPU v5', got {quoted(value)}")
    return value.strip()


def _size(value: Any, label: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    try:
        n = parse_size(value) if isinstance(value, str) else 0
    except ValueError:
        n = 0
    if n <= 0:
        raise UsageError(f"{label} must be a size such as 40GiB, 16G or 512M, got {quoted(value)}")
    return n


def _rate(value: Any, label: str) -> float:
    """Decimal GB/s; a bare number (or a TOML number) is GB/s. Bits and bytes as units.parse_rate_gbps reads them."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        rate = float(value)
    elif isinstance(value, str):
        try:
            rate = parse_rate_gbps(value)
        except ValueError as e:
            if str(e).startswith("ambiguous"):
                raise UsageError(f"{label}: {e}") from None
            raise UsageError(f"{label} must be {RATE_HELP}; got {quoted(value)}") from None
    else:
        rate = float("nan")
    if not (rate > 0 and math.isfinite(rate)):
        raise UsageError(f"{label} must be {RATE_HELP} above 0; got {quoted(value)}")
    return rate


_TFLOPS_RE = re.compile(r"^\s*(\d{1,9}(?:\.\d{1,9})?)\s*(tflop/?s|tflops)?\s*$", re.IGNORECASE | re.ASCII)


def _tflops(value: Any, label: str) -> float:
    """TFLOP/s: a number, or one followed by TFLOP/s or TFLOPS; anything else (GFLOP/s, a negative) is refused."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        rate = float(value)
    else:
        found = _TFLOPS_RE.match(value) if isinstance(value, str) else None
        rate = float(found.group(1)) if found else float("nan")
    if not (rate > 0 and math.isfinite(rate)):
        raise UsageError(f"{label} must be a number of TFLOP/s above 0, such as 600 or 600TFLOP/s; got {quoted(value)}")
    return rate


_PERCENT_RE = re.compile(r"^\s*(\d{1,3}(?:\.\d{1,6})?)\s*(%?)\s*$", re.ASCII)


def _percent(value: Any, label: str) -> float:
    """A percentage in [0, 100], read as --max-regression reads one (cli.gate.parse_percent): 10% or 2.5%, or a bare
    number of 1 or more (10 is 10%), or 0. A bare number between 0 and 1 could mean a fraction (0.1: 10%) or a
    percent (0.1%), so it is refused rather than guessed; a TOML number follows the same rule."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number, sign = (float(value), "") if math.isfinite(value) and value >= 0 else (float("nan"), "")
    else:
        found = _PERCENT_RE.match(value) if isinstance(value, str) else None
        number, sign = (float(found.group(1)), found.group(2)) if found else (float("nan"), "")
    if not 0 <= number <= 100:
        raise UsageError(f"{label} must be a percentage from 0% to 100%, such as 10% or 2.5%; got {quoted(value)}")
    if not sign and 0 < number < 1:
        raise UsageError(f"{label} {quoted(value)} is ambiguous: write {number * 100:g}% for {number * 100:g} percent, or {number:g}% for {number:g} percent")
    return number


def _timeout(value: Any, label: str) -> float:
    from devctl.probe.runner import MAX_TIMEOUT_S

    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_TIMEOUT_S
    if not ok:
        raise UsageError(f"{label} must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {quoted(value)}")
    return float(value)


def _names(items: list[str], label: str) -> list[str]:
    names = [n.strip() for item in items for n in item.split(",")]
    if not names or not all(names):
        raise UsageError(f"{label} has an empty check name; checks: {', '.join(CHECK_NAMES)}")
    for n in names:
        if n not in CHECK_NAMES:
            raise UsageError(f"unknown check {shown(n)} for {label}; checks: {', '.join(CHECK_NAMES)}")
    return names
