"""--host-root against trees prepared to make devctl leave them, hang, or write escape sequences to a terminal.

Each hostile tree (hosttrees.hostile_host) has links out of the tree to files beside it that carry a
unique marker; whatever devctl read from there would show up in its output, so the marker's absence
from stdout, stderr and JSON proves nothing outside was read. An audit hook on `open` and `os.listdir`
proves the same for the discovery modules directly, and that no device node is ever opened.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading
import uuid

import pytest
from conftest import devctl_env, run_devctl, validate_schema
from hosttrees import (
    ESCAPES,
    OUTSIDE_DRIVER_VERSION,
    base_host,
    hostile_host,
    outside_files,
    tpu_v4_host,
)

from devctl.discovery import amd, host, machine_facts, nvidia_pci, pci, procs, tpu
from devctl.hostroot import HostRoot
from devctl.model import to_jsonable
from devctl.text import printable

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")  # what a terminal acts on (tab and newline aside)


@pytest.fixture
def marker() -> str:
    return f"DEVCTL-OUTSIDE-{uuid.uuid4().hex}"


@pytest.fixture
def hostile(tmp_path, marker):
    return hostile_host(tmp_path, marker)


def bounded(fn, *args, limit: float = 60, **kwargs):
    """fn's result, from a thread that must finish: a read blocked on a FIFO fails the test instead of hanging it."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # re-raised below, in the test's thread
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"{fn.__name__} is still blocked (a FIFO opened for reading waits for a writer forever)"
    if "error" in box:
        raise box["error"]
    return box["value"]


def discover_all(root: HostRoot) -> dict:
    """Every discovery reader that goes through a HostRoot, as JSON-ready data."""
    return to_jsonable(
        {
            "tpu": tpu.tpu_info(root, environ={}),
            "nvidia_nodes": nvidia_pci.nvidia_device_nodes(root),
            "nvidia_visible": nvidia_pci.has_visible_nvidia_gpu(root),
            "nvidia_pci": nvidia_pci.nvidia_pci_devices(root),
            "amd": amd.amd_report(root),
            "host": host.host_info(root),
            "facts": machine_facts.machine_facts(root, environ={}),
        }
    )


# --- what the file system sees: an audit hook on open and listdir ---------------------------------------

_AUDITED: list[tuple[str, str]] | None = None


def _audit(event: str, args: tuple) -> None:
    if _AUDITED is not None and event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes)):
        path = os.fsdecode(args[0])
        _AUDITED.append((event, os.path.abspath(path)))


sys.addaudithook(_audit)  # audit hooks cannot be removed; this one records only inside `audited`


def audited(fn, *args):
    global _AUDITED
    _AUDITED = []
    try:
        return bounded(fn, *args), list(_AUDITED)
    finally:
        _AUDITED = None


def test_discovery_opens_nothing_outside_the_tree_and_no_device_node(hostile, marker):
    bounded(discover_all, base_host(hostile.path.parent / "warm").root)  # imports done, so only reads remain
    report, seen = audited(discover_all, hostile.root)
    root = os.path.realpath(hostile.path)
    # devctl's own capabilities (/proc/self/status) decide its advice; that is this process, not the tree.
    outside = [p for _, p in seen if not (p == root or p.startswith(root + "/") or p.startswith("/proc/self/"))]
    assert outside == []
    assert [p for e, p in seen if e == "open" and p.startswith(root + "/dev/")] == []  # nodes are stat'ed, never opened
    assert seen, "the audit hook saw no read at all"
    text = json.dumps(report)
    assert marker not in text and OUTSIDE_DRIVER_VERSION not in text


# --- links out of the tree ------------------------------------------------------------------------------


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "climbing"])
def test_a_sysfs_attribute_link_out_of_the_tree_is_not_followed(tmp_path, marker, relative):
    # The review's case: a `device` link to /etc/shadow printed its first line as the GPU's device id.
    h = base_host(tmp_path)
    out = outside_files(tmp_path, marker)
    h.pci_function("0000:18:00.0", "0x10de", "0x2330", class_code="0x030200")
    h.escape_link("/sys/bus/pci/devices/0000:18:00.0/device", out / "secret", relative=relative)
    (gpu,) = nvidia_pci.nvidia_pci_devices(h.root)
    assert gpu.address == "0000:18:00.0" and gpu.device_id == ""
    assert marker not in json.dumps(to_jsonable(gpu))


