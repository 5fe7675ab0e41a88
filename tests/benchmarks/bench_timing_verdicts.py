"""Benchmark (not a test): timing verdicts on the reference backend cannot be fooled by A/A.

Each comparison times two arms in LAUNCHES independent process starts each (a fresh
`python -m backends.reference` per launch, ranks forked after its own torch import), in
rotated order per launch (A B, B A, A B), and judges dispatch and combine with
harness.stats.compare (paired bootstrap 95% CI of the ratio of medians, 20,000 resamples,
fixed seed; CV limit MAX_CV, see below).

- A/A: 20 comparisons of the same personality (echo) as both arms. Target: at most one
  comparison with a `faster`/`slower` verdict on either phase (false positives <= 5%).
- Slowed arm: 10 comparisons of echo against echo run with the documented reference option
  `--extra-dispatch-passes EXTRA` (EXTRA extra, discarded dispatch exchanges per timed
  dispatch, so dispatch does EXTRA + 1 times the work; off by default). Target: dispatch
  called `slower` in at least 8 of 10.

MAX_CV: trial medians of a 2-rank gloo run on a shared 2-core machine scatter by 10-25%
(scheduler jitter from other jobs), so the CPU limit is 0.30, the same for both targets: a
limit that makes everything `too_noisy` would pass the A/A target trivially and miss the
slowed-arm target. Every comparison uses its own routing seed. Prints the per-comparison
verdicts and the counts; exit 1 when a target is missed.

    python tests/benchmarks/bench_timing_verdicts.py [--aa 20] [--slow 10] [--launches 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness import stats  # noqa: E402

MAX_CV = 0.30
EXTRA = 2
SHAPE = ["--ep", "2", "--ranks", "2", "--layers", "2", "--hidden", "512", "--experts", "16",
         "--topk", "4", "--expert-ffn", "24", "--seq", "512", "--capacity", "2.00",
         "--purpose", "time", "--warmup", "3", "--iters", "8", "--trials", "6"]
PHASES = ("dispatch", "combine")


def launch(personality: str, extra: int, seed: int) -> dict[str, list[float]]:
    """One fresh process start; its per-trial medians per phase (ms)."""
    argv = [sys.executable, "-m", "backends.reference", *SHAPE, "--personality", personality,
            "--seed", str(seed), "--extra-dispatch-passes", str(extra)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    for line in proc.stdout.splitlines():
        if "[EPCAP_TIMING] " in line:
            out = json.loads(line.split("[EPCAP_TIMING] ", 1)[1])
            return {p: [t[f"{p}_ms_median"] for t in out["per_trial"]] for p in PHASES}
    raise RuntimeError(f"no [EPCAP_TIMING] line (exit {proc.returncode}):\n{proc.stderr[-2000:]}")


def compare_arms(arms: list[tuple[str, int]], launches: int, seed: int) -> dict[str, stats.Comparison]:
    """Arm 1 against arm 0 (baseline), launches in rotated order; one Comparison per phase."""
    got: list[dict[str, list[list[float]]]] = [{p: [] for p in PHASES} for _ in arms]
    for i in range(launches):
        order = [(i + j) % len(arms) for j in range(len(arms))]
        for k in order:
            medians = launch(*arms[k], seed)
            for p in PHASES:
                got[k][p].append(medians[p])
    return {p: stats.compare(got[1][p], got[0][p], max_cv=MAX_CV) for p in PHASES}


def show(label: str, res: dict[str, stats.Comparison]) -> None:
    print(label + "  " + "  ".join(
        f"{p}: {c.verdict} ratio {c.ratio_median:.3f} CI [{c.ci_low:.3f}, {c.ci_high:.3f}] "
        f"cv {c.cv_backend:.3f}/{c.cv_baseline:.3f}" for p, c in res.items()), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aa", type=int, default=20)
    ap.add_argument("--slow", type=int, default=10)
    ap.add_argument("--launches", type=int, default=3)
    a = ap.parse_args()
    t0 = time.perf_counter()
    winners = {p: 0 for p in PHASES}
    aa_false = 0
    for r in range(a.aa):
        res = compare_arms([("echo", 0), ("echo", 0)], a.launches, seed=1000 + r)
        show(f"A/A {r + 1:2d}", res)
        hits = [p for p, c in res.items() if c.verdict in (stats.FASTER, stats.SLOWER)]
        for p in hits:
            winners[p] += 1
        aa_false += bool(hits)
    slower = 0
    for r in range(a.slow):
        res = compare_arms([("echo", 0), ("echo", EXTRA)], a.launches, seed=2000 + r)
        show(f"slow {r + 1:2d}", res)
        slower += res["dispatch"].verdict == stats.SLOWER
    aa_limit = a.aa // 20
    slow_need = -(-8 * a.slow // 10)
    print(f"A/A: {aa_false}/{a.aa} comparisons with a faster/slower verdict "
          f"(dispatch {winners['dispatch']}, combine {winners['combine']}); target <= {aa_limit}")
    print(f"slowed arm (--extra-dispatch-passes {EXTRA}): dispatch `slower` in {slower}/{a.slow}; "
          f"target >= {slow_need}")
    print(f"launches per arm {a.launches}, max_cv {MAX_CV}, wall {time.perf_counter() - t0:.0f} s, "
          f"load average {os.getloadavg()[0]:.2f}")
    ok = aa_false <= aa_limit and slower >= slow_need
    print("PASS" if ok else "MISS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
