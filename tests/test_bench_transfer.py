"""`devctl bench transfer` against real CPU JAX with 4 forced devices, run as a user runs it."""

from __future__ import annotations

import csv
import importlib.metadata
import io
import json
import os
import pty
import re
import subprocess
import sys
import threading

import pytest
from conftest import (
    assert_usage_error,
    devctl_env,
    run_devctl,
    run_json,
    validate_schema,
)

SMALL = ("--sizes", "4K,1M", "--repeats", "3", "--min-time", "0.005")
KIB, MIB = 1 << 10, 1 << 20
# jax before 0.6 ignores may_alias=False for a same-device put and returns its input; devctl says so instead of timing it.
SELF_PUT_COPIES = tuple(int(p) for p in importlib.metadata.version("jax").split(".")[:2]) >= (0, 6)


def cpu_env(devices: int = 4) -> dict[str, str]:
    # CPU even on a GPU machine: these tests are about the method, not the hardware.
    return devctl_env(devices, JAX_PLATFORMS="cpu")


def bench(*args: str, env=None, expect_code: int = 0) -> dict:
    doc = run_json("bench", "transfer", *args, env=env or cpu_env(), expect_code=expect_code)
    validate_schema(doc, "bench.transfer")
    return doc


def cells(doc: dict, **match) -> list[dict]:
    return [c for c in doc["results"] if all(c[k] == v for k, v in match.items())]


def one(doc: dict, **match) -> dict:
    found = cells(doc, **match)
    assert len(found) == 1, (match, found)
    return found[0]


@pytest.fixture(scope="module")
def main_run() -> dict:
    return bench(*SMALL)


@pytest.fixture(scope="module")
def variants_run() -> dict:
    return bench(*SMALL, "--variants", "all")


# ---- directions and the method ----------------------------------------------------------------------


def test_default_directions_main_variants(main_run):
    doc = main_run
    assert doc["schema"] == "devctl.bench.transfer/2"
    # The default on CPU devices is each direction's plain call: their pinned_host memory (recent jaxlibs) is host
    # memory like a numpy array's, not a faster path. Accelerators add pinned h2d and d2h (test_units_bench).
    assert {(c["direction"], c["variant"]) for c in doc["results"]} == {
        ("h2d", "pageable"),
        ("d2h", "copy"),
        ("d2d", "put"),
        ("d2d-self", "put"),
    }
    for size in (4 * KIB, MIB):
        h2d = one(doc, direction="h2d", size_bytes=size)
        assert (h2d["src"], h2d["dst"]) == ("host", "cpu:0")
        assert h2d["gbps"] > 0 and not h2d["zero_copy"] and h2d["bytes_moved"] == size
        assert h2d["samples"] >= 3
        assert h2d["min_s"] <= h2d["p10_s"] <= h2d["median_s"] <= h2d["p90_s"] <= h2d["max_s"]
        assert h2d["gbps"] == pytest.approx(size / h2d["median_s"] / 1e9)
        d2d = one(doc, direction="d2d", size_bytes=size)
        assert (d2d["src"], d2d["dst"]) == ("cpu:0", "cpu:1")
        self_copy = one(doc, direction="d2d-self", size_bytes=size)
        assert (self_copy["src"], self_copy["dst"]) == ("cpu:0", "cpu:0")
        if SELF_PUT_COPIES:
            # may_alias=False makes a same-device put a real copy, not the no-op it is by default.
            assert not self_copy["zero_copy"] and self_copy["gbps"] > 0
        else:
            assert self_copy["zero_copy"] and self_copy["gbps"] is None and "may_alias=False" in self_copy["note"]
        d2h = one(doc, direction="d2h", size_bytes=size)
        # The default device-to-host is a real copy: never the view np.asarray gives on CPU.
        assert not d2h["zero_copy"] and d2h["gbps"] > 0


def test_every_cell_verified_by_default_and_has_a_roof(main_run):
    for c in main_run["results"]:
        assert c["verified"] is True, c
        assert c["roof"] == "host_memcpy" and c["roof_gbps"] > 0
        if c["gbps"] is not None:
            assert c["pct_of_roof"] == pytest.approx(100 * c["gbps"] / c["roof_gbps"])
    memcpy = main_run["roofs"]["host_memcpy"]
    assert [r["size_bytes"] for r in memcpy] == [4 * KIB, MIB] and all(r["gbps"] > 0 for r in memcpy)
    assert main_run["roofs"]["pcie"] == [] and "no GPU" in main_run["roofs"]["pcie_reason"]


