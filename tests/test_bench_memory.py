"""`devctl bench memory` against real CPU JAX with 4 forced devices, run as a user runs it."""

from __future__ import annotations

import csv
import io
import json

import pytest
from conftest import assert_usage_error, devctl_env, run_devctl, run_json, validate_schema

from devctl.model.bench import BURST_MIN_S
from devctl.probe.bench import MAX_CALLS, MIN_CALLS

MIB = 1 << 20
SMALL = ("--sizes", "1M,4M", "--repeats", "3", "--min-time", "0.005", "--warmups", "1")


def cpu_env(devices: int = 4) -> dict[str, str]:
    # CPU even on a GPU machine: these tests are about the method, not the hardware.
    return devctl_env(devices, JAX_PLATFORMS="cpu")


def bench(*args: str, devices: int = 4, expect_code: int = 0) -> dict:
    doc = run_json("bench", "memory", *args, env=cpu_env(devices), expect_code=expect_code)
    validate_schema(doc, "bench.memory")
    return doc


@pytest.fixture(scope="module")
def run() -> dict:
    return bench(*SMALL)


def test_every_device_at_every_size_with_its_statistics(run):
    assert run["schema"] == "devctl.bench.memory/2"
    assert [(c["device"], c["size_bytes"]) for c in run["results"]] == [
        (f"cpu:{i}", size) for i in range(4) for size in (MIB, 4 * MIB)
    ]
    for c in run["results"]:
        assert not c["skipped"] and c["verified"] is True
        assert c["bytes_moved"] == 2 * c["size_bytes"]  # read once, written once
        assert c["samples"] >= 3
        # Every sample is a burst of calls and one sync; the figures are per call, the single call's cost apart.
        assert MIN_CALLS <= c["calls_per_sample"] <= MAX_CALLS
        assert c["single_call_s"] > 0 and c["call_overhead_s"] >= 0
        assert c["min_s"] <= c["p10_s"] <= c["median_s"] <= c["p90_s"] <= c["max_s"]
        assert c["gbps"] == pytest.approx(c["bytes_moved"] / c["median_s"] / 1e9)
        assert c["peak_gbps"] == pytest.approx(c["bytes_moved"] / c["min_s"] / 1e9)
        # A CPU has no published peak: no roof, and no percentage of one.
        assert c["roof_gbps"] is None and c["pct_of_roof"] is None
    assert [d["name"] for d in run["devices"]] == [f"cpu:{i}" for i in range(4)]
    env = run["environment"]
    assert env["repeats"] == 3 and env["warmups"] == 1 and env["min_time_s"] == 0.005 and env["elapsed_s"] > 0
    assert env["burst_min_s"] == BURST_MIN_S
    assert "burst" in run["method"] and "after the last (x + the number of calls)" in run["method"]


def test_each_device_is_compared_with_its_peers_by_the_straggler_rule(run):
    """The per-device comparison, end to end on real figures: every device's best GB/s, the median of them, and the
    stragglers exactly as devctl.model.stragglers names them from those figures."""
    from devctl.model.stragglers import find_stragglers

    comp = run["comparison"]
    assert comp["metric"] == "copy" and comp["unit"] == "GB/s"
    assert comp["roof_name"] is None and "CPU" in comp["roof_reason"]
    best: dict[str, float] = {}
    fastest: dict[str, float] = {}
    for c in run["results"]:
        best[c["device"]] = max(best.get(c["device"], 0), c["gbps"])
        fastest[c["device"]] = max(fastest.get(c["device"], 0), c["peak_gbps"])
    figures = {f["device"]: f for f in comp["figures"]}
    assert set(figures) == set(best)
    for device, f in figures.items():
        assert f["value"] == pytest.approx(best[device])  # the best median: set against the roof and the others
        assert f["fastest"] == pytest.approx(fastest[device])  # the fastest call: the rule's second look
        assert f["roof"] is None and f["pct_of_roof"] is None
    on_fastest = {s.name for s in find_stragglers(fastest)}
    expected = [s.name for s in find_stragglers(best) if s.name in on_fastest]
    assert [s["name"] for s in comp["stragglers"]] == expected
    assert {d for d, f in figures.items() if f["straggler"]} == set(expected)


