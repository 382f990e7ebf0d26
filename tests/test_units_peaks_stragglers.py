"""The straggler rule on hand-made figures, the published peaks table, and the per-device comparison built from
them (devctl.model.stragglers, devctl.model.peaks, devctl.model.bench): pure functions, no jax."""

from __future__ import annotations

import math

import pytest

from devctl.model.bench import compare, straggler_rule
from devctl.model.peaks import PEAKS, peak_for
from devctl.model.stragglers import Straggler, find_stragglers

# ---- the straggler rule --------------------------------------------------------------------------------------


def test_one_slow_device_among_eight_is_named_with_its_figure_and_the_median():
    values = {f"gpu:{i}": 2900.0 + i for i in range(8)}
    values["gpu:5"] = 2268.0
    found = find_stragglers(values)
    assert [s.name for s in found] == ["gpu:5"]
    s = found[0]
    assert s.value == 2268.0
    assert s.median == 2903.0  # the median of the seven others
    assert s.deviation_pct == pytest.approx(100 * (2903.0 - 2268.0) / 2903.0)
    assert s.threshold_pct == 10.0  # the floor: identical GPUs scatter far less than 10%
    assert s.describe("GB/s", digits=0) == "gpu:5 2268 GB/s, 22% below the median 2903 GB/s"


def test_within_the_floor_nobody_is_named():
    # 9% below the median: worse, but not by more than the 10% floor.
    assert find_stragglers({"a": 100.0, "b": 101.0, "c": 99.0, "d": 91.0}) == []
    assert [s.name for s in find_stragglers({"a": 100.0, "b": 101.0, "c": 99.0, "d": 89.0})] == ["d"]


def test_a_faster_device_is_not_a_straggler():
    assert find_stragglers({"a": 100.0, "b": 100.0, "c": 100.0, "d": 200.0}) == []


def test_the_mad_term_widens_the_bar_when_every_device_scatters():
    # f's peers scatter by ~+-15%: their median is 100 and MAD 10; 3 x 1.4826 x 10 = 44.5% of the median, not 10%.
    values = {"a": 85.0, "b": 90.0, "c": 100.0, "d": 110.0, "e": 115.0, "f": 60.0}
    found = find_stragglers(values)
    assert found == []  # 60 is 40% below its peers' median 100: inside their scatter
    values["f"] = 40.0
    assert [s.name for s in find_stragglers(values)] == ["f"]
    assert find_stragglers(values)[0].threshold_pct > 10.0


def test_floor_and_k_are_parameters():
    values = {"a": 100.0, "b": 100.0, "c": 100.0, "d": 95.0}
    assert find_stragglers(values) == []
    assert [s.name for s in find_stragglers(values, floor_pct=4.0)] == ["d"]


def test_lower_is_better_figures():
    times = {"host0": 1.00, "host1": 1.02, "host2": 0.99, "host3": 1.50}
    found = find_stragglers(times, higher_is_better=False)
    assert [s.name for s in found] == ["host3"]
    assert found[0].describe("s", digits=2) == "host3 1.50 s, 50% above the median 1.00 s"


def test_a_dead_device_is_named_and_does_not_drag_the_median():
    found = find_stragglers({"a": 100.0, "b": 0.0})
    assert [(s.name, s.value, s.median) for s in found] == [("b", 0.0, 100.0)]
    found = find_stragglers({"a": 100.0, "b": 98.0, "c": 0.0})
    assert [s.name for s in found] == ["c"] and found[0].median == 99.0  # b's reference leaves the dead c out too


def test_several_stragglers_worst_first_then_by_name():
    values = {"a": 100.0, "b": 100.0, "c": 100.0, "d": 100.0, "e": 100.0, "x": 50.0, "y": 70.0, "z": 70.0}
    assert [s.name for s in find_stragglers(values)] == ["x", "y", "z"]


@pytest.mark.parametrize("values", [{}, {"a": 1.0}, {"a": math.nan, "b": 1.0}, {"a": math.inf, "b": 2.0}, {"a": 0.0, "b": 0.0}])
def test_no_peers_nothing_to_compare(values):
    assert find_stragglers(values) == []


def test_two_peers_the_slower_is_named_past_the_floor():
    # Each is compared with the other: 75 is 25% below 100; 91 is 9% below, inside the floor.
    assert [s.name for s in find_stragglers({"a": 100.0, "b": 75.0})] == ["b"]
    assert find_stragglers({"a": 100.0, "b": 91.0}) == []


def test_three_peers_one_slow_and_one_a_little_slow():
    # With all three in one MAD, 90 would widen the bar so that 50 passed; leave-one-out judges 50 by {100, 90}.
    found = find_stragglers({"a": 100.0, "b": 90.0, "c": 50.0})
    assert [s.name for s in found] == ["c"] and found[0].median == 95.0


def test_straggler_is_a_frozen_record():
    s = Straggler("a", 1.0, 2.0, 50.0, 10.0)
    with pytest.raises(AttributeError):
        s.name = "b"  # type: ignore[misc]