def test_memcpy_roof_is_the_best_of_many_copies_and_a_cell_above_it_is_suspect(main_run):
    # The roof is the fastest of at least 10 copies (over 50 ms), not their median: a median taken while the
    # machine was busy let cells come out at 120% of it.
    for r in main_run["roofs"]["host_memcpy"]:
        assert r["samples"] >= 10 and r["min_s"] <= r["median_s"]
        assert r["gbps"] == pytest.approx(r["size_bytes"] / r["min_s"] / 1e9)
    for c in main_run["results"]:
        # Whatever this machine measured: above its roof means suspect, with the reason; never otherwise.
        above = c["pct_of_roof"] is not None and c["pct_of_roof"] > 100
        assert (c["suspect"] is not None) == above, c
        if above:
            assert "GB/s" in c["suspect"] and "memcpy" in c["suspect"]


def test_devices_and_environment_recorded(main_run):
    assert [d["name"] for d in main_run["devices"]] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    kinds = main_run["devices"][0]["memory_kinds"]
    assert kinds and all(isinstance(k, str) for k in kinds)  # which kinds depends on the jaxlib version
    env = main_run["environment"]
    assert env["sizes_bytes"] == [4 * KIB, MIB] and env["repeats"] == 3 and env["verify"] is True
    assert env["jax"] and env["backend"] == "cpu"


def test_d2h_on_cpu_is_a_view_and_reported_as_such(variants_run):
    # CPU np.asarray returns a view of the device buffer: timing it as bandwidth would be a lie.
    numpy_cells = cells(variants_run, direction="d2h", variant="numpy")
    assert numpy_cells
    for c in numpy_cells:
        assert c["zero_copy"] is True and c["gbps"] is None and c["bytes_moved"] == 0
        assert "zero-copy" in c["note"]


def test_all_variants(variants_run):
    doc = variants_run
    seen = {(c["direction"], c["variant"]) for c in doc["results"]}
    assert seen == {
        ("h2d", "pageable"), ("h2d", "aligned"), ("h2d", "pinned"),
        ("d2h", "numpy"), ("d2h", "copy"), ("d2h", "pinned"), ("d2h", "async"),
        ("d2d", "put"), ("d2d", "donate"),
        ("d2d-self", "put"), ("d2d-self", "donate"),
    }  # fmt: skip
    # Recent jaxlibs give CPU devices pinned_host memory; older ones (jax 0.6) only unpinned_host.
    pinned = "pinned_host" in doc["devices"][0]["memory_kinds"]
    for c in doc["results"]:
        if c["variant"] == "pinned" and not pinned:
            assert c["skipped"] and "pinned_host" in c["note"], c
            continue
        assert not c["skipped"], c
        assert c["verified"] is True, c
    # Real copies on CPU: a pinned_host round trip, an owned numpy copy, a donated put to another device.
    real = (("d2h", "copy"), ("d2d", "donate")) + ((("h2d", "pinned"), ("d2h", "pinned")) if pinned else ())
    for direction, variant in real:
        c = one(doc, direction=direction, variant=variant, size_bytes=MIB)
        assert c["gbps"] > 0 and not c["zero_copy"], c
    # Donating to the same device hands the buffer over: nothing is copied.
    donated = one(doc, direction="d2d-self", variant="donate", size_bytes=MIB)
    assert donated["zero_copy"] and donated["gbps"] is None


def test_every_cell_of_cpu_devices_is_timed_call_by_call_and_says_so(variants_run):
    # Bursts are for accelerators, where a launch and sync (~0.2 ms an H200 call) hide a fast transfer; a CPU
    # device's call is a host memcpy, and bursts there time something else (XLA's CPU client runs puts from one
    # source side by side, and a chained copy waits on the one before's event). Which cells burst on a GPU:
    # tests/test_units_bench.py and the gpu test below.
    measured = [c for c in variants_run["results"] if not c["skipped"]]
    assert {c["size_bytes"] for c in measured} == {4 * KIB, MIB}
    for c in measured:
        assert (c["method"], c["calls_per_sample"], c["call_overhead_s"], c["single_call_s"]) == ("single", 1, None, None), c
        assert c["samples"] >= 3 and c["min_s"] <= c["median_s"] <= c["max_s"], c
        if c["gbps"] is not None:
            # The figure is per call: the bytes of one transfer over the median's seconds per call.
            assert c["gbps"] == pytest.approx(c["bytes_moved"] / c["median_s"] / 1e9), c


