"""`devctl bench transfer`: every flag validated here, before the probe child (devctl/probe/bench_transfer.py) imports jax."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from devctl.cli import completion
from devctl.cli.bench_options import Bench, BenchFlags, bench_options, device_option, parse_sizes, run_bench, sizes_option
from devctl.cli.options import choose, parse_device, parse_devices, shown, split_list
from devctl.errors import UsageError
from devctl.model import bench_transfer as m
from devctl.model.devices import DeviceRef

Option = typer.Option
DirectionOpt = Annotated[
    Optional[list[str]],
    Option(
        "--direction", "-d", metavar="DIR", autocompletion=completion.directions, help="h2d, d2h, d2d, d2d-self or all (the default); repeatable or comma-separated."
    ),
]
VariantsOpt = Annotated[
    Optional[str],
    Option(
        "--variants",
        metavar="NAMES",
        autocompletion=completion.variants,
        help="main (each direction's plain call), all, or: " + ", ".join(m.ALL_VARIANTS) + ". Default: main, "
        "plus pinned for h2d and d2h on accelerators (devices with pinned_host memory; not CPU devices).",
    ),
]
SizesOpt = Annotated[
    Optional[str],
    sizes_option(
        "e.g. 4K,1M,64M,1G (K, M, G, T and KiB... are binary; KB, MB, GB are decimal). Default: 4K to 256M "
        "(1G where the device has room). A size this machine's memory cannot hold is an error."
    ),
]
VerifyOpt = Annotated[bool, Option("--verify/--no-verify", help="Check, once per cell, that the bytes arrive unchanged.")]
ShardedOpt = Annotated[
    bool, Option("--sharded", help="One array sharded over all local devices (aggregate bandwidth); not with --device, --src, --dst, --all-pairs or --variants.")
]
ReplicatedOpt = Annotated[bool, Option("--replicated", help="One array replicated on every local device; not with --device, --src, --dst, --all-pairs or --variants.")]
DeviceOpt = Annotated[
    Optional[list[str]],
    device_option(
        "Device(s) for h2d, d2h and d2d-self: a JAX id or platform:id (0, cpu:1, cuda:0), repeatable or comma-separated, "
        "or all. Default: the first. Not with --sharded or --replicated."
    ),
]
SrcOpt = Annotated[Optional[str], Option("--src", metavar="ID", autocompletion=completion.devices(many=False), help="d2d: the source device, as --device names one (not with --all-pairs).")]
DstOpt = Annotated[Optional[str], Option("--dst", metavar="ID", autocompletion=completion.devices(many=False), help="d2d: the destination device, as --device names one (not with --all-pairs).")]
AllPairsOpt = Annotated[bool, Option("--all-pairs", help="d2d: every ordered pair of devices at every size.")]

BENCH = Bench(m.GATE, m, "A few sizes", verbose=True)


@bench_options(BENCH)
def transfer(
    direction: DirectionOpt = None,
    variants: VariantsOpt = None,
    sizes: SizesOpt = None,
    verify: VerifyOpt = True,
    sharded: ShardedOpt = False,
    replicated: ReplicatedOpt = False,
    device: DeviceOpt = None,
    src: SrcOpt = None,
    dst: DstOpt = None,
    all_pairs: AllPairsOpt = False,
    *,
    flags: BenchFlags,
) -> None:
    """Host<->device and device<->device transfer bandwidth, against the host memcpy and PCIe roofs."""
    opts = build_options(
        direction, variants, sizes, flags.quick, flags.repeats, flags.min_time, flags.warmups, verify,
        sharded, replicated, device, src, dst, all_pairs,
    )  # fmt: skip
    from devctl.collect.bench_transfer import run_transfer
    from devctl.render.bench_transfer import progress_label

    run_bench(flags, run_transfer, opts, progress_label, "transfer", "the bytes of some cells did not arrive unchanged")


def build_options(
    direction, variants, sizes, quick, repeats, min_time, warmups, verify,
    sharded, replicated, device, src, dst, all_pairs,
) -> m.TransferOptions:  # fmt: skip
    directions = choose("--direction", direction, m.DIRECTIONS, m.DIRECTIONS)
    layouts = tuple(name for name, on in (("sharded", sharded), ("replicated", replicated)) if on) or ("single",)
    chosen_variants = parse_variants(variants, directions)
    devices = parse_devices("--device", device)
    src_ref, dst_ref = parse_device("--src", src), parse_device("--dst", dst)
    check_conflicts(directions, layouts, chosen_variants, devices, src_ref, dst_ref, all_pairs)
    return m.TransferOptions(
        directions=directions,
        variants=chosen_variants,
        pinned_on_accelerators=variants is None,  # the default; --variants main is the plain calls alone
        layouts=layouts,
        sizes_bytes=parse_sizes(sizes) if sizes is not None else None,
        devices=devices,
        src=src_ref,
        dst=dst_ref,
        all_pairs=all_pairs,
        verify=verify,
        **BENCH.counts(quick, repeats, min_time, warmups),
    )


def parse_variants(text: str | None, directions: tuple[str, ...]) -> tuple[str, ...] | None:
    """The variants named, in the table's order; None for each direction's main variant (and, without
    --variants, the pinned path the default adds on accelerators)."""
    if text is None:
        return None
    names = [n.lower() for n in split_list("--variants", [text], f"main, all, or some of {', '.join(m.ALL_VARIANTS)}")]
    for n in names:
        if n in ("main", "all"):
            continue
        if n not in m.ALL_VARIANTS:
            raise UsageError(f"unknown --variants name {shown(n)}; accepted: main, all, {', '.join(m.ALL_VARIANTS)}")
        if not any(n in m.VARIANTS[d] for d in directions):
            offers = "; ".join(f"{d}: {', '.join(m.VARIANTS[d])}" for d in directions)
            raise UsageError(f"--variants {n!r} applies to none of the directions measured ({offers})")
    if "all" in names:
        return m.ALL_VARIANTS
    if set(names) == {"main"}:
        return None
    chosen = set(names)
    if "main" in chosen:
        chosen |= {m.main_variant(d) for d in directions}
    return tuple(v for v in m.ALL_VARIANTS if v in chosen)


def check_conflicts(
    directions, layouts, variants, devices: tuple[DeviceRef, ...] | None, src: DeviceRef | None, dst: DeviceRef | None, all_pairs: bool
) -> None:
    """Flags that would be silently ignored together are an error: the user asked for something devctl would not do."""
    pair_flags = [f for f, on in (("--src", src is not None), ("--dst", dst is not None), ("--all-pairs", all_pairs)) if on]
    if all_pairs and (src is not None or dst is not None):
        raise UsageError("--all-pairs measures every pair of devices; give it or --src/--dst, not both")
    if src is not None and dst is not None and src.id == dst.id:  # ids are unique among a host's devices
        raise UsageError(f"--src and --dst are both device {src.id}; a copy within one device is --direction d2d-self")
    if pair_flags and "d2d" not in directions:
        raise UsageError(f"{pair_flags[0]} chooses d2d pairs, but d2d is not among the directions measured ({', '.join(directions)})")
    mesh = [f"--{name}" for name in layouts if name != "single"]
    if mesh:
        single_only = pair_flags + (["--device"] if devices is not None else []) + (["--variants"] if variants is not None else [])
        if single_only:
            raise UsageError(
                f"{' and '.join(mesh)} {'use' if len(mesh) > 1 else 'uses'} every local device with each direction's plain call: "
                f"{single_only[0]} does not apply (it is for the single-device layout)"
            )
    if devices is not None and pair_flags and not set(directions) & {"h2d", "d2h", "d2d-self"}:
        raise UsageError(f"--device chooses devices for h2d, d2h and d2d-self; with only d2d and {pair_flags[0]} it has nothing to choose")
