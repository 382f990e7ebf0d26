"""A GPU's NVML at its C boundary: pynvml's calls replaced on the real module (as test_nvml_reads does), answering
what NVML said of a bf16 matmul loop on a real H200 (reference/h200-observations.md, last section); the request
structure handed to nvmlGpmMetricsGet is pynvml's own ctypes one. Used by tests/test_gpm.py and
tests/test_check.py (in a devctl subprocess too: `install`, from a sitecustomize the test writes)."""

from __future__ import annotations

import ctypes
import json
from types import SimpleNamespace

# GPM's figures for a jitted 8192x8192 bf16 matmul in a loop on an H200 (percent; PCIe in MiB/s).
H200_MATMUL = {
    "NVML_GPM_METRIC_SM_UTIL": 64.30,
    "NVML_GPM_METRIC_SM_OCCUPANCY": 9.51,
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": 63.05,
    "NVML_GPM_METRIC_HMMA_TENSOR_UTIL": 63.05,
    "NVML_GPM_METRIC_DRAM_BW_UTIL": 12.53,
    "NVML_GPM_METRIC_GRAPHICS_UTIL": 69.81,
    "NVML_GPM_METRIC_PCIE_TX_PER_SEC": 2.0,
    "NVML_GPM_METRIC_PCIE_RX_PER_SEC": 3.0,
}
# The same loop with a 1 GiB `x + 1` loop beside it: tensor falls, DRAM rises.
H200_MATMUL_AND_COPY = {**H200_MATMUL, "NVML_GPM_METRIC_SM_UTIL": 89.86, "NVML_GPM_METRIC_SM_OCCUPANCY": 53.53,
                        "NVML_GPM_METRIC_ANY_TENSOR_UTIL": 29.38, "NVML_GPM_METRIC_DRAM_BW_UTIL": 55.29,
                        "NVML_GPM_METRIC_GRAPHICS_UTIL": 99.89}  # fmt: skip


