"""devctl's verdict on the GPU client variables, against what the installed jaxlib really does with them.

For each environment of the table, real jaxlib runs
`xla_client.generate_pjrt_gpu_plugin_options()` (pure Python: it runs on a
CPU-only machine) in a fresh interpreter, and `devctl check --only env` and
`devctl env` run as a user would. jaxlib raising and devctl failing the check
must coincide; every fix devctl gives as an environment change is applied and
jaxlib must then accept the environment.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import devctl_env, run_devctl, validate_schema

ALLOC = "XLA_PYTHON_CLIENT_ALLOCATOR"
FRAC = "XLA_CLIENT_MEM_FRACTION"
OLD_FRAC = "XLA_PYTHON_CLIENT_MEM_FRACTION"
PREALLOC = "XLA_PYTHON_CLIENT_PREALLOCATE"
COLL = "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB"
ABORT = "XLA_PYTHON_CLIENT_ABORT_COLLECTIVES_ON_FAILURE"
TFRT = "XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT"

_ORACLE = r"""
import json, sys
from jaxlib import xla_client
try:
    options = xla_client.generate_pjrt_gpu_plugin_options()
except Exception as e:
    print(json.dumps({"raises": True, "error": f"{type(e).__name__}: {e}"}))
else:
    print(json.dumps({"raises": False, "options": options}))