def test_zero_copy_alias_is_flagged_not_reported_as_bandwidth(variants_run):
    # XLA's CPU client aliases a 64-byte-aligned numpy array instead of copying it.
    aligned = one(variants_run, direction="h2d", variant="aligned", size_bytes=MIB)
    assert aligned["zero_copy"] is True
    assert aligned["gbps"] is None and aligned["peak_gbps"] is None and aligned["pct_of_roof"] is None
    assert aligned["bytes_moved"] == 0 and aligned["median_s"] > 0
    assert "aliases the numpy buffer" in aligned["note"]
    pageable = one(variants_run, direction="h2d", variant="pageable", size_bytes=MIB)
    assert pageable["zero_copy"] is False and pageable["gbps"] > 0


def test_fastest_path_named_per_direction(variants_run):
    fastest = {f["direction"]: f for f in variants_run["fastest"]}
    assert set(fastest) == {"h2d", "d2h", "d2d", "d2d-self"}
    h2d = fastest["h2d"]
    assert h2d["size_bytes"] == MIB and h2d["variant"] in ("pageable", "pinned")  # never the alias
    assert "aligned" in h2d["zero_copy_variants"]
    measured = [c["gbps"] for c in cells(variants_run, direction="h2d", size_bytes=MIB) if c["gbps"]]
    assert h2d["gbps"] == max(measured)
    assert fastest["d2h"]["variant"] in ("copy", "pinned") and "numpy" in fastest["d2h"]["zero_copy_variants"]


def test_sharded_and_replicated():
    doc = bench(*SMALL, "--sharded", "--replicated")
    assert {c["layout"] for c in doc["results"]} == {"sharded", "replicated"}
    for c in doc["results"]:
        assert c["verified"] is True, c
    sharded = one(doc, direction="h2d", layout="sharded", size_bytes=MIB)
    assert (sharded["src"], sharded["dst"]) == ("host", "cpu:all")
    assert sharded["bytes_moved"] == MIB and sharded["devices_involved"] == 4
    assert sharded["per_device_gbps"] == pytest.approx(sharded["gbps"] / 4)
    # Replicating from numpy sends the whole array to every device.
    replicated = one(doc, direction="h2d", layout="replicated", size_bytes=MIB)
    assert replicated["bytes_moved"] == 4 * MIB
    # A broadcast from device 0 moves at most three copies: the one that stays home may alias the source.
    bcast = one(doc, direction="d2d", layout="replicated", size_bytes=MIB)
    assert bcast["src"] == "cpu:0" and bcast["bytes_moved"] in (3 * MIB, 4 * MIB)
    rotated = one(doc, direction="d2d", layout="sharded", size_bytes=MIB)
    assert rotated["bytes_moved"] == MIB and rotated["gbps"] > 0
    # XLA copies a CPU mesh's shards in parallel: one thread's memcpy is no roof for them, and none is claimed.
    for c in doc["results"]:
        assert c["roof"] is None and c["pct_of_roof"] is None and "in parallel" in c["roof_reason"], c


def test_sharded_size_rounded_to_the_device_count():
    doc = bench("--sizes", "1001", "--repeats", "3", "--sharded", "--direction", "h2d")
    c = one(doc, direction="h2d")
    assert c["size_bytes"] == 1000 and "multiple of 4 devices" in c["note"] and c["verified"] is True


def test_chosen_pair_and_all_pairs():
    doc = bench(*SMALL, "--direction", "d2d", "--src", "2", "--dst", "1")
    assert {(c["src"], c["dst"]) for c in doc["results"]} == {("cpu:2", "cpu:1")}
    doc = bench("--sizes", "4K", "--repeats", "3", "--direction", "d2d", "--all-pairs")
    pairs = {(c["src"], c["dst"]) for c in doc["results"]}
    assert len(pairs) == 12 and all(s != d for s, d in pairs)


def test_devices_named_by_platform_and_with_leading_zeros():
    # memstats' device grammar: N or platform:N, `01` is device 1, repeats named once.
    doc = bench("--sizes", "4K", "--repeats", "3", "--direction", "h2d,d2d", "--device", "cpu:1,01", "--device", "CPU:03",
                "--src", "cpu:2", "--dst", "01", "--no-verify")  # fmt: skip
    assert [c["dst"] for c in cells(doc, direction="h2d")] == ["cpu:1", "cpu:3"]
    assert {(c["src"], c["dst"]) for c in cells(doc, direction="d2d")} == {("cpu:2", "cpu:1")}


def test_device_all_and_no_verify():
    doc = bench("--sizes", "4K", "--repeats", "3", "--direction", "h2d,d2d-self", "--device", "all", "--no-verify")
    assert {c["dst"] for c in cells(doc, direction="h2d")} == {"cpu:0", "cpu:1", "cpu:2", "cpu:3"}
    assert all(c["verified"] is None for c in doc["results"])


