"""benchmarks/gpu_acceptance.py, the hardware run that judges itself, kept working between GPU sessions: its
`--cpu` mode runs every check a machine without a GPU can, against real JAX, publishers and post-mortems.

A GPU is lent to few sessions, and a row that has rotted (a label renamed, a flag changed) costs one of them; here
the rows that need no GPU must pass, and those that do must say they were not judged, never pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import devctl_env

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_acceptance_script_passes_what_a_cpu_can_judge_and_judges_nothing_else(tmp_path):
    out = tmp_path / "rows.json"
    env = devctl_env(devices=1)
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_acceptance.py"), "--cpu", "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["check"]: r for r in json.loads(out.read_text())["rows"]}
    assert not [r for r in rows.values() if r["result"] == "FAIL"], rows
    # What a CPU host can show end to end: a job in the default directory, seen by every reader, dying of an OOM.
    for check in ("publish(): the default directory", "memstats sees the job", "memstats --top answers", "exporter: the job's series",
                  "the job dies of RESOURCE_EXHAUSTED", "post-mortem: what was asked", "post-mortem: what was held"):  # fmt: skip
        assert rows[check]["result"] == "PASS", rows[check]
    # The GPU's figures are shown, not judged, and the GPU-only checks say so.
    assert all(r["result"] == "skip" for c, r in rows.items() if c.startswith(("bench memory: copy at", "bench matmul: bf16"))), rows
    for check in ("memstats: usable memory on a shared GPU", "doctor with CUDA_VISIBLE_DEVICES=", "memstats: GPM tensor active under a bf16 matmul loop"):
        assert rows[check]["result"] == "skip" and rows[check]["measured"] == "no GPU", rows[check]