def test_a_slow_device_among_real_figures_is_named(run):
    """The real events of a run, with one device's copies made 20x slower (a device whose memory clocks dropped),
    assembled by the collector: that device is named, with its figure and the median. The rule widens its bar with
    the peers' scatter (3 x 1.4826 MADs), and their real figures at these small sizes scatter by 2x when the machine
    is busy (CI beside other jobs): the peers are set to their median here, each cell scaled whole and its fastest call
    put 5% above its median, so the test is of the collector naming the slow one, not of how quiet the machine was."""
    import statistics

    from devctl.collect.bench_memory import assemble
    from devctl.model import to_jsonable

    events = _events_of(run)
    cells = [e for e in events if e.get("event") == "cell"]
    for size in {e["size_bytes"] for e in cells}:
        at_size = [e for e in cells if e["size_bytes"] == size]
        typical = statistics.median(e["gbps"] for e in at_size if e["device"] != "cpu:2")
        for e in at_size:
            factor = (0.05 * typical if e["device"] == "cpu:2" else typical) / e["gbps"]
            for key in ("min_s", "p10_s", "median_s", "p90_s", "max_s", "mean_s"):
                e[key] /= factor
            e["gbps"] *= factor
            e["peak_gbps"] = e["gbps"] * 1.05  # else one lucky call of a busy run decides the fastest-call side
            e["min_s"] = e["median_s"] / 1.05
    report = assemble(events)
    named = [s.name for s in report.comparison.stragglers]
    assert "cpu:2" in named
    slow = next(s for s in report.comparison.stragglers if s.name == "cpu:2")
    assert slow.deviation_pct > 90 and slow.value < slow.median
    validate_schema({"schema": report.schema, **{k: v for k, v in to_jsonable(report).items() if k != "schema"}}, "bench.memory")


def _events_of(doc: dict) -> list[dict]:
    """A report's probe events again: the plan, a cell per result, done."""
    plan = {"event": "plan", "devices": doc["devices"], "environment": doc["environment"], "cells": len(doc["results"])}
    return [plan, *({"event": "cell", **c} for c in doc["results"]), {"event": "done", "elapsed_s": 1.0}]


def test_device_subset_and_csv():
    proc = run_devctl("bench", "memory", *SMALL[:1], "4M", *SMALL[2:], "--device", "1,cpu:3", "--csv", env=cpu_env())
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [(r["device"], r["size_bytes"]) for r in rows] == [("cpu:1", str(4 * MIB)), ("cpu:3", str(4 * MIB))]
    assert all(float(r["gbps"]) > 0 and r["verified"] == "True" for r in rows)
    assert all(int(r["calls_per_sample"]) >= MIN_CALLS and float(r["call_overhead_s"]) >= 0 for r in rows)


def test_table_names_the_roof_and_the_rule_and_the_method_with_verbose():
    args = ("bench", "memory", "--sizes", "1M", "--repeats", "3", "--min-time", "0", "--device", "0,1")
    proc = run_devctl(*args, "--verbose", env=cpu_env())
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "devctl bench memory" in out and "Memory: best median GB/s per device, bars against the fastest device" in out
    assert "Roof, memory: none; no published peak for a CPU device" in out
    assert "Rule: a device is a straggler" in out and "Method: y = x + 1" in out
    assert "Per call: launch + sync " in out and "not in the figures above" in out
    # One device: its figures, the roof and the overhead; no peers to compare, no method unless asked.
    one = run_devctl(*args[:-1], "0", env=cpu_env())
    assert one.returncode == 0, one.stderr
    assert "Memory: best median" not in one.stdout and "Stragglers" not in one.stdout and "peers" not in one.stdout
    assert "Method:" not in one.stdout and "Rule:" not in one.stdout and "Roof, memory: none" in one.stdout


def test_a_size_the_machine_cannot_hold_is_skipped_with_a_note():
    doc = bench("--sizes", "1M,900G", "--repeats", "3", "--min-time", "0", "--device", "0")
    big = [c for c in doc["results"] if c["size_bytes"] == 900 << 30]
    assert len(big) == 1 and big[0]["skipped"] and big[0]["gbps"] is None and big[0]["samples"] == 0
    assert "needs about" in big[0]["note"] and "host memory" in big[0]["note"]
    small = [c for c in doc["results"] if c["size_bytes"] == MIB]
    assert small[0]["verified"] is True


