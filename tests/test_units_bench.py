"""`devctl bench transfer`'s pure logic, imported directly: the regression gate, the fastest paths, the
host-memory estimate, the statistics, the probe child's plan of cells, the roof verdict (a cell above its roof
is suspect), and the text view's rules for one device and suspect cells.

The end-to-end tests (tests/test_bench_transfer.py) run all of this once through real CPU JAX; here each rule
gets its edge cases, and the planning gets the machines CPU JAX cannot be (8 GPUs, one device, devices
short of memory) as data. Nothing here imports jax or starts a process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import devctl_env

from devctl.model import bench_transfer as m
from devctl.model import gate
from devctl.model.bench_transfer import Cell, TransferOptions, fastest_paths, host_bytes_needed
from devctl.model.timing import single_timing

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def cell(direction="h2d", variant="pageable", size=4 * KIB, src="host", dst="cpu:0", gbps=10.0, layout="single", **kw) -> Cell:
    return Cell(direction, variant, layout, size, src, dst, gbps=gbps, **kw)


# ---- the regression gate ------------------------------------------------------------------------------


# The ~95% confidence interval of a median, per unit of p10-p90 spread over the median, times sqrt(samples).
CI_PER_SPREAD = 1.96 * 1.2533 / 2.563


def timed(size=16 * MIB, median_s=1e-3, noise=0.05, samples=10, **kw) -> Cell:
    """A measured cell whose median's confidence interval is +/- `noise` (a fraction): its p10 and p90 placed so."""
    gbps = size / median_s / 1e9
    half = noise * samples**0.5 / (2 * CI_PER_SPREAD)  # half the p10-p90 spread, a fraction of the median
    p10, p90 = median_s * (1 - half), median_s * (1 + half)
    return cell(size=size, gbps=gbps, samples=samples, p10_s=p10, median_s=median_s, p90_s=p90, **kw)


def slower(c: Cell, factor: float, noise: float = 0.05) -> Cell:
    """The same cell measured again, its median time `factor` times the first's."""
    assert c.median_s is not None
    return timed(c.size_bytes, c.median_s * factor, noise, direction=c.direction, variant=c.variant, src=c.src, dst=c.dst, layout=c.layout)


def baseline(*cells: Cell, name: str = "b") -> gate.Baseline:
    return gate.Baseline(name, {c.key: m.gate_figure(c) for c in cells})


def compare_with_baseline(cells, base: gate.Baseline, pct: float, all_sizes: bool = False) -> gate.Gate:
    return gate.judge([m.gate_figure(c) for c in cells], base, pct, "GB/s", m.gate_rule, all_sizes=all_sizes)


def left_out(g: gate.Gate, why: str) -> int:
    return g.left_out.get(why, 0)


def fig(*cells: Cell) -> list[gate.Figure]:
    return [m.gate_figure(c) for c in cells]


# A path as CPU JAX measures it with --quick: 30 us of fixed cost, then 12.5 GB/s.
SMALL = timed(4 * KIB, 30e-6 + 4 * KIB / 12.5e9)
LARGE = timed(16 * MIB, 30e-6 + 16 * MIB / 12.5e9)


def test_fixed_cost_is_where_the_line_through_the_smallest_and_largest_sizes_meets_zero_bytes():
    mid = timed(MIB, 5e-3)  # a middle size does not move the estimate
    (cost,) = m.fixed_costs_s(fig(SMALL, mid, LARGE)).values()
    assert cost == pytest.approx(30e-6)
    # Small sizes faster per byte than the large one (a cache) would put the line below zero: no fixed cost.
    assert list(m.fixed_costs_s(fig(timed(4 * KIB, 1e-7), timed(16 * MIB, 1e-2))).values()) == [0.0]
    # One size cannot tell fixed cost from bytes.
    assert list(m.fixed_costs_s(fig(LARGE)).values()) == [None]
    # Each path has its own: another direction is another line.
    d2h = [timed(s, t, direction="d2h", variant="copy", src="cpu:0", dst="host") for s, t in ((4 * KIB, 5e-6), (16 * MIB, 1e-3))]
    assert len(m.fixed_costs_s(fig(SMALL, LARGE, *d2h))) == 2


def test_noise_is_the_confidence_interval_of_the_median_from_its_samples_spread_and_count():
    # p10-p90 of 1.8-2.2 ms around 2 ms: sigma = 0.4 ms / 2.563; the median of 10 samples is within
    # 1.96 x 1.2533 x sigma / sqrt(10) of the truth 95% of the time: +/- 6.06%.
    c = cell(size=16 * MIB, samples=10, p10_s=1.8e-3, median_s=2e-3, p90_s=2.2e-3)
    assert m.gate_figure(c).noise_pct == pytest.approx(1.96 * 1.2533 * (0.4 / 2.563) / 10**0.5 / 2 * 100)
    # Four times the samples halve it; the same spread is the same noise at any median.
    four = cell(size=16 * MIB, samples=40, p10_s=1.8e-3, median_s=2e-3, p90_s=2.2e-3)
    assert m.gate_figure(four).noise_pct == pytest.approx(m.gate_figure(c).noise_pct / 2)
    assert m.gate_figure(timed(median_s=3e-3, noise=0.1)).noise_pct == pytest.approx(10.0)
    assert m.gate_figure(cell()).noise_pct is None  # no samples' figures


def test_only_bandwidth_bound_cells_are_gated_and_the_rest_are_counted():
    gate = compare_with_baseline([SMALL, LARGE], baseline(SMALL, LARGE), 10)
    assert gate.passed and (gate.compared, gate.gated, left_out(gate, "latency-bound"), left_out(gate, "one-size")) == (2, 1, 1, 0)
    # The 4K cell at ten times its time would fail if it were judged; it is not, unless asked.
    now = [slower(SMALL, 10), LARGE]
    assert compare_with_baseline(now, baseline(SMALL, LARGE), 10).passed
    every = compare_with_baseline(now, baseline(SMALL, LARGE), 10, all_sizes=True)
    assert not every.passed and (every.gated, left_out(every, "latency-bound"), every.all_sizes) == (2, 0, True)
    assert [r.cell for r in every.regressions] == ["h2d pageable single 4K host->cpu:0"]


def test_boundness_is_decided_by_the_baseline_not_by_this_run():
    """Every rerun judges the same cells, however its own small sizes came out."""
    now = [slower(SMALL, 100), slower(LARGE, 2)]
    gate = compare_with_baseline(now, baseline(SMALL, LARGE), 10)
    assert (gate.gated, left_out(gate, "latency-bound")) == (1, 1) and [r.cell for r in gate.regressions] == ["h2d pageable single 16M host->cpu:0"]


def test_a_path_measured_at_one_size_is_not_gated_unless_asked():
    gate = compare_with_baseline([LARGE], baseline(LARGE), 10)
    assert (gate.compared, gate.gated, left_out(gate, "one-size")) == (1, 0, 1)
    assert compare_with_baseline([LARGE], baseline(LARGE), 10, all_sizes=True).gated == 1


def test_a_drop_inside_the_noise_band_plus_the_allowance_passes():
    # Noise band: 5% + 5% on the times, 4.76% + 4.76% on GB/s; allowed: 10% beyond it. Bandwidth 1/1.2 of the
    # baseline's is a drop of 16.7%.
    assert compare_with_baseline([SMALL, slower(LARGE, 1.2)], baseline(SMALL, LARGE), 10).passed
    (r,) = compare_with_baseline([SMALL, slower(LARGE, 1.3)], baseline(SMALL, LARGE), 10).regressions
    assert r.change_pct == pytest.approx(-100 * 0.3 / 1.3)  # -23.1%
    band = 2 * gate.as_figure_pct(5.0)  # 9.52%
    assert r.noise_pct == pytest.approx(band) and r.beyond_noise_pct == pytest.approx(100 * 0.3 / 1.3 - band)
    assert r.baseline == LARGE.gbps and r.value == pytest.approx(LARGE.gbps / 1.3)


def test_a_noisy_baseline_widens_the_band_and_a_noisy_rerun_too():
    noisy = timed(16 * MIB, LARGE.median_s, noise=0.4)
    assert compare_with_baseline([SMALL, slower(LARGE, 1.6)], baseline(SMALL, noisy), 10).passed  # -37.5%, band 45%
    assert compare_with_baseline([SMALL, slower(LARGE, 1.6, noise=0.4)], baseline(SMALL, LARGE), 10).passed
    assert not compare_with_baseline([SMALL, slower(LARGE, 1.6)], baseline(SMALL, LARGE), 10).passed