def test_an_absolute_link_is_the_hosts_own_and_resolves_inside_the_tree(tmp_path):
    h = base_host(tmp_path)
    h.file("/usr/lib/os-release", 'PRETTY_NAME="Host OS 1"\n')
    h.remove("/etc/os-release")
    h.symlink("/etc/os-release", "/usr/lib/os-release")  # as on Debian and Fedora hosts
    h.file("/sys/devices/pci0000:00/0000:18:00.0/vendor", "0x10de\n")
    h.file("/sys/devices/pci0000:00/0000:18:00.0/device", "0x2330\n")
    h.symlink("/sys/bus/pci/devices/0000:18:00.0", "/sys/devices/pci0000:00/0000:18:00.0")
    assert host.host_info(h.root).os_name == "Host OS 1"
    assert [(g.address, g.device_id) for g in nvidia_pci.nvidia_pci_devices(h.root)] == [("0000:18:00.0", "0x2330")]


def test_directory_links_out_of_the_tree_are_not_listed(hostile):
    root = hostile.root
    assert "0000:99:00.0" not in [g.address for g in bounded(nvidia_pci.nvidia_pci_devices, root)]
    assert bounded(machine_facts.libcuda_versions, root) == ()  # /usr/lib/x86_64-linux-gnu leads out
    assert bounded(host.numa_nodes, root) == ()  # /sys/devices/system/node leads out
    skipped = bounded(amd.amd_report, root).skipped_nodes
    assert [n for n in skipped if n.startswith("node 2")] == ["node 2: no properties file"]
    assert root.listdir("/dev/shm") == [] and root.local("/dev/shm") is None


def test_process_links_out_of_the_tree_hold_nothing(hostile):
    # /proc/666 and /proc/669/fd lead to a directory beside the tree whose fd 3 holds /dev/vfio/5.
    holders = bounded(procs.path_holders, hostile.root, ["/dev/vfio/5"])
    assert [r.pid for r in holders["/dev/vfio/5"]] == [4242]


def test_link_targets_outside_sysfs_are_not_shown(tmp_path, marker):
    h = tpu_v4_host(tmp_path, chips=2)
    out = outside_files(tmp_path, marker)
    h.pci_function("0000:18:00.0", "0x10de", "0x2330", class_code="0x030200")
    h.escape_link("/sys/bus/pci/devices/0000:18:00.0/driver", out / f"{marker}-driver")
    # An accel device link to a directory named like a PCI address, but outside sysfs.
    h.escape_link("/sys/class/accel/accel0/device", out / "pci" / "0000:00:05.0")
    assert nvidia_pci.nvidia_pci_devices(h.root)[0].driver is None
    assert pci.link_name(h.root, "/sys/bus/pci/devices/0000:18:00.0/driver") is None
    chips = tpu.tpu_info(h.root, environ={}).chips
    # accel0's link is void, so chip 1 (0000:00:05.0) is not taken for /dev/accel0; each falls back to its index.
    assert [(c.pci_address, c.device_path) for c in chips] == [("0000:00:04.0", "/dev/accel0"), ("0000:00:05.0", "/dev/accel1")]
    assert marker not in json.dumps(to_jsonable(chips))


def test_readlink_resolves_as_the_hosts_kernel_would(tmp_path):
    h = base_host(tmp_path, layout="kernel")
    h.pci_function("0000:18:00.0", "0x10de", "0x2330", driver="nvidia", iommu_group=12)
    root = h.root
    # The bus entry is itself a link: the driver link is relative to where the function really lives.
    assert root.readlink("/sys/bus/pci/devices/0000:18:00.0/driver") == "/sys/bus/pci/drivers/nvidia"
    assert root.readlink("/sys/bus/pci/devices/0000:18:00.0/iommu_group") == "/sys/kernel/iommu_groups/12"
    h.symlink("/sys/bus/pci/devices/0000:18:00.0/driver", "../../../../../../../../../bus/pci/drivers/nvidia")
    assert root.readlink("/sys/bus/pci/devices/0000:18:00.0/driver") == "/bus/pci/drivers/nvidia"  # '..' stops at /
    assert pci.link_name(root, "/sys/bus/pci/devices/0000:18:00.0/driver") is None  # and that is not sysfs
    assert root.readlink("/sys/bus/pci/devices/0000:18:00.0/vendor") is None  # not a link


