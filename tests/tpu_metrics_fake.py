"""A fake libtpu runtime metrics service, from the same generated code devctl's client uses.

In the test process: `FakeMetrics(...).start()` serves on localhost:0 and says its port. As a process of its
own, standing in for one TPU job: `python tests/tpu_metrics_fake.py SPEC_JSON` serves on the port its
environment's TPU_RUNTIME_METRICS_PORTS gives (0: any), prints the port, and serves until its stdin closes.

A spec: {"hbm_used": [..per TensorCore..], "hbm_total": [..], "duty": [..per chip or core..],
"hbm_util": [..] or absent, "layout": "old" (an integer `device-id`, libtpu before ~2025) or "new"
(`device_ordinal` as a string in a key-value list), "first_ordinal": 0, "sleep_s": 0 (a stalled server),
"code": null or a grpc.StatusCode name every call fails with}.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent import futures

import grpc

from devctl.discovery.tpu_proto import tpu_metric_service_pb2 as pb
from devctl.discovery.tpu_proto import tpu_metric_service_pb2_grpc as pb_grpc

NAMES = {
    "hbm_used": "tpu.runtime.hbm.memory.usage.bytes",
    "hbm_total": "tpu.runtime.hbm.memory.total.bytes",
    "duty": "tpu.runtime.tensorcore.dutycycle.percent",
    "hbm_util": "tpu.runtime.hbm.utilization.percent",
}


def _metric(ordinal: int, value, layout: str) -> pb.Metric:
    if layout == "old":
        attribute = pb.Attribute(key="device-id", value=pb.AttrValue(int_attr=ordinal))
    else:
        kv = pb.KeyValueList(
            attributes=[
                pb.Attribute(key="device_ordinal", value=pb.AttrValue(string_attr=str(ordinal))),
                pb.Attribute(key="core_type", value=pb.AttrValue(string_attr="tensor_core")),
            ]
        )
        attribute = pb.Attribute(key="device", value=pb.AttrValue(kvlist_attr=kv))
    gauge = pb.Gauge(as_double=value) if isinstance(value, float) else pb.Gauge(as_int=value)
    return pb.Metric(attribute=attribute, gauge=gauge)


class FakeMetrics(pb_grpc.RuntimeMetricServiceServicer):
    def __init__(self, spec: dict):
        self.spec = spec
        self.requests: list[tuple[str, bool]] = []
        self.server: grpc.Server | None = None
        self.port = 0

    def GetRuntimeMetric(self, request, context):
        self.requests.append((request.metric_name, request.skip_node_aggregation))
        if self.spec.get("sleep_s"):
            time.sleep(self.spec["sleep_s"])
        if self.spec.get("code"):
            context.abort(getattr(grpc.StatusCode, self.spec["code"]), f"fake {self.spec['code']}")
        key = next((k for k, v in NAMES.items() if v == request.metric_name), None)
        if key is None or key not in self.spec:
            context.abort(grpc.StatusCode.NOT_FOUND, f"metric {request.metric_name} not found")
        first = self.spec.get("first_ordinal", 0)
        layout = self.spec.get("layout", "old")
        metrics = [_metric(first + i, v, layout) for i, v in enumerate(self.spec[key])]
        # The service lists devices in no promised order.
        metric = pb.TPUMetric(name=request.metric_name, description="fake", metrics=list(reversed(metrics)))
        return pb.MetricResponse(metric=metric)

    def start(self, port: int = 0) -> int:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RuntimeMetricServiceServicer_to_server(self, self.server)
        # Local credentials, as libtpu's service accepts them (tpu-info's own fake did the same).
        self.port = self.server.add_secure_port(f"localhost:{port}", grpc.local_server_credentials())
        self.server.start()
        return self.port

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=None)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    fake = FakeMetrics(json.loads(sys.argv[1]))
    # FAKE_BIND: a job whose TPU_RUNTIME_METRICS_PORTS lists several ports, serving on one of them.
    port = fake.start(int(os.environ.get("FAKE_BIND") or os.environ.get("TPU_RUNTIME_METRICS_PORTS", "0").split(",")[0] or 0))
    print(port, flush=True)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait()
    fake.stop()
