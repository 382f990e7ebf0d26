"""libtpu's runtime metrics service (`tpu.monitoring.runtime.RuntimeMetricService`), as generated Python.

The modules here are tpu-info's generated code (Apache-2.0, Copyright 2023 Google LLC), vendored from the
tpu-info 0.14.2 wheel on PyPI, which ships them without the .proto sources: see the header of each file for
the wheel's hash and the two lines changed. The service is wire-compatible with the one libtpu embeds.
They import grpc and protobuf, devctl's optional extra `tpu-metrics`: import them only inside the function
that asks the service (devctl.discovery.tpu_runtime), never on `--help` or completion.
"""
