"""Installed versions of jax, jaxlib, plugins and libtpu, read from package metadata, checked the way JAX checks them.

What JAX itself checks, and so what devctl calls an error:
- `import jax` refuses a jaxlib older than jax's minimum or newer than jax (jax/_src/lib check_jaxlib_version);
- jaxlib's plugin_support refuses a jax-cuda*/oneapi *plugin* (kernels) package not at jaxlib's exact version
  ("... so it will not be used"), where that jaxlib has the check (ROCm exempt);
- XLA's plugin check refuses a PJRT library by its PJRT C API version only (xla/pjrt/pjrt_api.cc): in
  compatibility mode, on by default, any library of the same major and a minor >= 29 passes, newer or older than
  jaxlib's own. A jax-cuda*-pjrt package of another release is therefore a warning, not a predicted crash, unless
  jaxlib's rule (devctl.probe.framework_pjrt) refuses its library's version.

Whatever is skewed, the fix is one command for the whole stack: jax's own pins for its release
(`pip install -U 'jax[cuda12]==X'`, X the installed jax), never one package up and another down.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from importlib import metadata
from importlib.util import find_spec

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from devctl.model.env import EnvFinding, PackageChange, PackageVersion, StackFix
from devctl.model.plugins import FrameworkPjrt
from devctl.model.remedy import pip_command

_PLUGIN_RE = re.compile(r"^jax[-_](cuda\d+|rocm\d+|oneapi)[-_](plugin|pjrt)$")
_VERSION_PREFIX = re.compile(r"[0-9]+(?:\.[0-9]+)*")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")
_STACK_ROLES = ("jaxlib", "plugin", "pjrt", "libtpu")


def _parse(v: str) -> tuple[int, ...]:
    """JAX's own parse: the dotted numeric prefix of a PEP 440 version."""
    m = _VERSION_PREFIX.match(v)
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def metadata_name(dist: metadata.Distribution) -> str | None:
    """The distribution's Name field; None where a broken install has none (`metadata["Name"]` raises there on new Pythons)."""
    return dist.metadata.get("Name")  # type: ignore[attr-defined]  # typeshed has PackageMetadata.get from 3.12; 3.10's email.message.Message has it


def installed_packages() -> list[PackageVersion]:
    """The JAX stack as installed: jax, jaxlib, every jax plugin/pjrt package, libtpu, numpy, ml_dtypes."""
    found: dict[str, PackageVersion] = {}
    for dist in metadata.distributions():
        name = _norm(metadata_name(dist) or "")
        if name in found or not name:
            continue
        role = _role(name)
        if role:
            found[name] = PackageVersion(name=name, version=dist.version, role=role)
    for required in ("jax", "jaxlib"):
        found.setdefault(required, PackageVersion(name=required, version=None, role=required))
    order = ["jax", "jaxlib", "plugin", "pjrt", "libtpu", "other"]
    return sorted(found.values(), key=lambda p: (order.index(p.role), p.name))


def _role(name: str) -> str | None:
    if name in ("jax", "jaxlib"):
        return name
    m = _PLUGIN_RE.match(name)
    if m:
        return m.group(2)
    if name in ("libtpu", "libtpu-nightly"):
        return "libtpu"
    if name in ("numpy", "ml-dtypes", "jax-tpu-embedding", "jax-metal", "intel-extension-for-openxla"):
        return "other"
    return None


def _package_file(package: str, relative: str) -> str | None:
    """The text of a file inside an installed package, found without importing it."""
    spec = find_spec(package)
    if not spec or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        try:
            with open(f"{location}/{relative}", encoding="utf-8") as f:
                return f.read()
        except OSError:
            continue
    return None


def minimum_jaxlib_version() -> str | None:
    """`_minimum_jaxlib_version` from jax/version.py, read as text (importing jax would initialize nothing, but costs a second)."""
    text = _package_file("jax", "version.py")
    m = re.search(r"^_minimum_jaxlib_version\s*=\s*['\"]([^'\"]+)['\"]", text or "", re.M)
    return m.group(1) if m else None


def jaxlib_checks_plugin_versions() -> bool | None:
    """Whether the installed jaxlib refuses a plugin of another version (jaxlib/plugin_support.py, jaxlib >= 0.6);
    older jaxlibs load any plugin's kernels without a word. None: no jaxlib."""
    if find_spec("jaxlib") is None:
        return None
    text = _package_file("jaxlib", "plugin_support.py")
    return bool(text and "so it will not be used" in text)


def libtpu_pin(jax_version: str | None) -> str | None:
    """The libtpu version jax[tpu] pins, e.g. '0.0.42.*', from jax's metadata."""
    if not jax_version:
        return None
    for text in jax_requirements():
        req = _requirement(text)
        if req and req[0] in ("libtpu", "libtpu-nightly") and req[3] == "tpu" and req[2]:
            return req[2]
    return None


