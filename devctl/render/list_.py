"""`devctl list` as tables: devices by backend, backends that failed, accelerators JAX does not use.

At 80 columns a device table keeps id, kind, the memory limit and where the device is (sm, NVML index, PCI
bus); what every device shares (process, memory kinds) becomes one line above it. A backend's reason and
advice are prose: they go on lines of their own under its row when the row would not fit.
"""

from __future__ import annotations

from itertools import groupby

from devctl.model.list_ import BackendInfo, BackendStatus
from devctl.render.console import Column, print_table, say
from devctl.units import format_bytes, format_seconds

# The device table's columns after the fixed ones: a device attribute each, shown only where some device has it.
_ATTRIBUTES = (("coords", 1), ("core", 1), ("sm", 2), ("nvml", 2), ("pci bus", 2))

# Backends JAX tries on every machine and skips without a word where they cannot start (a TPU without a chip,
# the IFRT proxy without a target): said in two words, their error stays in --json.
_QUIET_NAMES = {"tpu": "no TPU", "proxy": "no IFRT proxy"}


def render_inventory(inv) -> None:
    header = f"jax {inv.jax_version or '?'}, jaxlib {inv.jaxlib_version or '?'}"
    if inv.default_platform:
        header += f"; default backend: {inv.default_platform}"
    say(header)
    outcome = inv.jax_outcome
    if outcome is not None and outcome.fails:
        # Before any table: a program here gets no device, whatever each backend alone could do.
        say(f"jax.devices() {outcome.result}: {outcome.error or outcome.culprit or '?'}", hang="  ")
        if outcome.code:
            say(f"{outcome.code}: {outcome.summary}", hang="  ")
            say(f"fix: {outcome.fix}", hang="     ")
    missing = inv.missing_platforms
    if missing:
        # What the user asked for is not here: said first, whatever JAX would do without the flag.
        names = " ".join(f"--platform {p}" for p in missing)
        say(f"{names}: {' and '.join(missing)} {'does' if len(missing) == 1 else 'do'} not start here", hang="  ")
    backends = {b.platform: b for b in inv.backends}
    devices = sorted(inv.devices, key=lambda d: (d.platform, d.process_index, d.id))
    for platform, grouped in groupby(devices, key=lambda d: d.platform):
        group = list(grouped)
        b = backends.get(platform) or (backends.get("cuda") or backends.get("rocm") if platform == "gpu" else None)
        _device_table(platform, group, b)

    quiet = [b for b in inv.backends if b.skipped_quietly]
    if quiet:
        say(" and ".join(_QUIET_NAMES.get(b.platform, f"no {b.platform}") for b in quiet)
            + f" here (JAX skips the {' and '.join(b.platform for b in quiet)} backend{'s' if len(quiet) > 1 else ''})")  # fmt: skip
    bad = [b for b in inv.backends if b.status is not BackendStatus.OK and not b.skipped_quietly]
    if bad:
        columns = [
            Column("backend"), Column("status"), Column("code", priority=1),
            Column("reason", priority=2), Column("what to do", priority=3),
        ]  # fmt: skip
        # What is wrong in the machine's terms first; the library's own words stay in --json and doctor.
        rows = [[b.platform, b.status.value, b.code or "-", b.summary or b.error or "-", b.hint or "-"] for b in bad]
        print_table(columns, rows, title="backends not in use")

    if inv.unused_accelerators:
        columns = [Column("kind", priority=2), Column("name", priority=1), Column("where"), Column("why", priority=3)]
        rows = [[u.kind, u.name, u.location, u.reason] for u in inv.unused_accelerators]
        print_table(columns, rows, title="accelerators on this machine that JAX is not using")
    if not inv.devices and not missing:
        say("JAX sees no device at all; run devctl doctor.")


def one_line_version(b: BackendInfo) -> str:
    """A backend's platform_version on one line: CUDA's is "PJRT C API\\ncuda 12080" (PjRtCApiClient puts its own
    name on a line before the plugin's words); the name goes where the C API version is shown beside it."""
    lines = [line.strip() for line in (b.platform_version or "").splitlines() if line.strip()]
    if len(lines) > 1 and b.pjrt_c_api_version is not None and lines[0] == "PJRT C API":
        lines = lines[1:]
    return " / ".join(_cuda_version(line) for line in lines)