def test_single_device_skips_d2d_with_a_note():
    # Beside another direction; d2d alone on one device is bad input (test_d2d_alone_on_one_device_is_bad_input).
    doc = bench("--sizes", "4K", "--repeats", "3", "--direction", "h2d,d2d", env=cpu_env(1))
    c = one(doc, direction="d2d")
    assert c["skipped"] and c["gbps"] is None and c["samples"] == 0 and "2 devices" in c["note"]


def test_single_device_table_says_so_once_instead_of_a_skipped_row_per_size():
    args = ("--sizes", "4K,64K,1M", "--repeats", "3", "--min-time", "0.005", "--direction", "h2d,d2d,d2d-self")
    doc = bench(*args, env=cpu_env(1))
    assert len(cells(doc, direction="d2d", skipped=True)) == 3  # --json keeps every cell
    proc = run_devctl("bench", "transfer", *args, env=cpu_env(1))
    assert proc.returncode == 0, proc.stderr
    assert "→ none" not in proc.stdout and "skipped" not in proc.stdout and "d2d put" not in proc.stdout
    notes = [line for line in proc.stdout.splitlines() if "one device" in line]
    assert notes == ["Note: d2d: one device here, nothing to copy between; d2d-self measures on-device copies"]
    assert "d2d-self   put" in proc.stdout  # the on-device copies are measured and shown


def test_size_this_machine_cannot_hold_is_bad_input_naming_the_limit():
    # 16T can never run here: an error naming the size, the estimate and the machine's memory, not a run of skipped cells.
    from devctl.discovery.host import host_memory_limit
    from devctl.units import format_bytes

    proc = run_devctl("bench", "transfer", "--sizes", "4K,16T", "--repeats", "3", "--direction", "h2d", "--json", env=cpu_env())
    limit, _ = host_memory_limit()
    # h2d on CPU devices: the pattern, the roof's buffer, the result and the verification's comparison.
    assert_usage_error(proc, "--sizes 16T", f"about {format_bytes(4 * (16 << 40))}", "(4x the size", format_bytes(limit), "give sizes up to")
    assert proc.stdout == ""


def test_quick_runs_and_validates():
    doc = bench("--quick")
    assert doc["environment"]["quick"] is True
    assert len(doc["environment"]["sizes_bytes"]) <= 3
    assert one(doc, direction="h2d", size_bytes=max(doc["environment"]["sizes_bytes"]))["gbps"] > 0


# ---- text output -------------------------------------------------------------------------------------


def test_table_chart_and_summary_on_stdout_nothing_on_stderr():
    proc = run_devctl("bench", "transfer", "--sizes", "4K,64K,1M", *SMALL[2:], "--variants", "main,aligned", env=cpu_env())
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "GB/s" in out and "% of roof" in out and "median" in out and "p10 – p90" in out  # whole off a terminal
    assert "Bandwidth against size" in out and "█" in out
    assert "Roof, host memcpy" in out
    # The aligned array is aliased on CPU: one variant moved bytes, and one is not called the fastest.
    (h2d,) = [line for line in out.splitlines() if line.startswith("h2d at 1M: pageable ")]
    assert "% of host memcpy" in h2d and h2d.endswith("zero-copy (no transfer): aligned")
    assert "Fastest" not in out
    assert "zero-copy" in out
    assert "\x1b[" not in out  # plain text off a terminal
    assert proc.stderr == ""  # no progress bar when stderr is not a terminal


def test_progress_bar_only_on_a_terminal():
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain():  # read while the child writes, so a full pty buffer never blocks it
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO once the child's side is closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "devctl", "bench", "transfer", "--sizes", "4K", "--repeats", "3", "--json"],
            env=cpu_env(),
            stdout=subprocess.PIPE,
            stderr=slave,
            timeout=120,
        )
    finally:
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
    assert proc.returncode == 0
    json.loads(proc.stdout)  # stdout stays one clean JSON document
    assert b"".join(chunks).strip(), "expected a progress display on a terminal stderr"


# ---- the regression gate -----------------------------------------------------------------------------

# 4K is latency-bound on every path (its time is nearly all fixed cost), 64M bandwidth-bound: the gate judges
# the 64M cells and counts the 4K ones as not gated.
GATE_ARGS = ("--sizes", "4K,64M", "--repeats", "5", "--direction", "h2d,d2d-self")
GATE_CELLS = 4 if SELF_PUT_COPIES else 2  # cells with a GB/s to compare
GATED = GATE_CELLS // 2  # the 64M ones


@pytest.fixture(scope="module")
def baseline_doc() -> dict:
    return bench(*GATE_ARGS)


