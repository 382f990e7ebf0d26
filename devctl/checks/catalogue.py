"""`devctl doctor`'s catalogue of known failures, as data: what each is, why it happens, how to fix it, and JAX's own words for it.

Each entry mirrors reference/failure-modes.md §1 (its number, cause and fix);
entries numbered None are devctl's own. The rules that recognize them live in
devctl.checks.diagnosis and the rules_* modules; devctl.checks.advice gives
list and check the same entries by code. No logic here: adding an entry is a
data change, and docs/doctor.md's table of finding codes must name it (a test checks).
"""

from __future__ import annotations

import re

from devctl.model.doctor import KnownFailure
from devctl.privilege import as_root, thp_fix

# The CUDA fix when the driver branch is unknown; rules_gpu narrows it to one extra when the driver says which.
CUDA_FIX = 'pip install -U "jax[cuda13]" (NVIDIA driver >= 580) or "jax[cuda12]" (driver >= 525)'

CATALOGUE: dict[str, KnownFailure] = {
    k.id: k
    for k in (
        KnownFailure(
            "cuda-plugin-missing", 1, "NVIDIA GPU present but no CUDA plugin",
            "an NVIDIA GPU is on the machine but no CUDA plugin is installed (plain `pip install jax`, or a CPU-only conda jaxlib), so JAX falls back to the CPU",
            CUDA_FIX,
            ("https://github.com/jax-ml/jax/issues/29068",),
        ),
        KnownFailure(
            "plugin-version-skew", 2, "jax / jaxlib / plugin version skew",
            "jax, jaxlib and the jax-cuda*/rocm plugin and pjrt packages are at different versions (often after another package up- or downgraded one of them); JAX ignores the plugin, or crashes",
            'reinstall all of them at one version: pip install -U "jax[cuda12]==<jax version>"',
            ("https://github.com/jax-ml/jax/issues/26750", "https://github.com/jax-ml/jax/issues/24901"),
        ),
        KnownFailure(
            "pjrt-api-mismatch", 3, "PJRT API version mismatch between plugin and jaxlib",
            "the plugin library and jaxlib were built from different XLA revisions and speak different PJRT C API versions",
            "install the plugin release built for this jaxlib; as a stopgap, ENABLE_PJRT_COMPATIBILITY=true",
            ("https://github.com/jax-ml/jax/issues/22416",),
        ),
        KnownFailure(
            "jax-jaxlib-skew", 4, "jax / jaxlib version skew",
            "jax and jaxlib are at versions that reject each other (check_jaxlib_version)",
            'upgrade both together: pip install -U jax jaxlib',
            ("https://github.com/jax-ml/jax/issues/17638",),
        ),
        KnownFailure(
            "no-visible-gpu", 5, "no visible GPU",
            "the GPUs are hidden from CUDA: CUDA_VISIBLE_DEVICES is empty or -1, or the container was started without GPUs",
            "unset CUDA_VISIBLE_DEVICES (or list the GPUs); start the container with --gpus all (NVIDIA Container Toolkit) or request nvidia.com/gpu in Kubernetes",
            ("https://github.com/jax-ml/jax/issues/28376",),
        ),
        KnownFailure(
            "fabric-manager-missing", 6, "NVIDIA fabric manager not running on an NVSwitch system",
            "on NVSwitch systems (HGX A100/H100/H200) CUDA cannot start until nvidia-fabricmanager, matching the driver, is running: cuInit fails with CUDA_ERROR_SYSTEM_NOT_READY",
            "install nvidia-fabricmanager-<driver branch> and start it: " + as_root("systemctl enable --now nvidia-fabricmanager"),
            ("https://github.com/jax-ml/jax/issues/24866", "https://github.com/jax-ml/jax/pull/34113"),
        ),
        KnownFailure(
            "driver-library-mismatch", 7, "NVIDIA user-space driver does not match the kernel module",
            "the user-space libcuda/libnvidia-ml differ from the loaded kernel module, e.g. after a driver upgrade without a reboot, or driver libraries baked into a container image",
            "reboot (or reload the nvidia kernel module); in containers, let the NVIDIA Container Toolkit mount the host's driver libraries",
            ("https://github.com/jax-ml/jax/issues/3568", "https://github.com/jax-ml/jax/issues/15961"),
        ),
        KnownFailure(
            "cuda-library-shadowed", 8, "outdated CUDA library shadows the pip one",
            "an older system or conda CUDA library is found before the nvidia-* pip wheels (through LD_LIBRARY_PATH or a conda env), and JAX's version check rejects it",
            "unset LD_LIBRARY_PATH (or drop the CUDA directories from it) so the pip wheels load; JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 only hides the check",
            ("https://github.com/jax-ml/jax/issues/18032", "https://github.com/jax-ml/jax/issues/17497"),
        ),
        KnownFailure(
            "cuda-library-missing", 9, "CUDA library cannot be loaded",
            "a CUDA library is missing or not on the loader path (nvidia-* wheels absent or at mixed versions)",
            'reinstall: pip install -U "jax[cuda12]" (or [cuda13]); inspect with LD_DEBUG=libs',
            ("https://github.com/jax-ml/jax/issues/20519",),
        ),
        KnownFailure(
            "cudnn-failure", 10, "cuDNN version or handle failure",
            "an older cuDNN is found first, or cuDNN could not create its handle (too little free GPU memory, or a driver too old)",
            "install the matching cuDNN wheel in a fresh venv; lower the preallocation; update the driver",
            ("https://github.com/jax-ml/jax/issues/16901",),
        ),
        KnownFailure(
            "driver-too-old", 11, "NVIDIA driver older than the CUDA runtime / ptxas",
            "the driver supports an older CUDA than the runtime wheels or ptxas in use: PTX fails to load and compilation slows",
            "update the NVIDIA driver (>= 525 for CUDA 12, >= 580 for CUDA 13), or install CUDA wheels no newer than the driver",
            ("https://github.com/jax-ml/jax/issues/25344", "https://github.com/jax-ml/jax/issues/19821"),
        ),
        KnownFailure(
            "preallocation-contention", 12, "GPU preallocation leaves no room",
            "each JAX process preallocates 75% of every GPU it sees; with another process already on the GPU, the next one finds no memory ('no supported devices found', RESOURCE_EXHAUSTED)",
            "XLA_PYTHON_CLIENT_PREALLOCATE=false, or XLA_CLIENT_MEM_FRACTION=.XX so every process fits, set before JAX starts; or give each process its own GPU with CUDA_VISIBLE_DEVICES",
            ("https://github.com/jax-ml/jax/issues/17217", "https://github.com/jax-ml/jax/issues/19267"),
        ),
        KnownFailure(
            "nccl-shm-too-small", 13, "/dev/shm too small for NCCL",
            "NCCL (and RCCL) put their intra-node buffers in /dev/shm; Docker's default 64 MB runs out with several GPUs ('No space left on device')",
            "docker run --shm-size=16g (or --ipc=host); in Kubernetes mount an emptyDir with medium: Memory at /dev/shm",
            ("https://github.com/jax-ml/jax/issues/26465",),
        ),
        KnownFailure(
            "tpu-held", 14, "TPU held by another process",
            "libtpu lets one process own the TPU chips; another live process has them (JAX then prints the misleading 'libtpu is not installed')",
            "stop that process; to share the chips set TPU_VISIBLE_CHIPS, TPU_CHIPS_PER_PROCESS_BOUNDS and TPU_PROCESS_BOUNDS per process",
            ("https://github.com/jax-ml/jax/issues/22070", "https://github.com/jax-ml/jax/issues/10192"),
        ),
        KnownFailure(
            "tpu-stale-lockfile", 14, "stale libtpu lockfile",
            "a process that used the TPU died without removing /tmp/libtpu_lockfile; no live process holds it",
            as_root("rm /tmp/libtpu_lockfile"),
            ("https://github.com/jax-ml/jax/issues/22070",),
        ),
        KnownFailure(
            "libtpu-missing", 15, "libtpu missing or TPU_LIBRARY_PATH wrong",
            "TPU chips are present but no libtpu can be loaded: the libtpu package is not installed, or TPU_LIBRARY_PATH names a file that does not exist",
            "pip install -U \"jax[tpu]\"; fix or unset TPU_LIBRARY_PATH",
            ("https://github.com/jax-ml/jax/issues/13321",),
        ),
        KnownFailure(
            "tpu-device-permission", 16, "no access to the TPU device nodes",
            "the TPU device nodes (/dev/accel*, /dev/vfio/*) are missing or not accessible: a container that is not privileged or was not given the devices, or a VM device problem",
            "run the container privileged or pass the devices (--device /dev/vfio/<group> --device /dev/vfio/vfio, or /dev/accel*); if a node is missing on the VM, stop and start (or recreate) it",
            ("https://github.com/jax-ml/jax/issues/13260",),
        ),
        KnownFailure(
            "multihost-slice-waiting", 17, "multi-host TPU slice waits for its other hosts",
            "on a multi-host slice, TPU initialization blocks until the program runs on every host of the slice",
            "start the program on all hosts at once: gcloud compute tpus tpu-vm ssh NAME --worker=all --command='...'",
            ("https://github.com/jax-ml/jax/issues/19971",),
        ),
        KnownFailure(
            "cpu-without-avx", 18, "CPU lacks AVX",
            "jaxlib is built with AVX instructions, which this CPU (or its emulator) does not support",
            "run on native hardware with AVX, or build jaxlib from source",
        ),
        KnownFailure(
            "libtpu-version-skew", None, "libtpu does not match jax's pin",
            "jax[tpu] pins one libtpu release; another one may not load or may misbehave",
            'pip install -U "jax[tpu]==<jax version>"',
        ),
        KnownFailure(
            "tpu-thp-off", None, "transparent hugepages off on TPU v5e and newer",
            "JAX warns that the TPU runtime starts and stops much more slowly without transparent hugepages",
            thp_fix(),
        ),
        KnownFailure(
            "jax-platforms-unavailable", None, "JAX_PLATFORMS names a platform that does not start",
            "every platform JAX_PLATFORMS lists must initialize, or jax.devices() raises 'Unable to initialize backend'",
            "set JAX_PLATFORMS to platforms that work here (devctl list), or unset it so JAX picks the best available",
        ),
        KnownFailure(
            "plugin-half-installed", None, "a JAX plugin package without its PJRT package, or the reverse",
            "JAX's plugin module (jax_plugins.xla_cuda12, ...) is the -pjrt package's and its initialize() imports the -plugin package's kernels: with one half, JAX has no backend for that accelerator (pip check names the missing package)",
            "install both halves at jax's release: pip install -U 'jax[cuda12]==<version>' (or the extra of that plugin)",
        ),
        KnownFailure(
            "jaxlib-missing", None, "jaxlib is not installed",
            "jax is the Python half of JAX and jaxlib its compiled half; without jaxlib `import jax` raises ModuleNotFoundError",
            "install the jaxlib of jax's release: pip install -U 'jax==<version>' 'jaxlib==<version>'",
        ),
        KnownFailure(
            "xla-flags-invalid", None, "XLA_FLAGS has a flag XLA refuses",
            "XLA parses XLA_FLAGS when the first backend starts; an unknown flag or a value its type does not take makes it log the flag and end the process inside jax.devices() (exit status 1; older XLA aborts), with nothing to catch, whatever JAX_PLATFORMS says",
            "remove or correct that flag in XLA_FLAGS",
        ),
        KnownFailure(
            "jax-env-invalid", None, "a JAX_* variable JAX cannot read",
            "JAX reads its JAX_* configuration variables when it is imported; a boolean one whose value is not a truth value (true/false, 1/0, yes/no, on/off) makes `import jax` raise ValueError, whatever JAX_PLATFORMS says",
            "unset the variable, or give it a truth value (true or false)",
        ),
        KnownFailure(
            "cuda-plugin-without-gpu", None, "CUDA plugin installed on a machine without an NVIDIA GPU",
            "jax[cuda12]/[cuda13] is installed but this machine has no NVIDIA GPU (or its driver is not loaded or not mounted): the plugin's initialize() fails, JAX logs the error and falls back to CPU",
            "to silence the plugin set JAX_PLATFORMS=cpu, or uninstall the CUDA extra",
        ),
        KnownFailure(
            "nvidia-driver-not-mounted", None, "NVIDIA device nodes without the driver's libraries",
            "/dev/nvidia* exists but libcuda and libnvidia-ml cannot be loaded: typically a container given the devices but not the NVIDIA runtime",
            "start the container with the NVIDIA runtime (docker run --gpus all, or the NVIDIA device plugin in Kubernetes); on a host, install the driver",
        ),
        KnownFailure(
            "rocm-plugin-without-gpu", None, "ROCm plugin installed on a machine without an AMD GPU",
            "a jax-rocm plugin is installed but no AMD GPU is visible through KFD: the plugin fails, JAX falls back to CPU",
            "to silence the plugin set JAX_PLATFORMS=cpu, or uninstall it",
        ),
        KnownFailure(
            "pjrt-entry-broken", None, "a PJRT_NAMES_AND_LIBRARY_PATHS entry cannot be loaded",
            "JAX loads every PJRT_NAMES_AND_LIBRARY_PATHS entry before it looks at JAX_PLATFORMS, and does not catch a failure: every jax.devices() raises",
            "fix the entry's path, or remove it from PJRT_NAMES_AND_LIBRARY_PATHS",
        ),
        KnownFailure(
            "plugin-broken", None, "a JAX plugin fails to load",
            "the plugin's import or initialize() raised, crashed or hung; JAX logs it and goes on (or dies with it); JAX_PLATFORMS does not stop JAX from loading it",
            "reinstall the plugin at jaxlib's version, or uninstall it",
        ),
        KnownFailure(
            "backend-failed", None, "a JAX backend fails to initialize",
            "the backend's client could not be created; with JAX_PLATFORMS unset, jax.devices() raises for it",
            "fix the backend (its error says how) or uninstall its plugin; JAX_PLATFORMS=cpu skips it meanwhile",
        ),
        KnownFailure(
            "accelerator-unused", None, "accelerator present but JAX does not use it",
            "discovery finds the hardware, but no JAX backend initialized on it",
            "see each accelerator's reason",
        ),
        KnownFailure("check-failed", None, "a health check failed", "see the check's message", "see the check's remediation"),
        KnownFailure("check-warned", None, "a health check warned", "see the check's message", "see the check's remediation"),
    )
}  # fmt: skip