def test_one_device_has_no_peers():
    doc = bench("--sizes", "1M", "--repeats", "3", "--min-time", "0", devices=1)
    comp = doc["comparison"]
    assert len(comp["figures"]) == 1 and comp["stragglers"] == [] and comp["figures"][0]["vs_median_pct"] is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--sizes", "abc"), "--sizes"),
        (("--sizes", "2"), "at least 4 bytes"),
        (("--sizes", "4T"), "more than 1T"),
        (("--sizes", "1M,,2M"), "empty entry"),
        (("--device", "x"), "is not a device id"),
        (("--repeats", "0"), "--repeats"),
        (("--min-time", "-1"), "--min-time"),
        (("--timeout", "0"), "--timeout"),
        (("--json", "--csv"), "exclusive"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    assert_usage_error(run_devctl("bench", "memory", *args, env=cpu_env()), needle)


def test_an_unknown_device_is_named_by_the_child():
    proc = run_devctl("bench", "memory", "--sizes", "1M", "--device", "7", env=cpu_env())
    assert_usage_error(proc, "unknown device id 7", "0, 1, 2, 3")


def test_json_is_one_document():
    proc = run_devctl("bench", "memory", "--sizes", "1M", "--repeats", "3", "--min-time", "0", "--device", "0", "--json", env=cpu_env())
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["schema"] == "devctl.bench.memory/2"


# ---- bursts: how a sample is built, and that its calls all ran ------------------------------------------------


_BURSTS = r"""
import json, jax
from devctl.probe.bench_memory import Copy
from devctl.probe.bench import burst
copy = Copy(jax, jax.devices()[1], 1 << 16)
pointers = {b.unsafe_buffer_pointer() for b in copy.bufs}
first = (copy.last_problem() is None)
burst(copy, 7)
burst(copy, 3)
out = {"first": first, "calls": copy.calls, "ran": (copy.last_problem() is None), "in_place": copy.in_place,
       "max_burst": copy.max_burst, "same_buffers": {b.unsafe_buffer_pointer() for b in copy.bufs} == pointers,
       "on": copy.bufs[0].devices() == {jax.devices()[1]} and copy.bufs[1].devices() == {jax.devices()[1]}}
copy.calls += 1  # as if a call had been skipped (or two merged into one): the array is one short
out["one_short"] = (copy.last_problem() is None)
copy.calls -= 1
copy.bufs[0] = copy.bufs[0].at[12345].add(1)  # one element of the last result wrong
out["one_wrong"] = (copy.last_problem() is None)
print(json.dumps(out))
"""


def test_the_calls_of_a_burst_each_read_the_last_result_and_all_ran():
    """A burst on a real CPU device: 1 + 7 + 3 calls leave x + 11 in the array, in the same two buffers (each call
    read what the one before wrote, into the donated other), on the device asked; one call fewer than counted is
    caught, as is one wrong element."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _BURSTS], env=cpu_env(2), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["first"] is True and out["calls"] == 11 and out["ran"] is True
    assert out["in_place"] is True and out["max_burst"] is None and out["same_buffers"] is True
    assert out["on"] is True
    assert out["one_short"] is False and out["one_wrong"] is False


def test_the_burst_length_is_calibrated_to_the_target():
    """K: the first length tried whose burst lasts the target, growing from MIN_CALLS by what the last burst took
    (at least 2x, at most 16x a try), never past the limit. Fake bursts: no wall time involved."""
    from devctl.probe.bench import choose_calls

    def calls_for(per_call_s: float, limit: int = MAX_CALLS) -> tuple[int, list[int]]:
        tried: list[int] = []

        def run(k: int) -> float:
            tried.append(k)
            return k * per_call_s

        return choose_calls(run, limit, target_s=0.02), tried

    assert calls_for(0.03) == (2, [2, 2])  # a call past the target: a burst of two, no shorter (and again, warm)
    assert calls_for(0.004) == (6, [2, 6, 6])  # 2 calls 8 ms: aim at 20 ms (x 1.2): 6 calls, 24 ms twice
    k, tried = calls_for(1e-4)  # 2 calls 0.2 ms: 16x at most, then aimed
    assert tried == [2, 32, 240, 240] and k == 240 and k * 1e-4 >= 0.02
    assert calls_for(1e-7) == (MAX_CALLS, [2, 32, 512, MAX_CALLS])  # the host's dispatch, not the chip: capped
    assert calls_for(0.0) == (MAX_CALLS, [2, 32, 512, MAX_CALLS])  # no measurable time (a clock too coarse)
    assert calls_for(1e-4, limit=2) == (2, [2])  # a backend that ignored a donation: two calls at most

    # A first burst that paid for what the later ones reuse (its results' first allocation) does not fix K.
    first: list[int] = []

    def cold_then_warm(k: int) -> float:
        first.append(k)
        return 0.025 if len(first) == 1 else k * 6.7e-4  # an H200's 1 GiB on-device copy: 0.67 ms a call, warm
    assert choose_calls(cold_then_warm, 8, target_s=0.02) == 8 and first[:2] == [2, 2]


def test_long_warm_ups_keep_the_watchdog_told(monkeypatch):
    """Warm-ups are work too: while many of them run (here 2 cells x 20 calls of 10 ms), the engine tells the parent's
    watchdog every HEARTBEAT_S, or a healthy child would be killed as a hung one before its first timed call."""
    import time

    import devctl.probe.bench as engine
    from devctl.model.bench import ChipOptions

    calls: list[int] = []
    ticks_after: list[int] = []  # calls made when each tick was sent
    monkeypatch.setattr(engine, "emit", lambda event, **_: event == "tick" and ticks_after.append(len(calls)))
    monkeypatch.setattr(engine, "HEARTBEAT_S", 0.02)

    class Slow:
        def block_until_ready(self):
            time.sleep(0.01)
            return self

    def call():
        calls.append(1)
        return Slow()

    engine.time_interleaved({"a": call, "b": call}, ChipOptions(repeats=2, min_time_s=0.0, warmups=20))
    assert any(n < 40 for n in ticks_after), ticks_after  # some before the 40 warm-ups were over


def test_a_child_that_breaks_mid_run_says_why_in_one_error_event(monkeypatch):
    """What no cell caught (a backend lost mid-run) is one `error` event with its first line, and exit 1: never a
    traceback the parent cannot read."""
    from types import SimpleNamespace

    import devctl.probe.bench as engine

    events: list[tuple[str, dict]] = []
    monkeypatch.setattr(engine, "emit", lambda event, **fields: events.append((event, fields)))
    monkeypatch.setattr(engine, "read_request", lambda: {})

    def body(opts, jax, np):
        raise RuntimeError("INTERNAL: the device was lost\nmore detail")

    assert engine.run_child(SimpleNamespace(from_request=lambda request: request), body) == 1
    assert events == [("error", {"kind": "backend", "message": "RuntimeError: INTERNAL: the device was lost"})]


def test_a_process_0_that_never_answers_is_named():
    """Under --distributed a process waits for process 0's choice a bounded time, then stops with a line naming it."""
    from types import SimpleNamespace

    from devctl.probe.bench import ChildProblem
    from devctl.probe.bench_collective import Agreement

    def never(key, wait_ms):
        raise RuntimeError(f"DEADLINE_EXCEEDED: {key} not found after {wait_ms} ms")

    agreement = Agreement(SimpleNamespace(blocking_key_value_get=never), me=1, n=2, timeout_s=1)
    with pytest.raises(ChildProblem, match=r"process 0 gave no answer within 121 s .*DEADLINE_EXCEEDED"):
        agreement.agree(True)


def test_a_cell_s_figures_are_per_call_and_its_overhead_is_paired_and_never_negative():
    from devctl.probe.bench import Timing, burst_limit

    t = Timing(10, per_call=[1.0e-3, 1.1e-3, 0.9e-3], single=[1.3e-3, 1.3e-3, 1.2e-3], extra=[0.3e-3, 0.2e-3, 0.3e-3])
    st = t.stats()
    assert st["calls_per_sample"] == 10 and st["median_s"] == pytest.approx(1.0e-3) and st["min_s"] == pytest.approx(0.9e-3)
    assert st["single_call_s"] == pytest.approx(1.3e-3) and st["call_overhead_s"] == pytest.approx(0.3e-3)
    # Single calls no slower than a burst's (a long call on a noisy machine): 0, not a negative cost.
    assert Timing(2, [5e-3], [4.9e-3], [-0.1e-3]).stats()["call_overhead_s"] == 0
    assert Timing(2).stats()["median_s"] is None and Timing(2).stats()["call_overhead_s"] is None
    assert burst_limit(object()) == MAX_CALLS
    # Single calls: the first 3 always, then while they add at most a quarter to the bursts' time, 50 at most.
    long = Timing(2, single=[0.02] * 3)
    assert not long.wants_single(0.2) and long.wants_single(0.24)
    assert Timing(2).wants_single(0.0) and not Timing(500, single=[1e-4] * 50).wants_single(100.0)
    assert burst_limit(type("NoDonation", (), {"max_burst": MIN_CALLS})()) == MIN_CALLS


def test_a_child_that_falls_silent_is_killed_and_the_line_says_where(tmp_path):
    """--timeout is how long the child may say nothing: past it, one line says so, how long, and its last event."""
    proc = run_devctl("bench", "memory", "--quick", "--timeout", "0.2", env=devctl_env(1))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "said nothing for 0.2 s and was killed (--timeout; " in line, line
