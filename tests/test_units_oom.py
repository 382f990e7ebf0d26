"""What an out-of-memory error asked for (devctl.model.oom.parse_oom), read from the real messages of XLA's CUDA
(BFC, platform and async allocators), ROCm, TPU and CPU runtimes, and the post-mortem view of the H200's OOM
(reference/h200-observations.md section 5) as the publisher records it. Pure: no jax."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from devctl.model.oom import parse_oom, size_bytes

TIB, GIB, MIB = 1 << 40, 1 << 30, 1 << 20

# The H200's, exact (jax 0.11.2, jax-cuda13-plugin 0.11.2).
H200 = (
    "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4.00TiB with allocator GPU_0_bfc on device 0. "
    "[executable_name='jit_broadcast_in_dim'] [tf-allocator-allocation-error='']"
)
BFC_LOG = "bfc_allocator.cc:598] Allocator (GPU_0_bfc) ran out of memory trying to allocate 4.00TiB (rounded to 4398046511104)"
ASYNC_LOG = "gpu_async_1 cuMemAllocAsync failed to allocate 1225195446464 bytes: RESOURCE_EXHAUSTED: : CUDA_ERROR_OUT_OF_MEMORY: out of memory"

# message -> (requested_bytes, exact, device ordinal, family, scope, memory, free_bytes, capacity_bytes)
CASES = {
    "gpu bfc, newest (the H200)": (H200, (4 * TIB, False, 0, "gpu_bfc", "allocation", None, None, None)),
    "gpu bfc, newest, another size": (
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 33.00GiB with allocator GPU_0_bfc on device 0",
        (33 * GIB, False, 0, "gpu_bfc", "allocation", None, None, None),
    ),
    "gpu bfc, mid (no device)": (
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2.24GiB. [executable_name='jit_score_target'] [tf-allocator-allocation-error='']",
        (2405181686, False, None, "gpu_bfc", "allocation", None, None, None),
    ),
    "gpu bfc, pinned host memory": (
        "RESOURCE_EXHAUSTED: Out of host memory while trying to allocate 512.0KiB.",
        (512 * 1024, False, None, "gpu_bfc", "allocation", "pinned_host", None, None),
    ),
    "gpu bfc, old (bytes)": (
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3199993600 bytes.",
        (3199993600, True, None, "gpu_bfc", "allocation", None, None, None),
    ),
    "gpu platform allocator": (
        "RESOURCE_EXHAUSTED: Failed to allocate request for 2.99GiB (3206250496B) on device ordinal 0",
        (3206250496, True, 0, "gpu_platform", "allocation", None, None, None),
    ),
    "gpu platform allocator, older jaxlib": (
        "Resource exhausted: Failed to allocate request for 32.00MiB (33554432B) on device ordinal 0",
        (32 * MIB, True, 0, "gpu_platform", "allocation", None, None, None),
    ),
    "rocm": (
        "RESOURCE_EXHAUSTED: Failed to allocate request for 154.06GiB (165425291480B) on device ordinal 0",
        (165425291480, True, 0, "gpu_platform", "allocation", None, None, None),
    ),
    "cuda async allocator, the exception": (
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 262.56GiB.",
        (281921653309, False, None, "gpu_bfc", "allocation", None, None, None),
    ),
    "cuda async allocator, its log line": (ASYNC_LOG, (1225195446464, True, 1, "gpu_async", "allocation", None, None, None)),
    "bfc log line": (BFC_LOG, (4 * TIB, True, 0, "gpu_bfc_log", "allocation", None, None, None)),
    "tpu runtime": (
        "RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 15.65G. That was not possible. "
        "There are 11.08G free.; (0x0x0_HBM0)",
        (16804059546, False, None, "tpu_runtime", "allocation", "hbm", 11897059410, None),
    ),
    "tpu runtime, newer": (
        "RESOURCE_EXHAUSTED: E0100: RuntimeBufferAllocationFailure: Error allocating device buffer: Attempting to allocate "
        "8.00M. That was not possible. There are 6.43M free.; (0x0x1_HBM0)",
        (8 * MIB, False, None, "tpu_runtime", "allocation", "hbm", 6742344, None),
    ),
    "tpu compiler": (
        "XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 21.90G of 7.48G hbm. "
        "Exceeded hbm capacity by 14.42G.",
        (23514945946, False, None, "tpu_compile", "program", "hbm", None, 8031588844),
    ),
    "cpu": (
        "RESOURCE_EXHAUSTED: Out of memory allocating 4398046511104 bytes.",
        (4 * TIB, True, None, "cpu", "allocation", None, None, None),
    ),
    "a comma as decimal mark": (
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2,24GiB.",
        (2405181686, False, None, "gpu_bfc", "allocation", None, None, None),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_real_message_gives_its_request(name):
    message, expected = CASES[name]
    assert tuple(parse_oom(message)) == expected
    # As the job's exception says it, behind its type.
    assert tuple(parse_oom(f"jax.errors.JaxRuntimeError: {message}")) == expected


def test_sizes_as_xla_prints_them_are_base_1024_with_the_uncertainty_of_their_last_digit():
    assert size_bytes("4.00", "TiB") == (4398046511104, TIB // 100)
    assert size_bytes("512.0", "KiB") == (524288, 102)
    assert size_bytes("15.65", "G") == (16804059546, GIB // 100)
    assert size_bytes("123", "B") == (123, 1)
    assert size_bytes("3199993600", "bytes") == (3199993600, 1)


def test_the_first_phrase_after_the_status_is_the_request():
    """The compiler's BufferAssignment block after the request lists other sizes, and other allocations."""
    message = (
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 35.06GiB.\n"
        "BufferAssignment OOM Debugging.\nBufferAssignment stats:\n"
        "             parameter allocation:    1.50GiB\n"
        "        maybe_live_out allocation:   33.56GiB\n"
        "     preallocated temp allocation:   35.06GiB\n"
        "                 total allocation:   36.56GiB\n"
        "allocation 0: size 3199993600 bytes, parameter 0\n"
        "Out of memory allocating 1024 bytes."
    )
    assert parse_oom(message)[:4] == (37645388349, False, None, "gpu_bfc")
    # Before the status: a log line of another allocation is not the request.
    assert parse_oom(f"earlier: Out of memory allocating 1024 bytes.\n{CASES['rocm'][0]}").requested_bytes == 165425291480


