"""Published peaks per accelerator kind: the roofs `bench memory` and `bench matmul` (and `bench collective`'s
link figures) are set against.

    peak_for(device_kind) -> Peak | None

Pure data, looked up by the `device_kind` string JAX reports ("NVIDIA H100 80GB HBM3", "TPU v5 lite"). Every
figure is the vendor's own, per chip or GPU, and each comes with its source in a comment; a figure that could not
be confirmed is None (with a comment), never a guess. Units:

  hbm_gbps          memory bandwidth, decimal GB/s
  bf16_tflops       dense (no 2:4 sparsity) BF16 matrix TFLOP/s (tensor cores, MXU)
  f32_tflops        dense FP32 TFLOP/s at full FP32 precision: on GPUs the non-tensor FP32 figure (what a matmul at
                    jax.lax.Precision.HIGHEST can reach; NVIDIA's TF32 figure is a lower precision and is kept apart,
                    tf32_tflops). TPUs publish no FP32 matmul peak: None.
  tf32_tflops       dense TF32 tensor-core TFLOP/s (NVIDIA), the precision JAX's DEFAULT f32 matmul may use on GPU
  link_total_gbps   the chip's published GPU-to-GPU link bandwidth, both directions of every link added (NVLink,
                    Infinity Fabric, ICI), decimal GB/s
  links             how many links make up link_total_gbps, where published

NVIDIA quotes tensor-core figures "with sparsity"; the dense figure is half of it, which is what is stored here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    """One device kind's published peaks; None where the vendor publishes none or it could not be confirmed."""

    name: str  # the product, as its datasheet names it ("H100 SXM")
    hbm_gbps: float | None
    bf16_tflops: float | None
    f32_tflops: float | None
    tf32_tflops: float | None
    link_total_gbps: float | None
    links: int | None
    source: str  # the datasheet or page the figures come from

    @property
    def link_gbps(self) -> float | None:
        """One link, one direction (decimal GB/s): what a ring neighbour's ppermute can reach at most."""
        if self.link_total_gbps is None or not self.links:
            return None
        return self.link_total_gbps / self.links / 2


# ---- NVIDIA -------------------------------------------------------------------------------------------------
# H100 SXM5 / PCIe: NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/, "H100 datasheet"):
# SXM 3.35 TB/s, FP32 67, TF32 989* and BF16 1,979* (*with sparsity), NVLink 900 GB/s (18 NVLink4 links);
# PCIe 2 TB/s, FP32 51, TF32 756*, BF16 1,513*, NVLink bridge 600 GB/s.
H100_SXM = Peak("H100 SXM", 3350, 989.5, 67, 494.5, 900, 18, "NVIDIA H100 Tensor Core GPU datasheet (SXM5)")
H100_PCIE = Peak("H100 PCIe", 2000, 756.5, 51, 378, 600, None, "NVIDIA H100 Tensor Core GPU datasheet (PCIe)")
# H200 SXM: NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200/): 4.8 TB/s HBM3e; the same
# GH100 compute as H100 SXM (FP32 67, TF32 989*, BF16 1,979*), NVLink 900 GB/s.
H200 = Peak("H200 SXM", 4800, 989.5, 67, 494.5, 900, 18, "NVIDIA H200 Tensor Core GPU datasheet (SXM)")
# A100: NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): FP32 19.5,
# TF32 312*, BF16 624*; memory 40GB 1,555 GB/s, 80GB PCIe 1,935 GB/s, 80GB SXM 2,039 GB/s; NVLink 600 GB/s
# (SXM: 12 NVLink3 links; PCIe: an NVLink bridge for 2 GPUs, links not stated).
_A100 = "NVIDIA A100 Tensor Core GPU datasheet"
A100_SXM_40 = Peak("A100 40GB SXM", 1555, 312, 19.5, 156, 600, 12, _A100)
A100_PCIE_40 = Peak("A100 40GB PCIe", 1555, 312, 19.5, 156, 600, None, _A100)
A100_SXM_80 = Peak("A100 80GB SXM", 2039, 312, 19.5, 156, 600, 12, _A100)
A100_PCIE_80 = Peak("A100 80GB PCIe", 1935, 312, 19.5, 156, 600, None, _A100)
# B200 (HGX B200, 1,000 W): NVIDIA HGX B200 / DGX B200 datasheet: 8 TB/s HBM3e, FP32 80, TF32 2.2 PF* and
# BF16 4.5 PF* per GPU, NVLink5 1.8 TB/s (18 links).
B200 = Peak("B200 (HGX)", 8000, 2250, 80, 1100, 1800, 18, "NVIDIA HGX B200 datasheet (per GPU)")
# L4: NVIDIA L4 Tensor Core GPU datasheet: 300 GB/s GDDR6, FP32 30.3, TF32 120*, BF16 242*; no NVLink.
L4 = Peak("L4", 300, 121, 30.3, 60, None, None, "NVIDIA L4 Tensor Core GPU datasheet")

