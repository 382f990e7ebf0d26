"""Discovery against fake host trees (TPU, NVIDIA, AMD hosts), the real host, and fake CUDA wheels."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType, SimpleNamespace

import hosttrees
import pytest
from conftest import devctl_env

from devctl.checks.cuda_driver import check_driver_vs_runtime
from devctl.discovery import amd, cuda_wheels, host, nvidia_pci, nvml, pci, procs, tpu
from devctl.hostroot import HostRoot
from devctl.model import to_jsonable

GIB = 1 << 30

# --- host -----------------------------------------------------------------


def test_host_info_parses_the_fake_host(tmp_path):
    h = hosttrees.base_host(tmp_path)
    info = host.host_info(h.root)
    assert info.hostname == "fakehost"
    assert info.cpu_model == "Fake CPU @ 2.50GHz"
    assert (info.logical_cores, info.physical_cores) == (8, 4)
    assert info.memory_total_bytes == 16384000 * 1024
    assert info.memory_available_bytes == 8192000 * 1024
    assert (info.swap_total_bytes, info.swap_free_bytes) == (2 * GIB, GIB)
    assert info.numa_nodes == (0, 1)
    assert (info.thp_mode, info.thp_enabled) == ("always", True)
    assert info.os_name == "Debian GNU/Linux 12 (bookworm)"
    assert info.kernel == "6.1.0-fake-amd64"
    assert info.shm_total_bytes and info.shm_total_bytes > 0
    assert info.shm_free_bytes is not None and info.shm_total_bytes is not None
    assert 0 <= info.shm_free_bytes <= info.shm_total_bytes
    # Affinity belongs to this machine, not to the inspected root.
    assert info.usable_cores is None and "usable_cores" in info.unavailable
    json.dumps(to_jsonable(info))


def test_thp_madvise_is_not_enabled_by_jax_rule(tmp_path):
    info = host.host_info(hosttrees.base_host(tmp_path, thp="always [madvise] never").root)
    assert (info.thp_mode, info.thp_enabled) == ("madvise", False)


def test_missing_files_become_none_with_reasons(tmp_path):
    h = hosttrees.base_host(tmp_path, thp=None, shm=False, numa_nodes=0, cpu_model=None)
    info = host.host_info(h.root)
    assert info.thp_mode is None and info.thp_enabled is None and "thp_enabled" in info.unavailable
    assert info.shm_total_bytes is None and "/dev/shm" in info.unavailable["shm_total_bytes"]
    assert info.numa_nodes == ()
    assert info.cpu_model is None and "cpu_model" in info.unavailable
    assert info.physical_cores == 4  # core ids are still there


def test_host_info_on_the_real_host():
    info = host.host_info(HostRoot("/"))
    assert info.logical_cores and info.logical_cores >= 1
    assert info.memory_total_bytes and info.memory_total_bytes > 0
    assert info.python_executable == sys.executable
    assert info.kernel
    json.dumps(to_jsonable(info))


# --- processes ------------------------------------------------------------


def test_path_holders_reports_pid_user_command(tmp_path):
    h = hosttrees.base_host(tmp_path)
    h.process(4242, ["python3", "train.py", "--steps", "10"], uid=1001, fds={3: "/dev/vfio/0", 4: "/dev/null"})
    h.process(4343, [], comm="tpu_worker", uid=0, fds={9: "/dev/vfio/0"})
    h.process(4444, ["sleep", "1"], fds={0: "/dev/null"})

    held = procs.path_holders(h.root, ["/dev/vfio/0", "/dev/vfio/1"])
    assert list(held) == ["/dev/vfio/0"]
    refs = held["/dev/vfio/0"]
    assert [(r.pid, r.uid, r.user) for r in refs] == [(4242, 1001, "1001"), (4343, 0, "0")]
    assert refs[0].command == "python3 train.py --steps 10"
    assert refs[1].command == "tpu_worker"  # empty cmdline falls back to comm


def test_unreadable_processes_are_counted_not_raised(tmp_path):
    h = hosttrees.base_host(tmp_path)
    h.process(50, ["secret"], uid=0, fds_readable=False)
    h.process(51, ["mine"], fds={1: "/dev/accel0"})
    scan = procs.scan_holders(h.root, "/dev/accel0")
    assert scan.uninspectable_processes == 1
    assert [r.pid for r in scan.holders["/dev/accel0"]] == [51]


def test_pid_alive(tmp_path):
    h = hosttrees.base_host(tmp_path)
    h.process(70, ["zombie"], state="Z (zombie)")
    assert procs.pid_alive(h.root, 1)
    assert not procs.pid_alive(h.root, 70)
    assert not procs.pid_alive(h.root, 99999)


def test_pid_alive_on_this_machine_asks_the_kernel():
    import os
    import time

    assert procs.pid_alive(HostRoot("/"), os.getpid())
    assert not procs.pid_alive(HostRoot("/"), 0) and not procs.pid_alive(HostRoot("/"), procs.PID_MAX + 1)
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while "\nState:\tZ" not in HostRoot("/").read_text(f"/proc/{child.pid}/status") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not procs.pid_alive(HostRoot("/"), child.pid)  # exited, not yet reaped: a zombie runs nothing
    finally:
        child.wait()
    assert not procs.pid_alive(HostRoot("/"), child.pid)


def test_find_process_by_program_name(tmp_path):
    h = hosttrees.base_host(tmp_path)
    h.process(900, ["/usr/bin/nv-fabricmanager", "-c", "fm.cfg"], uid=0)
    h.process(901, [], comm="nv-fabricmanage")  # comm is cut to 15 characters
    assert procs.find_process(h.root, "nv-fabricmanager").pid == 900
    assert procs.find_process(h.root, "nvidia-persistenced") is None


def test_holders_on_the_real_host_find_another_process_but_not_devctl_itself(tmp_path):
    import os
    import subprocess

    target = tmp_path / "held.txt"
    target.write_text("")
    # A grandchild that holds the file open; its parent shell exits, so it is not one of ours.
    out = subprocess.run(["sh", "-c", f"sleep 30 3<'{target}' >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True)
    holder = int(out.stdout.strip())
    try:
        with open(target):
            scan = procs.scan_holders(HostRoot("/"), str(target))
        pids = [r.pid for r in scan.holders[str(target)]]
        assert holder in pids
        assert os.getpid() not in pids  # devctl and its probe children are never "another process"
    finally:
        os.kill(holder, 9)


# --- TPU ------------------------------------------------------------------


def test_tpu_v4_host(tmp_path):
    h = hosttrees.tpu_v4_host(tmp_path)
    h.process(900, ["python", "job.py"], fds={5: "/dev/accel2"})
    report = tpu.tpu_info(h.root, environ={})
    assert report.chip_count == 4 and report.pci_function_count == 4
    assert report.versions == ("v4",)
    assert [c.device_path for c in report.chips] == [f"/dev/accel{i}" for i in range(4)]
    assert all(c.device_path_exists and c.accessible for c in report.chips)
    assert report.chips[0].hbm_bytes == 32 * GIB and report.chips[0].devices_per_chip == 1
    assert [r.pid for r in report.chips[2].holders] == [900]
    assert report.chips[2].holders[0].command == "python job.py"
    assert report.chips[0].holders == ()


def test_tpu_accel_nodes_follow_sysfs_class_links(tmp_path):
    h = hosttrees.tpu_v4_host(tmp_path, chips=2)
    # Swap the class links: accel0 is the second PCI device.
    h.symlink("/sys/class/accel/accel0/device", "../../../0000:00:05.0")
    h.symlink("/sys/class/accel/accel1/device", "../../../0000:00:04.0")
    chips = tpu.tpu_info(h.root, environ={}).chips
    assert [(c.pci_address, c.device_path) for c in chips] == [("0000:00:04.0", "/dev/accel1"), ("0000:00:05.0", "/dev/accel0")]


def test_tpu_v5e_host_uses_iommu_groups(tmp_path):
    h = hosttrees.tpu_v5e_host(tmp_path, chips=4)
    h.process(1234, ["python3", "-c", "import jax"], uid=1000, fds={7: "/dev/vfio/6"})
    report = tpu.tpu_info(h.root, environ={})
    assert report.chip_count == 4 and report.versions == ("v5e",)
    assert [c.device_path for c in report.chips] == ["/dev/vfio/5", "/dev/vfio/6", "/dev/vfio/7", "/dev/vfio/8"]
    assert [c.iommu_group for c in report.chips] == ["5", "6", "7", "8"]
    assert report.chips[1].holders[0].pid == 1234
    assert report.chips[0].hbm_bytes == 16 * GIB
    assert [c.numa_node for c in report.chips] == [0, 0, 0, 0]


def test_tpu_vfio_without_iommu_group_falls_back_to_index(tmp_path):
    h = hosttrees.tpu_v5e_host(tmp_path, chips=2)
    h.remove("/sys/bus/pci/devices/0000:00:04.0/iommu_group")
    chip = tpu.tpu_info(h.root, environ={}).chips[0]
    assert chip.device_path == "/dev/vfio/0" and not chip.device_path_exists
    assert chip.accessible is None and "accessible" in chip.unavailable
    assert chip.notes


def test_tpu_v6e_host(tmp_path):
    report = tpu.tpu_info(hosttrees.tpu_v6e_host(tmp_path, chips=8).root, environ={})
    assert report.chip_count == 8 and report.versions == ("v6e",)
    assert report.chips[7].numa_node == 1 and report.chips[7].hbm_bytes == 32 * GIB


@pytest.mark.parametrize("version,hbm_gib", [("v2", 8), ("v3", 16)])
def test_tpu_v2_v3_count_chips_not_functions(tmp_path, version, hbm_gib):
    report = tpu.tpu_info(hosttrees.tpu_v2v3_host(tmp_path, version).root, environ={})
    assert report.pci_function_count == 8
    assert report.chip_count == 4
    assert report.versions == (version,)
    chip = report.chips[1]
    assert chip.pci_functions == ("0000:00:05.0", "0000:00:05.1")
    assert chip.device_path == "/dev/accel1"
    assert chip.devices_per_chip == 2 and chip.hbm_bytes == hbm_gib * GIB


def test_tpu_0x0027_with_unknown_subsystem_is_v3_with_a_note(tmp_path):
    chip = tpu.tpu_info(hosttrees.tpu_v2v3_host(tmp_path, "unknown", chips=1).root, environ={}).chips[0]
    assert chip.version == "v3" and "0x0099" in chip.notes[0]


def test_tpu_newer_ids_are_recognised(tmp_path):
    h = hosttrees.base_host(tmp_path)
    h.pci_function("0000:00:04.0", "0x1ae0", "0x0083", iommu_group=0)
    h.pci_function("0000:00:05.0", "0x1ae0", "0x007c")
    h.pci_function("0000:00:06.0", "0x1ae0", "0x9999")  # not a TPU id
    h.pci_function("0000:00:07.0", "0x8086", "0x0063")  # not Google
    report = tpu.tpu_info(h.root, environ={})
    assert report.versions == ("tpu8i", "tpu8t")
    assert report.chips[0].hbm_bytes is None and "hbm_bytes" in report.chips[0].unavailable


def test_no_tpu_on_a_gpu_host(tmp_path):
    report = tpu.tpu_info(hosttrees.nvidia_host(tmp_path).root, environ={})
    assert report.chips == () and report.lockfile.state == "absent"


def test_lockfile_held_by_an_open_fd(tmp_path):
    h = hosttrees.tpu_v5e_host(tmp_path)
    h.lockfile()
    h.process(777, ["python", "train.py"], fds={3: "/tmp/libtpu_lockfile", 4: "/dev/vfio/5"})
    lock = tpu.tpu_info(h.root, environ={}).lockfile
    assert lock.exists and lock.state == "held"
    assert [(r.pid, r.command) for r in lock.holders] == [(777, "python train.py")]


def test_lockfile_stale_when_nobody_holds_it(tmp_path):
    h = hosttrees.tpu_v5e_host(tmp_path)
    h.lockfile("31337\n")
    lock = tpu.tpu_info(h.root, environ={}).lockfile
    assert lock.state == "stale" and lock.holders == ()
    assert lock.pid_in_file == 31337 and lock.pid_in_file_alive is False
    assert "rm /tmp/libtpu_lockfile" in lock.reason


def test_lockfile_held_by_the_live_pid_it_names(tmp_path):
    h = hosttrees.tpu_v5e_host(tmp_path)
    h.lockfile("4100")
    h.process(4100, ["python", "notebook_kernel.py"])
    lock = tpu.tpu_info(h.root, environ={}).lockfile
    assert lock.state == "held" and lock.pid_in_file_alive and lock.holders[0].pid == 4100


def test_lockfile_held_per_proc_locks(tmp_path):
    h = hosttrees.tpu_v5e_host(tmp_path)
    h.lockfile()
    h.process(4200, ["python", "job.py"], uid=0, fds_readable=False)  # its fds are out of sight
    h.proc_lock(4200, "/tmp/libtpu_lockfile")
    lock = tpu.tpu_info(h.root, environ={}).lockfile
    assert lock.state == "held" and [r.pid for r in lock.holders] == [4200]


def test_lockfile_unknown_when_some_processes_are_uninspectable(tmp_path):
    h = hosttrees.tpu_v5e_host(tmp_path)
    h.lockfile()
    h.process(4300, ["python", "job.py"], uid=0, fds_readable=False)
    report = tpu.tpu_info(h.root, environ={})
    assert report.lockfile.state == "unknown" and "1 process could not be inspected" in report.lockfile.reason
    assert report.uninspectable_processes == 1


def test_tpu_env_vars():
    env = {"TPU_VISIBLE_CHIPS": "0,1", "LIBTPU_INIT_ARGS": "--foo", "TPU_NEW_THING": "1", "HOME": "/root"}
    out = tpu.tpu_env(env)
    assert list(out) == ["LIBTPU_INIT_ARGS", "TPU_VISIBLE_CHIPS", "TPU_NEW_THING"]


def test_tpu_info_on_the_real_host_finds_no_tpu():
    report = tpu.tpu_info(HostRoot("/"))
    assert report.chips == ()
    json.dumps(to_jsonable(report))


# --- AMD ------------------------------------------------------------------


def test_amd_host_counts_gpu_nodes_only(tmp_path):
    report = amd.amd_report(hosttrees.amd_host(tmp_path, gpus=2, oversized_node=True).root)
    assert report.jax_gpu_count == 2 and report.kfd_present and not report.dxg_present
    assert [g.node for g in report.gpus] == [1, 2]  # node 0 is the CPU
    assert len(report.skipped_nodes) == 1 and "16 KB" in report.skipped_nodes[0]
    g = report.gpus[0]
    assert (g.name, g.vendor_id, g.device_id, g.simd_count) == ("gfx942", 0x1002, 29857, 1216)
    assert (g.gfx_target_version, g.gfx_target) == (90402, "gfx942")
    assert g.vram_bytes == 192 * GIB
    assert g.pci_address == "0000:10:00.0"
    assert (g.drm_render_minor, g.render_node) == (128, "/dev/dri/renderD128")
    assert len(amd.amd_gpus(hosttrees.amd_host(tmp_path / "again").root)) == 2


def test_amd_dxg_counts_as_one_gpu_like_jax(tmp_path):
    h = hosttrees.base_host(tmp_path)
    h.dev("/dev/dxg")
    report = amd.amd_report(h.root)
    assert report.gpus == () and report.jax_gpu_count == 1


def test_amd_without_kfd_node(tmp_path):
    report = amd.amd_report(hosttrees.amd_host(tmp_path, kfd=False).root)
    assert len(report.gpus) == 2 and not report.kfd_present


def test_gfx_target_names():
    assert [amd.gfx_target(v) for v in (90010, 90402, 110000, 90008)] == ["gfx90a", "gfx942", "gfx1100", "gfx908"]


# --- NVIDIA: nodes and PCI ------------------------------------------------


def test_nvidia_nodes_and_pci(tmp_path):
    h = hosttrees.nvidia_host(tmp_path, gpus=8)
    h.dev("/dev/nvidia10")
    nodes = nvidia_pci.nvidia_device_nodes(h.root)
    assert nodes[:9] == [f"/dev/nvidia{i}" for i in range(8)] + ["/dev/nvidia10"]
    assert nodes[9:] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert nvidia_pci.has_visible_nvidia_gpu(h.root)
    pci = nvidia_pci.nvidia_pci_devices(h.root)
    assert len(pci) == 8  # the NVSwitch is not a GPU
    assert pci[0].address == "0000:18:00.0" and pci[0].driver == "nvidia" and pci[0].class_code == "0x030200"
    assert pci[7].numa_node == 1


def test_nvidia_gpu_without_driver(tmp_path):
    h = hosttrees.nvidia_host(tmp_path, gpus=2, driver=None, nodes=False)
    assert not nvidia_pci.has_visible_nvidia_gpu(h.root)
    assert nvidia_pci.nvidia_device_nodes(h.root) == []
    assert [p.driver for p in nvidia_pci.nvidia_pci_devices(h.root)] == [None, None]


@pytest.mark.parametrize("node", ["/dev/nvidiactl", "/dev/dxg"])
def test_jax_rule_for_visible_nvidia_gpu(tmp_path, node):
    h = hosttrees.base_host(tmp_path)
    assert not nvidia_pci.has_visible_nvidia_gpu(h.root)
    h.dev(node)
    assert nvidia_pci.has_visible_nvidia_gpu(h.root)


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        (b"00000000:3B:00.0\0", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("3B:00.1", "0000:3b:00.1"),
        ("00010000:1A:02.3", "10000:1a:02.3"),
        ("not a bus id", None),
        (None, None),
    ],
)
def test_normalize_pci_bus_id(raw, expected):
    assert pci.normalize_pci_bus_id(raw) == expected


# --- sysfs links: flat trees, the kernel's relative links, absolute links --


@pytest.mark.parametrize("layout", hosttrees.LAYOUTS)
def test_sysfs_layouts_give_the_same_answers(tmp_path, layout):
    nv = hosttrees.nvidia_host(tmp_path / "nv", gpus=2, layout=layout).root
    assert [(p.address, p.device_id, p.driver, p.numa_node) for p in nvidia_pci.nvidia_pci_devices(nv)] == [
        ("0000:18:00.0", "0x2330", "nvidia", 0), ("0000:2a:00.0", "0x2330", "nvidia", 0),
    ]  # fmt: skip
    assert nvidia_pci.nvswitch_functions(nv) == ("0000:05:00.0",)
    v4 = hosttrees.tpu_v4_host(tmp_path / "v4", chips=2, layout=layout).root
    # Read from the class links themselves (chip order alone would give the same paths).
    assert tpu._accel_nodes_by_pci(v4) == {"0000:00:04.0": "/dev/accel0", "0000:00:05.0": "/dev/accel1"}
    v5 = tpu.tpu_info(hosttrees.tpu_v5e_host(tmp_path / "v5", chips=2, layout=layout).root, environ={})
    assert [(c.iommu_group, c.device_path, c.device_path_exists) for c in v5.chips] == [("5", "/dev/vfio/5", True), ("6", "/dev/vfio/6", True)]


def _pci_view(root: HostRoot) -> list[tuple]:
    base = pci.PCI_DEVICES
    return [
        (a, pci.hex_id(root, f"{base}/{a}/vendor"), pci.hex_id(root, f"{base}/{a}/device"), pci.class_code(root, f"{base}/{a}/class"),
         pci.link_name(root, f"{base}/{a}/driver"), pci.link_name(root, f"{base}/{a}/iommu_group"), pci.numa_node(root, f"{base}/{a}"))
        for a in pci.pci_addresses(root)
    ]  # fmt: skip


def test_the_real_sysfs_reads_the_same_as_root_and_as_a_host_root(tmp_path):
    import os

    real = _pci_view(HostRoot("/"))
    if not real:
        pytest.skip("no PCI functions in this machine's sysfs")
    for address, *_ in real:
        link = f"/sys/bus/pci/devices/{address}/driver"
        if os.path.islink(link):  # the value devctl showed before links were resolved inside a root
            assert pci.link_name(HostRoot("/"), link) == os.path.basename(os.readlink(link))
    tree = tmp_path / "host"
    (tree / "sys").mkdir(parents=True)
    # The kernel's own sysfs under a host root: its links are relative and must resolve inside the tree.
    if subprocess.run(["mount", "--bind", "/sys", str(tree / "sys")], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount /sys here (needs root)")
    try:
        assert _pci_view(HostRoot(str(tree))) == real
    finally:
        subprocess.run(["umount", str(tree / "sys")], check=False)


# --- NVIDIA: NVML ---------------------------------------------------------


def test_nvml_report_here_is_unavailable_not_an_error():
    report = nvml.nvml_report()
    if report.status == "ok":
        pytest.skip("this machine has a working NVIDIA driver")
    assert report.status == "unavailable"
    assert report.reason and report.gpus == ()
    assert report.unavailable["nvml"] == report.reason


def test_without_the_nvml_library_pynvml_is_not_imported_and_says_the_same(monkeypatch):
    if nvml.nvml_report().status == "ok":
        pytest.skip("this machine has a working NVIDIA driver")
    code = "import sys; from devctl.discovery import nvml; r = nvml.nvml_report(); print(r.status, r.reason, 'pynvml' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], env=devctl_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    fast = proc.stdout.strip()
    import pynvml  # now nvidia-ml-py itself looks for the library

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    full = nvml.nvml_report()
    assert fast == f"{full.status} {full.reason} False"


def test_nvml_shadowed_module_is_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", ModuleType("pynvml"))
    report = nvml.nvml_report()
    assert report.status == "error" and "not nvidia-ml-py" in report.reason


@pytest.fixture
def fake_nvml(monkeypatch):
    """The real pynvml module with its C calls replaced: two GPUs, one lost, some fields unsupported."""
    import pynvml

    calls = {"init": 0, "shutdown": 0}

    def raises(err):
        def f(*args):
            raise err()

        return f

    def handle(i):
        if i == 1:
            raise pynvml.NVMLError_GpuIsLost()
        return f"h{i}"

    fakes = {
        "nvmlInit": lambda: calls.__setitem__("init", calls["init"] + 1),
        "nvmlShutdown": lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1),
        "nvmlSystemGetDriverVersion": lambda: "550.54.15",
        "nvmlSystemGetCudaDriverVersion_v2": lambda: 12040,
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": handle,
        "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda h: "GPU-8f6b2c1e-0000-1111-2222-333344445555",
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=b"00000000:18:00.0"),
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(total=80 * GIB, used=GIB, free=79 * GIB),
        "nvmlDeviceGetCudaComputeCapability": lambda h: (9, 0),
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: 1,
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": raises(pynvml.NVMLError_FunctionNotFound),
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetPowerUsage": raises(pynvml.NVMLError_NotSupported),
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700000,
        "nvmlDeviceGetTemperature": lambda h, sensor: 41,
    }
    for name, fn in fakes.items():
        monkeypatch.setattr(pynvml, name, fn)
    return calls


def test_nvml_report_with_a_fake_driver(fake_nvml):
    report = nvml.nvml_report()
    assert report.status == "ok" and report.reason is None
    assert (report.driver_version, report.cuda_driver_version, report.cuda_driver_version_str) == ("550.54.15", 12040, "12.4")
    assert fake_nvml == {"init": 1, "shutdown": 1}
    good, lost = report.gpus
    assert good.name == "NVIDIA H100 80GB HBM3" and good.uuid.startswith("GPU-")
    assert good.pci_bus_id == "0000:18:00.0"
    assert (good.memory_total_bytes, good.memory_used_bytes, good.memory_free_bytes) == (80 * GIB, GIB, 79 * GIB)
    assert good.compute_capability == (9, 0)
    assert (good.pcie_link_gen_current, good.pcie_link_gen_max, good.pcie_link_width_max) == (1, 5, 16)
    assert good.pcie_link_gen_gpu_max is None and "driver" in good.unavailable["pcie_link_gen_gpu_max"]
    assert good.power_draw_w is None and "not supported" in good.unavailable["power_draw_w"]
    assert good.power_limit_w == 700.0 and good.temperature_c == 41
    assert lost.index == 1 and lost.uuid is None and "lost" in lost.unavailable["uuid"]
    json.dumps(to_jsonable(report))


def test_nvml_driver_not_loaded_is_unavailable(monkeypatch):
    import pynvml

    def init():
        raise pynvml.NVMLError_DriverNotLoaded()

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    report = nvml.nvml_report()
    assert report.status == "unavailable" and "not loaded" in report.reason


def test_nvml_version_mismatch_is_an_error(monkeypatch):
    import pynvml

    def init():
        raise pynvml.NVMLError_LibRmVersionMismatch()

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    report = nvml.nvml_report()
    assert report.status == "error" and "reboot" in report.reason


@pytest.mark.gpu
def test_nvml_report_on_a_real_gpu():
    report = nvml.nvml_report()
    if report.status != "ok":
        pytest.skip(f"NVML not usable here: {report.reason}")
    assert report.gpus, "NVML initialized but reports no GPU"
    gpu = report.gpus[0]
    assert gpu.uuid and gpu.uuid.startswith(("GPU-", "MIG-"))
    assert gpu.memory_total_bytes and gpu.memory_total_bytes > 0
    assert gpu.pci_bus_id and pci.normalize_pci_bus_id(gpu.pci_bus_id) == gpu.pci_bus_id
    assert report.cuda_driver_version and report.cuda_driver_version >= 11000
    json.dumps(to_jsonable(report))


# --- CUDA wheels ----------------------------------------------------------


def _dist(site: Path, name: str, version: str, requires: list[str] = ()) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


@pytest.fixture
def site(tmp_path):
    site = tmp_path / "site-packages"
    _dist(site, "nvidia-cuda-runtime-cu12", "12.0.146")
    _dist(site, "nvidia-cublas-cu12", "12.4.5.8")
    _dist(site, "nvidia-cudnn-cu12", "9.1.0.70")
    _dist(site, "nvidia-cufft-cu12", "11.2.1.3")
    _dist(site, "nvidia-cusparse-cu12", "12.0.2.55")
    _dist(site, "nvidia-cuda-cupti-cu12", "12.4.127")
    _dist(site, "nvidia-nccl-cu12", "2.21.5")
    _dist(site, "nvidia-ml-py", "12.560.30")
    _dist(site, "nvidia-cuda-runtime", "13.0.48")
    _dist(site, "nvidia-cudnn-cu13", "10.0.1")
    _dist(site, "nvidia-cusolver-cu12", "dev")
    _dist(
        site,
        "jax-cuda12-plugin",
        "0.6.0",
        [
            "jax-cuda12-pjrt==0.6.0",
            'nvidia-cudnn-cu12<10.0,>=9.8; extra == "with-cuda"',
            'nvidia-cufft-cu12 (>=11.0.2.54) ; extra == "with-cuda"',
            'nvidia-cusolver-cu12>=11.4.5.107; extra == "with-cuda"',
        ],
    )
    _dist(site, "jax-cuda13-plugin", "0.8.0", ['nvidia-cudnn-cu13<10.0,>=9.12; extra == "with-cuda"'])
    return site


def test_cuda_wheels_verdicts(site):
    wheels = {w.distribution: w for w in cuda_wheels.cuda_wheels([str(site)])}
    assert "nvidia-ml-py" not in wheels
    assert "jax-cuda12-plugin" not in wheels
    runtime = wheels["nvidia-cuda-runtime-cu12"]
    assert (runtime.component, runtime.cuda_major, runtime.minimum, runtime.verdict) == ("cuda_runtime", 12, "12.1", "too old")
    assert wheels["nvidia-cublas-cu12"].verdict == "ok"
    assert wheels["nvidia-cusparse-cu12"].verdict == "too old"
    assert wheels["nvidia-cuda-cupti-cu12"].component == "cupti" and wheels["nvidia-cuda-cupti-cu12"].verdict == "ok"
    cudnn = wheels["nvidia-cudnn-cu12"]
    assert (cudnn.minimum, cudnn.verdict) == ("9.8", "too old") and "jax-cuda12-plugin" in cudnn.minimum_source
    assert wheels["nvidia-cufft-cu12"].verdict == "ok" and wheels["nvidia-cufft-cu12"].minimum == "11.0.2.54"
    assert wheels["nvidia-nccl-cu12"].verdict == "not checked" and wheels["nvidia-nccl-cu12"].minimum is None
    assert wheels["nvidia-cusolver-cu12"].verdict == "unknown"
    cu13 = wheels["nvidia-cuda-runtime"]
    assert (cu13.cuda_major, cu13.verdict) == (13, "ok")
    assert wheels["nvidia-cudnn-cu13"].verdict == "too new"
    assert cuda_wheels.cuda_runtime_version(wheels.values()) == "13.0.48"
    json.dumps(to_jsonable(list(wheels.values())))


def test_cuda_wheels_from_sys_path(site, monkeypatch):
    monkeypatch.setattr(sys, "path", [str(site)])
    names = {w.distribution for w in cuda_wheels.cuda_wheels()}
    assert "nvidia-cudnn-cu12" in names and "nvidia-ml-py" not in names


def test_cuda_wheel_requirements_are_read_as_pip_reads_them(tmp_path):
    site = tmp_path / "site-packages"
    _dist(site, "nvidia-cuda-runtime-cu12", "12.8.90")
    _dist(site, "nvidia-cudnn-cu12", "9.10.0")
    _dist(site, "nvidia-nccl-cu12", "2.27.3")
    _dist(site, "nvidia-nvjitlink-cu12", "13.0.0rc1")
    _dist(
        site,
        "jax_cuda12_plugin",  # metadata names are compared canonicalized
        "0.7.0",
        [
            "nvidia-cuda-runtime-cu12==12.*",  # a series pin is its floor
            'Nvidia_cuDNN_cu12 >= 9.8, >=9.12; extra == "with-cuda"',  # the higher of two floors binds
            "nvidia-nccl-cu12 (<2.27)",
            "nvidia-nvjitlink-cu12>=13.0",  # a pre-release counts by its numbers, as JAX compares them
            "not a requirement (",
        ],
    )
    wheels = {w.distribution: w for w in cuda_wheels.cuda_wheels([str(site)])}
    assert (wheels["nvidia-cuda-runtime-cu12"].minimum, wheels["nvidia-cuda-runtime-cu12"].verdict) == ("12.1", "ok")
    cudnn = wheels["nvidia-cudnn-cu12"]
    assert (cudnn.minimum, cudnn.verdict) == ("9.12", "too old") and cudnn.minimum_source == "jax-cuda12-plugin 0.7.0 requires >=9.12,>=9.8"
    assert wheels["nvidia-nccl-cu12"].verdict == "too new" and "<2.27" in wheels["nvidia-nccl-cu12"].minimum_source
    assert wheels["nvidia-nvjitlink-cu12"].verdict == "ok"
    assert cuda_wheels.parse_version("13.0.0rc1") == (13, 0, 0) and cuda_wheels.parse_version("dev") is None


def test_cuda_wheels_none_installed(tmp_path):
    assert cuda_wheels.cuda_wheels([str(tmp_path)]) == []


@pytest.mark.parametrize(
    "driver,runtime,expected",
    [
        (12040, "12.4.127", None),
        (12080, "12.4.127", None),
        (13000, "12.9.79", None),
        (12020, "12.4.127", ("cuda-driver-older-than-runtime", "warning")),
        (11080, "12.1.105", ("cuda-driver-too-old", "error")),
        (12090, "13.0.48", ("cuda-driver-too-old", "error")),
        (None, "12.4.127", None),
        (12040, None, None),
    ],
)
def test_driver_vs_runtime(driver, runtime, expected):
    finding = check_driver_vs_runtime(driver, runtime)
    if expected is None:
        assert finding is None
    else:
        assert (finding.code, finding.severity) == expected
        assert nvml.format_cuda_version(driver) in finding.message and finding.hint


# --- import hygiene -------------------------------------------------------


def test_discovery_imports_no_jax_or_pynvml():
    code = textwrap.dedent(
        """
        import sys
        import devctl.discovery.host, devctl.discovery.procs, devctl.discovery.tpu
        import devctl.discovery.amd, devctl.discovery.nvidia_pci, devctl.discovery.nvml, devctl.discovery.cuda_wheels
        import devctl.discovery.machine_facts, devctl.model.hardware
        print([m for m in ("jax", "jaxlib", "numpy", "pynvml") if m in sys.modules])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