# JAX's and XLA's own words (failure-modes.md §1), matched in backend and plugin errors.
MESSAGES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fid, re.compile(pattern, re.IGNORECASE))
    for fid, pattern in (
        ("cuda-plugin-missing", r"a CUDA-enabled jaxlib is not installed"),
        ("plugin-version-skew", r"Jax plugin configuration error|is not compatible with the installed jaxlib version|has no attribute 'register_custom_type_id_handler'"),
        ("pjrt-api-mismatch", r"Mismatched PJRT plugin PJRT API"),
        ("jax-jaxlib-skew", r"is newer than and incompatible with jax version|but this version of jax requires version"),
        ("no-visible-gpu", r"CUDA_ERROR_NO_DEVICE|No visible GPU devices"),
        ("fabric-manager-missing", r"CUDA_ERROR_SYSTEM_NOT_READY"),
        ("driver-library-mismatch", r"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|does not match DSO version|versions differ \(driver upgraded"),
        ("cuda-library-shadowed", r"Outdated \w+ installation found"),
        ("cuda-library-missing", r"Unable to load cu\w+\. Is it installed\?"),
        ("cudnn-failure", r"DNN library initialization failed|Could not create cudnn handle|CuDNN library needs to have matching"),
        ("driver-too-old", r"older than the ptxas CUDA version|Unsupported \.version|CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
        ("preallocation-contention", r"no supported devices found for platform CUDA|RESOURCE_EXHAUSTED: Out of memory"),
        ("nccl-shm-too-small", r"/dev/shm/nccl-"),
        ("tpu-held", r"TPU is already in use by process with pid|libtpu\.so already in use"),
        ("libtpu-missing", r"TPU_LIBRARY_PATH is set to a non-existent path"),
        ("tpu-device-permission", r"Couldn't open device: /dev/(accel|vfio)|open\(/dev/(accel|vfio)"),
        ("multihost-slice-waiting", r"TPU backend initialization is taking more than"),
        ("cpu-without-avx", r"built using AVX instructions"),
        ("xla-flags-invalid", r"Unknown flags? in XLA_FLAGS|Couldn't interpret value .* for flag"),
        ("jaxlib-missing", r"jax requires jaxlib to be installed"),
        ("jax-env-invalid", r"invalid truth value .* for environment"),
    )
)  # fmt: skip

# Linux driver branch that first supports each CUDA release (CUDA Toolkit release notes, table 3).
CUDA_MIN_DRIVER_BRANCH = (
    ((13, 0), 580), ((12, 9), 575), ((12, 8), 570), ((12, 6), 560), ((12, 5), 555), ((12, 4), 550),
    ((12, 3), 545), ((12, 2), 535), ((12, 1), 530), ((12, 0), 525), ((11, 8), 520), ((11, 7), 515),
    ((11, 6), 510), ((11, 5), 495), ((11, 4), 470), ((11, 0), 450),
)  # fmt: skip
