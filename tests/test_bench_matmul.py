"""`devctl bench matmul` against real CPU JAX with forced devices, run as a user runs it; its flag grammar and
its verification on hand-made products."""

from __future__ import annotations

import csv
import io

import pytest
from conftest import assert_usage_error, devctl_env, run_devctl, run_json, validate_schema

from devctl.errors import UsageError
from devctl.probe.bench import MAX_CALLS, MIN_CALLS

SMALL = ("--sizes", "64,128", "--repeats", "3", "--min-time", "0.005", "--warmups", "1")


def cpu_env(devices: int = 2) -> dict[str, str]:
    return devctl_env(devices, JAX_PLATFORMS="cpu")


def bench(*args: str, devices: int = 2) -> dict:
    doc = run_json("bench", "matmul", *args, env=cpu_env(devices))
    validate_schema(doc, "bench.matmul")
    return doc


@pytest.fixture(scope="module")
def run() -> dict:
    return bench(*SMALL)


def test_every_device_dtype_and_size(run):
    assert run["schema"] == "devctl.bench.matmul/2"
    assert [(c["device"], c["dtype"], c["n"]) for c in run["results"]] == [
        (f"cpu:{i}", dtype, n) for i in range(2) for dtype in ("bf16", "f32") for n in (64, 128)
    ]
    for c in run["results"]:
        assert not c["skipped"] and c["verified"] is True, c
        assert c["flops"] == 2 * c["n"] ** 3
        assert c["precision"] == {"bf16": "DEFAULT", "f32": "HIGHEST"}[c["dtype"]]
        assert c["min_s"] <= c["p10_s"] <= c["median_s"] <= c["p90_s"] <= c["max_s"]
        assert c["tflops"] == pytest.approx(c["flops"] / c["median_s"] / 1e12)
        # Every sample is a burst of calls and one sync; the figures are per call, the single call's cost apart.
        assert MIN_CALLS <= c["calls_per_sample"] <= MAX_CALLS and c["samples"] >= 3
        assert c["single_call_s"] > 0 and c["call_overhead_s"] >= 0
        assert c["roof_tflops"] is None and c["pct_of_roof"] is None


def test_one_comparison_per_dtype_by_the_straggler_rule(run):
    from devctl.model.stragglers import find_stragglers

    assert [comp["metric"] for comp in run["comparisons"]] == ["bf16", "f32"]
    for comp in run["comparisons"]:
        best: dict[str, float] = {}
        fastest: dict[str, float] = {}
        for c in run["results"]:
            if c["dtype"] == comp["metric"]:
                best[c["device"]] = max(best.get(c["device"], 0), c["tflops"])
                fastest[c["device"]] = max(fastest.get(c["device"], 0), c["peak_tflops"])
        assert {f["device"]: f["value"] for f in comp["figures"]} == pytest.approx(best)
        assert {f["device"]: f["fastest"] for f in comp["figures"]} == pytest.approx(fastest)
        on_fastest = {s.name for s in find_stragglers(fastest)}
        assert [s["name"] for s in comp["stragglers"]] == [s.name for s in find_stragglers(best) if s.name in on_fastest]
        assert comp["unit"] == "TFLOP/s" and "CPU" in comp["roof_reason"]


def test_one_dtype_one_device_csv():
    proc = run_devctl("bench", "matmul", "--dtype", "float32", "--sizes", "64", "--repeats", "3", "--min-time", "0",
                      "--device", "cpu:1", "--csv", env=cpu_env())  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [(r["device"], r["dtype"], r["n"], r["precision"]) for r in rows] == [("cpu:1", "f32", "64", "HIGHEST")]
    assert int(rows[0]["calls_per_sample"]) >= MIN_CALLS and float(rows[0]["call_overhead_s"]) >= 0


def test_table():
    proc = run_devctl("bench", "matmul", "--dtype", "bf16", "--sizes", "64", "--repeats", "3", "--min-time", "0", env=cpu_env())
    assert proc.returncode == 0, proc.stderr
    assert "devctl bench matmul" in proc.stdout and "Matmul bf16: best median TFLOP/s per device" in proc.stdout
    assert "Roof, matmul bf16: none" in proc.stdout
    assert "Per call: launch + sync " in proc.stdout and "Method:" not in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--dtype", "f16"), "unknown --dtype 'f16'"),
        (("--dtype", "all,bogus"), "unknown --dtype 'bogus'"),  # `all` does not excuse the rest
        (("--dtype", ""), "--dtype is empty"),
        (("--sizes", "8"), "between 16 and 65536"),
        (("--sizes", "1M"), "not a matrix side"),
        (("--sizes", "100K"), "between 16 and 65536"),
        (("--device", "cpu:x"), "not a device id"),
        (("--warmups", "-1"), "--warmups"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    assert_usage_error(run_devctl("bench", "matmul", *args, env=cpu_env()), needle)


def test_side_grammar():
    from devctl.cli.bench_matmul import parse_dtypes, parse_sides

    assert parse_sides("4K,2048,4k") == (2048, 4096)
    assert parse_dtypes(None) == ("bf16", "f32") and parse_dtypes(["all"]) == ("bf16", "f32")
    assert parse_dtypes(["f32,bfloat16"]) == ("bf16", "f32")
    with pytest.raises(UsageError):
        parse_sides("-5")


def test_verification_catches_a_lower_precision_than_asked():
    """f32 is checked to FP32 accuracy: a product computed from bf16-rounded inputs (what TF32 or one bf16 pass
    would give) fails it; the true product passes; bf16's looser bar accepts its own rounding."""
    import numpy as np

    from devctl.probe.bench_matmul import _verify

    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 128)).astype(np.float32)
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    assert _verify(np, exact, a, b, "f32")
    rounded = lambda x: (x.view(np.uint32) & 0xFFFF0000).view(np.float32)  # noqa: E731  (bf16's mantissa)
    low = (rounded(a).astype(np.float64) @ rounded(b).astype(np.float64)).astype(np.float32)
    assert not _verify(np, low, a, b, "f32")
    assert _verify(np, rounded(exact), a, b, "bf16")
    assert not _verify(np, exact * 1.1, a, b, "bf16")
    nan = exact.copy()
    nan[0, 0] = np.nan
    assert not _verify(np, nan, a, b, "f32")


_BURSTS = r"""
import json, jax, numpy as np
from devctl.probe.bench_matmul import Product
from devctl.probe.bench import burst
dev = jax.devices()[1]
p = Product(jax, np, dev, "f32", 128)
where = p.c.unsafe_buffer_pointer()
ok_first = p.verified
burst(p, 5)
out = {"first": ok_first, "last": p.last_is_right(), "in_place": p.in_place, "max_burst": p.max_burst,
       "same_buffer": p.c.unsafe_buffer_pointer() == where, "on": p.c.devices() == {dev}}
print(json.dumps(out))
"""


def test_each_call_of_a_burst_writes_into_the_result_of_the_one_before():
    """A burst on a real CPU device: every call wrote its C into the same (donated) buffer, so each waited for the
    one before and none allocated; the last call's C is checked as the first one's is."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _BURSTS], env=cpu_env(2), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"first": True, "last": True, "in_place": True, "max_burst": None, "same_buffer": True, "on": True}