def test_pooled_runs_take_the_median_of_their_figures_and_how_far_their_medians_lay_apart():
    fast, mid, slow = (baseline(SMALL, slower(LARGE, f), name=n) for f, n in ((1.0, "a"), (1.1, "b"), (1.3, "c")))
    pool = gate.pool([fast, mid, slow])
    assert (pool.name, pool.runs) == ("a, b, c", 3)
    big = pool.figures[LARGE.key]
    assert big.median_s == pytest.approx(LARGE.median_s * 1.1) and big.value == pytest.approx(LARGE.gbps / 1.1)
    assert big.noise_pct == pytest.approx(5.0) and big.samples == 10
    # Half the range of the runs' GB/s (1/1 to 1/1.3 of the fastest's), in percent of their median (1/1.1).
    assert pool.run_spread_pct[LARGE.key] == pytest.approx((1 - 1 / 1.3) / 2 * 1.1 * 100)  # 12.7%
    # A rerun where the slowest earlier run landed (-23% against the fastest) is no regression against the pool,
    # whose band holds how far its runs lay apart; against the fastest run alone it is one.
    rerun = [SMALL, slower(LARGE, 1.3)]
    assert not compare_with_baseline(rerun, fast, 10).passed
    judged = compare_with_baseline(rerun, pool, 10)
    assert judged.passed and judged.baseline_runs == 3
    # Pooling hides no real slowdown: 1.4x slower than the pool's median (-29%) is beyond 12.7% + 5% + 10%.
    assert not compare_with_baseline([SMALL, slower(LARGE, 1.1 * 1.4)], pool, 10).passed
    assert gate.pool([fast]) is fast


def test_the_allowance_is_inclusive_and_zero_fails_any_drop_past_the_band():
    # A drop exactly the band plus the allowance is allowed.
    base = baseline(SMALL, LARGE)
    band = 2 * gate.as_figure_pct(5.0)  # each median's 5% (of its time) is 4.76% of its GB/s
    exact = timed(16 * MIB, LARGE.median_s / (1 - (band + 10) / 100))  # -19.5%: 9.5 points of band, 10 allowed
    assert compare_with_baseline([exact], base, 10).passed
    assert not compare_with_baseline([exact], base, 9.9).passed
    assert not compare_with_baseline([slower(LARGE, 1.12)], base, 0).passed  # -10.7%, band 9.5%
    assert compare_with_baseline([slower(LARGE, 1.1)], base, 0).passed  # -9.1%, inside the band
    assert compare_with_baseline([slower(LARGE, 0.2)], base, 0).passed  # faster is never a regression


def test_gate_matches_cells_by_every_part_of_their_key():
    """Same size and direction but another variant, layout, source or destination is another cell."""
    others = [
        timed(16 * MIB, 1.0, variant="pinned"),
        timed(16 * MIB, 1.0, layout="sharded"),
        timed(16 * MIB, 1.0, dst="cpu:1"),
        timed(16 * MIB, 1.0, direction="d2h", src="cpu:0", dst="host"),
        timed(8 * MIB, 1.0),
    ]
    judged = compare_with_baseline(others, baseline(SMALL, LARGE), 10)
    # None compared; the baseline's gated cell is not in the run: absent, a regression (SMALL is latency-bound).
    assert judged.compared == 0 and [(r.cell, r.absent) for r in judged.regressions] == [("h2d pageable single 16M host->cpu:0", True)]


def test_a_gated_cell_that_measured_nothing_now_has_regressed_whatever_the_noise():
    large2 = timed(64 * MIB, 4 * LARGE.median_s)
    now = [cell(size=16 * MIB, gbps=None, zero_copy=True), cell(size=64 * MIB, gbps=None, skipped=True, note="out of memory")]
    gate = compare_with_baseline(now, baseline(SMALL, LARGE, large2), 50)
    assert not gate.passed and gate.gated == 2
    assert [(r.cell, r.value, r.change_pct, r.noise_pct) for r in gate.regressions] == [
        ("h2d pageable single 16M host->cpu:0", None, None, None), ("h2d pageable single 64M host->cpu:0", None, None, None)
    ]  # fmt: skip


def test_gate_lists_regressions_in_the_order_of_the_run_and_its_band_range():
    sizes = [64 * MIB, 16 * MIB, 256 * MIB]
    base = baseline(SMALL, *(timed(s, s / 12.5e9) for s in sizes))
    judged = compare_with_baseline([timed(s, 2 * s / 12.5e9, noise=0.01 * i) for i, s in enumerate(sizes, 1)], base, 10)
    assert [r.cell.split()[3] for r in judged.regressions] == ["64M", "16M", "256M"]
    f = gate.as_figure_pct
    assert (judged.min_noise_pct, judged.max_noise_pct) == (pytest.approx(f(5.0) + f(1.0)), pytest.approx(f(5.0) + f(3.0)))


def test_gate_lines_say_what_fell_how_far_past_its_noise_and_what_was_not_gated():
    from devctl.render.gate import gate_lines as lines_of

    def gate_lines(g: gate.Gate) -> list[str]:
        return lines_of(g, m.GATE)

    base = baseline(SMALL, LARGE, timed(64 * MIB, 4 * LARGE.median_s), name="runs/a100.json")
    now = [SMALL, slower(LARGE, 1.3), cell(size=64 * MIB, gbps=None, zero_copy=True)]
    lines = gate_lines(compare_with_baseline(now, base, 10))
    assert lines == [
        "baseline runs/a100.json: 2 of 2 bandwidth-bound cells fell more than 10% beyond its noise band:",
        f"  h2d pageable single 16M host->cpu:0: {LARGE.gbps / 1.3:.3g} GB/s, -23% vs {LARGE.gbps:.3g} GB/s (noise band ±10%: 14 points beyond it)",
        f"  h2d pageable single 64M host->cpu:0: no bandwidth now (zero-copy or skipped), baseline {LARGE.gbps:.3g} GB/s",
        "1 latency-bound cells not gated; --gate-all-sizes gates them",
    ]
    large2 = timed(64 * MIB, 4 * LARGE.median_s)
    ok = gate_lines(compare_with_baseline([SMALL, slower(LARGE, 1.1), large2], base, 10))
    assert ok == [
        "baseline runs/a100.json: 2 bandwidth-bound cells gated, none fell more than 10% beyond its noise band (noise band ±10%)",
        "1 latency-bound cells not gated; --gate-all-sizes gates them",
    ]
    # A cell the baseline has and this run has not (a device gone, a size no longer measured) is named, and fails.
    lost = gate_lines(compare_with_baseline([SMALL, LARGE], base, 10))
    assert lost[:2] == [
        "baseline runs/a100.json: 1 of 2 bandwidth-bound cells fell more than 10% beyond its noise band:",
        f"  h2d pageable single 64M host->cpu:0: not in this run (the baseline has it), baseline {large2.gbps:.3g} GB/s",
    ]
    one = gate_lines(compare_with_baseline([LARGE], baseline(LARGE, name="b"), 10, all_sizes=False))
    assert one[-1].startswith("1 cells not gated: their path was measured at one size")
    every = gate_lines(compare_with_baseline([SMALL, LARGE, large2], base, 10, all_sizes=True))
    assert every == ["baseline runs/a100.json: 3 cells gated, none fell more than 10% beyond its noise band (noise band ±10%)"]


# ---- the fastest paths --------------------------------------------------------------------------------


def test_fastest_is_the_best_variant_at_the_largest_size_per_direction_and_layout():
    cells = [
        cell(variant="pageable", size=MIB, gbps=30.0),  # faster, but not at the largest size
        cell(variant="pageable", size=64 * MIB, gbps=12.0),
        cell(variant="pinned", size=64 * MIB, gbps=25.0),
        cell(variant="pageable", size=64 * MIB, gbps=40.0, layout="sharded", dst="cpu:all"),
        cell(direction="d2h", variant="copy", size=16 * MIB, src="cpu:0", dst="host", gbps=7.0),
    ]
    got = {(f.direction, f.layout): f for f in fastest_paths(cells)}
    assert set(got) == {("h2d", "single"), ("h2d", "sharded"), ("d2h", "single")}
    assert (got["h2d", "single"].variant, got["h2d", "single"].gbps, got["h2d", "single"].size_bytes) == ("pinned", 25.0, 64 * MIB)
    assert got["h2d", "sharded"].variant == "pageable" and got["d2h", "single"].size_bytes == 16 * MIB


def test_fastest_never_names_a_cell_whose_bytes_arrived_changed():
    cells = [cell(variant="pinned", gbps=90.0, verified=False), cell(variant="pageable", gbps=10.0, verified=True)]
    (f,) = fastest_paths(cells)
    assert f.variant == "pageable" and f.gbps == 10.0