# ---- the peaks table -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "name", "hbm", "bf16"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 3350, 989.5),
        ("NVIDIA H100 PCIe", "H100 PCIe", 2000, 756.5),
        ("NVIDIA H200", "H200 SXM", 4800, 989.5),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 2039, 312),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM", 1555, 312),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe", 1555, 312),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 1935, 312),
        ("NVIDIA B200", "B200 (HGX)", 8000, 2250),
        ("NVIDIA L4", "L4", 300, 121),
        ("AMD Instinct MI300X", "MI300X", 5300, 1307.4),
        ("TPU v4", "TPU v4", 1200, 275),
        ("TPU v5 lite", "TPU v5e", 819, 197),
        ("TPU v5", "TPU v5p", 2765, 459),
        ("TPU v6 lite", "TPU v6e", 1638, 918),
        ("TPU7x", "TPU7x", 7370, 2307),
    ],
)
def test_device_kinds_find_their_datasheet(kind, name, hbm, bf16):
    peak = peak_for(kind)
    assert peak is not None and peak.name == name
    assert (peak.hbm_gbps, peak.bf16_tflops) == (hbm, bf16)
    assert peak.source


@pytest.mark.parametrize("kind", ["cpu", "", None, "NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA GeForce RTX 4090", "TPU v3"])
def test_unknown_kinds_have_no_roof_rather_than_a_wrong_one(kind):
    assert peak_for(kind) is None


def test_every_peak_is_plausible_and_sourced():
    for p in PEAKS:
        assert p.source, p.name
        assert p.hbm_gbps is None or 100 <= p.hbm_gbps <= 10_000, p
        assert p.bf16_tflops is None or 50 <= p.bf16_tflops <= 5_000, p
        # Dense BF16 on tensor cores / MXUs is always far above FP32 math.
        assert p.f32_tflops is None or p.bf16_tflops is None or p.f32_tflops < p.bf16_tflops, p
        assert p.tf32_tflops is None or p.bf16_tflops is None or p.tf32_tflops <= p.bf16_tflops, p
    assert all(peak_for(k).f32_tflops is None for k in ("TPU v4", "TPU v5 lite", "TPU v5", "TPU v6 lite", "TPU7x"))


def test_per_link_bandwidth_is_one_direction_of_one_link():
    h100 = peak_for("NVIDIA H100 80GB HBM3")
    assert h100.link_gbps == pytest.approx(900 / 18 / 2)  # NVLink4: 25 GB/s per direction per link
    assert peak_for("TPU v5 lite").link_gbps == pytest.approx(50)  # 400 GBps bidirectional over 4 ports
    assert peak_for("TPU v4").link_gbps is None  # not published: unknown, not guessed


# ---- the per-device comparison ------------------------------------------------------------------------------


def test_compare_sets_every_device_against_its_roof_and_the_median():
    best = {"cuda:0": (2900.0, 4 << 30), "cuda:1": (2890.0, 4 << 30), "cuda:2": (2000.0, 1 << 30), "cuda:3": (None, None)}
    kinds = dict.fromkeys(best, "NVIDIA H100 80GB HBM3")
    comp = compare("copy", "GB/s", best, kinds, dict.fromkeys(best, 3350.0), roof_name="H100 SXM", roof_source="datasheet", roof_reason=None)
    by = {f.device: f for f in comp.figures}
    assert comp.median == 2890.0
    assert by["cuda:0"].pct_of_roof == pytest.approx(100 * 2900 / 3350)
    assert by["cuda:2"].straggler and by["cuda:2"].vs_median_pct == pytest.approx(100 * (2000 / 2890 - 1))
    assert by["cuda:3"].value is None and by["cuda:3"].size is None and not by["cuda:3"].straggler
    assert [s.name for s in comp.stragglers] == ["cuda:2"]
    assert comp.rule == straggler_rule()


def test_compare_without_roofs_compares_devices_with_each_other():
    best = {"cpu:0": (25.0, 1), "cpu:1": (25.5, 1)}
    comp = compare("copy", "GB/s", best, dict.fromkeys(best, "cpu"), {}, roof_name=None, roof_source=None, roof_reason="no peak")
    assert all(f.roof is None and f.pct_of_roof is None for f in comp.figures)
    assert comp.stragglers == () and comp.roof_reason == "no peak"
    assert comp.median == pytest.approx(25.25)


def test_compare_names_a_device_slow_on_its_median_and_on_its_fastest_call():
    """A device whose typical call was slowed by another job but whose fastest call matches its peers is not a
    straggler, nor one whose only deficit is that the others had one lucky quiet call; one slow on both is."""
    kinds = dict.fromkeys(("cpu:0", "cpu:1", "cpu:2", "cpu:3"), "cpu")

    def run(best, fastest):
        return compare("copy", "GB/s", {d: (v, 1) for d, v in best.items()}, kinds, {}, fastest=fastest,
                       roof_name=None, roof_source=None, roof_reason=None)  # fmt: skip

    medians = {"cpu:0": 10.0, "cpu:1": 10.1, "cpu:2": 7.0, "cpu:3": 9.9}
    assert run(medians, {"cpu:0": 10.5, "cpu:1": 10.6, "cpu:2": 10.4, "cpu:3": 10.5}).stragglers == ()
    assert run({**medians, "cpu:2": 9.8}, {"cpu:0": 10.5, "cpu:1": 10.6, "cpu:2": 8.0, "cpu:3": 10.5}).stragglers == ()
    comp = run(medians, {"cpu:0": 10.5, "cpu:1": 10.6, "cpu:2": 7.2, "cpu:3": 10.5})
    assert [s.name for s in comp.stragglers] == ["cpu:2"] and comp.stragglers[0].value == 7.0  # the median figure
    assert {f.device: f.fastest for f in comp.figures}["cpu:2"] == 7.2
