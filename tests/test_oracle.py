"""devctl's prediction of what JAX does, compared with what real JAX does under the same environment.

Each scenario is an environment a user really ends up in, built here from real
things: JAX_PLATFORMS values, PJRT_NAMES_AND_LIBRARY_PATHS entries (missing
files, a text file, JSON configs, real PJRT libraries compiled with cc), and
plugin packages whose initialize() raises, fails to import, segfaults or hangs.
For each, `devctl list --json` is run, then real JAX in a fresh interpreter;
any disagreement fails. Where devctl offers a fix that is an environment
change, the fix is applied and JAX must then do what devctl promised.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
from conftest import devctl_env, run_devctl, validate_schema
from oracle import disagreements, jax_truth
from plugin_packages import write_plugin

SEP = os.pathsep
UNINSTALL = "_ORACLE_UNINSTALL"  # a setup's note of what `pip uninstall` of its plugin would remove


@dataclass
class Scenario:
    name: str
    env: dict[str, str] = field(default_factory=dict)
    expect: str = "ok"  # what JAX does: keeps each scenario honest about what it exercises
    setup: Callable[[Path, dict], dict[str, str]] | None = None  # (tmp dir, pjrt libs) -> more env
    devices: int = 4
    timeout: float = 60


def _plugin(behaviour: str, name: str = "oracle_plugin"):
    def setup(tmp: Path, libs: dict) -> dict[str, str]:
        path = write_plugin(tmp / "site", name, behaviour)
        return {"PYTHONPATH": str(tmp / "site"), UNINSTALL: str(path)}

    return setup


def _import_error(tmp: Path, libs: dict) -> dict[str, str]:
    pkg = tmp / "site" / "jax_plugins" / "needs_missing_dep"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import devctl_no_such_dependency\n\ndef initialize():\n    pass\n")
    return {"PYTHONPATH": str(tmp / "site"), UNINSTALL: str(pkg)}


def _registers(library: str, name: str = "pluggy", priority: int = 400):
    """A packaged plugin that registers a real PJRT library, as the CUDA and ROCm plugins do."""

    def setup(tmp: Path, libs: dict) -> dict[str, str]:
        pkg = tmp / "site" / "jax_plugins" / name
        pkg.mkdir(parents=True)
        path = libs[library] if library in libs else library
        (pkg / "__init__.py").write_text(
            "from jax._src import xla_bridge as xb\n\n"
            f"def initialize():\n    xb.register_plugin({name!r}, priority={priority}, library_path={str(path)!r})\n"
        )
        return {"PYTHONPATH": str(tmp / "site"), UNINSTALL: str(pkg)}

    return setup


def _pjrt(*entries: tuple[str, str]):
    """PJRT_NAMES_AND_LIBRARY_PATHS from (name, path) pairs; a path may name a pjrt_libs variant or a file to write."""

    def setup(tmp: Path, libs: dict) -> dict[str, str]:
        items = []
        for name, path in entries:
            if path in libs:
                path = str(libs[path])
            elif path.startswith("write:"):
                kind, _, content = path[len("write:"):].partition(":")
                target = tmp / f"{name}.{kind}"
                target.write_text(content.replace("LIB", str(libs["good"])))
                path = str(target)
            items.append(f"{name}{SEP}{path}" if name else path)
        return {"PJRT_NAMES_AND_LIBRARY_PATHS": ",".join(items)}

    return setup


SCENARIOS = [
    Scenario("plain-cpu-4-devices"),
    Scenario("plain-cpu-1-device", devices=1),
    Scenario("jax-platforms-cpu", {"JAX_PLATFORMS": "cpu"}),
    Scenario("jax-platforms-empty", {"JAX_PLATFORMS": ""}),
    Scenario("jax-platforms-cuda-no-gpu", {"JAX_PLATFORMS": "cuda"}, expect="raises"),
    Scenario("jax-platforms-gpu-no-gpu", {"JAX_PLATFORMS": "gpu"}, expect="raises"),
    Scenario("jax-platforms-cpu-cuda", {"JAX_PLATFORMS": "cpu,cuda"}),
    Scenario("jax-platforms-tpu-no-libtpu", {"JAX_PLATFORMS": "tpu"}, expect="raises"),
    Scenario("jax-platforms-cpu-tpu", {"JAX_PLATFORMS": "cpu,tpu"}, expect="raises"),
    Scenario("jax-platforms-unknown", {"JAX_PLATFORMS": "foo"}, expect="raises"),
    Scenario("jax-platforms-uppercase", {"JAX_PLATFORMS": "CPU"}, expect="raises"),
    Scenario("jax-platforms-space", {"JAX_PLATFORMS": "cpu, tpu"}, expect="raises"),
    Scenario("tpu-library-path-missing", {"TPU_LIBRARY_PATH": "/nonexistent/libtpu.so"}),
    Scenario("allocator-and-preallocation", {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}),
    Scenario("pjrt-missing-file", setup=_pjrt(("ghost", "/nonexistent/libghost.so")), expect="raises"),
    Scenario("pjrt-missing-file-with-cpu-only", {"JAX_PLATFORMS": "cpu"}, setup=_pjrt(("ghost", "/nonexistent/libghost.so")), expect="raises"),
    Scenario("pjrt-two-missing-files", setup=_pjrt(("ghost1", "/nonexistent/a.so"), ("ghost2", "/nonexistent/b.so")), expect="raises"),
    Scenario("pjrt-not-a-library", setup=_pjrt(("text", "write:so:not an ELF file")), expect="raises"),
    Scenario("pjrt-no-get-pjrt-api", setup=_pjrt(("nosym", "no_get_pjrt_api")), expect="raises"),
    Scenario("pjrt-library-without-client", setup=_pjrt(("fakegpu", "good")), expect="crashes"),
    Scenario("pjrt-library-named-away", {"JAX_PLATFORMS": "cpu"}, setup=_pjrt(("fakegpu", "good"))),
    Scenario("pjrt-json-config", setup=_pjrt(("viajson", 'write:json:{"library_path": "LIB"}')), expect="crashes"),
    Scenario("pjrt-json-without-library-path", setup=_pjrt(("badjson", 'write:json:{"create_options": {}}')), expect="raises"),
    Scenario("pjrt-json-missing", setup=_pjrt(("nojson", "/nonexistent/plugin.json")), expect="raises"),
    Scenario("pjrt-malformed-item", setup=_pjrt(("", "just-a-path-without-name"))),
    Scenario("pjrt-segfaulting-library", setup=_pjrt(("boom", "segfault")), expect="crashes"),
    Scenario("plugin-initialize-raises", setup=_plugin("raises")),
    Scenario("plugin-import-fails", setup=_import_error),
    Scenario("plugin-segfaults", setup=_plugin("segfaults"), expect="crashes"),
    Scenario("plugin-aborts", setup=_plugin("aborts"), expect="crashes"),
    Scenario("plugin-registers-library-without-client", setup=_registers("good"), expect="crashes"),
    Scenario("plugin-hangs", setup=_plugin("hangs"), expect="hangs", timeout=8),
    Scenario("plugin-registers-missing-library", setup=_registers("/nonexistent/libpluggy.so")),
    Scenario("plugin-registered-but-jax-platforms-cpu", {"JAX_PLATFORMS": "cpu"}, setup=_registers("good")),
    # JAX_PLATFORMS as JAX splits it (issue 21): a platform skipped where JAX goes on, names it does not know.
    Scenario("jax-platforms-cuda-cpu-no-gpu", {"JAX_PLATFORMS": "cuda,cpu"}),
    Scenario("jax-platforms-trailing-comma", {"JAX_PLATFORMS": "cpu,"}, expect="raises"),
    Scenario("jax-platforms-leading-space", {"JAX_PLATFORMS": " cpu"}, expect="raises"),
    Scenario("jax-platforms-empty-entry", {"JAX_PLATFORMS": "cpu,,tpu"}, expect="raises"),
    Scenario("jax-platforms-gpu-cpu-no-gpu", {"JAX_PLATFORMS": "gpu,cpu"}, expect="raises"),
    Scenario("jax-platforms-unknown-then-cpu", {"JAX_PLATFORMS": "foo,cpu"}, expect="raises"),
    Scenario("cuda-visible-devices-empty-no-gpu", {"CUDA_VISIBLE_DEVICES": ""}),
    # XLA's flag parser ends the process inside jax.devices() (exit status 1, nothing to catch).
    Scenario("xla-flags-unknown-flag", {"XLA_FLAGS": "--xla_no_such_flag=1"}, expect="exits"),
    Scenario("xla-flags-bad-value", {"XLA_FLAGS": "--xla_force_host_platform_device_count=abc"}, expect="exits"),
    Scenario("xla-flags-bad-among-good", {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=x2"}, expect="exits"),
    # jax._src.config reads its boolean JAX_* variables at import: a value that is no truth value raises there.
    Scenario("jax-env-bool-invalid", {"JAX_ENABLE_X64": "maybe"}, expect="raises"),
    Scenario("jax-env-bool-invalid-with-jax-platforms-cpu", {"JAX_DEBUG_NANS": "sometimes", "JAX_PLATFORMS": "cpu"}, expect="raises"),
    Scenario("xla-flags-bad-with-jax-platforms-cpu", {"XLA_FLAGS": "--xla_cpu_enable_fast_math=maybe", "JAX_PLATFORMS": "cpu"}, expect="exits"),
]


def beside_jax(command: str, scenario: Scenario, tmp_path: Path, pjrt_libs: dict) -> tuple:
    """`devctl COMMAND --json` and real JAX in the scenario's environment: (env, devctl's process, its document,
    JAX's truth), JAX doing what the scenario says it does."""
    env = _environment(scenario, tmp_path, pjrt_libs)
    proc = run_devctl(command, "--json", "--timeout", str(min(scenario.timeout, 20)), env=env, timeout=300)
    doc = json.loads(proc.stdout)
    validate_schema(doc, command)
    truth = jax_truth(env, timeout=scenario.timeout)
    assert truth["result"] == scenario.expect, f"the scenario no longer exercises what it says: JAX {truth}"
    return env, proc, doc, truth


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_devctl_predicts_what_jax_does(scenario: Scenario, tmp_path, pjrt_libs):
    env, proc, predicted, truth = beside_jax("list", scenario, tmp_path, pjrt_libs)
    assert disagreements(predicted, truth) == [], truth.get("stderr", "")[-2000:]
    # `devctl list` exits 1 exactly when jax.devices() would fail.
    assert proc.returncode == (1 if scenario.expect != "ok" else 0), proc.stderr
    outcome = predicted["jax_outcome"]
    if scenario.expect != "ok":
        assert outcome["code"] and outcome["fix"], outcome
    # Every way every printed fix offers, as data (the outcome's, each row's), applied: JAX must then do what
    # the fix promised, and devctl must agree that it does.
    remedies = [(outcome["code"], outcome["fix"], r) for r in outcome["remedies"]] if scenario.expect != "ok" else []
    remedies += [(b["code"], b["hint"], r) for b in predicted["backends"] if b["status"] != "ok" for r in b["remedies"]]
    for code, said, remedy in remedies:
        for args in remedy["pip"]:
            # Light scenarios install nothing from the registry: the one pip fix is removing their plugin.
            assert args[0] == "uninstall", (scenario.name, said)
        if remedy["env"]:
            _verify_env_remedy(env, remedy["env"], code, said)
    if _advises_uninstall(predicted):
        _verify_uninstall(env, scenario)
    if scenario.expect != "ok" and not outcome["remedies"]:
        assert "uninstall" in outcome["fix"] or "fix what its error says" in outcome["fix"], outcome  # a fix in words