def test_fastest_ignores_skipped_cells_when_choosing_the_largest_size():
    cells = [cell(size=MIB, gbps=10.0), cell(size=GIB, gbps=None, skipped=True, note="skipped: out of memory")]
    (f,) = fastest_paths(cells)
    assert f.size_bytes == MIB and f.variant == "pageable"


def test_fastest_names_zero_copy_variants_and_says_when_nothing_moved():
    cells = [cell(variant="aligned", gbps=None, zero_copy=True), cell(variant="pageable", gbps=5.0)]
    (f,) = fastest_paths(cells)
    assert f.variant == "pageable" and f.zero_copy_variants == ("aligned",)
    (f,) = fastest_paths([cell(variant="aligned", gbps=None, zero_copy=True)])
    assert f.variant is None and f.gbps is None and f.note == "every variant was zero-copy here: no bytes move"
    (f,) = fastest_paths([cell(gbps=None, verified=False)])
    assert f.variant is None and f.note == "nothing measured at this size"


def test_fastest_carries_the_roof_of_the_chosen_cell():
    c = cell(gbps=50.0, roof="pcie", roof_gbps=63.0, pct_of_roof=79.4)
    (f,) = fastest_paths([c])
    assert (f.roof, f.roof_gbps, f.pct_of_roof) == ("pcie", 63.0, 79.4)


def pcie_cell(direction="h2d", variant="pageable", gbps=6.9, size=GIB, dev="cuda:0", **kw) -> Cell:
    src, dst = ("host", dev) if direction == "h2d" else (dev, "host")
    pct, suspect = m.roof_verdict(gbps, "pcie", 63.0)
    return cell(direction, variant, size, src, dst, gbps=gbps, roof="pcie", roof_gbps=63.0, pct_of_roof=pct, suspect=suspect, **kw)


def test_fastest_lists_every_other_variant_measured_there_fastest_first():
    cells = [pcie_cell(variant="pageable", gbps=6.9), pcie_cell(variant="aligned", gbps=6.3), pcie_cell(variant="pinned", gbps=49.5),
             pcie_cell(variant="pinned", gbps=60.0, size=MIB)]  # fmt: skip
    (f,) = fastest_paths(cells)
    assert (f.variant, f.gbps) == ("pinned", 49.5)
    assert [(o.variant, o.gbps) for o in f.others] == [("pageable", 6.9), ("aligned", 6.3)]
    assert f.others[0].pct_of_roof == pytest.approx(100 * 6.9 / 63.0)
    # Several devices: each variant by its best cell, never twice.
    two = [pcie_cell(variant="pinned", gbps=49.0, dev="cuda:1"), *cells]
    (f,) = fastest_paths(two)
    assert f.gbps == 49.5 and [o.variant for o in f.others] == ["pageable", "aligned"]


def test_advice_names_the_pinned_path_when_it_leaves_the_plain_call_far_behind():
    h2d, d2h = fastest_paths([pcie_cell(variant="pageable", gbps=6.9), pcie_cell(variant="pinned", gbps=49.5),
                              pcie_cell("d2h", "copy", 1.45), pcie_cell("d2h", "pinned", 53.0)])  # fmt: skip
    assert h2d.advice is not None and h2d.advice.startswith("h2d from pinned_host memory is 7.2x pageable: stage host arrays through it")
    assert h2d.advice.endswith("(this figure leaves out that first copy)")  # the copy into pinned_host memory is not timed
    assert d2h.advice is not None and d2h.advice.startswith("d2h into pinned_host memory is 36.6x copy: fetch through it")
    # Not much faster: nothing to change.
    (f,) = fastest_paths([pcie_cell(variant="pageable", gbps=40.0), pcie_cell(variant="pinned", gbps=50.0)])
    assert f.variant == "pinned" and f.advice is None
    # CPU devices: pinned_host is host memory there, whatever the figures say.
    cpu_cells = [cell(variant="pageable", gbps=2.0, roof="host_memcpy", roof_gbps=9.0), cell(variant="pinned", gbps=8.0, roof="host_memcpy", roof_gbps=9.0)]
    assert fastest_paths(cpu_cells)[0].advice is None


def test_advice_when_only_pageable_paths_were_measured_far_below_the_link():
    (f,) = fastest_paths([pcie_cell(variant="pageable", gbps=5.4)])
    assert f.advice is not None and "9% of the PCIe link" in f.advice and "--variants main,pinned" in f.advice
    # The pinned path was tried (skipped: no pinned_host memory): the table says why, no advice to measure it.
    skipped = Cell("h2d", "pinned", "single", GIB, "host", "cuda:0", skipped=True, note="skipped: cuda:0 has no pinned_host memory")
    assert fastest_paths([pcie_cell(variant="pageable", gbps=5.4), skipped])[0].advice is None
    # Near the link, or no link known: nothing to say.
    assert fastest_paths([pcie_cell(variant="pageable", gbps=40.0)])[0].advice is None
    assert fastest_paths([cell(variant="pageable", gbps=5.4)])[0].advice is None


def test_the_verdict_compares_where_the_paths_were_all_measured():
    """Pinned skipped at 1G (no host memory for it) but measured at 256M: the verdict compares at 256M rather than
    calling pageable the only path at 1G (the misleading line of the H200)."""
    skipped = Cell("h2d", "pinned", "single", GIB, "host", "cuda:0", skipped=True, note="skipped: 1G does not fit in host memory twice")
    cells = [pcie_cell(variant="pageable", gbps=6.9), skipped,
             pcie_cell(variant="pageable", gbps=5.0, size=256 * MIB), pcie_cell(variant="pinned", gbps=42.3, size=256 * MIB)]  # fmt: skip
    (f,) = fastest_paths(cells)
    assert (f.size_bytes, f.variant, [o.variant for o in f.others]) == (256 * MIB, "pinned", ["pageable"])
    assert f.advice is not None and "pinned_host" in f.advice


def test_one_variant_is_not_called_fastest_and_the_roof_is_named_as_its_link():
    from devctl.render.bench_transfer import verdict_line

    link = m.PcieLink("cuda:0", "0000:18:00.0", 5, 16, 5, 63.0)
    roofs = m.Roofs(pcie=(link,))
    (f,) = fastest_paths([pcie_cell(variant="pageable", gbps=5.4, size=256 * MIB)])
    assert verdict_line(f, roofs) == "h2d at 256M: pageable 5.40 GB/s, 9% of PCIe Gen5 x16 (63.0 GB/s)"
    # Without the link's generation and width, the roof is the link's peak.
    assert verdict_line(f, m.Roofs()) == "h2d at 256M: pageable 5.40 GB/s, 9% of the PCIe link's peak (63.0 GB/s)"
    (f,) = fastest_paths([pcie_cell(variant="pageable", gbps=6.9), pcie_cell(variant="pinned", gbps=49.5)])
    assert verdict_line(f, roofs) == "Fastest h2d at 1G: pinned 49.5 GB/s, 79% of PCIe Gen5 x16 (63.0 GB/s); pageable 6.90 GB/s, 11%"
    # A zero-copy variant moved nothing: one variant measured, not a fastest.
    (f,) = fastest_paths([pcie_cell(variant="pageable", gbps=6.9), cell(variant="aligned", size=GIB, dst="cuda:0", gbps=None, zero_copy=True)])
    assert verdict_line(f, roofs).startswith("h2d at 1G: pageable 6.90 GB/s") and verdict_line(f, roofs).endswith("zero-copy (no transfer): aligned")
    # A mesh's roof is its links' sum.
    sharded = cell(variant="pageable", size=GIB, dst="cuda:all", gbps=100.0, layout="sharded", roof="pcie", roof_gbps=8 * 63.0, pct_of_roof=100 / 5.04)
    (f,) = fastest_paths([sharded])
    eight = m.Roofs(pcie=tuple(m.PcieLink(f"cuda:{i}", None, 5, 16, 5, 63.0) for i in range(8)))
    assert verdict_line(f, eight) == "h2d (sharded) at 1G: pageable 100 GB/s, 20% of 8 PCIe Gen5 x16 links (504 GB/s)"