def test_an_exact_count_elsewhere_that_agrees_with_the_shown_size_is_taken():
    """The BFC's own log line, or the async allocator's chained one, says the byte count the exception rounds."""
    found = parse_oom(f"{H200}\n{BFC_LOG}")
    assert (found.requested_bytes, found.exact, found.device_ordinal) == (4 * TIB, True, 0)
    agreeing = "gpu_async_1 cuMemAllocAsync failed to allocate 281921658880 bytes: RESOURCE_EXHAUSTED: : CUDA_ERROR_OUT_OF_MEMORY: out of memory"
    found = parse_oom(f"{CASES['cuda async allocator, the exception'][0]}\n{agreeing}")
    assert (found.requested_bytes, found.exact, found.device_ordinal) == (281921658880, True, 1)
    # One that does not agree is another allocation's: the shown size stays, and so does its lack of a device.
    found = parse_oom(f"{CASES['cuda async allocator, the exception'][0]}\n{ASYNC_LOG}")
    assert (found.requested_bytes, found.exact, found.device_ordinal) == (281921653309, False, None)


def test_a_message_without_a_request_says_nothing():
    for message in ("", "RESOURCE_EXHAUSTED: too many open files", "INTERNAL: something else"):
        assert tuple(parse_oom(message)) == (None, False, None, None, None, None, None, None)


# ---- the publisher's fields, and the post-mortem view ---------------------------------------------


def _device(platform: str, id: int, local_hardware_id: int | None) -> SimpleNamespace:
    """The attributes of a jax Device that the publisher reads."""
    return SimpleNamespace(platform=platform, id=id, local_hardware_id=local_hardware_id)


def test_the_ordinal_is_the_jobs_gpu_of_that_local_hardware_id():
    from devctl.publish.holders import requested

    one = [_device("gpu", 0, 0)]
    assert requested(H200, one)["requested_device"] == "gpu:0"
    # A second process of a cluster: its device 0 (CUDA's ordinal) has global id 8.
    cluster = [_device("gpu", 8, 0), _device("gpu", 9, 1)]
    assert requested(CASES["rocm"][0], cluster)["requested_device"] == "gpu:8"
    assert requested(ASYNC_LOG, cluster)["requested_device"] == "gpu:9"
    # No GPU of the job has that ordinal, or the message names none: unknown.
    assert requested(ASYNC_LOG, one)["requested_device"] is None
    assert requested(CASES["gpu bfc, mid (no device)"][0], one)["requested_device"] is None
    cpus = [_device("cpu", i, i) for i in range(4)]
    assert requested(H200, cpus)["requested_device"] is None
    assert requested(CASES["cpu"][0], cpus) == {
        "requested_bytes": 4 * TIB, "requested_device": None, "requested_exact": True, "requested_scope": "allocation",
        "requested_memory": None, "free_bytes": None, "capacity_bytes": None,
    }  # fmt: skip
    assert requested("INTERNAL: no size", cpus)["requested_exact"] is None