class FakeGpm:
    """Three GPUs: h0 an H200 with GPM (its NVLink counters unsupported: a PCIe card), h1 an A100 without GPM,
    h2 an H100 in MIG mode with two GPU instances (ids 1 and 2) that GPM samples one by one."""

    def __init__(self, monkeypatch, mig: bool = False, *, gpus: int | None = None, h0: dict | None = None,
                 utilization: tuple[int, int] | None = (78, 18), gpm: bool = True):  # fmt: skip
        """`gpus`: how many of the three there are (h0 first); `h0`: the H200's GPM figures (default H200_MATMUL);
        `utilization`: NVML's (gpu, memory) percentages on every GPU (None: NVML has none); `gpm=False`: no GPU has GPM."""
        import pynvml

        self.pynvml = pynvml
        self.calls = {"init": 0, "shutdown": 0}
        self.samples: dict[int, tuple] = {}  # address -> (handle, gpu instance id) it was taken of
        self.alive: dict[int, object] = {}  # allocated and not freed
        self.taken = 0
        self.figures = {"h0": h0 or H200_MATMUL, "h2": H200_MATMUL, ("h2", 1): H200_MATMUL, ("h2", 2): H200_MATMUL_AND_COPY}
        self.gpus = gpus if gpus is not None else 3 if mig else 2
        names = {
            "nvmlInit": lambda: self._count("init"),
            "nvmlShutdown": lambda: self._count("shutdown"),
            "nvmlDeviceGetCount": lambda: self.gpus,
            "nvmlDeviceGetHandleByIndex": lambda i: f"h{i}",
            "nvmlDeviceGetUtilizationRates": lambda h: self._utilization(utilization),
            "nvmlGpmQueryDeviceSupport": lambda h: SimpleNamespace(isSupportedDevice=int(gpm and h in ("h0", "h2"))),
            "nvmlDeviceGetMigMode": self._mig_mode,
            "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7,
            "nvmlDeviceGetMigDeviceHandleByIndex": self._mig_handle,
            "nvmlDeviceGetGpuInstanceId": lambda m: {"mig0": 1, "mig1": 2}[m],
            "nvmlDeviceGetUUID": lambda h: f"MIG-{h}",
            "nvmlGpmSampleAlloc": self._alloc,
            "nvmlGpmSampleFree": self._free,
            "nvmlGpmSampleGet": self._get,
            "nvmlGpmMigSampleGet": lambda h, gi, s: self._get(h, s, gi),
            "nvmlGpmMetricsGet": self._metrics,
            "nvmlDeviceGetProcessUtilization": self._process_utilization,
        }
        self.since: list[int] = []  # the timestamps devctl asked per-process samples since
        for name, fn in names.items():
            monkeypatch.setattr(pynvml, name, fn)

    def _utilization(self, rates):
        if rates is None:
            raise self.pynvml.NVMLError_NotSupported()
        return SimpleNamespace(gpu=rates[0], memory=rates[1])

    def _count(self, what: str) -> None:
        self.calls[what] += 1

    def _process_utilization(self, h, since_us):
        self.since.append(since_us)
        if h != "h0":
            raise self.pynvml.NVMLError_NotFound()  # what NVML says of a GPU no process used in the window
        sample = self.pynvml.c_nvmlProcessUtilizationSample_t
        return [sample(4242, since_us + 1, 80, 20, 0, 0), sample(4242, since_us + 2, 76, 16, 0, 0), sample(77, since_us + 3, 2, 0, 0, 0)]

    def _mig_mode(self, h):
        if h == "h2":
            return [1, 1]
        raise self.pynvml.NVMLError_NotSupported()

    def _mig_handle(self, h, i):
        if i < 2:
            return f"mig{i}"
        raise self.pynvml.NVMLError_NotFound()

    def _alloc(self):
        struct = self.pynvml.struct_c_nvmlGpmSample_t()
        sample = ctypes.pointer(struct)
        self.alive[ctypes.addressof(struct)] = struct
        return sample

    def _free(self, sample):
        del self.alive[ctypes.addressof(sample.contents)]

    def _get(self, handle, sample, gi=None):
        if handle == "h2" and gi is None:
            raise self.pynvml.NVMLError_NotSupported()  # a GPU in MIG mode is sampled per instance
        self.samples[ctypes.addressof(sample.contents)] = (handle, gi)
        self.taken += 1
        return sample

    def _metrics(self, request):
        handle, gi = self.samples[ctypes.addressof(request.sample1.contents)]
        assert self.samples[ctypes.addressof(request.sample2.contents)] == (handle, gi), "two samples of different GPUs"
        assert request.version == self.pynvml.NVML_GPM_METRICS_GET_VERSION
        figures = self.figures[handle if gi is None else (handle, gi)]
        by_id = {getattr(self.pynvml, name): value for name, value in figures.items()}
        for i in range(request.numMetrics):
            m = request.metrics[i]
            if m.metricId in by_id:
                m.value, m.nvmlReturn = by_id[m.metricId], self.pynvml.NVML_SUCCESS
            else:
                m.value, m.nvmlReturn = 0.0, self.pynvml.NVML_ERROR_NOT_SUPPORTED
        return request


# An idle H200: GPM counts nothing busy (what it reads between jobs).
H200_IDLE = {name: 0.0 for name in H200_MATMUL}


class _SetAttr:
    """monkeypatch's setattr, for a process that is not a test (install)."""

    def setattr(self, target, name, value):
        setattr(target, name, value)


def install(spec: str) -> FakeGpm:
    """The fake, in this whole process, from JSON: FakeGpm's keyword arguments ("h0": "idle" or "matmul")."""
    kwargs = json.loads(spec)
    kwargs["h0"] = {"idle": H200_IDLE, "matmul": H200_MATMUL}[kwargs.get("h0", "matmul")]
    if "utilization" in kwargs:
        kwargs["utilization"] = tuple(kwargs["utilization"])
    return FakeGpm(_SetAttr(), **kwargs)