def test_h200_transfer_verdict_names_pinned_fastest_with_how_far_each_path_is_from_the_link():
    """The document devctl printed on a real H200 (`bench transfer --variants all --sizes 64M,1G --direction
    h2d,d2h --json`, tests/fixtures/h200/): pageable h2d and np.asarray d2h are a fraction of the link, pinned_host
    nearly all of it, and the verdict says so rather than 'Fastest h2d: pageable, 9% of the link's peak'."""
    import json
    from dataclasses import replace
    from pathlib import Path

    from devctl.model import from_dict, to_jsonable
    from devctl.render.bench_transfer import summary_lines

    doc = json.loads((Path(__file__).parent / "fixtures" / "h200" / "bench-transfer-variants-all-64m-1g.json").read_text())
    # Recorded as version 1: version 2 only added each cell's timing method and overhead (defaults here).
    report = from_dict(m.TransferReport, {**doc, "schema": m.SCHEMA})
    report = replace(report, fastest=fastest_paths(report.results))
    h2d, d2h = report.fastest
    assert (h2d.direction, h2d.variant, h2d.size_bytes, round(h2d.gbps or 0, 1)) == ("h2d", "pinned", GIB, 49.5)
    assert (d2h.direction, d2h.variant, d2h.size_bytes, round(d2h.gbps or 0, 1)) == ("d2h", "pinned", GIB, 53.0)
    assert round(h2d.pct_of_roof or 0) == 79 and round(d2h.pct_of_roof or 0) == 84  # of 63.0 GB/s, PCIe Gen5 x16
    assert [o.variant for o in h2d.others] == ["pageable", "aligned"] and [o.variant for o in d2h.others] == ["copy", "async", "numpy"]
    lines = summary_lines(report)
    assert lines[:4] == [
        "Fastest h2d at 1G: pinned 49.5 GB/s, 79% of PCIe Gen5 x16 (63.0 GB/s); pageable 6.91 GB/s, 11%; aligned 6.33 GB/s, 10%",
        "Advice: h2d from pinned_host memory is 7.2x pageable: stage host arrays through it with "
        'jax.device_put(x, sharding.with_memory_kind("pinned_host")), then device_put to the device (this figure leaves out that first copy)',
        "Fastest d2h at 1G: pinned 53.0 GB/s, 84% of PCIe Gen5 x16 (63.0 GB/s); copy 1.45 GB/s, 2%; async 1.45 GB/s, 2%; numpy 1.44 GB/s, 2%",
        "Advice: d2h into pinned_host memory is 36.5x copy: fetch through it with "
        'jax.device_put(x, sharding.with_memory_kind("pinned_host")), then np.asarray',
    ]
    # What --quick printed there before pinned was in the default: the pageable paths alone, and no "Fastest".
    plain = [c for c in report.results if c.variant in ("pageable", "copy") and c.size_bytes == 64 * MIB]
    alone = replace(report, results=tuple(plain), fastest=fastest_paths(plain))
    lines = summary_lines(alone)
    assert lines[0] == "h2d at 64M: pageable 5.02 GB/s, 8% of PCIe Gen5 x16 (63.0 GB/s)"
    assert lines[1].startswith("Advice: pageable h2d reaches 8% of the PCIe link")
    assert lines[2] == "d2h at 64M: copy 1.23 GB/s, 2% of PCIe Gen5 x16 (63.0 GB/s)"
    # The verdict is data too: --json carries it, as its schema says.
    from conftest import validate_schema

    validate_schema(to_jsonable(report), "bench.transfer")


# ---- options ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "variants,direction,layout,expected",
    [
        (None, "h2d", "single", ("pageable",)),
        (None, "d2h", "single", ("copy",)),
        (("pinned", "pageable"), "h2d", "single", ("pageable", "pinned")),  # in the table's order, not the user's
        (("pinned",), "d2d", "single", ("put",)),  # a direction without the named variants still measures its plain call
        (m.ALL_VARIANTS, "d2h", "single", ("copy", "numpy", "pinned", "async")),
        (m.ALL_VARIANTS, "h2d", "sharded", ("pageable",)),  # mesh layouts measure what a plain call does
    ],
)
def test_variants_for(variants, direction, layout, expected):
    assert TransferOptions(variants=variants).variants_for(direction, layout) == expected


@pytest.mark.parametrize(
    "pinned_on_accelerators,pinned_path,direction,layout,expected",
    [
        (True, True, "h2d", "single", ("pageable", "pinned")),  # the CLI's default on an accelerator
        (True, True, "d2h", "single", ("copy", "pinned")),
        (True, True, "d2d", "single", ("put",)),  # no pinned path between devices
        (True, True, "d2d-self", "single", ("put",)),
        (True, True, "h2d", "sharded", ("pageable",)),  # mesh layouts measure what a plain call does
        (True, False, "h2d", "single", ("pageable",)),  # CPU devices: pinned_host is host memory like any other
        (False, True, "h2d", "single", ("pageable",)),  # devctl check's h2d figure, --variants main: the plain call
    ],
)
def test_the_default_adds_the_pinned_path_for_h2d_and_d2h_where_the_devices_have_one(
    pinned_on_accelerators, pinned_path, direction, layout, expected
):
    opts = TransferOptions(pinned_on_accelerators=pinned_on_accelerators)
    assert opts.variants_for(direction, layout, pinned_path=pinned_path) == expected
    # Named variants are measured as named, whatever the devices.
    named = TransferOptions(variants=("pageable",), pinned_on_accelerators=pinned_on_accelerators)
    assert named.variants_for("h2d", "single", pinned_path=pinned_path) == ("pageable",)


@pytest.mark.parametrize(
    "platform,kinds,expected",
    [
        ("gpu", ("device", "pinned_host", "unpinned_host"), True),
        ("tpu", ("device", "pinned_host", "unpinned_host"), True),
        ("gpu", ("device",), False),  # a backend that offers no pinned_host memory
        ("cpu", ("device", "pinned_host", "unpinned_host"), False),  # recent jaxlibs: host memory under another name
    ],
)
def test_pinned_is_a_path_of_its_own_on_accelerators_only(platform, kinds, expected):
    assert m.pinned_is_a_path(platform, kinds) is expected


@pytest.mark.parametrize(
    "flag,expected_variants,expected_pinned",
    [
        (None, None, True),  # no --variants: the default, pinned on accelerators
        ("main", None, False),  # each direction's plain call alone
        ("main,pinned", ("pageable", "pinned", "copy", "put"), False),  # ALL_VARIANTS order
    ],
)
def test_the_cli_default_asks_for_the_pinned_path_and_main_does_not(flag, expected_variants, expected_pinned):
    from devctl.cli.bench_transfer import build_options

    opts = build_options(None, flag, None, False, None, None, None, True, False, False, None, None, None, False)
    assert (opts.variants, opts.pinned_on_accelerators) == (expected_variants, expected_pinned)
    quick = build_options(None, flag, None, True, None, None, None, True, False, False, None, None, None, False)
    assert quick.pinned_on_accelerators is expected_pinned  # --quick keeps it


def test_options_survive_the_trip_to_the_probe_child():
    import json

    opts = TransferOptions(directions=("h2d", "d2d"), variants=("pinned",), layouts=("single", "sharded"),
                           sizes_bytes=(4096, MIB), all_pairs=True, repeats=5, min_time_s=0.01, verify=False,
                           pinned_on_accelerators=True)  # fmt: skip
    assert TransferOptions.from_request(json.loads(json.dumps(opts.to_request()))) == opts


# ---- the host-memory estimate (measured multiples, model/bench_transfer.py's docstring) -------------------------


def _need(size=MIB, in_host=True, n=4, pinned_path=False, **opts):
    opts_ = TransferOptions(**opts)
    return host_bytes_needed(opts_, size, devices_in_host_memory=in_host, device_count=n, pinned_path=pinned_path) / size


@pytest.mark.parametrize(
    "opts,multiple",
    [
        ({"directions": ("h2d",)}, 4),
        ({"directions": ("d2h",)}, 5),
        ({"directions": ("d2d",)}, 5),
        ({"directions": ("d2d-self",)}, 5),
        ({}, 5),  # every direction: the most any one of them holds
        ({"variants": m.ALL_VARIANTS}, 6),  # the aligned copy and a pinned buffer
        ({"directions": ("h2d",), "verify": False}, 3),
        ({"verify": False}, 5),  # d2h holds its copies whatever the verification
        ({"directions": ("h2d",), "layouts": ("replicated",)}, 7),
        ({"layouts": ("replicated",)}, 11),  # d2d-self replicated on 4 devices: source and copy on each, checked
        ({"layouts": ("sharded",)}, 5),  # a sharded array holds the size once in all
    ],
)
def test_host_estimate_on_cpu_devices(opts, multiple):
    assert _need(**opts) == multiple


def test_host_estimate_on_an_accelerator_counts_only_the_host_side():
    assert _need(in_host=False) == 2 + 2  # the buffers, and a result fetched and compared
    assert _need(in_host=False, directions=("d2h",), variants=("pinned",)) == 2 + 3
    assert _need(in_host=False, directions=("d2d",), verify=False) == 2
    # The default's pinned cells on an accelerator hold a pinned buffer too; not on CPU devices, which measure none.
    assert _need(in_host=False, directions=("d2h",), pinned_on_accelerators=True, pinned_path=True) == 2 + 3
    assert _need(in_host=False, directions=("d2h",), pinned_on_accelerators=True) == 2 + 2
    # On an accelerator a replicated array is device memory: the host estimate does not grow with the devices.
    assert _need(in_host=False, layouts=("replicated",), n=8) == _need(in_host=False, layouts=("replicated",), n=2)