def gate_run(tmp_path, doc: dict, *args: str, name: str = "base.json") -> subprocess.CompletedProcess:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return run_devctl("bench", "transfer", *GATE_ARGS, "--baseline", str(path), *args, env=cpu_env())


def test_a_rerun_passes_against_its_own_baseline_judging_the_bandwidth_bound_cells(tmp_path, baseline_doc):
    # 99%: this test is about what is judged and said; whether identical reruns pass at 10% is a statistical
    # question, answered by benchmarks/bench_gate.py (tests never depend on timing).
    proc = gate_run(tmp_path, baseline_doc, "--max-regression", "99%", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate_schema(doc, "bench.transfer")
    gate = doc["gate"]
    assert gate["passed"] is True and gate["regressions"] == [] and gate["all_sizes"] is False
    assert (gate["compared"], gate["gated"], gate["left_out"]) == (GATE_CELLS, GATED, {"latency-bound": GATE_CELLS - GATED})
    assert 0 <= gate["min_noise_pct"] <= gate["max_noise_pct"]
    assert f"{GATED} bandwidth-bound cells gated, none fell more than 99% beyond its noise band" in proc.stderr
    assert f"{GATE_CELLS - GATED} latency-bound cells not gated; --gate-all-sizes gates them" in proc.stderr


def test_a_repeated_baseline_pools_the_runs_and_the_same_file_twice_is_refused(tmp_path, baseline_doc):
    second = json.loads(json.dumps(baseline_doc))
    for c in second["results"]:
        c["samples"] += 1  # another run: its own figures
    (tmp_path / "second.json").write_text(json.dumps(second))
    proc = gate_run(tmp_path, baseline_doc, "--baseline", str(tmp_path / "second.json"), "--max-regression", "99%", "--json")
    assert proc.returncode == 0, proc.stderr
    gate = json.loads(proc.stdout)["gate"]
    assert gate["baseline_runs"] == 2 and gate["baseline"].endswith("second.json") and gate["gated"] == GATED
    assert "(2 runs pooled)" in proc.stderr
    twice = gate_run(tmp_path, baseline_doc, "--baseline", str(tmp_path / "base.json"))
    assert twice.returncode == 2 and "Traceback" not in twice.stderr
    assert twice.stderr.strip().endswith("is given twice; pool different runs (each run's own --json result)"), twice.stderr
    # The same run under another name (a link) or copied, even reformatted: one run, refused.
    (tmp_path / "link.json").symlink_to(tmp_path / "base.json")
    (tmp_path / "copy.json").write_text(json.dumps(baseline_doc, indent=1))
    for other in ("link.json", "copy.json"):
        proc = gate_run(tmp_path, baseline_doc, "--baseline", str(tmp_path / other))
        assert_usage_error(proc, f"{other}' holds the same figures as", "base.json", "one run given twice")


def faster(doc: dict, factor: float) -> dict:
    """The baseline as if every path had been `factor` times faster, with almost no spread."""
    out = json.loads(json.dumps(doc))
    for c in out["results"]:
        if c["gbps"] is not None:
            c["gbps"] *= factor
            c["median_s"] /= factor
            c["p10_s"], c["p90_s"] = c["median_s"] * 0.995, c["median_s"] * 1.005
    return out


def test_a_faster_tight_baseline_fails_naming_each_cell_and_how_far_past_its_noise(tmp_path, baseline_doc):
    # 1000x: the drop (-99.9%) stays beyond 10% plus the noise band whatever this run's own samples do under
    # load (a 4x faster baseline was not enough in CI: a loaded run's p10-p90 spread can exceed its median).
    proc = gate_run(tmp_path, faster(baseline_doc, 1000), "--max-regression", "10%", name="fast.json")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{GATED} of {GATED} bandwidth-bound cells fell more than 10% beyond its noise band" in proc.stderr
    line = next(x for x in proc.stderr.splitlines() if "h2d pageable single 64M host->cpu:0" in x)
    assert re.search(r": [0-9.]+ GB/s, -\d+% vs [0-9.]+ GB/s \(noise band ±\d+%: \d+ points beyond it\)$", line), line
    assert ("d2d-self put single 64M cpu:0->cpu:0" in proc.stderr) is SELF_PUT_COPIES  # a zero-copy cell has no GB/s to compare
    assert "single 4K" not in proc.stderr  # latency-bound: not judged
    assert f"{GATE_CELLS - GATED} latency-bound cells not gated" in proc.stderr
    doc = run_json("bench", "transfer", *GATE_ARGS, "--baseline", str(tmp_path / "fast.json"), env=cpu_env(), expect_code=1)
    validate_schema(doc, "bench.transfer")
    gate = doc["gate"]
    assert gate["passed"] is False and gate["max_regression_pct"] == 10 and len(gate["regressions"]) == GATED
    for r in gate["regressions"]:
        # Not -99.9% exactly: the baseline and this run are separate processes, whose 64M cells can land in
        # different page-fault modes on a VM (benchmarks/README.md); a 1000x faster baseline still shows a clear drop.
        assert " 64M " in r["cell"] and r["change_pct"] < -10
        assert r["beyond_noise_pct"] == pytest.approx(-r["change_pct"] - r["noise_pct"]) and r["beyond_noise_pct"] > 10


def test_gate_all_sizes_judges_the_latency_bound_cells_too(tmp_path, baseline_doc):
    doc = json.loads(gate_run(tmp_path, faster(baseline_doc, 1000), "--gate-all-sizes", "--json").stdout)
    gate = doc["gate"]
    assert gate["all_sizes"] is True and (gate["gated"], gate["left_out"]) == (GATE_CELLS, {})
    assert {r["cell"].split()[3] for r in gate["regressions"]} == {"4K", "64M"}


def test_gate_with_no_matching_cell_is_bad_input(tmp_path, baseline_doc):
    path = tmp_path / "base.json"
    path.write_text(json.dumps(baseline_doc))
    proc = run_devctl("bench", "transfer", "--sizes", "8K", "--repeats", "3", "--direction", "h2d", "--baseline", str(path), env=cpu_env())
    assert_usage_error(proc, "no cell matching")


def test_gate_with_only_latency_bound_cells_to_judge_is_bad_input_not_a_pass(tmp_path):
    # A baseline whose every cell is latency-bound (4K and 16K h2d: the fixed cost is most of either's time).
    args = ("bench", "transfer", "--sizes", "4K,16K", "--repeats", "3", "--direction", "h2d")
    first = run_devctl(*args, "--json", env=cpu_env())
    assert first.returncode == 0, first.stderr
    path = tmp_path / "base.json"
    path.write_text(first.stdout)
    gated = (*args, "--baseline", str(path))
    assert_usage_error(run_devctl(*gated, env=cpu_env()), "none of the 2 matching cells is bandwidth-bound", "--gate-all-sizes")
    assert run_devctl(*gated, "--gate-all-sizes", "--max-regression", "99%", env=cpu_env()).returncode == 0


def test_a_baseline_cell_this_run_lacks_is_named_and_fails(tmp_path, baseline_doc):
    """A cell the baseline gated and this run did not measure (a device gone, a size no longer measured) is a
    regression, named: a lost GPU must not pass the gate."""
    path = tmp_path / "base.json"
    path.write_text(json.dumps(baseline_doc))
    proc = run_devctl("bench", "transfer", "--sizes", "4K", "--repeats", "3", "--direction", "h2d", "--baseline", str(path),
                      "--max-regression", "99%", env=cpu_env())  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "h2d pageable single 64M host->cpu:0: not in this run (the baseline has it)" in proc.stderr


def test_a_baseline_without_the_spread_of_its_samples_is_refused(tmp_path, baseline_doc):
    """An older or hand-made result with a GB/s but no p10/median/p90 cannot be judged against its noise."""
    old = json.loads(json.dumps(baseline_doc))
    i = next(i for i, c in enumerate(old["results"]) if c["gbps"] is not None)
    for k in ("p10_s", "p90_s"):
        del old["results"][i][k]
    assert_usage_error(gate_run(tmp_path, old, name="old.json"), f"results[{i}] has a bandwidth but no samples, p10_s")
    swapped = json.loads(json.dumps(baseline_doc))
    cell = swapped["results"][i]
    cell["p10_s"], cell["p90_s"] = cell["p90_s"] * 2, cell["p10_s"] / 2
    assert_usage_error(gate_run(tmp_path, swapped, name="swapped.json"), f"results[{i}] has p10_s", "not in order")


# ---- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--sizes", "12Q"), "'12Q'"),
        (("--sizes", "0"), "'0'"),
        (("--sizes", "4K,,1M"), "empty entry"),
        (("--repeats", "-1"), "--repeats"),
        (("--repeats", "0"), "--repeats"),
        (("--warmups", "-2"), "--warmups"),
        (("--min-time", "-1"), "--min-time"),
        (("--direction", "sideways"), "'sideways'"),
        (("--variants", "teleport"), "'teleport'"),
        (("--direction", "h2d", "--variants", "donate"), "'donate'"),
        (("--device", "gpu0"), "'gpu0'"),
        (("--src", "1", "--dst", "1"), "d2d-self"),
        (("--max-regression", "10%"), "--baseline"),
        (("--gate-all-sizes",), "--gate-all-sizes needs --baseline"),
        (("--timeout", "0"), "--timeout"),
        # An empty value is an error, never "the default" (a script's variable that came out empty).
        (("--direction", ""), "--direction is empty"),
        (("--direction", "h2d,"), "empty entry"),
        (("--variants", ""), "--variants is empty"),
        (("--device", ""), "--device is empty"),
        (("--sizes", ""), "--sizes is empty"),
        (("--device", "²"), "'²'"),  # str.isdigit() says yes, int() says no
        (("--device", "9" * 5000), "is not a device id"),
        (("--device", "tpu-chip:0"), "JAX does not use"),  # memstats' physical views are no JAX device
        (("--device", "warp:0"), "names no platform"),
        (("--src", ""), "--src is empty"),
        (("--src", "0,1"), "--src takes one device"),
        (("--dst", "all"), "--dst takes one device"),
        (("--src", "-1"), "'-1' is not a device id"),
        (("--src", "01", "--dst", "cpu:1"), "d2d-self"),
        (("--sizes", "9" * 5000), "not a size"),
        # Flags that would be silently ignored together.
        (("--src", "0", "--all-pairs"), "--all-pairs"),
        (("--dst", "1", "--all-pairs"), "--all-pairs"),
        (("--sharded", "--device", "1"), "--sharded uses every local device"),
        (("--replicated", "--src", "0", "--dst", "1"), "--src does not apply"),
        (("--sharded", "--replicated", "--all-pairs"), "--all-pairs does not apply"),
        (("--sharded", "--variants", "all"), "--variants does not apply"),
        (("--direction", "h2d", "--src", "1"), "--src chooses d2d pairs"),
        (("--direction", "h2d,d2h", "--all-pairs"), "--all-pairs chooses d2d pairs"),
        (("--direction", "d2d", "--src", "0", "--dst", "1", "--device", "2"), "nothing to choose"),
    ],
)
def test_bad_flags_fail_fast_with_one_line(args, needle):
    proc = run_devctl("bench", "transfer", *args, env=cpu_env())
    assert_usage_error(proc, needle)


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--direction", "d2d", "--src", "9"), "unknown device id 9 for --src"),
        (("--direction", "d2d", "--dst", "7"), "unknown device id 7 for --dst"),
        (("--device", "5"), "unknown device id 5 for --device"),
        # A platform the device is not on is as unknown as an id the host lacks.
        (("--device", "cuda:0"), "unknown device cuda:0 for --device"),
        (("--direction", "d2d", "--src", "tpu:1"), "unknown device tpu:1 for --src"),
    ],
)
def test_unknown_device_is_bad_input(args, needle):
    proc = run_devctl("bench", "transfer", "--sizes", "4K", "--repeats", "3", *args, env=cpu_env())
    assert_usage_error(proc, needle, "0, 1, 2, 3")