# --- FIFOs, devices and endless files -------------------------------------------------------------------


def test_fifos_where_files_are_read_cost_a_value_not_a_hang(hostile):
    report = bounded(discover_all, hostile.root)
    info = report["host"]
    assert info["cpu_model"] is None and "not readable" in info["unavailable"]["cpu_model"]  # /proc/cpuinfo
    assert info["thp_mode"] is None and info["kernel"] is None
    chips = report["tpu"]["chips"]
    assert [h["command"] for h in chips[1]["holders"]] == [None]  # pid 4343: cmdline, comm and status are FIFOs
    assert report["tpu"]["lockfile"]["exists"] and report["tpu"]["lockfile"]["pid_in_file"] is None
    assert report["tpu"]["uninspectable_processes"] == 1  # pid 4444: its fd directory is a FIFO
    assert "node 3: properties file is not readable" in report["amd"]["skipped_nodes"]
    assert {g["address"] for g in report["nvidia_pci"]} == {"0000:18:00.0", "0000:1a:00.0", "0000:1b:00.0"}
    fifo_gpu = next(g for g in report["nvidia_pci"] if g["address"] == "0000:1a:00.0")
    assert (fifo_gpu["device_id"], fifo_gpu["class_code"], fifo_gpu["numa_node"]) == ("", None, None)


def test_an_endless_file_is_read_up_to_the_cap(hostile):
    # /proc/sys/kernel/hostname is 16 GiB (a hole after "bighost"): the fallback after /etc/hostname leads out.
    assert bounded(host.host_info, hostile.root).hostname == "bighost"