def jax_requirements() -> list[str]:
    """jax's Requires-Dist lines: its release's own pins for jaxlib, the plugins and libtpu, per extra."""
    try:
        return list(metadata.requires("jax") or [])
    except metadata.PackageNotFoundError:
        return []


# ---- the one fix ----------------------------------------------------------------------------------


def _requirement(text: str) -> tuple[str, set[str], str | None, str] | None:
    """(name, its extras, the one version or pin it allows or None, the jax extra it belongs to or "")."""
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    # packaging has no public accessor for a marker's operands; its text is normalised ('extra == "cuda12"').
    extra = _EXTRA_MARKER.search(str(req.marker or ""))
    return _norm(req.name), {_norm(e) for e in req.extras}, _exact(req.specifier), extra.group(1) if extra else ""


def _exact(specifier: SpecifierSet) -> str | None:
    """The one version a specifier allows: '==X', '==X.*' or '>=X,<=X'."""
    specs = list(specifier)
    equal = [s.version for s in specs if s.operator == "=="]
    if equal:
        return equal[0]
    low = {s.version for s in specs if s.operator == ">="}
    high = {s.version for s in specs if s.operator == "<="}
    return next(iter(low)) if len(low) == 1 and low == high else None


def _upper(text: str) -> str | None:
    try:
        specs = Requirement(text).specifier
    except InvalidRequirement:
        return None
    return next((s.version for s in specs if s.operator == "<="), None)


def _satisfies(version: str | None, target: str) -> bool:
    """`version` is the one `target` names ('0.6.2', or a pin such as '0.0.17.*')."""
    if version is None:
        return False
    try:
        return Version(version) in SpecifierSet(f"=={target}")
    except (InvalidVersion, InvalidSpecifier):
        return _parse(version) == _parse(target.removesuffix(".*"))


def _family_plugin(name: str) -> str | None:
    """The plugin (kernels) distribution of a jax-<family>-plugin/pjrt package: what jax's extras pin."""
    m = _PLUGIN_RE.match(name)
    return f"jax-{m.group(1)}-plugin" if m else None


def plan_stack_fix(
    jax_version: str,
    installed: Mapping[str, str | None],
    requires: Sequence[str],
    with_cuda: bool = False,
) -> StackFix:
    """The one command that puts every installed package of the stack at jax `jax_version`'s own pins.

    `installed` maps distribution names (jaxlib, jax-cuda12-plugin, jax-cuda12-pjrt, libtpu, ...) to
    versions; `requires` is jax's Requires-Dist; `with_cuda`: the NVIDIA CUDA wheels are installed, so
    the extra that brings them (jax[cuda12]) is chosen over the one that expects a local CUDA
    (jax[cuda12-local]).
    """
    installed = {_norm(k): v for k, v in installed.items()}
    pins: dict[str, dict[str, tuple[str | None, set[str]]]] = {}  # extra -> name -> (pin, its extras)
    base_jaxlib: str | None = None
    for text in requires:
        req = _requirement(text)
        if req is None:
            continue
        name, req_extras, pin, extra = req
        if not extra and name == "jaxlib":
            base_jaxlib = pin or _upper(text)
        pins.setdefault(extra, {})[name] = (pin, req_extras)
    accelerator_extras = {e: p for e, p in pins.items() if e and any(n == "libtpu" or _PLUGIN_RE.match(n) for n in p)}

    release_jaxlib = next((p["jaxlib"][0] for p in accelerator_extras.values() if p.get("jaxlib", (None,))[0]), None)
    release_jaxlib = release_jaxlib or base_jaxlib or jax_version

    chosen: list[str] = []
    explicit: dict[str, str] = {}
    targets: dict[str, str] = {"jaxlib": release_jaxlib}
    families = sorted(filter(None, {_family_plugin(n) for n in installed}))
    for plugin in families:
        candidates = [e for e, p in accelerator_extras.items() if plugin in p]
        pjrt = plugin[: -len("plugin")] + "pjrt"
        if not candidates:  # jax's release has no extra for it: name its packages
            for n in (plugin, pjrt):
                if n in installed:
                    explicit[n] = targets[n] = release_jaxlib
            continue
        family = plugin[len("jax-") : -len("-plugin")]

        def rank(extra: str, plugin=plugin, family=family) -> tuple:
            brings_cuda = bool(accelerator_extras[extra][plugin][1] & {"with-cuda"})
            return (brings_cuda != with_cuda, extra not in (family, f"{family}-local"), len(extra), extra)

        extra = min(candidates, key=rank)
        chosen.append(extra)
        target = accelerator_extras[extra][plugin][0] or release_jaxlib
        targets[plugin] = targets[pjrt] = target  # a plugin release requires its own pjrt release
    for tpu in ("libtpu", "libtpu-nightly"):
        if tpu in installed:
            candidates = [e for e, p in accelerator_extras.items() if "libtpu" in p]
            if candidates:
                extra = "tpu" if "tpu" in candidates else min(candidates, key=len)
                chosen.append(extra)
                targets[tpu] = accelerator_extras[extra]["libtpu"][0] or "?"
    chosen = sorted(set(chosen))
    if chosen:
        parts = [f"jax[{','.join(chosen)}]=={jax_version}"]
    else:
        parts = [f"jax=={jax_version}", f"jaxlib=={release_jaxlib}"]
    parts += [f"{n}=={v}" for n, v in sorted(explicit.items())]

    changes = []
    for name, target in targets.items():
        version = installed.get(name)
        if target == "?" or _satisfies(version, target):
            continue
        # Not installed: jaxlib, or the missing half of a plugin family whose other half is (both are targets).
        changes.append(PackageChange(name=name, installed=version, target=target))
    changes.sort(key=lambda c: (c.name != "jaxlib", c.name))
    moved = ", ".join(f"{c.name} {c.installed or '(not installed)'} -> {c.target}" for c in changes)
    return StackFix(
        command=pip_command(["install", "-U", *parts]),
        pip=["install", "-U", *parts],
        jax_version=jax_version,
        extras=chosen,
        changes=changes,
        summary=f"puts the stack at jax {jax_version}'s own release" + (f": {moved}" if moved else ""),
    )