def test_bad_baselines(tmp_path):
    missing = tmp_path / "missing.json"
    not_json = tmp_path / "garbage.json"
    not_json.write_text("{ this is not json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "devctl.list/1", "devices": []}))
    edited = tmp_path / "edited.json"
    cell = {"direction": "h2d", "variant": "pageable", "layout": "single", "size_bytes": 4096, "src": "host", "dst": "cpu:0", "gbps": "fast"}
    edited.write_text(json.dumps({"schema": "devctl.bench.transfer/2", "results": [cell]}))
    for path, needle in (
        (missing, "no such file"), (not_json, "is not JSON"), (other, "not a devctl bench transfer result"),
        (edited, "results[0] has gbps 'fast'"),
    ):  # fmt: skip
        proc = run_devctl("bench", "transfer", "--baseline", str(path), env=cpu_env())
        assert_usage_error(proc, needle)
    bad_pct = tmp_path / "ok.json"
    bad_pct.write_text(json.dumps({"schema": "devctl.bench.transfer/2", "results": []}))
    assert_usage_error(run_devctl("bench", "transfer", "--baseline", str(bad_pct), "--max-regression", "150%", env=cpu_env()), "150%")


# ---- pure functions ----------------------------------------------------------------------------------


def test_pcie_peak_table():
    from devctl.probe.bench_transfer import pcie_peak_gbps

    assert pcie_peak_gbps(5, 16) == pytest.approx(63.0, abs=0.02)
    assert pcie_peak_gbps(4, 16) == pytest.approx(31.5, abs=0.02)
    assert pcie_peak_gbps(3, 16) == pytest.approx(15.75, abs=0.02)
    assert pcie_peak_gbps(2, 16) == pytest.approx(8.0)
    assert pcie_peak_gbps(4, 8) == pytest.approx(15.75, abs=0.02)
    assert pcie_peak_gbps(None, 16) is None and pcie_peak_gbps(9, 16) is None


def test_chart_bar():
    from devctl.render.bench import bar

    assert bar(1.0, 4) == "████" and bar(0.5, 4) == "██  " and bar(0.0, 4).strip() == "▏"


# ---- a real GPU --------------------------------------------------------------------------------------


def _nvidia_gpu_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetCount() > 0
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _nvidia_gpu_present(), reason="needs an NVIDIA GPU with NVML")
def test_gpu_quick_h2d_against_the_pcie_roof():
    env = devctl_env(1)
    env.pop("XLA_FLAGS", None)
    doc = run_json("bench", "transfer", "--quick", env=env, timeout=300)
    validate_schema(doc, "bench.transfer")
    gpus = {d["name"] for d in doc["devices"] if d["platform"] == "gpu"}
    assert "cuda" in f'{doc["environment"]["backend"]} {doc["environment"]["platform_version"]}'.lower()
    h2d = [c for c in doc["results"] if c["direction"] == "h2d" and c["dst"] in gpus]
    assert h2d and all(c["verified"] for c in h2d)
    big = max(h2d, key=lambda c: c["size_bytes"])
    assert big["gbps"] > 0 and not big["zero_copy"]
    links = [link for link in doc["roofs"]["pcie"] if link["peak_gbps"]]
    assert links, doc["roofs"]
    assert big["roof"] == "pcie" and big["roof_gbps"] == pytest.approx(links[0]["peak_gbps"])
    assert 0 < big["pct_of_roof"] <= 100
    # The default on a GPU measures the pinned path beside the plain calls, and the verdict compares them.
    assert {c["variant"] for c in doc["results"] if c["direction"] in ("h2d", "d2h")} == {"pageable", "copy", "pinned"}
    fastest = {f["direction"]: f for f in doc["fastest"]}
    for direction in ("h2d", "d2h"):
        assert fastest[direction]["others"], fastest[direction]  # two paths measured: a fastest and the other
    # On a GPU every 64M cell whose source can be sent again is timed in bursts (the launch and sync, ~0.2 ms an
    # H200 call, reported apart): pinned h2d and d2h, the plain h2d, the on-device copy; the 4K cells call by call.
    for c in doc["results"]:
        if c["skipped"]:
            continue
        burst = c["size_bytes"] > 64 * KIB and (c["direction"], c["variant"]) in {("h2d", "pageable"), ("h2d", "pinned"), ("d2h", "pinned"), ("d2d-self", "put")}
        assert c["method"] == ("burst" if burst else "single"), c
        if burst:
            assert c["calls_per_sample"] >= 2 and c["call_overhead_s"] is not None, c


