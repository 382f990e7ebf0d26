#!/usr/bin/env bash
# The heavy oracle scenarios in one command: build (or reuse) the cached venvs of tests/scenarios.py,
# run every heavy test (`pytest -m heavy tests/`: the oracle, the version truths, real libtpu), and write the run's summary as Markdown.
#
#   benchmarks/run_heavy.sh [SUMMARY.md]          # default: benchmarks/results/heavy-run.md
#
# PYTHON picks the interpreter that runs pytest (default .venv/bin/python, else python3);
# DEVCTL_SCENARIO_CACHE the venv cache (default /root/.cache/devctl-scenarios). Extra pytest
# arguments go in PYTEST_ARGS (say PYTEST_ARGS='-k cuda'). Exit status: pytest's.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
SUMMARY=${1:-benchmarks/results/heavy-run.md}
mkdir -p "$(dirname "$SUMMARY")"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/devctl-heavy.XXXXXX")
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)

echo "== building the scenario venvs (cached; only changed ones are rebuilt)"
t0=$(date +%s)
"$PY" tests/scenarios.py build 2>&1 | tee "$WORK/build.log"
build_rc=${PIPESTATUS[0]}
build_s=$(( $(date +%s) - t0 ))

echo "== pytest -m heavy"
t0=$(date +%s)
# shellcheck disable=SC2086
"$PY" -m pytest -m heavy tests/ -p no:cacheprovider -rA --durations=0 \
    --junitxml="$WORK/junit.xml" ${PYTEST_ARGS:-} 2>&1 | tee "$WORK/pytest.log"
test_rc=${PIPESTATUS[0]}
test_s=$(( $(date +%s) - t0 ))

"$PY" - "$WORK" "$SUMMARY" "$STARTED" "$build_rc" "$build_s" "$test_rc" "$test_s" <<'EOF'
import json, os, platform, subprocess, sys, xml.etree.ElementTree as ET
from pathlib import Path

work, summary, started, build_rc, build_s, test_rc, test_s = sys.argv[1:]
sys.path.insert(0, "tests")
import scenarios

def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:
        return ""

lines = [
    "# Heavy oracle scenarios: run summary",
    "",
    f"- started: {started}, host: {platform.node()} ({os.cpu_count()} CPUs), git: {sh('git', 'rev-parse', '--short', 'HEAD')}"
    + (" (with uncommitted changes)" if sh("git", "status", "--porcelain", "--untracked-files=no") else ""),
    f"- venv builds: {build_s} s (exit {build_rc}); pytest -m heavy: {test_s} s (exit {test_rc})",
    f"- venv cache: {scenarios.cache_root()}",
    "",
    "## Venvs",
    "",
    "| venv | python | packages | size | built | build time |",
    "|---|---|---|---|---|---|",
]
root = scenarios.cache_root()
names = list(scenarios.VENVS) + sorted(p.name for p in root.glob("*-fixed")) + sorted(p.name for p in root.glob("*-uninstalled"))
for name in names:
    venv = root / name
    stamp = scenarios.read_stamp(venv) or {}
    if not venv.exists():
        lines.append(f"| {name} | - | not built | - | - | - |")
        continue
    pkgs = ", ".join(p for p in stamp.get("packages", []) if p.lower().startswith(("jax", "libtpu")))
    size = scenarios.venv_size(venv) / 2**30
    python = Path(stamp.get("python", "?")).name
    lines.append(f"| {name} | {python} | {pkgs} | {size:.2f} GiB | {stamp.get('built', '-')} | {stamp.get('seconds', '-')} s |")

lines += ["", "## Tests", "", "| test | result | seconds |", "|---|---|---|"]
counts, failures = {}, []
junit = Path(work) / "junit.xml"
if junit.exists():
    for case in ET.parse(junit).getroot().iter("testcase"):
        result = "passed"
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                result = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
                message = (node.get("message") or "").strip().splitlines()
                result += f": {message[0][:200]}" if message else ""
                if tag in ("failure", "error"):
                    failures.append((case.get("name"), (node.get("message") or "").strip()[:1500]))
                break
        counts[result.split(":")[0]] = counts.get(result.split(":")[0], 0) + 1
        lines.append(f"| {case.get('name')} | {result.replace('|', '/')} | {float(case.get('time', 0)):.1f} |")
lines.insert(5, "- results: " + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none (see the log)"))
if failures:
    lines += ["", "## Failures", ""]
    for name, message in failures:
        lines += [f"### {name}", "", "````text", message, "````", ""]
lines += ["", f"Full logs of this run: {work}/build.log, {work}/pytest.log"]
Path(summary).write_text("\n".join(lines) + "\n")
print(f"summary written to {summary}")
EOF
exit "$test_rc"
