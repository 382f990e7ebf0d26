#!/usr/bin/env bash
# Hardware acceptance: run every devctl command, the GPU tests and the self-judging acceptance run
# (benchmarks/gpu_acceptance.py) on a real machine, and write one Markdown report with each command's
# output, exit code and wall time.
#
#   bash benchmarks/hardware_acceptance.sh [REPORT.md]        # default: hardware-report.md
#
# Meant for a GPU machine with jax and its CUDA plugin preinstalled and no network: it installs
# nothing and needs only bash and coreutils (timeout, date, head, tail, wc, mktemp). It runs from
# the repository root with PYTHONPATH=$PWD, so the checkout's devctl is what runs. It never stops
# at a failure and never waits forever: each command runs under `timeout` (CMD_TIMEOUT seconds,
# default 300; PYTEST_TIMEOUT for `pytest -m gpu`, default 1800), with stdin from /dev/null.
# PYTHON picks the interpreter (default python3); WHEELS, a folder of wheels for the test extras the
# GPU tests need (jsonschema), where the machine lacks them; MAX_LINES caps each command's output in the
# report (default 400: its first and last lines are kept). Exit status: 0 when every command
# exited 0, else 1; the report is written either way.
set -u
cd "$(dirname "$0")/.." || exit 2
REPORT=${1:-hardware-report.md}
case $REPORT in /*) ;; *) REPORT=$OLDPWD/$REPORT ;; esac
PY=${PYTHON:-python3}
CMD_TIMEOUT=${CMD_TIMEOUT:-300}
PYTEST_TIMEOUT=${PYTEST_TIMEOUT:-1800}
MAX_LINES=${MAX_LINES:-400}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export COLUMNS=${COLUMNS:-120}
export PYTHONUNBUFFERED=1

WORK=$(mktemp -d "${TMPDIR:-/tmp}/devctl-acceptance.XXXXXX") || exit 2
BODY=$WORK/body.md
ROWS=$WORK/rows.md
: >"$BODY"
: >"$ROWS"
FAILURES=0
N=0

now_ns() { date +%s%N; }

# run TITLE TIMEOUT CMD...: run it, time it, append its section and its summary row.
run() {
    local title=$1 limit=$2
    shift 2
    N=$((N + 1))
    local out=$WORK/out.$N
    local t0 t1 rc ms secs status lines
    echo "[$N] $title" >&2
    t0=$(now_ns)
    timeout -k 10 "$limit" "$@" </dev/null >"$out" 2>&1
    rc=$?
    t1=$(now_ns)
    ms=$(((t1 - t0) / 1000000))
    secs=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
    case $rc in
        0) status="ok" ;;
        124 | 137) status="TIMED OUT after ${limit} s" ;;
        *) status="exit $rc" ;;
    esac
    [ "$rc" -eq 0 ] || FAILURES=$((FAILURES + 1))
    lines=$(wc -l <"$out")
    printf '| %d | `%s` | %s | %s | %s s |\n' "$N" "$title" "$rc" "$status" "$secs" >>"$ROWS"
    {
        printf '## %d. `%s`\n\n' "$N" "$title"
        printf -- '- command: `%s`\n' "$*"
        printf -- '- exit code: %s (%s)\n- wall time: %s s\n- output: %s line(s), stdout and stderr together' "$rc" "$status" "$secs" "$lines"
        if [ "$lines" -gt "$MAX_LINES" ]; then
            printf ', the first and last %d shown\n\n' $((MAX_LINES / 2))
        else
            printf '\n\n'
        fi
        echo '````text'
        if [ "$lines" -gt "$MAX_LINES" ]; then
            head -n $((MAX_LINES / 2)) "$out"
            printf '\n[... %d lines left out ...]\n\n' $((lines - MAX_LINES))
            tail -n $((MAX_LINES / 2)) "$out"
        else
            cat "$out"
        fi
        # A last line without a newline must not swallow the closing fence.
        [ -s "$out" ] && [ "$(tail -c 1 "$out" | wc -l)" -eq 0 ] && echo
        echo '````'
        echo
    } >>"$BODY"
    write_report
}

STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
T_ALL=$(now_ns)

# The report is rewritten after every command, so a run cut short (an outer timeout, a lost machine)
# still leaves what it did.
write_report() {
    local total_ms=$((($(now_ns) - T_ALL) / 1000000))
    {
        echo "# devctl hardware acceptance report"
        echo
        echo "- started: $STARTED, last written: $(date -u +%Y-%m-%dT%H:%M:%SZ), wall time so far: $((total_ms / 1000)) s"
        echo "- host: $(uname -n), $(uname -srm)"
        echo "- repository: $PWD (PYTHONPATH=$PYTHONPATH), interpreter: $PY"
        echo "- commands: $N, not exiting 0: $FAILURES (a timeout is exit 124 or 137)"
        echo
        echo "| # | command | exit | status | wall time |"
        echo "|---|---|---|---|---|"
        cat "$ROWS"
        echo
        cat "$BODY"
    } >"$REPORT.tmp" && mv -f "$REPORT.tmp" "$REPORT"
}

# The machine, as far as bash and coreutils (and the tools already there) tell.
run "uname -a" 30 uname -a
if command -v nvidia-smi >/dev/null 2>&1; then
    run "nvidia-smi" 60 nvidia-smi
else
    run "ls -l /dev/nvidia*" 30 bash -c 'ls -l /dev/nvidia* 2>&1 || echo "no /dev/nvidia* device node"'
fi
run "$PY --version" 30 "$PY" --version
run "installed jax, libtpu and nvidia-* packages" 120 "$PY" -c \
    "import importlib.metadata as m; print('\n'.join(f'{d.metadata[\"Name\"]} {d.version}' for d in sorted(m.distributions(), key=lambda d: d.metadata['Name'] or '') if (d.metadata['Name'] or '').lower().startswith(('jax', 'libtpu', 'nvidia-'))))"

# Every devctl command.
run "python3 -m devctl list" "$CMD_TIMEOUT" "$PY" -m devctl list
run "python3 -m devctl list --json" "$CMD_TIMEOUT" "$PY" -m devctl list --json
run "python3 -m devctl plugins" "$CMD_TIMEOUT" "$PY" -m devctl plugins
run "python3 -m devctl env" "$CMD_TIMEOUT" "$PY" -m devctl env
run "python3 -m devctl memstats" "$CMD_TIMEOUT" "$PY" -m devctl memstats
run "python3 -m devctl bench transfer --quick" "$CMD_TIMEOUT" "$PY" -m devctl bench transfer --quick
run "python3 -m devctl bench memory --quick" "$CMD_TIMEOUT" "$PY" -m devctl bench memory --quick
run "python3 -m devctl bench matmul --quick" "$CMD_TIMEOUT" "$PY" -m devctl bench matmul --quick
run "python3 -m devctl check --platform gpu" "$CMD_TIMEOUT" "$PY" -m devctl check --platform gpu
run "python3 -m devctl doctor" "$CMD_TIMEOUT" "$PY" -m devctl doctor

# devctl's figures and verdicts beside ground truth measured on this machine, judged: one table, pass or fail
# (benchmarks/gpu_acceptance.py: copy and matmul against JAX's own burst loop, pinned transfers, a second
# process's real allocatable memory, a CUDA OOM post-mortem, a job publishing in the default directory, doctor,
# GPM under a matmul loop). Its rows also go to REPORT's name with -acceptance.json for .md.
run "python3 benchmarks/gpu_acceptance.py" "${ACCEPTANCE_TIMEOUT:-600}" "$PY" benchmarks/gpu_acceptance.py --json "${REPORT%.md}-acceptance.json"

# The tests that need a real NVIDIA GPU (they skip elsewhere). They validate every JSON document against its schema
# with jsonschema, a test extra a GPU machine's preinstalled stack may lack: WHEELS=DIR installs it from wheels
# carried along (pip download jsonschema attrs rpds-py referencing jsonschema-specifications typing-extensions),
# under this run's work directory. Without it, one row says what is missing before pytest fails on it.
if ! "$PY" -c "import jsonschema" >/dev/null 2>&1; then
    if [ -n "${WHEELS:-}" ]; then
        run "pip install jsonschema from $WHEELS" 120 "$PY" -m pip install -q --no-index --find-links "$WHEELS" --target "$WORK/deps" jsonschema
        export PYTHONPATH="$PYTHONPATH:$WORK/deps"
    fi
    run "the test extras import" 30 "$PY" -c "import jsonschema"
fi
run "python3 -m pytest -m gpu" "$PYTEST_TIMEOUT" "$PY" -m pytest -m gpu -rA -p no:cacheprovider

write_report
rm -rf "$WORK"
echo "report written to $REPORT ($N commands, $FAILURES not exiting 0)" >&2
[ "$FAILURES" -eq 0 ]