def cuda_wheels_installed(packages: Sequence[PackageVersion]) -> bool:
    """The NVIDIA wheels that jax[cudaNN] brings are installed (their plugin's with-cuda requirements)."""
    for p in packages:
        if p.role != "plugin" or not p.version or "cuda" not in p.name:
            continue
        try:
            requires = metadata.requires(p.name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            req = _requirement(text)
            if req and req[3] in ("with-cuda", "with_cuda") and _installed(req[0]):
                return True
    return any(d.startswith(("nvidia-cuda-runtime", "nvidia-cublas")) for d in _installed_names())


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def _installed_names() -> set[str]:
    return {_norm(metadata_name(d) or "") for d in metadata.distributions()}


def stack_fix(packages: Sequence[PackageVersion], requires: Sequence[str] | None = None, with_cuda: bool | None = None) -> StackFix | None:
    """The one fix for this installation (None without jax: there is no release to pin to)."""
    jax = next((p.version for p in packages if p.name == "jax"), None)
    if not jax:
        return None
    installed = {p.name: p.version for p in packages if p.role in _STACK_ROLES and p.version}
    return plan_stack_fix(
        jax,
        installed,
        jax_requirements() if requires is None else requires,
        cuda_wheels_installed(packages) if with_cuda is None else with_cuda,
    )


# ---- the findings ---------------------------------------------------------------------------------


JAXLIB_MISSING = "jaxlib is not installed: `import jax` raises (jax requires jaxlib to be installed)"


def check_versions(
    packages: list[PackageVersion],
    minimum_jaxlib: str | None,
    tpu_pin: str | None,
    *,
    fix: StackFix | None = None,
    plugin_check: bool | None = True,
    framework: FrameworkPjrt | None = None,  # jaxlib's PJRT C API version and rule, for the words only
) -> list[EnvFinding]:
    """Findings for every combination JAX rejects (jaxlib too old or newer than jax, a plugin not at jaxlib's
    version, a PJRT library jaxlib's rule refuses) or that skews; each skew's remedy is the one `fix`.

    `plugin_check`: the installed jaxlib refuses plugins of another version (jaxlib_checks_plugin_versions).
    The pjrt and libtpu rows carry their library's PJRT C API verdict (pjrt_accepted, pjrt_check)."""
    by_name = {p.name: p for p in packages}
    jax, jaxlib = by_name.get("jax"), by_name.get("jaxlib")
    findings: list[EnvFinding] = []
    if not jax or not jax.version:
        findings.append(EnvFinding("error", ["jax"], "jax is not installed", "pip install -U jax"))
    if not jaxlib or not jaxlib.version:
        # jax's own words: `import jax` raises ModuleNotFoundError. The one fix is the stack's, which installs it.
        findings.append(EnvFinding("error", ["jaxlib"], JAXLIB_MISSING, fix.command if fix else "pip install -U jax jaxlib"))
    if not (jax and jax.version and jaxlib and jaxlib.version):
        return findings
    remedy = fix.command if fix else f"pip install -U 'jax=={jax.version}' 'jaxlib=={jax.version}'"
    findings += _half_installed(by_name, remedy)
    jl = jaxlib.version
    if minimum_jaxlib and _parse(jl) < _parse(minimum_jaxlib):
        findings.append(
            EnvFinding(
                "error", ["jax", "jaxlib"],
                f"jaxlib is version {jl}, but this version of jax requires version >= {minimum_jaxlib}.",
                remedy,
            )
        )  # fmt: skip
    if _parse(jl) > _parse(jax.version):
        findings.append(
            EnvFinding(
                "error", ["jax", "jaxlib"],
                f"jaxlib version {jl} is newer than and incompatible with jax version {jax.version}.",
                remedy,
            )
        )  # fmt: skip
    for p in packages:
        if not p.version:
            continue
        if p.role == "plugin" and "rocm" not in p.name and _parse(p.version) != _parse(jl):
            if plugin_check is not False:
                # jaxlib/plugin_support.py::check_plugin_version, word for word: exact numeric equality, ROCm exempt.
                message = (
                    f"JAX plugin {p.name.replace('-', '_')} version {p.version} is installed, but it is not compatible "
                    f"with the installed jaxlib version {jl}, so it will not be used."
                )
                findings.append(EnvFinding("error", [p.name, "jaxlib"], message, remedy))
            else:
                message = (
                    f"{p.name} {p.version} is not jaxlib {jl}'s release, and this jaxlib does not check: JAX loads its "
                    f"kernels anyway, a pair never released together (such pairs have crashed: jax-ml/jax#24901)"
                )
                findings.append(EnvFinding("warning", [p.name, "jaxlib"], message, remedy))
        elif p.role == "pjrt" and _parse(p.version) != _parse(jl):
            findings.append(_pjrt_finding(p, jaxlib, remedy, framework))
        elif p.role == "libtpu" and tpu_pin and not _satisfies(p.version, tpu_pin):
            refused = f"; {_refusal(p, jaxlib)}" if p.pjrt_accepted is False else ""
            findings.append(
                EnvFinding(
                    "error" if refused else "warning", [p.name, "jax"],
                    f"{p.name} {p.version} is installed, but jax {jax.version} pins libtpu=={tpu_pin}{refused}.",
                    remedy,
                )
            )  # fmt: skip
    return findings


HALF_INSTALLED = "is installed without"  # the words of a plugin without its pjrt package, or the reverse


def _half_installed(by_name: Mapping[str, PackageVersion], remedy: str) -> list[EnvFinding]:
    """A plugin package without its pjrt package, or the reverse (`pip check` names both): JAX's plugin module
    jax_plugins.xla_<family> is the pjrt package's, and its initialize() imports the plugin package's kernels."""
    out = []
    for name, p in by_name.items():
        m = _PLUGIN_RE.match(name)
        if not m or not p.version:
            continue
        family = m.group(1)
        plugin, pjrt = f"jax-{family}-plugin", f"jax-{family}-pjrt"
        other = pjrt if name == plugin else plugin
        if by_name.get(other) is not None and by_name[other].version:
            continue
        if name == plugin:
            why = f"JAX finds no jax_plugins.xla_{family.replace('-', '_')} module (it is {pjrt}'s), so it has no {family} backend (pip check: {plugin} requires {pjrt})"
        else:
            why = f"its plugin's initialize() imports {plugin.replace('-', '_')}, which is missing: JAX logs the error and goes on without {family}"
        out.append(EnvFinding("warning", [name, other], f"{name} {p.version} {HALF_INSTALLED} {other}: {why}", remedy))
    return out


def _refusal(p: PackageVersion, jaxlib: PackageVersion) -> str:
    own = f" (PJRT C API {jaxlib.pjrt_api_version})" if jaxlib.pjrt_api_version else ""
    return f"jaxlib {jaxlib.version}{own} refuses its library (PJRT C API {p.pjrt_api_version}): {p.pjrt_check}"


def _pjrt_finding(p: PackageVersion, jaxlib: PackageVersion, remedy: str, framework: FrameworkPjrt | None) -> EnvFinding:
    if p.pjrt_accepted is False:
        return EnvFinding("error", [p.name, "jaxlib"], f"{p.name} {p.version}: {_refusal(p, jaxlib)}", remedy)
    if p.pjrt_accepted:
        mode = framework.mode if framework is not None else "its rule"
        why = f"JAX accepts its library (PJRT C API {p.pjrt_api_version}; jaxlib's own is {jaxlib.pjrt_api_version}, {mode})"
    else:
        why = f"whether jaxlib accepts its library is unknown ({p.pjrt_check or 'its PJRT C API version was not read'})"
    return EnvFinding(
        "warning", [p.name, "jaxlib"],
        f"{p.name} {p.version} is not jaxlib {jaxlib.version}'s release: {why}; JAX releases and tests them only together",
        remedy,
    )  # fmt: skip


