"""--baseline of `bench memory`, `bench matmul` and `bench collective`: the gate of `bench transfer` (its rule is
tested in test_units_bench.py) over each bench's cells, end to end on forced CPU devices, and the shared model."""

from __future__ import annotations

import json

import pytest
from conftest import assert_usage_error, devctl_env, run_devctl, validate_schema

from devctl.model.gate import Baseline, Figure, as_figure_pct, judge, noise_pct, pool

# Each command at its quickest, and what its cells are judged on.
COMMANDS = {
    "memory": (["bench", "memory", "--quick", "--repeats", "5"], "gbps", "GB/s"),
    "matmul": (["bench", "matmul", "--quick", "--dtype", "f32", "--repeats", "5"], "tflops", "TFLOP/s"),
    "collective": (["bench", "collective", "--quick", "--collective", "all-reduce", "--sizes", "4K,1M"], "busbw_gbps", "GB/s"),
}


def faster(doc: dict, value: str, factor: float) -> dict:
    """The run as if every cell had been `factor` times faster, with a tight spread: any rerun falls far below it."""
    out = json.loads(json.dumps(doc))
    for c in out["results"]:
        if c.get(value) is not None:
            c[value] *= factor
            c["median_s"] /= factor
            c["p10_s"], c["p90_s"] = c["median_s"] * 0.995, c["median_s"] * 1.005
    return out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_bench_gates_against_its_own_runs_and_names_what_fell(tmp_path, name):
    args, value, unit = COMMANDS[name]
    env = devctl_env(devices=2)
    first = run_devctl(*args, "--json", env=env)
    assert first.returncode == 0, first.stderr
    base = json.loads(first.stdout)
    (tmp_path / "base.json").write_text(json.dumps(base))
    (tmp_path / "fast.json").write_text(json.dumps(faster(base, value, 1000)))
    (tmp_path / "fast2.json").write_text(json.dumps(faster(base, value, 1010)))

    # Against itself at 99%: passes, says how many cells it judged, and the JSON carries the verdict.
    proc = run_devctl(*args, "--baseline", str(tmp_path / "base.json"), "--max-regression", "99%", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate_schema(doc, f"bench.{name}")
    gate = doc["gate"]
    assert gate["passed"] is True and gate["unit"] == unit and gate["gated"] >= 1 and gate["baseline_runs"] == 1
    assert "none fell more than 99% beyond its noise band" in proc.stderr

    # Against two runs 1000x faster, pooled: every judged cell fell, each named with its figure and band.
    proc = run_devctl(*args, "--baseline", str(tmp_path / "fast.json"), "--baseline", str(tmp_path / "fast2.json"), "--json", env=env)
    assert proc.returncode == 1, proc.stderr
    gate = json.loads(proc.stdout)["gate"]
    assert gate["passed"] is False and gate["baseline_runs"] == 2 and len(gate["regressions"]) == gate["gated"]
    assert all(r["change_pct"] < -10 and r["beyond_noise_pct"] > 10 for r in gate["regressions"]), gate
    assert f"(2 runs pooled): {gate['gated']} of {gate['gated']} cells fell more than 10%" in proc.stderr
    assert f" {unit}, -" in proc.stderr and "Traceback" not in proc.stderr
    if name == "collective":  # the 4K cells are latency: not judged, and counted
        assert gate["not_gated"] == 1 and "1 latency cells (64K and below) not gated" in proc.stderr
        assert [r["cell"] for r in gate["regressions"]] == ["all-reduce devices 1M float32"]


def test_a_baseline_of_another_bench_or_edited_is_one_line_exit_2(tmp_path):
    env = devctl_env(devices=1)
    (tmp_path / "other.json").write_text(json.dumps({"schema": "devctl.bench.transfer/2", "results": []}))
    assert_usage_error(run_devctl("bench", "matmul", "--baseline", str(tmp_path / "other.json"), env=env), "not a devctl bench matmul result")
    cell = {"device": "cpu:0", "size_bytes": 1 << 28, "gbps": 20.0, "samples": 5}  # no spread: cannot be judged honestly
    (tmp_path / "edited.json").write_text(json.dumps({"schema": "devctl.bench.memory/2", "results": [cell]}))
    assert_usage_error(run_devctl("bench", "memory", "--baseline", str(tmp_path / "edited.json"), env=env), "results[0]", "p10_s")
    assert_usage_error(run_devctl("bench", "collective", "--max-regression", "5%", env=env), "--max-regression needs --baseline")
    ok = {"device": "cpu:0", "size_bytes": 1 << 28, "gbps": 20.0, "samples": 5, "p10_s": 0.02, "median_s": 0.026, "p90_s": 0.03}
    (tmp_path / "elsewhere.json").write_text(json.dumps({"schema": "devctl.bench.memory/2", "results": [{**ok, "device": "cuda:7"}]}))
    proc = run_devctl("bench", "memory", "--quick", "--baseline", str(tmp_path / "elsewhere.json"), env=env)
    assert_usage_error(proc, "has no cell matching this run")


# ---- the shared model ----------------------------------------------------------------------------------------


def fig(key: str, value: float, noise: float = 0.02, samples: int = 10) -> Figure:
    """A cell whose median's confidence interval is +/- `noise` (a fraction)."""
    half = noise * samples**0.5 / (2 * 1.96 * 1.2533 / 2.563)
    return Figure(key, key, value, samples, 1 - half, 1.0, 1 + half)


def test_judge_uses_the_transfer_gates_band_and_pooling():
    assert fig("a", 1).noise_pct == pytest.approx(2.0) and noise_pct(10, None, 1.0, 2.0) is None
    base = Baseline("b", {"a": fig("a", 100), "b": fig("b", 100)})
    gate = judge([fig("a", 87), fig("b", 80)], base, 10, "GB/s")  # bands 3.9% of GB/s: -13% passes, -20% fails
    band = 2 * as_figure_pct(2.0)
    assert [r.cell for r in gate.regressions] == ["b"] and gate.regressions[0].beyond_noise_pct == pytest.approx(20 - band)
    # Three runs lying 20 apart widen the band to half that range (10% of their median 100).
    runs = [Baseline(n, {"b": fig("b", v)}) for n, v in (("r1", 90), ("r2", 100), ("r3", 110))]
    pooled = pool(runs)
    assert pooled.runs == 3 and pooled.figures["b"].value == 100 and pooled.run_spread_pct["b"] == pytest.approx(10.0)
    assert judge([fig("b", 80)], pooled, 10, "GB/s").passed  # -20% inside 10 + 2 + 10
    assert not judge([fig("b", 70)], pooled, 10, "GB/s").passed
    left_out = judge([fig("a", 1)], base, 10, "GB/s", lambda baseline: lambda f: "small")
    assert (left_out.compared, left_out.gated, left_out.not_gated, left_out.passed) == (1, 0, 1, True)
    assert left_out.left_out == {"small": 1}


def test_a_loaded_runs_slow_calls_cannot_hide_a_drop_its_fast_calls_show():
    from devctl.model.gate import run_noise_pct

    # Ten calls: the fast decile 5% under the median, the slow one 10x over it (a neighbour took the CPU).
    assert noise_pct(10, 0.95, 1.0, 10.0) > 100  # the median's interval alone would excuse any drop
    assert run_noise_pct(10, 0.95, 1.0, 10.0) == pytest.approx(100 / 0.95 - 100)  # 5.3%: what the fast calls show
    base = Baseline("b", {"a": fig("a", 100)})
    loaded = Figure("a", "a", 50, 10, 0.95, 1.0, 10.0)  # -50%
    gate = judge([loaded], base, 10, "GB/s")
    assert not gate.passed and gate.regressions[0].noise_pct == pytest.approx(as_figure_pct(2) + as_figure_pct(100 / 0.95 - 100))


def test_the_band_is_a_drop_in_the_figure_as_the_change_is():
    """A median's noise is a share of its time; the change is a share of the figure. A time 100% longer is a figure
    50% lower: a band of 64% on the times (a busy 2-core machine's --quick cells) once let a run at half the
    baseline's figure pass; as the figure's band (39%) it fails."""
    base = Baseline("b", {"a": Figure("a", "a", 100.0, 5, 1.0, 1.0, 1.0)})
    noisy_run = Figure("a", "a", 50.0, 5, 1.0, 1.64, 4.0)  # 2x slower; its median 64% over its fast decile
    assert noisy_run.run_noise_pct == pytest.approx(64.0)
    gate = judge([noisy_run], base, 10, "GB/s")
    (r,) = gate.regressions
    assert not gate.passed and r.noise_pct == pytest.approx(as_figure_pct(64.0)) and r.change_pct == pytest.approx(-50.0)


def test_a_band_too_wide_for_any_drop_to_fail_is_said_not_gated():
    """Noise that alone leaves no drop that could fail is counted as not gated, with why, not as a cell judged."""
    from devctl.model import bench_memory
    from devctl.render.gate import gate_lines

    base = Baseline("b", {"a": Figure("a", "a", 100.0, 3, 1.0, 20.0, 400.0)})  # the median 20x its fast decile
    gate = judge([Figure("a", "a", 1.0, 3, 1.0, 20.0, 400.0)], base, 10, "GB/s")
    assert (gate.gated, gate.left_out, gate.passed) == (0, {"noisy": 1}, True)
    assert gate_lines(gate, bench_memory.GATE)[-1].startswith("1 cells too noisy to gate: their noise band alone")
    # The allowance asked for is the user's to choose: 99% with a narrow band is still a gate.
    assert judge([fig("a", 100)], Baseline("b", {"a": fig("a", 100)}), 99, "GB/s").gated == 1


def test_cells_timed_another_way_in_the_baseline_are_not_compared():
    """A baseline from before bursts (no method: call by call) holds lower figures on an accelerator: not gated."""
    before = Baseline("b", {"a": Figure("a", "a", 100.0, 10, 0.99, 1.0, 1.01, None)})
    now = Figure("a", "a", 130.0, 10, 0.99, 1.0, 1.01, "burst")
    gate = judge([now], before, 10, "GB/s")
    assert (gate.compared, gate.gated, gate.left_out) == (1, 0, {"method": 1})
    pooled = pool([Baseline(n, {"a": Figure("a", "a", v, 10, 0.99, 1.0, 1.01, "burst")}) for n, v in (("r1", 100.0), ("r2", 101.0))])
    assert pooled.figures["a"].method == "burst" and judge([now], pooled, 10, "GB/s").gated == 1


def _memory_doc(**cell) -> dict:
    ok = {"device": "cpu:0", "size_bytes": 1 << 28, "gbps": 20.0, "samples": 5, "p10_s": 0.02, "median_s": 0.026, "p90_s": 0.03}
    return {"schema": "devctl.bench.memory/2", "results": [{**ok, **cell}], "devices": [{"name": "cpu:0", "device_kind": "cpu"}]}


def test_baselines_no_gate_can_trust_are_one_line_exit_2(tmp_path):
    env = devctl_env(devices=1)

    def refused(doc, *lines: str, text: str | None = None):
        path = tmp_path / "base.json"
        path.write_text(text if text is not None else json.dumps(doc))
        assert_usage_error(run_devctl("bench", "memory", "--quick", "--baseline", str(path), env=env), *lines)

    refused(None, "results[0] has bytes_moved 1000", "not a measured figure", text=json.dumps(_memory_doc()).replace('"gbps"', '"bytes_moved": ' + "1" + "0" * 400 + ', "gbps"'))  # fmt: skip
    refused(None, "results[0] has gbps nan, not a measured figure", text=json.dumps(_memory_doc()).replace("20.0", "NaN"))
    refused(_memory_doc(verified=False), "results[0] is a result that failed its verification")
    refused({"schema": "devctl.bench.memory/2", "results": {}}, "has no list of results")
    # Measured on another kind of device under the same name: refused once this run says what its devices are.
    other = _memory_doc()
    other["devices"][0]["device_kind"] = "NVIDIA H100 80GB HBM3"
    refused(other, "was measured on 'NVIDIA H100 80GB HBM3' (cpu:0), this run on 'cpu'", "record one on this machine")