def _h200_postmortem():
    """The post-mortem of reference/h200-observations.md section 5 as the publisher now writes it: the request
    from the error, and only the 8 MiB holder held (the 4 TiB array's buffer never existed)."""
    from devctl.discovery.holders import decode
    from devctl.model.holders import POSTMORTEM_SCHEMA, PostMortem
    from devctl.publish.holders import requested

    holder = {"nbytes": 8 * MIB, "shape": [2, 1024, 1024], "dtype": "float32", "sharding": "SingleDeviceSharding(device=CudaDevice(id=0), memory_kind=device)",
              "memory_kind": "device", "devices": ["gpu:0"], "site": "oom.py:4 (holder)"}  # fmt: skip
    doc = {
        "schema": POSTMORTEM_SCHEMA, "pid": 2392, "command": ["python3", "oom.py"], "hostname": "h200", "timestamp": 1795593000.0,
        "error": f"JaxRuntimeError: {H200}"[:500], **requested(f"JaxRuntimeError: {H200}", [_device("gpu", 0, 0)]),
        "devices": [{"device": "gpu:0", "memory_stats": {"bytes_in_use": 8 * MIB, "bytes_limit": 112583507968, "peak_bytes_in_use": 8 * MIB}}],
        "total_arrays": 1, "total_bytes": 8 * MIB, "arrays": [holder], "sites": [{"site": "oom.py:4 (holder)", "arrays": 1, "nbytes": 8 * MIB}],
    }  # fmt: skip
    return decode(PostMortem, doc, POSTMORTEM_SCHEMA, "2392-1795593000.postmortem.json")


@pytest.fixture
def plain_stdout(capsys):
    """devctl's consoles bound to pytest's captured stdout (not a terminal: plain, whole lines)."""
    from devctl.render import console

    console._console.cache_clear()
    yield capsys
    console._console.cache_clear()


def test_the_h200_postmortem_says_what_was_asked_and_what_was_held(plain_stdout):
    from devctl.model.holders import POSTMORTEMS_SCHEMA, PostMortemReport, requested_text
    from devctl.render.holders import render_postmortems

    pm = _h200_postmortem()
    assert (pm.requested_bytes, pm.requested_device, pm.requested_exact) == (4398046511104, "gpu:0", False)
    assert (pm.total_arrays, pm.total_bytes) == (1, 8 * MIB)
    assert requested_text(pm) == "asking for 4.0 TiB on gpu:0"
    render_postmortems(PostMortemReport(POSTMORTEMS_SCHEMA, "/run/devctl", (pm,)))
    out = plain_stdout.readouterr().out
    assert "ran out of memory at" in out and ", asking for 4.0 TiB on gpu:0" in out, out
    assert "it held 1 live array, 8.0 MiB:" in out and "4.0 TiB  " not in out, out
    assert "oom.py:4 (holder)" in out and "oom.py:6" not in out


def test_the_request_is_said_with_what_the_message_knows():
    from dataclasses import replace

    from devctl.model.holders import requested_text

    pm = _h200_postmortem()
    assert requested_text(replace(pm, requested_device=None)) == "asking for 4.0 TiB"
    assert requested_text(replace(pm, requested_bytes=None)) == ""
    assert requested_text(replace(pm, requested_device=None, requested_memory="pinned_host")) == "asking for 4.0 TiB of pinned host memory"
    tpu = replace(pm, requested_device=None, requested_bytes=8 * MIB, requested_memory="hbm", free_bytes=6742344)
    assert requested_text(tpu) == "asking for 8.0 MiB (6.4 MiB free)"
    compiled = replace(pm, requested_device=None, requested_bytes=23514945946, requested_scope="program", requested_memory="hbm", capacity_bytes=8031588844)
    assert requested_text(compiled) == "compiling a program that needs 21.9 GiB of 7.5 GiB hbm"
