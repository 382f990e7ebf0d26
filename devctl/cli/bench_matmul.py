"""`devctl bench matmul`: each device's matmul TFLOP/s in bf16 and f32, against its published dense peak and its
peers. Flags are checked here, before the probe child (devctl/probe/bench_matmul.py) imports jax."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from devctl.cli import completion
from devctl.cli.bench_options import Bench, BenchFlags, DeviceOpt, bench_options, run_bench, sizes_option
from devctl.cli.options import DTYPE_NAMES, choose, parse_devices, renamed, shown, split_list
from devctl.errors import UsageError
from devctl.model import bench as c
from devctl.model import bench_matmul as m

DtypeOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--dtype",
        metavar="DTYPE",
        autocompletion=completion.names(lambda: m.DTYPES),
        help="bf16, f32 or all (the default: both); repeatable or comma-separated. f32 is full FP32 math "
        "(Precision.HIGHEST), not TF32.",
    ),
]
SizesOpt = Annotated[
    Optional[str],
    sizes_option(
        f"Matrix sides n (n x n @ n x n), e.g. 2048,8192 or 4K (K = 1024). Default: 2048, 4096, 8192 on "
        f"accelerators, 512, 1024 on CPU (--quick: one). {m.MIN_SIDE} to {m.MAX_SIDE}; a size the device cannot hold "
        "is skipped with a note.", complete=False
    ),
]


@bench_options(Bench(m.GATE, c, "One size", verbose=True))
def matmul(dtype: DtypeOpt = None, sizes: SizesOpt = None, device: DeviceOpt = None, *, flags: BenchFlags) -> None:
    """Each device's matmul TFLOP/s (bf16, f32), against its roof (the published dense peak) and its peers."""
    from devctl.collect.bench_matmul import run_matmul
    from devctl.render.bench_matmul import progress_label

    devices = parse_devices("--device", device)
    opts = m.MatmulOptions(devices=devices, **flags.counts(), dtypes=parse_dtypes(dtype), sizes=parse_sides(sizes) if sizes is not None else None)
    wrong = "some products were wrong (see the notes)"
    run_bench(flags, run_matmul, opts, progress_label, "matmul", wrong, comparisons=lambda r: r.comparisons)


def parse_dtypes(items: list[str] | None) -> tuple[str, ...]:
    """--dtype: bench matmul's short names, or the names JAX writes (bfloat16, float32)."""
    short = {long: name for name, long in DTYPE_NAMES.items() if name in m.DTYPES} | {"fp32": "f32"}
    return choose("--dtype", renamed(items, short), m.DTYPES, m.DTYPES)


def parse_sides(text: str) -> tuple[int, ...]:
    out = set()
    for p in split_list("--sizes", [text], "matrix sides such as 2048,8192"):
        raw = p.strip()
        scale = 1024 if raw[-1:] in ("k", "K") else 1
        digits = raw[:-1] if scale > 1 else raw
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 9:
            raise UsageError(f"--sizes {shown(p)} is not a matrix side; give whole numbers such as 2048,8192 or 4K")
        n = int(digits) * scale
        if not m.MIN_SIDE <= n <= m.MAX_SIDE:
            raise UsageError(f"--sizes {shown(p)}: a matrix side must be between {m.MIN_SIDE} and {m.MAX_SIDE}")
        out.add(n)
    return tuple(sorted(out))
