"""`devctl bench collective` against real CPU JAX with 4 forced devices (and 2 processes on 127.0.0.1), run as a
user runs it; the bus-bandwidth rule and the straggler assembly tested in-process against hand-computed values."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest
from conftest import assert_usage_error, devctl_env, run_devctl, run_json, validate_schema
from test_distributed import finish, free_port

from devctl.model import bench_collective as m

KIB, MIB = 1 << 10, 1 << 20
SMALL = ("--sizes", "4K,64K", "--repeats", "3", "--warmups", "1", "--budget", "0.01")


def cpu_env(devices: int = 4) -> dict[str, str]:
    # CPU even on a GPU machine: these tests are about the method, not the hardware.
    return devctl_env(devices, JAX_PLATFORMS="cpu")


def bench(*args: str, env=None) -> dict:
    doc = run_json("bench", "collective", *args, env=env or cpu_env())
    validate_schema(doc, "bench.collective")
    return doc


def cells(doc: dict, **match) -> list[dict]:
    return [c for c in doc["results"] if all(c[k] == v for k, v in match.items())]


# ---- the bus-bandwidth rule, by hand -----------------------------------------------------------------


def test_busbw_rule_matches_hand_computed_values():
    # 256 MiB in 1 ms is 268.435456 GB/s of algbw, whatever the collective (nccl-tests: algbw = S / t).
    S, t = 256 * MIB, 1e-3
    assert m.bandwidths("all-reduce", S, 8, t) == pytest.approx((268.435456, 268.435456 * 14 / 8))  # 2(n-1)/n = 1.75
    assert m.bandwidths("all-gather", S, 8, t) == pytest.approx((268.435456, 234.881024))  # (n-1)/n = 0.875
    assert m.bandwidths("reduce-scatter", S, 4, t) == pytest.approx((268.435456, 201.326592))  # 0.75
    assert m.bandwidths("all-to-all", S, 2, t) == pytest.approx((268.435456, 134.217728))  # 0.5
    assert m.bandwidths("ppermute", S, 8, t) == pytest.approx((268.435456, 268.435456))  # point to point: x 1
    assert m.bus_factor("all-reduce", 2) == 1.0 and m.bus_factor("all-reduce", 4) == 1.5
    assert m.bandwidths("all-reduce", S, 8, None) == (None, None)
    with pytest.raises(ValueError):
        m.bus_factor("all-reduce", 1)


def test_sizes_are_nccl_tests_sizes_per_rank():
    # all-gather's S is its output (S/n goes in); reduce-scatter's is its input (S/n comes out).
    assert (m.input_bytes("all-gather", 4 * MIB, 4), m.output_bytes("all-gather", 4 * MIB, 4)) == (MIB, 4 * MIB)
    assert (m.input_bytes("reduce-scatter", 4 * MIB, 4), m.output_bytes("reduce-scatter", 4 * MIB, 4)) == (4 * MIB, MIB)
    assert (m.input_bytes("all-reduce", 4 * MIB, 4), m.output_bytes("all-reduce", 4 * MIB, 4)) == (4 * MIB, 4 * MIB)
    from devctl.probe.bench_collective_ops import elements

    assert elements("all-gather", 4 * KIB, 4, 4) == (256, 4 * KIB)
    assert elements("all-to-all", 1000, 3, 4) == (249, 996)  # whole float32 elements in each of 3 pieces
    assert elements("ppermute", 1001, 3, 4) == (250, 1000)


def test_link_and_host_stragglers_are_named():
    from devctl.collect.bench_collective import host_stragglers, link_stragglers

    pairs = []
    for i in range(4):
        for j in range(4):
            if i != j:
                median = 1e-3 * (2.0 if (i, j) == (2, 0) else 1.0)  # one link at half the speed of the others
                alg, bus = m.bandwidths("ppermute", MIB, 2, median)
                pairs.append(m.CollectiveCell("ppermute-pair", "devices", 2, MIB, "float32", f"cpu:{i}", f"cpu:{j}",
                                              samples=5, median_s=median, algbw_gbps=alg, busbw_gbps=bus))  # fmt: skip
    found = link_stragglers(tuple(pairs))
    assert [(s.kind, s.name) for s in found] == [("link", "cpu:2->cpu:0")]
    assert found[0].gbps == pytest.approx(MIB / 2e-3 / 1e9) and found[0].deviation_pct == pytest.approx(50)
    hosts = tuple(m.HostFigure(i, f"h{i}", "all-reduce", "hosts", MIB, "float32", 1e-3, gbps) for i, gbps in enumerate((10.0, 10.2, 4.0, 9.9)))
    assert [s.name for s in host_stragglers(hosts)] == ["process 2 (h2)"]


# ---- real runs ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mesh_run() -> dict:
    return bench(*SMALL, "--mesh", "data=2,model=2", "--all-pairs")


def test_every_collective_on_each_named_axis(mesh_run):
    doc = mesh_run
    assert doc["schema"] == "devctl.bench.collective/2"
    assert [(a["name"], a["size"], a["groups"], a["scope"]) for a in doc["axes"]] == [
        ("data", 2, 2, "intra-host"), ("model", 2, 2, "intra-host"),
    ]  # fmt: skip
    for axis in ("data", "model"):
        for name in m.COLLECTIVES:
            found = cells(doc, collective=name, axis=axis)
            assert [c["size_bytes"] for c in found] == [4 * KIB, 64 * KIB], (axis, name)
            for c in found:
                assert not c["skipped"] and c["samples"] >= 3 and c["ranks"] == 2
                assert c["min_s"] <= c["p10_s"] <= c["median_s"] <= c["p90_s"] <= c["max_s"]
                # The report's own figures obey the rule: algbw from the median, busbw by the factor.
                assert c["algbw_gbps"] == pytest.approx(c["size_bytes"] / c["median_s"] / 1e9)
                assert c["busbw_gbps"] == pytest.approx(c["algbw_gbps"] * m.bus_factor(name, 2))
                assert c["roof_gbps"] is None and c["compile_s"] > 0
    env = doc["environment"]
    assert env["process_count"] == 1 and env["shard_map"] in ("jax.shard_map", "jax.experimental.shard_map")
    assert "no published peak" in env["roof_note"] and "CPU" in env["roof_note"]


def test_all_pairs_measures_every_ordered_pair_of_each_axis(mesh_run):
    pairs = cells(mesh_run, collective="ppermute-pair")
    # Two axes of 2: (0 -> 1) and (1 -> 0) on each, run by both groups at once, so named by axis index.
    assert sorted((c["axis"], c["src"], c["dst"]) for c in pairs) == [
        ("data", "data[0]", "data[1]"), ("data", "data[1]", "data[0]"),
        ("model", "model[0]", "model[1]"), ("model", "model[1]", "model[0]"),
    ]  # fmt: skip
    assert all(c["size_bytes"] == 64 * KIB and c["busbw_gbps"] == c["algbw_gbps"] for c in pairs)


def test_table_fits_and_csv_has_a_row_per_cell():
    env = cpu_env()
    three_sizes = ("--sizes", "4K,16K,64K", *SMALL[2:])
    proc = run_devctl("bench", "collective", *three_sizes, "-c", "all-reduce,ppermute", "--all-pairs", env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "devctl bench collective" in out and "Bus bandwidth against size" in out
    assert "ppermute GB/s on axis devices" in out  # the 4 x 4 link matrix
    assert "Stragglers: none among 12 links" in out or "Straggler link:" in out
    assert "Latency on devices (median at 4K)" in out and "Best busbw on devices" in out and "\x1b[" not in out
    # Two sizes are two rows of the table: no chart, no latency or best-busbw line that would say them again.
    two = run_devctl("bench", "collective", *SMALL, "-c", "all-reduce", env=env)
    assert two.returncode == 0, two.stderr
    assert "all-reduce" in two.stdout and not any(w in two.stdout for w in ("against size", "Latency on", "Best busbw"))
    proc = run_devctl("bench", "collective", *SMALL, "-c", "all-gather", "--dtype", "bfloat16,int8", "--csv", env=env)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [(r["dtype"], r["size_bytes"]) for r in rows] == [("bfloat16", "4096"), ("bfloat16", "65536"), ("int8", "4096"), ("int8", "65536")]
    assert all(float(r["busbw_gbps"]) > 0 and r["collective"] == "all-gather" for r in rows)


def test_quick_sweeps_two_sizes():
    doc = bench("--quick", "-c", "all-reduce")
    assert [c["size_bytes"] for c in doc["results"]] == list(m.QUICK_SIZES)
    assert doc["environment"]["quick"] is True and doc["environment"]["repeats"] == m.QUICK_REPEATS
    # The latency cell times single calls (the launch is its figure); the bandwidth cell bursts of calls, the
    # per-call overhead apart; both say so.
    small, large = doc["results"]
    assert (small["method"], small["calls_per_sample"], small["call_overhead_s"]) == ("single", 1, None)
    assert large["method"] == "burst" and large["calls_per_sample"] >= 2 and large["call_overhead_s"] >= 0
    assert large["single_call_s"] > 0 and all(c["verified"] is True for c in doc["results"])


# ---- bad input: one line, exit 2 -----------------------------------------------------------------------


def test_unknown_collective_and_bad_mesh_syntax():
    assert_usage_error(run_devctl("bench", "collective", "-c", "broadcast", env=cpu_env()), "--collective", "broadcast", "all-reduce")
    assert_usage_error(run_devctl("bench", "collective", "--mesh", "data:2", env=cpu_env()), "--mesh", "NAME=SIZE")
    assert_usage_error(run_devctl("bench", "collective", "--mesh", "a=2,a=2", env=cpu_env()), "twice")
    assert_usage_error(run_devctl("bench", "collective", "--dtype", "complex64", env=cpu_env()), "--dtype", "float32")


def test_a_size_that_holds_no_element_or_no_machine_is_bad_input():
    """A size under one element of the widest dtype asked, or over 1T a device, measures nothing: exit 2 before jax
    starts (bench matmul's short dtype names work here too)."""
    assert_usage_error(run_devctl("bench", "collective", "--sizes", "3", env=cpu_env()), "at least 4 bytes (one float32 element)", "'3'")
    proc = run_devctl("bench", "collective", "--dtype", "bf16", "--sizes", "1", env=cpu_env())
    assert_usage_error(proc, "at least 2 bytes (one bfloat16 element)")
    proc = run_devctl("bench", "collective", "--dtype", "int8,f32", "--sizes", "2", env=cpu_env())
    assert_usage_error(proc, "at least 4 bytes (one float32 element)")
    assert_usage_error(run_devctl("bench", "collective", "--sizes", "2T", env=cpu_env()), "'2T' is more than 1T per device")


def test_mesh_that_does_not_multiply_to_the_device_count():
    proc = run_devctl("bench", "collective", *SMALL, "--mesh", "data=3,model=2", env=cpu_env())
    assert_usage_error(proc, "data=3,model=2", "6 devices", "there are 4")


def test_an_axis_of_one_device_is_said_not_measured():
    args = ("bench", "collective", "--sizes", "4K", "--repeats", "3", "--warmups", "1", "--budget", "0.01",
            "-c", "all-reduce", "--mesh", "data=1,model=4")  # fmt: skip
    doc = bench(*args[2:])
    assert [a["name"] for a in doc["axes"]] == ["model"] and {c["axis"] for c in doc["results"]} == {"model"}
    assert doc["environment"]["axes_note"] == "data: one device along it, nothing to exchange, not measured"
    text = run_devctl(*args, env=cpu_env())
    assert text.returncode == 0, text.stderr
    assert "Note: data: one device along it, nothing to exchange, not measured" in " ".join(text.stdout.split())
    assert bench(*SMALL, "-c", "all-reduce")["environment"]["axes_note"] is None  # the default mesh has no such axis


def test_one_device_has_nothing_to_measure():
    proc = run_devctl("bench", "collective", "--quick", env=cpu_env(1))
    assert_usage_error(proc, "one device here (cpu:0)", "at least 2 devices", "nothing to measure")


# ---- --distributed: two processes on 127.0.0.1, gloo ---------------------------------------------------------


def start_collective(index: int, n: int, port: int, *extra: str) -> subprocess.Popen:
    argv = [
        sys.executable, "-m", "devctl", "bench", "collective", "--distributed", "--coordinator", f"127.0.0.1:{port}",
        "--num-processes", str(n), "--process-id", str(index), *extra,
    ]  # fmt: skip
    return subprocess.Popen(argv, env=cpu_env(2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_processes_measure_intra_and_inter_host_axes_apart():
    port = free_port()
    procs = [start_collective(i, 2, port, *SMALL, "-c", "all-reduce,ppermute", "--timeout", "30", "--json") for i in range(2)]
    (rc0, out0, err0), (rc1, out1, err1) = finish(procs)
    assert rc0 == 0, err0
    assert rc1 == 0, err1
    assert out1 == ""  # process 0 prints the cluster's figures
    doc = json.loads(out0)
    validate_schema(doc, "bench.collective")
    assert doc["environment"]["process_count"] == 2 and len(doc["devices"]) == 4
    axes = {a["name"]: (a["size"], a["groups"], a["scope"]) for a in doc["axes"]}
    assert axes == {"hosts": (2, 2, "inter-host"), "local": (2, 2, "intra-host")}
    for axis in ("hosts", "local"):
        for name in ("all-reduce", "ppermute"):
            found = cells(doc, collective=name, axis=axis)
            assert len(found) == 2 and all(c["busbw_gbps"] > 0 for c in found), (axis, name)
    # Each process's own timing of the largest size of every collective and axis, gathered on process 0.
    assert sorted({h["process_index"] for h in doc["hosts"]}) == [0, 1]
    assert {(h["collective"], h["axis"], h["size_bytes"]) for h in doc["hosts"]} == {
        (c, a, 64 * KIB) for c in ("all-reduce", "ppermute") for a in ("hosts", "local")
    }


def test_a_process_alone_is_told_its_peers_never_joined():
    proc = start_collective(0, 2, free_port(), "--quick", "--timeout", "2")
    ((rc, out, err),) = finish([proc])
    assert rc == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "not every process joined" in lines[0] and "Traceback" not in err


@pytest.mark.parametrize(
    ("collective", "position", "pair", "right", "wrong"),
    [
        ("all-reduce", 0, None, [6] * 8, [1] * 8),  # the input back: no reduction
        ("reduce-scatter", 1, None, [6] * 4, [2] * 4),
        ("all-gather", 2, None, [1, 1, 2, 2, 3, 3], [3, 3, 2, 2, 1, 1]),  # the ranks' blocks out of order
        ("all-to-all", 0, None, [1, 1, 2, 2, 3, 3], [1, 1, 1, 1, 1, 1]),  # its own block kept
        ("ppermute", 0, None, [3] * 4, [1] * 4),  # rank 0 gets rank 2's block on a ring of 3
        ("ppermute-pair", 1, (0, 1), [1] * 4, [0] * 4),  # the destination got nothing
        ("ppermute-pair", 2, (0, 1), [0] * 4, [3] * 4),  # a device outside the pair kept its block
    ],
)
def test_every_collectives_verification_refuses_a_wrong_result(collective, position, pair, right, wrong):
    """Each collective's check, given the blocks of a 3-rank group whose inputs hold 1, 2 and 3, passes the right
    output block and refuses a wrong one."""
    import numpy as np

    from devctl.probe.bench_collective_ops import block_is_right

    values = [1, 2, 3]
    assert block_is_right(np, collective, position, values, np.asarray(right, dtype=np.float32), pair)
    assert not block_is_right(np, collective, position, values, np.asarray(wrong, dtype=np.float32), pair)


_NOTHING_MOVED = r"""
import json
import jax, numpy as np
from devctl.probe.bench_collective_ops import build_mesh, compiled_collective, make_input, output_is_right
layout = build_mesh(jax, np, jax.devices(), (("data", 2), ("model", 7)))
seen = {}
for axis, n in (("data", 2), ("model", 7)):
    for collective in ("ppermute", "all-to-all", "all-reduce"):
        x = make_input(jax, layout, 14 * 8, "float32", axis)  # whole chunks for all-to-all on either axis
        out = compiled_collective(jax, layout, collective, axis, n, x)(x)
        seen[f"{collective} on {axis}"] = [output_is_right(np, layout, axis, collective, out), output_is_right(np, layout, axis, collective, x)]
print(json.dumps(seen))
"""


def test_a_collective_that_moved_nothing_is_refused_on_every_axis_of_a_mesh():
    """On 14 real CPU devices as a data=2 x model=7 mesh, each collective's real output passes and its input handed
    back unchanged (nothing moved) is refused, on both axes: the devices of a `data` group sit 7 apart in the mesh,
    where values taken from the mesh index once repeated (every group's devices held the same value)."""
    proc = subprocess.run([sys.executable, "-c", _NOTHING_MOVED], env=cpu_env(14), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen == {f"{c} on {a}": [True, False] for a in ("data", "model") for c in ("ppermute", "all-to-all", "all-reduce")}


def test_a_cell_skipped_on_one_process_alone_does_not_shift_the_agreed_questions():
    """Under --distributed every process asks process 0 the same questions in the same order. A cell skipped on one
    process alone (an exception after the collective ran) must not change how many it asks: the default sweep's
    stop is asked at every size, with or without a prediction."""
    from types import SimpleNamespace

    from devctl.probe.bench_collective import Bench, Series

    def questions(skip_second: bool) -> list:
        asked: list = []
        bench = Bench.__new__(Bench)
        bench.opts = SimpleNamespace(sizes_bytes=None, warmups=1, repeats=5, cell_cap_s=1e9, dtypes=("float32",))
        bench.agreement = SimpleNamespace(agree=lambda value: asked.append(value) or value)
        bench.sweep_notes = []
        made = iter(range(1, 100))

        def cell(collective, axis, size, dtype, **_):
            asked.append("room")  # _cell's own question (whether the size fits)
            n = next(made)
            skipped = skip_second and n == 2
            return m.CollectiveCell(collective, "d", 2, size, dtype, skipped=skipped, **({} if skipped else {"median_s": 1e-4 * n, "samples": 5}))

        bench._cell = cell
        series = Series()
        for size in m.DEFAULT_SIZES[:5]:
            bench._sweep_cell(series, "all-reduce", SimpleNamespace(name="d"), size, "float32")
        return asked

    everywhere, one_skipped = questions(False), questions(True)
    assert len(everywhere) == len(one_skipped) == 10
    assert [q == "room" for q in everywhere] == [q == "room" for q in one_skipped]


_SWEEP_STOPPED = r"""
import json
import jax, numpy as np
import devctl.probe.bench as engine
import devctl.probe.bench_collective as child
from devctl.model import bench_collective as m
events = []
child.emit = engine.emit = lambda event, **fields: events.append(dict(fields, event=event))
m.SWEEP_CELL_CAP_S = 1e-9  # every prediction is over it: each series stops after the two sizes it predicts from
bench = child.Bench(m.CollectiveOptions(repeats=2, warmups=1, budget_s=0.001), jax, np, child.Agreement())
bench.resolve()
bench.run()
print(json.dumps([e for e in events if e["event"] in ("plan", "cell", "dropped")], default=str))
"""


def test_a_sweep_stopped_early_takes_its_cells_out_of_the_progress_total():
    """The default sweep stops a collective where its next size would take too long: the child says how many planned
    cells will not run, so the progress bar's total ends where the cells do (a run once ended at 46/50)."""
    proc = subprocess.run([sys.executable, "-c", _SWEEP_STOPPED], env=cpu_env(4), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = json.loads(proc.stdout.splitlines()[-1])
    planned = next(e["cells"] for e in events if e["event"] == "plan")
    ran = sum(e["event"] == "cell" for e in events)
    dropped = [e["cells"] for e in events if e["event"] == "dropped"]
    collectives = len(m.CollectiveOptions().collectives)
    assert ran == 2 * collectives and len(dropped) == collectives and planned == ran + sum(dropped)


def test_the_progress_total_loses_the_cells_dropped(monkeypatch):
    """On a terminal: a `dropped` event takes its cells out of the bar's total, so a finished run reads n/n."""
    from devctl.render.bench import Progress

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with Progress(lambda event: "cell") as progress:
        progress.on_event({"event": "plan", "cells": 10})
        progress.on_event({"event": "cell"})
        progress.on_event({"event": "dropped", "cells": 4})
        task = progress._bar.tasks[0]
        assert (task.completed, task.total) == (1, 6)


def test_the_method_and_the_busbw_rule_are_said_on_request():
    """The method is for --verbose (and docs/bench.md), not every run: one `Method:` line with the busbw rule."""
    plain = run_devctl("bench", "collective", *SMALL, env=cpu_env())
    verbose = run_devctl("bench", "collective", *SMALL, "--verbose", env=cpu_env())
    assert plain.returncode == verbose.returncode == 0, plain.stderr + verbose.stderr
    assert "Method:" not in plain.stdout and "busbw = algbw" not in plain.stdout
    (method,) = [line for line in verbose.stdout.splitlines() if line.startswith("Method:")]
    assert "calibrated to last 20 ms" in method and "busbw = algbw x 2(n-1)/n for all-reduce" in method