"""


def _row(env: dict[str, str], id: str | None = None):
    return pytest.param(env, id=id or ",".join(f"{k.split('_', 2)[-1]}={v!r}" for k, v in env.items()))


TABLE = [
    # allocator: jaxlib lower()s the name and checks it against its own list
    *[_row({ALLOC: v}) for v in ("address", "platform", "bfc", "cuda_async", "default", "vmm", "garbage", "BFC", "Platform", "", " bfc")],
    # integers: int() of the value; the collective size is skipped when empty, the 0/1 flags are not
    *[_row({COLL: v}) for v in ("abc", "12", "-1", "", "1.5", " 12 ", "0x10")],
    *[_row({ABORT: v}) for v in ("1", "0", "true", "false", "", "yes", "maybe")],
    *[_row({TFRT: v}) for v in ("1", "x", "")],
    # fractions: float() of the value, empty skipped, both names set raises
    *[_row({FRAC: v}) for v in ("0.5", "1.5", "abc", "", "0", "-0.2", "nan", "1e-1", " .3")],
    *[_row({OLD_FRAC: v}) for v in ("0.5", "1.5", "abc", "")],
    _row({FRAC: "0.5", OLD_FRAC: "0.6"}, "both-fraction-names"),
    _row({FRAC: "", OLD_FRAC: "0.6"}, "both-names-new-empty"),
    _row({FRAC: "0.5", OLD_FRAC: ""}, "both-names-old-empty"),
    _row({FRAC: "abc", OLD_FRAC: "0.6"}, "both-names-new-bad"),
    # preallocation: any value is accepted
    *[_row({PREALLOC: v}) for v in ("false", "False", "0", "true", "1", "", "no")],
    # several at once: every culprit must be named and fixed
    _row({ALLOC: "address", COLL: "abc"}, "two-errors"),
    _row({ALLOC: "bogus", OLD_FRAC: "0.5", PREALLOC: "false"}, "error-and-deprecation"),
    _row({OLD_FRAC: "abc", ABORT: "true", TFRT: "on"}, "three-errors"),
]


def _base_env(**extra: str) -> dict[str, str]:
    env = devctl_env(devices=1)
    for name in list(env):
        if name.startswith(("JAX_", "XLA_", "PJRT_", "TPU_", "LIBTPU")) and name != "XLA_FLAGS":
            del env[name]
    env.update(extra)
    return env


def jaxlib_truth(env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", _ORACLE], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def env_check(env: dict[str, str]) -> dict:
    proc = run_devctl("check", "--only", "env", "--json", env=env, timeout=60)
    assert proc.returncode in (0, 1), f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    doc = json.loads(proc.stdout)
    validate_schema(doc, "check")
    (check,) = doc["checks"]
    assert proc.returncode == (1 if check["status"] == "fail" else 0)
    return check


def env_problems(env: dict[str, str]) -> dict[str, str]:
    proc = run_devctl("env", "--json", env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate_schema(doc, "env")
    return {e["name"]: e["problem"] for e in doc["env"] if e["problem"]}


def apply_fixes(env: dict[str, str], fixes: dict) -> dict[str, str]:
    new = dict(env)
    for fix in fixes.values():
        for name in fix["unset"]:
            new.pop(name, None)
        new.update(fix["set"])
    return new


def test_base_environment_is_clean():
    truth = jaxlib_truth(_base_env())
    check = env_check(_base_env())
    assert not truth["raises"] and check["status"] == "pass", (truth, check)


@pytest.mark.parametrize("setting", TABLE)
def test_devctl_agrees_with_jaxlib(setting):
    env = _base_env(**setting)
    truth = jaxlib_truth(env)
    check = env_check(env)
    errors = check["details"]["errors"]
    said = f"jaxlib: {truth}\ndevctl: {check['status']}: {check['message']} | {check['remediation']}"

    assert (check["status"] == "fail") == truth["raises"], said
    assert bool(errors) == truth["raises"] and set(errors) <= set(setting), said
    named = [v for v in setting if v in truth.get("error", "")]
    assert not named or set(named) & set(errors), said  # the variable jaxlib complains about is one devctl blames
    # `devctl env` shows the same problems the check judged
    assert env_problems(env) == check["details"]["problems"], said

    fixes = check["details"]["fixes"]
    assert set(errors) <= set(fixes), said  # every error here is settled by an environment change
    if not fixes:
        return
    fixed = apply_fixes(env, fixes)
    after = jaxlib_truth(fixed)
    assert not after["raises"], f"{said}\nafter the fixes {fixes}: {after}"
    check_after = env_check(fixed)
    assert check_after["status"] != "fail" and not set(fixes) & set(check_after["details"]["problems"]), check_after
    if not truth["raises"] and all(f["set"] for f in fixes.values()):
        # A fix that renames or rewrites a value jaxlib accepted must leave jaxlib's options as they were.
        assert after["options"] == truth["options"], f"{said}\nafter: {after}"


def test_deprecated_fraction_is_renamed_with_the_users_value():
    check = env_check(_base_env(**{OLD_FRAC: "0.5"}))
    assert check["status"] == "warn"
    assert check["details"]["fixes"] == {OLD_FRAC: {"set": {FRAC: "0.5"}, "unset": [OLD_FRAC]}}
    assert f"{FRAC}=0.5" in check["remediation"] and "0.75" not in check["remediation"], check["remediation"]


@pytest.mark.parametrize("where", ["remediation", "problem"])
def test_every_allocator_devctl_recommends_is_one_jaxlib_accepts(where):
    check = env_check(_base_env(**{ALLOC: "garbage"}))
    assert check["status"] == "fail"
    text = check["remediation"] if where == "remediation" else check["details"]["problems"][ALLOC]
    listed = re.split(r"set one of |must be one of ", text, maxsplit=1)[1].split(";")[0].split(" (")[0]
    names = re.findall(r"[a-z_]+", listed)
    assert {"default", "bfc"} <= set(names), text
    for name in names:  # on jaxlib 0.10.2 this is what kept `address` out
        assert not jaxlib_truth(_base_env(**{ALLOC: name}))["raises"], f"devctl recommends {name!r}, jaxlib rejects it"


# ---- the rules come from the installed jaxlib's source, and fall back when it cannot be read -------


def _fake_jaxlib(site: Path, xla_client: str | None) -> dict[str, str]:
    """A `jaxlib` package found before the real one; its xla_client.py is pure Python, so the oracle runs it too."""
    pkg = site / "jaxlib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    if xla_client is not None:
        (pkg / "xla_client.py").write_text(xla_client)
    return {"PYTHONPATH": f"{site}{os.pathsep}{devctl_env()['PYTHONPATH']}"}


# Another jaxlib: `address` accepted, `vmm` not, the name stripped as well as lower-cased, a new integer variable.
_OTHER_JAXLIB = '''
import os

def generate_pjrt_gpu_plugin_options():
  options = {}
  allocator = os.getenv('XLA_PYTHON_CLIENT_ALLOCATOR', 'default').strip().lower()
  size = os.getenv('XLA_PYTHON_CLIENT_NEW_POOL_MB', '')
  if allocator not in ('default', 'platform', 'bfc', 'cuda_async', 'address'):
    raise ValueError('XLA_PYTHON_CLIENT_ALLOCATOR env var must be one of ..., got "%s"' % allocator)
  options['allocator'] = allocator
  if size:
    options['new_pool'] = int(size) << 20
  return options
'''


@pytest.mark.parametrize(
    "setting",
    [{ALLOC: "address"}, {ALLOC: "vmm"}, {ALLOC: " Address "}, {"XLA_PYTHON_CLIENT_NEW_POOL_MB": "abc"}, {"XLA_PYTHON_CLIENT_NEW_POOL_MB": "64"}],
    ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()),
)
def test_rules_follow_the_installed_jaxlib(tmp_path, setting):
    env = _base_env(**_fake_jaxlib(tmp_path / "site", _OTHER_JAXLIB), **setting)
    truth = jaxlib_truth(env)
    check = env_check(env)
    assert (check["status"] == "fail") == truth["raises"], (truth, check)
    assert check["details"]["jaxlib_rules"].endswith(str(tmp_path / "site" / "jaxlib" / "xla_client.py"))


@pytest.mark.parametrize("kind", ["missing", "fifo", "oversized", "not-python", "no-function", "device"])
def test_unreadable_jaxlib_source_falls_back_to_the_built_in_rules(tmp_path, kind):
    site = tmp_path / "site"
    env = _base_env(**_fake_jaxlib(site, None), **{ALLOC: "address"})
    path = site / "jaxlib" / "xla_client.py"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would block forever without O_NONBLOCK
    elif kind == "oversized":
        path.write_text("# padding\n" * 200_000)
    elif kind == "not-python":
        path.write_bytes(b"\xff\xfe not python (")
    elif kind == "no-function":
        path.write_text("def something_else():\n  pass\n")
    elif kind == "device":
        path.symlink_to("/dev/zero")  # a link to an endless non-file: refused, not read
    check = env_check(env)
    rules = check["details"]["jaxlib_rules"]
    assert rules.startswith("jaxlib 0.10.2, as built into devctl"), rules
    assert check["status"] == "fail" and "must be one of default, platform, bfc, cuda_async, vmm" in check["message"]
    proc = run_devctl("env", env=env, timeout=60)
    assert proc.returncode == 0 and "as built into devctl" in proc.stdout, proc.stdout + proc.stderr


def test_the_installed_jaxlibs_own_source_is_understood():
    # On every jaxlib CI installs (the oldest and the newest), the rules are read, not the fallback's.
    from devctl.discovery.envvars import jaxlib_rules

    rules = jaxlib_rules()
    assert rules.origin.endswith("xla_client.py") and "built into devctl" not in rules.source, rules


def test_an_allocator_list_named_before_its_check_is_read(tmp_path):
    # jaxlib 0.12 writes `allowed_allocators = (...)` and then `if allocator not in allowed_allocators`.
    named = _OTHER_JAXLIB.replace(
        "  if allocator not in ('default', 'platform', 'bfc', 'cuda_async', 'address'):",
        "  allowed = ('default', 'platform', 'bfc', 'cuda_async', 'address')\n  if allocator not in allowed:",
    )
    assert named != _OTHER_JAXLIB
    for value, fails in (("address", False), ("vmm", True)):
        env = _base_env(**_fake_jaxlib(tmp_path / value, named), **{ALLOC: value})
        assert jaxlib_truth(env)["raises"] is fails
        check = env_check(env)
        assert (check["status"] == "fail") is fails and "built into devctl" not in check["details"]["jaxlib_rules"], check


def test_built_in_rules_match_the_installed_jaxlib():
    # When this fails, jaxlib changed: update FALLBACK_RULES and the version it names.
    from importlib.metadata import version

    from devctl.discovery.envvars import FALLBACK_RULES, jaxlib_rules

    rules = jaxlib_rules()
    if version("jaxlib") != "0.10.2":
        pytest.skip(f"the built-in rules are jaxlib 0.10.2's; jaxlib {version('jaxlib')} is installed")
    assert rules.origin.endswith("xla_client.py") and rules.source == "jaxlib 0.10.2"
    fields = ("allocators", "numbers", "both_fractions_raise", "normalise")
    assert [getattr(rules, f) for f in fields] == [getattr(FALLBACK_RULES, f) for f in fields]