def _cuda_version(words: str) -> str:
    """"cuda 13000" (CUDA's version number, 1000 x major + 10 x minor, as the CUDA plugin says it) as "CUDA 13.0";
    any other words as they are (--json keeps the plugin's own)."""
    kind, _, number = words.partition(" ")
    if kind == "cuda" and number.isdigit() and len(number) >= 4:
        n = int(number)
        return f"CUDA {n // 1000}.{n % 1000 // 10}"
    return words


def _title(platform: str, count: int, b: BackendInfo | None) -> str:
    title = f"{platform}: {count} device(s)"
    if b is not None:
        version = one_line_version(b)
        if version:
            title += f", {version}"
        if b.pjrt_c_api_version:
            title += f", PJRT C API {b.pjrt_c_api_version}"
        title += f", init {format_seconds(b.init_s)}"
    return title


def _device_table(platform: str, group: list, b: BackendInfo | None) -> None:
    columns = [
        Column("id", "right"), Column("kind", priority=3), Column("process", "right", priority=5),
        Column("hw id", "right", priority=4), Column("memory kinds", priority=6),
        Column("memory limit", "right", priority=1, short="limit"),
    ]  # fmt: skip
    rows = []
    for d in group:
        stats = d.memory_stats or {}
        rows.append([
            str(d.id), d.device_kind, str(d.process_index), "-" if d.local_hardware_id is None else str(d.local_hardware_id),
            ",".join(k if k != d.default_memory_kind else f"{k}*" for k in (d.memory_kinds or [])) or "-",
            format_bytes(stats.get("bytes_limit")),
        ])  # fmt: skip
    attributes = [_attributes(d) for d in group]
    for name, priority in _ATTRIBUTES:
        if any(name in a for a in attributes):
            columns.append(Column(name, priority=priority))
            for row, a in zip(rows, attributes):
                row.append(a.get(name, "-"))
    print_table(columns, rows, title=_title(platform, len(group), b))
    without = [str(d.id) for d in group if d.memory_stats is None]
    if without:
        which = "these devices" if len(without) == len(group) else f"device(s) {', '.join(without)}"
        say(f"memory_stats(): not implemented on {which}, so no memory limit", hang="  ")


def _attributes(d) -> dict[str, str]:
    a = d.attributes
    out = {}
    if "coords" in a:
        out["coords"] = ",".join(str(c) for c in a["coords"]) if isinstance(a["coords"], (list, tuple)) else str(a["coords"])
    if "core_on_chip" in a:
        out["core"] = str(a["core_on_chip"])
    if "compute_capability" in a:
        out["sm"] = str(a["compute_capability"])
    if d.nvml_gpu:
        out["nvml"] = str(d.nvml_gpu["index"])
        out["pci bus"] = str(d.nvml_gpu["pci_bus_id"])
    elif "pci_bus_id" in a:
        out["pci bus"] = str(a["pci_bus_id"])
    return out


def csv_rows(inv) -> tuple[list[str], list[list]]:
    """One row per device, raw values: bytes as integers, memory kinds as `;`-separated names."""
    header = [
        "platform", "id", "kind", "process_index", "local_hardware_id", "memory_kinds", "default_memory_kind",
        "bytes_limit", "bytes_in_use", "peak_bytes_in_use", "coords", "core_on_chip", "compute_capability",
        "pci_bus_id", "nvml_index", "nvml_uuid", "backend_version",
    ]  # fmt: skip
    backends = {b.platform: b for b in inv.backends}
    rows = []
    for d in sorted(inv.devices, key=lambda d: (d.platform, d.process_index, d.id)):
        b = backends.get(d.platform) or (backends.get("cuda") or backends.get("rocm") if d.platform == "gpu" else None)
        stats = d.memory_stats or {}
        a = d.attributes
        nvml = d.nvml_gpu or {}
        coords = a.get("coords")
        rows.append([
            d.platform, d.id, d.device_kind, d.process_index, d.local_hardware_id, ";".join(d.memory_kinds or []),
            d.default_memory_kind, stats.get("bytes_limit"), stats.get("bytes_in_use"), stats.get("peak_bytes_in_use"),
            " ".join(str(c) for c in coords) if isinstance(coords, (list, tuple)) else coords, a.get("core_on_chip"),
            a.get("compute_capability"), nvml.get("pci_bus_id") or a.get("pci_bus_id"), nvml.get("index"), nvml.get("uuid"),
            one_line_version(b) if b is not None else None,
        ])  # fmt: skip
    return header, rows