def test_csv_is_one_row_per_cell_and_mesh_figures_say_they_are_aggregates():
    env = devctl_env(devices=2)
    proc = run_devctl("bench", "transfer", "--quick", "--direction", "h2d", "--csv", env=env)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert rows and all(r["direction"] == "h2d" for r in rows)
    assert all(int(r["size_bytes"]) > 0 and float(r["gbps"]) > 0 for r in rows), rows
    proc = run_devctl("bench", "transfer", "--quick", "--direction", "h2d", "--replicated", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "replicated: GB/s is the aggregate over every device of the mesh" in " ".join(proc.stdout.split())


def test_d2d_alone_on_one_device_is_bad_input():
    """-d d2d on a host of one device has nothing to measure: a usage error that names the device and what does
    measure it (d2d-self), not an empty run that exits 0."""
    proc = run_devctl("bench", "transfer", "--quick", "-d", "d2d", env=devctl_env(1))
    assert_usage_error(proc, "-d d2d copies between devices", "this host has one (cpu:0)", "-d d2d-self", "xla_force_host_platform_device_count")


def test_the_method_is_said_on_request():
    """--verbose adds one `Method:` line (how a latency and a burst are timed); a plain run has none."""
    args = ("bench", "transfer", "--sizes", "4K", "--repeats", "3", "--direction", "h2d")
    plain, verbose = run_devctl(*args, env=cpu_env(1)), run_devctl(*args, "-v", env=cpu_env(1))
    assert plain.returncode == verbose.returncode == 0, plain.stderr + verbose.stderr
    assert "Method:" not in plain.stdout
    (method,) = [line for line in verbose.stdout.splitlines() if line.startswith("Method:")]
    assert "up to 64K a sample is one transfer and its block_until_ready" in method and "wait on every result" in method