# ---- AMD ------------------------------------------------------------------------------------------------------
# MI300X: AMD Instinct MI300X data sheet (amd.com/en/products/accelerators/instinct/mi300/mi300x.html): 5.3 TB/s
# HBM3, FP32 (vector and matrix) 163.4, TF32 653.7, BF16 1,307.4 dense; 7 Infinity Fabric links of 128 GB/s
# (both directions) = 896 GB/s.
MI300X = Peak("MI300X", 5300, 1307.4, 163.4, 653.7, 896, 7, "AMD Instinct MI300X data sheet")

# ---- Google TPU (per chip; cloud.google.com/tpu/docs/<version>, "System architecture") -------------------------
# TPUs publish no FP32 or TF32 matmul peak (FP32 at HIGHEST precision runs as several bf16 passes): None.
# v4: 275 TFLOPs bf16, HBM2 1,200 GBps; the docs give no per-chip ICI bandwidth (None).
TPU_V4 = Peak("TPU v4", 1200, 275, None, None, None, None, "cloud.google.com/tpu/docs/v4")
# v5e: 197 TFLOPs bf16, 819 GBps HBM2, 400 GBps bidirectional ICI per chip, 4 ICI ports.
TPU_V5E = Peak("TPU v5e", 819, 197, None, None, 400, 4, "cloud.google.com/tpu/docs/v5e")
# v5p: 459 TFLOPs bf16, 2,765 GBps HBM2e, 1,200 GBps bidirectional ICI per chip (4,800 Gbps), 3D torus: 6 ports.
TPU_V5P = Peak("TPU v5p", 2765, 459, None, None, 1200, 6, "cloud.google.com/tpu/docs/v5p")
# v6e (Trillium): 918 TFLOPs bf16, 1,638 GBps HBM, 800 GBps bidirectional ICI per chip, 4 ICI ports.
TPU_V6E = Peak("TPU v6e", 1638, 918, None, None, 800, 4, "cloud.google.com/tpu/docs/v6e")
# 7x (Ironwood): 2,307 TFLOPs bf16 (cloud.google.com/tpu/docs/tpu7x); 7.37 TB/s HBM and 1.2 TBps bidirectional ICI
# (Google's Ironwood announcement, April 2025). The number of ICI ports is not published in the pages found (None).
# Each chip has two TensorCores; where JAX shows them as two devices, each device has a share of these figures.
TPU_7X = Peak("TPU7x", 7370, 2307, None, None, 1200, None, "cloud.google.com/tpu/docs/tpu7x; Google Ironwood announcement")

# device_kind patterns, most specific first; matched case-insensitively against the whole string. A kind that
# matches none (H100 NVL, H200 NVL, a new part) has no roof: better none than the wrong one.
_RULES: tuple[tuple[str, Peak], ...] = (
    (r"nvidia h100 (80gb hbm3|sxm.*)", H100_SXM),
    (r"nvidia h100 pcie", H100_PCIE),
    (r"nvidia h200( sxm.*| 141gb.*)?", H200),
    (r"nvidia a100[- ]sxm4?[- ]80gb", A100_SXM_80),
    (r"nvidia a100[- ]sxm4?[- ]40gb", A100_SXM_40),
    (r"nvidia a100[- ]pcie[- ]40gb", A100_PCIE_40),
    (r"nvidia a100 80gb pcie", A100_PCIE_80),
    (r"nvidia b200", B200),
    (r"nvidia l4", L4),
    (r"(amd instinct )?mi300x( oam)?", MI300X),
    (r"tpu v4", TPU_V4),
    (r"tpu v5( lite|e)", TPU_V5E),
    (r"tpu v5p?", TPU_V5P),
    (r"tpu v6( lite|e)", TPU_V6E),
    (r"tpu ?7x", TPU_7X),
)

PEAKS: tuple[Peak, ...] = tuple(dict.fromkeys(peak for _, peak in _RULES))


def peak_for(device_kind: str | None) -> Peak | None:
    """The published peaks of this JAX device_kind; None when devctl knows none (CPU, an unlisted part)."""
    if not device_kind:
        return None
    kind = " ".join(device_kind.split()).lower()
    for pattern, peak in _RULES:
        if re.fullmatch(pattern, kind):
            return peak
    return None


def no_peak_reason(device_kind: str | None, platform: str | None = None) -> str:
    """Why a device has no roof, in words for a report."""
    if platform == "cpu":
        return "no published peak for a CPU device: devices are compared with each other"
    return f"no published peak known for device kind {device_kind!r}: devices are compared with each other"