def test_device_nodes_are_looked_at_never_opened(tmp_path):
    h = tpu_v4_host(tmp_path, chips=2)
    h.fifo("/dev/accel0")  # opening it for reading would wait for a writer
    h.remove("/dev/accel1")
    try:
        os.mknod(h.local("/dev/accel1"), stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    bounded(tpu.tpu_info, base_host(tmp_path / "warm").root, environ={})
    report, seen = audited(tpu.tpu_info, h.root)
    assert [c.device_path_exists for c in report.chips] == [True, True]
    assert all(c.accessible is not None for c in report.chips)
    assert [p for e, p in seen if e == "open" and "/dev/" in p] == []


# --- what reaches the terminal --------------------------------------------------------------------------


def test_names_read_from_the_tree_carry_no_control_characters(tmp_path):
    h = base_host(tmp_path, cpu_model=f"Fake CPU{ESCAPES}")
    h.file("/etc/hostname", f"evil{ESCAPES}\n")
    h.file("/etc/os-release", f'PRETTY_NAME="Debian{ESCAPES}"\n')
    h.file("/proc/sys/kernel/osrelease", f"6.1{ESCAPES}\n")
    h.process(4242, ["python3", f"train.py{ESCAPES}", "--flag\nnext"], fds={3: "/dev/accel0"})
    h.file("/sys/class/kfd/kfd/topology/nodes/1/properties", "simd_count 4\n")
    h.file("/sys/class/kfd/kfd/topology/nodes/1/name", f"gfx{ESCAPES}\n")
    info = host.host_info(h.root)
    (ref,) = procs.path_holders(h.root, "/dev/accel0")["/dev/accel0"]
    shown = [info.hostname, info.cpu_model, info.os_name, info.kernel, ref.command, amd.amd_report(h.root).gpus[0].name]
    assert [s for s in shown if _CONTROL.search(s)] == []
    assert info.hostname.startswith("evil\\x1b") and ref.command.startswith("python3 train.py\\x1b") and "--flag\\x0anext" in ref.command


def test_pci_names_and_ids_must_have_the_kernels_form(tmp_path):
    h = base_host(tmp_path)
    h.file(f"/sys/bus/pci/devices/0000:1c:00.0{ESCAPES}/vendor", "0x10de\n")
    h.pci_function("0000:1b:00.0", "0x10de", "0x2330" + ESCAPES, class_code="0x030200 and more")
    h.pci_function("0000:1e:00.0", "0x10DE", "0x2330", class_code="0x030200")  # upper case is still the kernel's form
    pcis = nvidia_pci.nvidia_pci_devices(h.root)
    assert [(p.address, p.device_id, p.class_code) for p in pcis] == [("0000:1b:00.0", "", None), ("0000:1e:00.0", "0x2330", "0x030200")]


def test_printable_keeps_text_and_replaces_controls():
    assert printable("NVIDIA H100 80GB HBM3 — ümlaut") == "NVIDIA H100 80GB HBM3 — ümlaut"
    assert printable("a\x1b[2Jb\tc\u202ed\x9b") == "a\\x1b[2Jb\\x09c\\u202ed\\x9b"


# --- the commands, end to end ---------------------------------------------------------------------------


def _assert_clean(proc: subprocess.CompletedProcess, marker: str) -> None:
    both = proc.stdout + proc.stderr
    assert "Traceback" not in both, proc.stderr
    assert marker not in both and OUTSIDE_DRIVER_VERSION not in both
    assert not _CONTROL.search(both), [m.group() for m in _CONTROL.finditer(both)][:5]


@pytest.mark.parametrize("json_out", [False, True], ids=["table", "json"])
def test_list_on_a_hostile_tree(hostile, marker, tmp_path, json_out):
    args = ["list", "--host-root", str(hostile.path), "--timeout", "5"] + (["--json"] if json_out else [])
    # A FIFO read without O_NONBLOCK would block past any timeout: subprocess's own timeout fails the test.
    proc = run_devctl(*args, env=devctl_env(devices=1), timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _assert_clean(proc, marker)
    if not json_out:
        assert "held by pid 4242 (python3 train.py\\x1b" in proc.stdout
        return
    doc = json.loads(proc.stdout)
    validate_schema(doc, "list")
    chips = [u for u in doc["unused_accelerators"] if u["kind"] == "tpu-chip"]
    assert [c["location"] for c in chips] == ["0000:00:04.0", "0000:00:05.0"]
    assert {u["location"] for u in doc["unused_accelerators"] if u["kind"] == "nvidia-gpu"} == {"0000:18:00.0", "0000:1a:00.0", "0000:1b:00.0"}
    assert doc["host"]["hostname"] == "bighost"


@pytest.mark.parametrize("json_out", [False, True], ids=["table", "json"])
def test_doctor_on_a_hostile_tree(hostile, marker, tmp_path, json_out):
    args = ["doctor", "--host-root", str(hostile.path), "--timeout", "5"] + (["--json"] if json_out else [])
    proc = run_devctl(*args, env=devctl_env(devices=1), timeout=180, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the held TPU is a real problem of this tree
    _assert_clean(proc, marker)
    if json_out:
        doc = json.loads(proc.stdout)
        validate_schema(doc, "doctor")
        assert "tpu-held" in {f["id"] for f in doc["findings"]}
    else:
        assert "TPU held by another process" in proc.stdout


def test_check_on_a_hostile_tree(hostile, marker, tmp_path):
    proc = run_devctl("check", "--host-root", str(hostile.path), "--only", "tpu,host", "--json", env=devctl_env(devices=1), timeout=120, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    _assert_clean(proc, marker)
    validate_schema(json.loads(proc.stdout), "check")


def test_a_tree_whose_top_directories_lead_out_is_empty_not_the_outside(tmp_path, marker):
    # sys, proc and dev all links out: a container given the wrong mount. Nothing of this machine is shown.
    out = outside_files(tmp_path, marker)
    tree = tmp_path / "host"
    tree.mkdir()
    for name in ("sys", "proc", "dev"):
        (tree / name).symlink_to(f"/{name}")  # the host's own /sys: inside the tree, which has none
    (tree / "etc").symlink_to(out)
    report = bounded(discover_all, HostRoot(str(tree)))
    assert report["nvidia_pci"] == [] and report["tpu"]["chips"] == [] and report["host"]["hostname"] is None
    assert report["host"]["memory_total_bytes"] is None  # not this machine's /proc/meminfo
    assert marker not in json.dumps(report)