def _verify_env_remedy(env: dict[str, str], change: dict, code: str, said: str) -> None:
    fixed = {k: v for k, v in env.items() if k not in change}
    fixed.update({k: v for k, v in change.items() if v is not None})
    truth = jax_truth(fixed)
    assert truth["result"] == "ok", f"devctl's fix {said!r} ({change}) does not make jax.devices() work: {truth.get('error')}"
    again = run_devctl("list", "--json", env=fixed, timeout=180)
    doc = json.loads(again.stdout)
    assert again.returncode == 0 and doc["jax_outcome"]["result"] == "ok", doc["jax_outcome"]
    assert code not in [b["code"] for b in doc["backends"]], (said, change, doc["backends"])


def _advises_uninstall(predicted: dict) -> bool:
    advice = [predicted["jax_outcome"].get("fix") or ""] + [b.get("hint") or "" for b in predicted["backends"] if b.get("plugin")]
    return any("uninstall" in a for a in advice)


def _verify_uninstall(env: dict[str, str], scenario: Scenario) -> None:
    """Apply 'uninstall the plugin': JAX then works and logs no broken plugin."""
    import shutil

    path = env.get(UNINSTALL)
    assert path, f"{scenario.name}: devctl advises an uninstall, and the scenario has no plugin to remove"
    shutil.rmtree(path)
    truth = jax_truth(env)
    assert truth["result"] == "ok" and truth["broken_plugins"] == [], truth