def test_host_estimate_grows_with_the_devices_a_replicated_array_is_copied_to():
    assert _need(n=8, layouts=("replicated",)) > _need(n=4, layouts=("replicated",)) > _need(n=2, layouts=("replicated",))


def test_host_estimate_is_linear_in_the_size():
    opts = TransferOptions(variants=m.ALL_VARIANTS)
    one = host_bytes_needed(opts, MIB, devices_in_host_memory=True, device_count=4)
    assert host_bytes_needed(opts, 256 * MIB, devices_in_host_memory=True, device_count=4) == 256 * one


# ---- statistics and aliasing (probe/bench_transfer.py) -------------------------------------------------------


def test_stats_of_no_samples_are_unknown_not_zero():
    from devctl.model.timing import sample_stats

    assert sample_stats([]) == dict.fromkeys(("min_s", "p10_s", "median_s", "p90_s", "max_s", "mean_s", "cv"))


def test_stats_are_order_free_and_interpolated():
    from devctl.model.timing import sample_stats

    st = sample_stats([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (st["min_s"], st["median_s"], st["max_s"], st["mean_s"]) == (1.0, 3.0, 5.0, 3.0)
    assert st["p10_s"] == pytest.approx(1.4) and st["p90_s"] == pytest.approx(4.6)
    assert st["cv"] == pytest.approx(2.5**0.5 / 3)  # sample standard deviation over the mean


def test_stats_of_one_sample_have_no_spread():
    from devctl.model.timing import sample_stats

    st = sample_stats([2e-3])
    assert st["median_s"] == st["p10_s"] == st["p90_s"] == 2e-3 and st["cv"] is None


def test_median_of_an_even_count_is_the_midpoint():
    from devctl.model.timing import sample_stats

    assert sample_stats([1.0, 2.0, 3.0, 10.0])["median_s"] == 2.5


def test_moved_bytes_leave_out_what_aliases_the_source():
    from devctl.probe.bench_transfer_recipes import moved_bytes, overlaps

    src = [(1000, 100)]
    assert moved_bytes([(5000, 100)], src) == 100
    assert moved_bytes([(1000, 100)], src) == 0
    assert moved_bytes([(1050, 100)], src) == 0  # a partial overlap is an alias too
    assert moved_bytes([(1100, 100)], src) == 100  # adjacent, not overlapping
    assert moved_bytes([(1000, 50), (9000, 50)], src) == 50  # one shard aliases, one was copied
    assert not overlaps([], src) and not overlaps(src, [])


def test_failure_notes_tell_out_of_memory_from_other_failures():
    from devctl.probe.bench import failure_note as _failure_note

    oom = _failure_note(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1073741824 bytes. More text"))
    assert oom == "skipped: out of memory (RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1073741824 bytes)"
    assert _failure_note(MemoryError()).startswith("skipped: out of memory")
    other = _failure_note(ValueError("bad\n   layout. second sentence"))
    assert other == "failed: ValueError: bad layout"
    assert len(_failure_note(RuntimeError("x" * 5000))) < 250


# ---- the probe child's plan, on machines given as data ------------------------------------------------


def gpu(i: int, limit: int | None = 80 * GIB, in_use: int = 0, kinds=("device", "pinned_host", "unpinned_host")):
    return SimpleNamespace(
        id=i, platform="gpu", device_kind="NVIDIA H100 80GB HBM3", local_hardware_id=i, client=SimpleNamespace(platform="cuda"),
        memory_stats=lambda: {"bytes_limit": limit, "bytes_in_use": in_use} if limit else {},
        addressable_memories=lambda: [SimpleNamespace(kind=k) for k in kinds],
    )  # fmt: skip


def cpu(i: int):
    return SimpleNamespace(
        id=i, platform="cpu", device_kind="cpu", local_hardware_id=None, client=SimpleNamespace(platform="cpu"),
        memory_stats=lambda: None, addressable_memories=lambda: [SimpleNamespace(kind=k) for k in ("device", "pinned_host")],
    )  # fmt: skip


def ref(i: int, platform: str | None = None):
    """A device as the CLI hands it to the child (parsed --device/--src/--dst)."""
    try:
        from devctl.model.devices import DeviceRef
    except ImportError:  # before device references had a platform, the child took plain ids
        return i
    return DeviceRef(i, platform)


def planned(local, **opts):
    from devctl.probe.bench_transfer import Bench

    bench = Bench(TransferOptions(**opts), SimpleNamespace(local_devices=lambda: list(local)), np=None)
    bench.resolve()
    return bench


def names(pairs) -> list[tuple[int, int]]:
    return [(a.id, b.id) for a, b in pairs]


def test_default_plan_on_8_gpus_sweeps_one_pair_and_measures_the_matrix_once():
    b = planned([gpu(i) for i in range(8)])
    assert [d.id for d in b.targets] == [0]
    assert names(b.pairs) == [(0, 1)]
    assert len(b.matrix_pairs) == 8 * 7 - 1 and (0, 1) not in names(b.matrix_pairs) and b.pairs_note is None
    assert b.sizes == list(m.DEFAULT_SIZES) + [m.LARGE_SIZE] and b.sweep_note is None
    groups = b.plan()
    assert len(groups) == len(b.sizes)
    d2d = lambda g: [(s.src.id, s.dst.id) for s in g if s.direction == "d2d"]  # noqa: E731
    assert all(d2d(g) == [(0, 1)] for g in groups[:-1])
    assert len(d2d(groups[-1])) == 56  # every ordered pair, once, at the largest size
    per_size = [(s.direction, s.variant) for s in groups[0]]
    assert per_size == [("h2d", "pageable"), ("d2h", "copy"), ("d2d", "put"), ("d2d-self", "put")]


def test_the_matrix_is_measured_with_the_main_variant_only():
    b = planned([gpu(i) for i in range(3)], directions=("d2d",), variants=("put", "donate"))
    top = b.plan()[-1]
    assert sorted((s.variant, s.src.id, s.dst.id) for s in top) == sorted(
        [("put", a, c) for a in range(3) for c in range(3) if a != c] + [("donate", 0, 1)]
    )


def test_large_size_joins_only_where_every_device_has_room():
    b = planned([gpu(0), gpu(1, limit=4 * GIB)])
    assert m.LARGE_SIZE not in b.sizes
    assert b.sweep_note == "default sweep stops at 256M: cuda:1 has 4.0 GiB free"
    b = planned([gpu(0, limit=None)], directions=("h2d",))
    assert b.sweep_note == "default sweep stops at 256M: cuda:0 does not report its memory size"
    b = planned([gpu(0, limit=80 * GIB, in_use=76 * GIB)], directions=("h2d",))
    assert m.LARGE_SIZE not in b.sizes  # what is in use counts against the room


def test_cpu_devices_get_no_matrix_and_say_why():
    b = planned([cpu(i) for i in range(4)])
    assert names(b.pairs) == [(0, 1)] and b.matrix_pairs == []
    assert b.pairs_note == "d2d pair matrix not measured: CPU devices share host memory (use --all-pairs)"
    assert b.sweep_note == "default sweep stops at 256M: cpu:0 does not report its memory size"


def test_quick_and_explicit_sizes():
    b = planned([gpu(i) for i in range(4)], quick=True)
    assert b.sizes == list(m.QUICK_SIZES) and b.matrix_pairs == [] and b.pairs_note is None
    b = planned([gpu(i) for i in range(4)], sizes_bytes=(MIB, 4 * KIB))
    assert b.sizes == [MIB, 4 * KIB] and b.sweep_note is None  # the user's order


def test_all_pairs_sweeps_every_ordered_pair_at_every_size():
    b = planned([cpu(i) for i in range(3)], all_pairs=True, directions=("d2d",), sizes_bytes=(KIB, MIB))
    assert len(b.pairs) == 6 and b.matrix_pairs == []
    assert [len(g) for g in b.plan()] == [6, 6]


@pytest.mark.parametrize(
    "src,dst,expected",
    [
        (2, 0, [(2, 0)]),
        (2, None, [(2, 0), (2, 1), (2, 3)]),
        (None, 2, [(0, 2), (1, 2), (3, 2)]),
    ],
)
def test_src_and_dst_choose_the_pairs(src, dst, expected):
    b = planned([gpu(i) for i in range(4)], src=None if src is None else ref(src), dst=None if dst is None else ref(dst))
    assert names(b.pairs) == expected and b.matrix_pairs == []


def test_every_device_is_a_target_with_an_empty_device_list():
    b = planned([gpu(i) for i in range(3)], devices=(), directions=("h2d", "d2h"), sizes_bytes=(MIB,))
    (group,) = b.plan()
    assert [(s.direction, (s.dst or s.src).id) for s in group] == [("h2d", 0), ("h2d", 1), ("h2d", 2), ("d2h", 0), ("d2h", 1), ("d2h", 2)]


def test_an_unknown_device_is_a_usage_problem_naming_the_devices_there():
    from devctl.probe.bench import UsageProblem
    from devctl.probe.bench_transfer import Bench

    bench = Bench(TransferOptions(devices=(ref(7),)), SimpleNamespace(local_devices=lambda: [gpu(0), gpu(1)]), np=None)
    with pytest.raises(UsageProblem) as e:
        bench.resolve()
    assert "--device" in str(e.value) and "7" in str(e.value) and str(e.value).endswith("this host's cuda devices are 0, 1")


def test_one_device_plans_d2d_as_a_skipped_cell_with_a_reason():
    b = planned([gpu(0)], directions=("h2d", "d2d"), sizes_bytes=(MIB,))
    (spec,) = (s for s in b.plan()[0] if s.direction == "d2d")  # d2d alone on one device is bad input (exit 2)
    assert spec.dst is None
    why = b._cannot_run(spec)
    assert why == "skipped: device-to-device needs at least 2 devices"
    skipped = b._skipped(spec, why)
    assert skipped.skipped and skipped.dst == "none" and skipped.src == "cuda:0" and skipped.gbps is None


def _planned_variants(b) -> set[tuple[str, str]]:
    return {(spec.direction, spec.variant) for group in b.plan() for spec in group}


def test_the_default_plan_on_a_gpu_measures_pinned_h2d_and_d2h_beside_the_plain_calls():
    # The CLI's default (no --variants), on an 8-GPU host as JAX shows it: device, pinned_host, unpinned_host.
    b = planned([gpu(i) for i in range(8)], pinned_on_accelerators=True)
    assert b.pinned_path
    assert _planned_variants(b) == {("h2d", "pageable"), ("h2d", "pinned"), ("d2h", "copy"), ("d2h", "pinned"),
                                    ("d2d", "put"), ("d2d-self", "put")}  # fmt: skip
    # Every size, both directions: the verdict compares the two paths at the largest.
    for group in b.plan():
        assert sum(s.variant == "pinned" for s in group) == 2
    # --quick too: two sizes, pinned included.
    quick = planned([gpu(0)], pinned_on_accelerators=True, quick=True)
    assert ("h2d", "pinned") in _planned_variants(quick) and ("d2h", "pinned") in _planned_variants(quick)
    # Per size: h2d and d2h twice each, d2d (a skipped cell on one device), d2d-self.
    assert [len(g) for g in quick.plan()] == [6, 6]


def test_the_default_plan_elsewhere_is_each_directions_plain_call():
    plain = {("h2d", "pageable"), ("d2h", "copy"), ("d2d", "put"), ("d2d-self", "put")}
    # CPU devices: JAX gives them a pinned_host kind, but it is host memory like a numpy array's.
    cpus = planned([cpu(0), cpu(1)], pinned_on_accelerators=True)
    assert not cpus.pinned_path and _planned_variants(cpus) == plain
    # A GPU whose backend offers no pinned_host memory: no path to measure (--variants pinned says why, skipped).
    bare = planned([gpu(0, kinds=("device",)), gpu(1, kinds=("device",))], pinned_on_accelerators=True)
    assert _planned_variants(bare) == plain
    # Without the CLI's default (devctl check's h2d figure, --variants main): the plain calls on a GPU too.
    assert _planned_variants(planned([gpu(0), gpu(1)])) == plain
    # Mesh layouts: the plain call only.
    mesh = planned([gpu(0), gpu(1)], pinned_on_accelerators=True, layouts=("sharded",))
    assert {v for _, v in _planned_variants(mesh)} == {"pageable", "copy", "put"}


def test_pinned_variant_is_skipped_where_the_device_has_no_pinned_host_memory():
    b = planned([gpu(0, kinds=("device",))], directions=("h2d",), variants=("pinned",), sizes_bytes=(MIB,))
    (spec,) = b.plan()[0]
    assert b._cannot_run(spec) == "skipped: cuda:0 has no pinned_host memory"


def test_a_size_the_device_cannot_hold_is_skipped_with_the_figures():
    b = planned([gpu(0, limit=2 * GIB, in_use=GIB)], directions=("h2d",), sizes_bytes=(512 * MIB,))
    (spec,) = b.plan()[0]
    assert b._cannot_run(spec) == "skipped: needs about 1.5 GiB on cuda:0, 1.0 GiB free"


def test_a_burst_holds_at_most_a_quarter_of_the_free_memory_where_its_results_land():
    from devctl.probe.bench_transfer_recipes import Transfer

    b = planned([gpu(0, limit=80 * GIB, in_use=16 * GIB), gpu(1, limit=80 * GIB, in_use=79 * GIB)], directions=("h2d", "d2d"), sizes_bytes=(64 * MIB,))
    repeatable, fresh = Transfer(op=lambda _: None, burst=lambda: None), Transfer(op=lambda _: None)
    specs = b.plan()[0]
    h2d = next(s for s in specs if s.direction == "h2d" and s.variant == "pageable")
    d2d = next(s for s in specs if s.direction == "d2d" and s.variant == "put" and s.dst.id == 1)
    assert b._burst_limit(h2d, repeatable) == 8 * GIB // (64 * MIB)  # 64 GiB free on cuda:0: BURST_MEMORY_BYTES caps it
    assert b._burst_limit(d2d, repeatable) == GIB // 4 // (64 * MIB)  # cuda:1 has 1 GiB free: its quarter caps it
    assert b._burst_limit(h2d, fresh) == 0  # a fresh source each time: call by call
    (small,) = (s for s in planned([gpu(0)], directions=("h2d",), sizes_bytes=(64 * KIB,)).plan()[0] if s.variant == "pageable")
    assert b._burst_limit(small, repeatable) == 0  # a latency cell: call by call
    (on_cpu,) = (s for s in planned([cpu(0)], directions=("h2d",), sizes_bytes=(64 * MIB,)).plan()[0] if s.variant == "pageable")
    assert b._burst_limit(on_cpu, repeatable) == 0  # CPU devices: call by call
    full = planned([gpu(0, limit=80 * GIB, in_use=80 * GIB - 100 * MIB)], directions=("h2d",), sizes_bytes=(64 * MIB,))
    (tight,) = (s for s in full.plan()[0] if s.variant == "pageable")
    assert full._burst_limit(tight, repeatable) < 2  # no room for two results in flight: the cell is timed call by call


def test_a_burst_of_independent_calls_waits_on_every_result_and_a_chain_on_its_last():
    """Transfers from one source may finish out of order (several streams): their burst waits on each result. Calls
    that feed one another end in order, and their earlier results may be donated away: only the last is waited on."""
    from devctl.probe.bench import burst
    from devctl.probe.bench_transfer_recipes import _Independent

    waited: list[int] = []

    class Result:
        def __init__(self, n: int):
            self.n = n

        def block_until_ready(self):
            waited.append(self.n)
            return self

    made = iter(range(100))
    burst(_Independent(lambda: Result(next(made))), 4)
    assert waited == [0, 1, 2, 3]
    waited.clear()
    burst(lambda: Result(next(made)), 4)
    assert waited == [7]


def test_every_burst_of_transfers_from_one_source_waits_on_every_result():
    """On real JAX CPU devices, every recipe that can run in bursts: those that copy one fixed source (their calls may
    end out of order) wait on every result, the chained on-device copy on its last. The pinned d2h once waited on
    its last alone, as the pinned h2d did when an H200 read it at 72 GB/s on a 63 GB/s link."""
    import jax
    import numpy as np

    from devctl.model.bench_transfer import ALL_VARIANTS
    from devctl.probe.bench_transfer import Bench
    from devctl.probe.bench_transfer_recipes import HostBuffers

    bench = Bench(TransferOptions(directions=("h2d", "d2h", "d2d-self"), variants=ALL_VARIANTS, sizes_bytes=(MIB,)), jax, np)
    bench.resolve()
    waits_on_every = {}
    for spec in bench.plan()[0]:
        transfer = bench._transfer(spec, HostBuffers(np, MIB))
        if transfer.burst is not None:
            waits_on_every[(spec.direction, spec.variant)] = getattr(transfer.burst, "independent", False)
    assert waits_on_every == {
        ("h2d", "pageable"): True, ("h2d", "aligned"): True, ("h2d", "pinned"): True, ("d2h", "pinned"): True,
        ("d2d-self", "put"): False,
    }  # fmt: skip


@pytest.mark.parametrize("direction", ["h2d", "d2h", "d2d-self"])
def test_a_transfers_verification_refuses_a_wrong_result(direction):
    """Each direction's real transfer on JAX CPU devices, its result then corrupted as a faulty path would: one
    flipped bit at offset 4099, the last 13 bytes missing, bytes one period of the pattern off. Each is refused;
    the untouched transfer passes."""
    import dataclasses

    import jax
    import numpy as np

    from devctl.probe.bench_transfer import Bench
    from devctl.probe.bench_transfer_recipes import PATTERN_PERIOD, HostBuffers

    size = 2 * PATTERN_PERIOD + 4099
    bench = Bench(TransferOptions(directions=(direction,), sizes_bytes=(size,)), jax, np)
    bench.resolve()
    spec = bench.plan()[0][0]
    host = HostBuffers(np, size)
    transfer = bench._transfer(spec, host)
    assert bench._verify(transfer, host, spec) is True

    def flipped(a):
        out = np.array(a).reshape(-1)
        out[4099] ^= 0x10
        return out

    wrong = {
        "a flipped bit": flipped,
        "13 bytes short": lambda a: np.array(a).reshape(-1)[:-13],
        "a shifted copy": lambda a: np.roll(np.array(a).reshape(-1), PATTERN_PERIOD),
    }
    for what, corrupt in wrong.items():
        bad = dataclasses.replace(transfer, op=lambda arg, corrupt=corrupt: corrupt(transfer.op(arg)))
        assert bench._verify(bad, host, spec) is False, what


_REPLICATED_COPY_LOST = r"""
import dataclasses, json
import jax, numpy as np
from devctl.model.bench_transfer import TransferOptions
from devctl.probe.bench_transfer import Bench
from devctl.probe.bench_transfer_recipes import HostBuffers

bench = Bench(TransferOptions(directions=("h2d", "d2d"), layouts=("replicated",), sizes_bytes=(1 << 20,)), jax, np)
bench.resolve()
seen = {}
for spec in bench.plan()[0]:
    host = HostBuffers(np, 1 << 20)
    transfer = bench._transfer(spec, host)

    def last_copy_zeroed(arg, op=transfer.op):
        out = op(arg)
        copies = [s.data for s in out.addressable_shards]
        copies[-1] = jax.device_put(np.zeros(out.shape, out.dtype), list(copies[-1].devices())[0])
        return jax.make_array_from_single_device_arrays(out.shape, out.sharding, copies)

    seen[spec.direction] = [bench._verify(transfer, host, spec), bench._verify(dataclasses.replace(transfer, op=last_copy_zeroed), host, spec)]
print(json.dumps(seen))
"""


def test_a_replicated_transfer_is_verified_on_every_device():
    """A replicated put onto 4 real JAX CPU devices (h2d, and d2d: a broadcast from the first device) whose last copy
    arrived as zeros is refused: np.asarray reads one copy, and d2d's first is the source itself."""
    proc = subprocess.run([sys.executable, "-c", _REPLICATED_COPY_LOST], env=devctl_env(4), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {"h2d": [True, False], "d2d": [True, False]}


@pytest.mark.parametrize("direction", ["d2d-self", "h2d"])
def test_a_burst_of_real_transfers_gives_every_timing_field_and_the_bytes_moved(direction):
    """The burst and the call-by-call timing of a transfer, on real JAX CPU devices (where devctl itself times call by call: the
    mechanics, not the figures): K within its limit, samples per call, the call timed alone beside the first bursts
    and the bytes its result moved."""
    import jax
    import numpy as np

    from devctl.probe.bench_transfer import Bench
    from devctl.probe.bench_transfer_recipes import HostBuffers

    bench = Bench(TransferOptions(directions=(direction,), sizes_bytes=(MIB,), repeats=3, min_time_s=0.01), jax, np)
    bench.resolve()
    spec = next(s for s in bench.plan()[0] if s.variant in ("put", "pageable"))
    transfer = bench._transfer(spec, HostBuffers(np, MIB))
    timing, moved = bench._time(transfer, limit=16, warmed=False)
    assert timing["method"] == "burst" and 2 <= timing["calls_per_sample"] <= 16 and timing["samples"] >= 3
    assert 0 < timing["min_s"] <= timing["median_s"] <= timing["max_s"]
    assert timing["single_call_s"] > 0 and timing["call_overhead_s"] >= 0
    assert moved == MIB  # a real copy: the result is not the source's memory
    # Under MIN_CALLS the same engine times it call by call: every sample one call, no overhead apart from it.
    timing, moved = bench._time(transfer, limit=1, warmed=False)
    assert timing["method"] == "single" and timing["calls_per_sample"] == 1 and timing["samples"] >= 3
    assert 0 < timing["min_s"] <= timing["median_s"] <= timing["max_s"] and timing.get("call_overhead_s") is None
    assert moved == MIB


def test_mesh_layouts_span_every_device_and_round_sharded_sizes_down():
    b = planned([gpu(i) for i in range(3)], layouts=("sharded", "replicated"), directions=("h2d", "d2d"), sizes_bytes=(MIB,))
    specs = b.plan()[0]
    assert [(s.layout, s.direction) for s in specs] == [("sharded", "h2d"), ("sharded", "d2d"), ("replicated", "h2d"), ("replicated", "d2d")]
    assert all(len(s.devices) == 3 for s in specs)
    sharded_h2d = specs[0]
    assert (b._endpoint(sharded_h2d.src, sharded_h2d), b._endpoint(sharded_h2d.dst, sharded_h2d)) == ("host", "cuda:all")
    fitted, note = b._fit_to_mesh(sharded_h2d)
    assert fitted.size == MIB - MIB % 3 and note == f"rounded down to {MIB - MIB % 3} bytes, a multiple of 3 devices"
    assert b._fit_to_mesh(specs[2]) == (specs[2], None)  # replicated arrays are not split
    broadcast = specs[3]
    assert broadcast.src.id == 0 and broadcast.dst == "mesh"


def test_a_cell_that_moved_no_bytes_is_zero_copy_with_no_bandwidth():
    from devctl.probe.bench_transfer_plan import Spec

    b = planned([cpu(0), cpu(1)], sizes_bytes=(MIB,))
    roof = m.MemcpyRoof(MIB, 50, MIB / 10e9, 10.0)
    spec = Spec("d2h", "numpy", "single", MIB, b.local[0], None)
    c = b._cell(spec, single_timing([1e-6, 2e-6, 3e-6]), 0, True, roof, None)
    assert c.zero_copy and c.gbps is None and c.pct_of_roof is None and c.peak_gbps is None
    assert c.note == "zero-copy: np.asarray returns a view of the device buffer on this backend"
    assert c.median_s == 2e-6 and c.samples == 3


def test_a_measured_cell_has_its_rate_from_the_median_and_its_cpu_roof():
    from devctl.probe.bench_transfer_plan import Spec

    b = planned([cpu(0), cpu(1)], sizes_bytes=(MIB,))
    roof = m.MemcpyRoof(MIB, 50, MIB / 10e9, 10.0)
    spec = Spec("h2d", "pageable", "single", 1_000_000, None, b.local[0])
    c = b._cell(spec, single_timing([0.0002, 0.0004, 0.0001]), 1_000_000, False, roof, "rounded down")
    assert c.gbps == pytest.approx(5.0) and c.peak_gbps == pytest.approx(10.0)  # median 200 us, fastest 100 us
    assert (c.roof, c.roof_gbps, c.pct_of_roof) == ("host_memcpy", 10.0, pytest.approx(50.0))
    assert (c.src, c.dst) == ("host", "cpu:0")
    assert c.note == "rounded down; bytes did not arrive unchanged" and c.verified is False


def test_gpu_roofs_are_the_pcie_links_and_say_why_when_unknown():
    from devctl.probe.bench_transfer_plan import Spec

    b = planned([gpu(i) for i in range(2)], sizes_bytes=(MIB,))
    roof = m.MemcpyRoof(MIB, 50, MIB / 10e9, 10.0)
    h2d = Spec("h2d", "pageable", "single", MIB, None, b.local[1])
    d2d = Spec("d2d", "put", "single", MIB, b.local[0], b.local[1])
    b.links = {1: m.PcieLink("cuda:1", "0000:2a:00.0", 5, 16, 5, 63.0)}
    assert b._roof_for(h2d, roof) == ("pcie", 63.0, None)
    assert b._roof_for(d2d, roof) == (None, None, "no roof for this path (NVLink, ICI and HBM peaks are not queried)")
    b.links = {1: m.PcieLink("cuda:1", reason="NVML could not read the link: Not Supported")}
    assert b._roof_for(h2d, roof) == (None, None, "NVML could not read the link: Not Supported")
    b.links, b.pcie_reason = {}, "NVML unavailable: libnvidia-ml.so.1 not found"
    assert b._roof_for(h2d, roof) == (None, None, "NVML unavailable: libnvidia-ml.so.1 not found")


def test_a_sharded_h2d_roof_adds_up_the_links_of_every_device():
    b = planned([gpu(i) for i in range(4)], layouts=("sharded", "replicated"), directions=("h2d", "d2h"), sizes_bytes=(MIB,))
    b.links = {i: m.PcieLink(f"cuda:{i}", peak_gbps=63.0) for i in range(4)}
    roof = m.MemcpyRoof(MIB, 50, None, None)
    by = {(s.layout, s.direction): s for s in b.plan()[0]}
    assert b._roof_for(by["sharded", "h2d"], roof)[1] == pytest.approx(4 * 63.0)
    assert b._roof_for(by["replicated", "d2h"], roof)[1] == pytest.approx(63.0)  # one replica is read


def test_devices_involved_per_layout():
    from devctl.probe.bench_transfer_plan import Spec, devices_involved

    mesh = tuple(range(4))
    assert devices_involved(Spec("h2d", "pageable", "single", 1, None, 0)) == 1
    assert devices_involved(Spec("h2d", "pageable", "sharded", 1, None, "mesh", mesh)) == 4
    assert devices_involved(Spec("d2h", "copy", "replicated", 1, "mesh", None, mesh)) == 1
    assert devices_involved(Spec("d2d", "put", "replicated", 1, 0, "mesh", mesh)) == 3


# ---- roofs: a cell above its roof is suspect -----------------------------------------------------------


def test_a_cell_at_or_below_its_roof_gets_its_percentage():
    assert m.roof_verdict(7.5, "host_memcpy", 15.0) == (50.0, None)
    assert m.roof_verdict(15.0, "host_memcpy", 15.0) == (100.0, None)  # reaching the roof is allowed


def test_a_cell_above_its_roof_is_suspect_and_says_which_roof():
    pct, why = m.roof_verdict(17.7, "host_memcpy", 15.0)
    assert pct == pytest.approx(118.0) and m.above_roof(pct)
    assert why is not None and "118% of the host's best memcpy (15.0 GB/s)" in why and "17.7 GB/s" in why
    pct, why = m.roof_verdict(64.0, "pcie", 63.0)
    assert why is not None and "the PCIe link's peak (63.0 GB/s)" in why


def test_no_bandwidth_or_no_roof_is_neither_a_percentage_nor_suspect():
    assert m.roof_verdict(None, "host_memcpy", 15.0) == (None, None)  # zero-copy, skipped
    assert m.roof_verdict(400.0, None, None) == (None, None)  # NVLink: no roof queried
    assert not m.above_roof(None)


def test_a_mesh_of_cpu_devices_has_no_memcpy_roof():
    """XLA's CPU client copies a mesh's shards in parallel, so one thread's memcpy is no limit for them."""
    b = planned([cpu(i) for i in range(4)], layouts=("single", "sharded"), directions=("h2d",), sizes_bytes=(MIB,))
    roof = m.MemcpyRoof(MIB, 50, MIB / 10e9, 12.0, min_s=MIB / 12e9)
    by = {s.layout: s for s in b.plan()[0]}
    assert b._roof_for(by["single"], roof) == ("host_memcpy", 12.0, None)
    kind, gbps, why = b._roof_for(by["sharded"], roof)
    assert (kind, gbps) == (None, None) and why is not None and "in parallel" in why


# ---- the text view: one device, suspect cells ------------------------------------------------------------


@pytest.fixture
def plain_stdout(capsys):
    """devctl's consoles bound to pytest's captured stdout (not a terminal: plain, whole lines)."""
    from devctl.render import console

    console._console.cache_clear()
    yield capsys
    console._console.cache_clear()


def test_one_device_d2d_is_one_note_not_a_skipped_row_per_size(plain_stdout):
    from golden_reports import bench_cpu1_quick

    from devctl.render.bench_transfer import transfer_text

    report = bench_cpu1_quick()
    assert [c.dst for c in report.results if c.skipped] == ["none", "none"]  # kept in --json
    transfer_text(report)
    out = plain_stdout.readouterr().out
    assert "→ none" not in out and "skipped" not in out and "d2d put" not in out  # no row, no chart series
    assert "against size" not in out  # two sizes are the table's two rows of each path: no chart
    assert out.count("one device") == 1
    assert "Note: d2d: one device here, nothing to copy between; d2d-self measures on-device copies" in out


def test_a_suspect_cell_shows_suspect_not_its_percentage(plain_stdout):
    from dataclasses import replace

    from golden_reports import bench_cpu1_quick

    from devctl.render.bench_transfer import chart_lines, transfer_text

    report = bench_cpu1_quick()
    (cell,) = [c for c in report.results if c.suspect]
    assert cell.pct_of_roof is not None and cell.pct_of_roof > 100  # the figure stays in --json
    transfer_text(report)
    out = plain_stdout.readouterr().out
    (row,) = [line for line in out.splitlines() if "cpu:0 → host" in line and "16M" in line]
    assert row.endswith("suspect") and "%" not in row
    d2h = [c for c in report.results if c.direction == "d2h"]
    chart = chart_lines([*d2h, replace(d2h[0], size_bytes=1 << 20)], width=80)  # a third size: a chart
    assert any(line.endswith("15.6 (suspect)") for line in chart)  # its bar says so too
    assert "d2h at 16M: copy 15.6 GB/s, suspect: above host memcpy (14.7 GB/s)" in out.splitlines()
    assert "Note: suspect: 1 cell came out faster than its roof" in out


def test_a_pair_matrix_wider_than_the_terminal_comes_in_even_blocks(monkeypatch):
    """16 GPUs' d2d matrix at 80 columns: two blocks of 8 destinations, each with every source row."""
    import sys

    from rich.cells import cell_len
    from test_golden import _Terminal

    from devctl.render import console
    from devctl.render.bench_transfer import transfer_text

    pairs = [(a, b) for a in range(16) for b in range(16) if a != b]
    cells = [cell("d2d", "put", GIB, f"cuda:{a}", f"cuda:{b}", gbps=380.0 + a - b) for a, b in pairs]
    report = m.TransferReport(tuple(cells), m.Roofs(), fastest_paths(cells), (), {})
    screen = _Terminal()
    for name, value in (("COLUMNS", "80"), ("TERM", "xterm-256color"), ("NO_COLOR", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "stdout", screen)
    console._console.cache_clear()
    try:
        transfer_text(report)
    finally:
        console._console.cache_clear()
    lines = screen.getvalue().splitlines()
    assert max(cell_len(line) for line in lines) <= 80
    titles = [line for line in lines if line.startswith("d2d put GB/s at 1G")]
    assert [t.rsplit(", ", 1)[1] for t in titles] == ["cuda:0 to cuda:7", "cuda:8 to cuda:15"]
    assert sum(line.startswith("cuda:15 ") for line in lines) == 2  # every source in each block


def test_figures_read_as_people_write_them_never_in_exponent_notation():
    from devctl.units import figure

    # An H100's HBM (3350 GB/s), an NVLink (450), PCIe (25.6), a CPU's small transfers (0.142).
    assert [figure(v) for v in (3350.4, 450.0, 25.63, 1.234, 0.1423, None)] == ["3350", "450", "25.6", "1.23", "0.142", "-"]
    # Three figures below 10 too, trailing zeros kept, so that a column reads alike (2.20 beside 3.11, not 2.2).
    assert [figure(v) for v in (2.2, 0.068, 9.9996, 0.0)] == ["2.20", "0.0680", "10.0", "0"]


def test_progress_counts_only_the_cells_that_run():
    """A d2d cell of a one-device run is planned (the report says why it cannot run) but is not progress: the plan's
    total leaves it out and the bar does not advance for it."""
    from devctl.render.bench import Progress

    updates: list[dict] = []

    class Bar:
        def update(self, task, **kw):
            updates.append(kw)

    progress = Progress(lambda event: event.get("direction", "?"))
    progress._bar, progress._task = Bar(), 0
    for event in ({"event": "plan", "cells": 2}, {"event": "cell", "direction": "h2d"},
                  {"event": "cell", "direction": "d2d", "counted": False}, {"event": "cell", "direction": "d2h"}):  # fmt: skip
        progress.on_event(event)
    assert [(u.get("total"), u.get("advance"), u.get("description")) for u in updates] == [
        (2, None, "measuring"), (None, 1, "done: h2d"), (None, 1, "done: d2h")
    ]  # fmt: skip
