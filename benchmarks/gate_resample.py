"""How the regression gate would have judged the runs bench_gate.py kept, with baselines drawn from them.

bench_gate.py records one baseline and judges every rerun against it: one draw. This script takes the documents
it kept (--keep DIR) and, many times over, pools K identical reruns as the baseline (as `--baseline` repeated
does) and judges every other identical rerun (a false alarm when it fails) and every slowed rerun (a catch)
with devctl's own gate (devctl.model.gate.pool and judge), so the rates do not hang on
which runs happened to be the baseline.

Usage: python benchmarks/gate_resample.py DIR [--runs 1,3,5] [--draws 200] [--max-regression 10]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devctl.collect.gate import read_baseline  # noqa: E402
from devctl.model.bench_transfer import GATE  # noqa: E402
from devctl.model.gate import judge  # noqa: E402
from devctl.model.gate import pool as pooled  # noqa: E402


def load_baseline(path: str):
    return read_baseline(path, Path(path).read_bytes(), GATE)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--runs", default="1,3,5", help="baseline sizes to try (runs pooled)")
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--max-regression", type=float, default=10.0)
    args = ap.parse_args()
    identical = [load_baseline(str(p)) for p in sorted(args.dir.glob("identical-*.json"))]
    slowed = [load_baseline(str(p)) for p in sorted(args.dir.glob("slowed-*.json"))]
    rng = random.Random(1)

    def fails(base, run) -> bool:
        return not judge(run.figures.values(), base, args.max_regression, GATE.unit, GATE.rule).passed

    print(f"{args.dir}: {len(identical)} identical and {len(slowed)} slowed reruns, {args.draws} draws per baseline size")
    for k in (int(x) for x in args.runs.split(",")):
        alarms = judged = caught = tried = 0
        for _ in range(args.draws):
            picked = set(rng.sample(range(len(identical)), k))
            base = pooled([identical[i] for i in sorted(picked)])
            rest = [r for i, r in enumerate(identical) if i not in picked]
            alarms += sum(fails(base, r) for r in rest)
            judged += len(rest)
            caught += sum(fails(base, r) for r in slowed)
            tried += len(slowed)
        catches = f"{100 * caught / tried:.1f}% of slowed reruns caught" if tried else "no slowed reruns"
        print(f"  baseline of {k} run(s): {100 * alarms / judged:.1f}% false alarms, {catches}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