def test_jax_platforms_does_not_silence_a_broken_plugin(tmp_path, pjrt_libs):
    """Why devctl never offers JAX_PLATFORMS=cpu for a broken plugin: JAX imports every plugin anyway."""
    scenario = Scenario("raises", {"JAX_PLATFORMS": "cpu"}, setup=_plugin("raises"))
    env = _environment(scenario, tmp_path, pjrt_libs)
    assert jax_truth(env)["broken_plugins"] == ["jax_plugins.oracle_plugin"]
    doc = json.loads(run_devctl("list", "--json", env=env).stdout)
    (row,) = [b for b in doc["backends"] if b.get("plugin")]
    assert row["code"] == "DEVCTL_FR_PLUGIN_BROKEN" and "JAX_PLATFORMS" not in row["hint"]


def _environment(scenario: Scenario, tmp: Path, libs: dict) -> dict[str, str]:
    env = devctl_env(devices=scenario.devices)
    env.update(scenario.env)
    extra = scenario.setup(tmp, libs) if scenario.setup else {}
    if "PYTHONPATH" in extra:
        env["PYTHONPATH"] = SEP.join((extra.pop("PYTHONPATH"), env["PYTHONPATH"]))
    env.update(extra)
    return env


def test_env_says_what_xla_refuses_in_xla_flags_and_nothing_when_it_takes_them():
    """`devctl env` asks XLA's own parser (jaxlib's CPU client in a child): the flag that ends every JAX program is
    named with its fix, and flags XLA takes are not a problem."""
    bad = devctl_env(devices=1, XLA_FLAGS="--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=abc")
    doc = json.loads(run_devctl("env", "--json", env=bad, timeout=180).stdout)
    (row,) = [v for v in doc["env"] if v["name"] == "XLA_FLAGS"]
    assert "Couldn't interpret value abc for flag xla_force_host_platform_device_count" in row["problem"], row
    assert row["problem"].endswith("export XLA_FLAGS=--xla_cpu_enable_fast_math=false"), row
    # check says the same, with the same fix, in its env, backends and devices rows.
    checks = {c["name"]: c for c in json.loads(run_devctl("check", "--json", env=bad, timeout=300).stdout)["checks"]}
    fix = "remove --xla_force_host_platform_device_count=abc from XLA_FLAGS: export XLA_FLAGS=--xla_cpu_enable_fast_math=false"
    assert [(checks[n]["status"], checks[n]["remediation"]) for n in ("env", "backends", "devices")] == [("fail", fix)] * 3, checks
    good = json.loads(run_devctl("env", "--json", env=devctl_env(devices=2), timeout=180).stdout)
    assert [v["problem"] for v in good["env"] if v["name"] == "XLA_FLAGS"] == [None]
