"""Probe child for `devctl bench matmul` (`python -m devctl.probe.bench_matmul '<MatmulOptions as JSON>'`): each
device's matmul throughput per dtype, a recipe of the engine (devctl.probe.bench, whose events it emits).

C = A @ B over square matrices made on the device (normal random values, committed to it), compiled once; 2 n^3
flops per call. A few rows and columns of C are checked against float64 on the host, with a tolerance that a
lower precision than asked (TF32 or one bf16 pass for f32) would exceed, after the first call and after the last.

Timed in bursts (devctl.probe.bench): each call writes its C into the buffer the call before it wrote, donated to
it, so the calls of a burst run one after another (also on a backend that would run independent executions side by
side) and none allocates. Every call is its own execution of the compiled program: XLA optimises within one
program, never across calls, and the runtime runs every call it is given.
"""

from __future__ import annotations

from devctl.model import bench_matmul as m
from devctl.model.peaks import peak_for
from devctl.probe.bench import MIN_CALLS, Group, Recipe, run_recipe
from devctl.probe.channel import exit_child

# Rows and columns of C checked: enough to catch a wrong kernel, few enough to cost nothing next to the timing.
CHECK_ROWS, CHECK_COLS = 4, 64
# Largest error allowed, relative to the largest |C| checked. bf16: the result itself is rounded to 8 bits of
# mantissa (2^-8 ~ 0.4%). f32 at HIGHEST: float32 accumulation over n terms stays far below 1e-4; TF32 inputs
# (10-bit mantissa) or one bf16 pass would land near 1e-3 and fail.
TOLERANCE = {"bf16": 2e-2, "f32": 1e-4}

RECIPE = Recipe(
    work=lambda c: c.flops,
    scale=1e12,
    fields=("tflops", "peak_tflops", "roof_tflops"),
    roof=lambda dev, c: getattr(peak_for(dev.device_kind), m.ROOF_FIELD[c.dtype], None),
    wrong=lambda c: f"the result was wrong (beyond {TOLERANCE[c.dtype]:g} of the float64 product): no TFLOP/s reported",
    unit_word="TFLOP/s",
)


def main() -> int:
    return run_recipe(m.MatmulOptions, RECIPE, plan)


def plan(opts: m.MatmulOptions, jax, np, platform: str) -> tuple[list[Group], str | None, dict]:
    sizes = list(opts.sizes) if opts.sizes is not None else list(m.default_sizes(platform, opts.quick))
    note = None
    if opts.sizes is None and opts.quick:
        note = "--quick: one size; the default sweep is " + ", ".join(str(n) for n in m.default_sizes(platform, False))
    return [group(jax, np, dtype, n) for dtype in opts.dtypes for n in sizes], note, {"sizes": sizes}


def group(jax, np, dtype: str, n: int) -> Group:
    """Every device at one dtype and size."""
    return Group(
        lambda name: m.MatmulCell(name, dtype, n, m.PRECISION[dtype], m.flops(n)),
        m.DEVICE_COPIES * n * n * m.ELEMENT_BYTES[dtype],
        f"n={n} {dtype} (A, B and C)",
        lambda dev: Product(jax, np, dev, dtype, n),
    )


class Product:
    """One device's A and B (normal random values, made on the device and committed to it), its C, and its compiled
    dot, which writes each product into the C of the call before."""

    def __init__(self, jax, np, dev, dtype: str, n: int):
        import jax.numpy as jnp

        self.np, self.dtype = np, dtype
        jdtype = {"bf16": jnp.bfloat16, "f32": jnp.float32}[dtype]
        on_dev = jax.sharding.SingleDeviceSharding(dev)
        ka, kb = jax.random.split(jax.random.key(0))
        make = jax.jit(lambda k: jax.random.normal(k, (n, n), jdtype), out_shardings=on_dev)
        self.operands = (make(ka), make(kb))
        first = jax.jit(lambda: jnp.zeros((n, n), jdtype), out_shardings=on_dev)()
        precision = getattr(jax.lax.Precision, m.PRECISION[dtype])
        # keep_unused: the donated C is not read, and must not be dropped from the call (it orders the calls).
        dot = jax.jit(lambda x, y, c: jnp.matmul(x, y, precision=precision), donate_argnums=2, keep_unused=True)
        self.dot = dot.lower(*self.operands, first).compile()
        target = first.unsafe_buffer_pointer()
        self.c = self.dot(*self.operands, first)
        self.in_place = self.c.unsafe_buffer_pointer() == target
        # A backend that ignored the donation allocates every C: a burst must not hold many of them at once.
        self.max_burst = None if self.in_place else MIN_CALLS
        self.verified = _verify(np, self.c, *self.operands, dtype)

    def __call__(self):
        self.c = self.dot(*self.operands, self.c)
        return self.c

    def last_is_right(self) -> bool:
        """The C of the last call checked as the first one was."""
        return _verify(self.np, self.c, *self.operands, self.dtype)

    def last_problem(self) -> str | None:
        if self.last_is_right():
            return None
        return RECIPE.wrong(self) + " (the last call's)"


def _verify(np, c, a, b, dtype: str) -> bool:
    """Sampled rows and columns of C against float64 products of the same (already rounded) inputs."""
    n = a.shape[0]
    rows = np.linspace(0, n - 1, min(CHECK_ROWS, n)).astype(int)
    cols = np.linspace(0, n - 1, min(CHECK_COLS, n)).astype(int)
    a_rows = np.asarray(a[rows, :]).astype(np.float64)
    b_cols = np.asarray(b[:, cols]).astype(np.float64)
    want = a_rows @ b_cols
    got = np.asarray(c[rows][:, cols]).astype(np.float64)
    scale = float(np.abs(want).max()) or 1.0
    return bool(np.isfinite(got).all()) and float(np.abs(got - want).max()) <= TOLERANCE[dtype] * scale


if __name__ == "__main__":
    exit_child(main)
