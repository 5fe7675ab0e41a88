"""Benchmark (not a test): timing verdicts on the reference backend cannot be fooled by A/A.

Twenty repeats, each with its own routing seed. A repeat times its arms in LAUNCHES rounds;
round i starts every arm once (a new process per launch), in the arm order rotated by i
(A B S, B S A, S A B), exactly as the campaign's time stage does, and harness.timing.stats.compare
judges dispatch and combine (ratio of medians, paired bootstrap 95% CI over launches and
trials, 20,000 resamples, fixed seed; CV limit MAX_CV):

- A/A: arm B is the same personality (echo) as the baseline A, in every repeat: 20
  comparisons. Target: at most one with a `faster`/`slower` verdict on either phase.
- Slowed arm: in the first 10 repeats arm S is echo run with the documented reference option
  `--extra-dispatch-passes EXTRA` (EXTRA extra, discarded dispatch exchanges per timed
  dispatch, so dispatch does EXTRA + 1 times the work; off by default). Target: S's dispatch
  called `slower` than A in at least 8 of 10.

Launches (`--launch`): `forked` (default; what the CPU campaign does with `launch: forked`:
each launch is a new process forked from a server that imported torch once, see
harness/launch/forkserver.py) or `fresh` (a new interpreter per launch, ~1.5 s more CPU each).

MAX_CV: trial medians of a 2-rank gloo run on a shared 2-core machine scatter by 10-40%
(scheduler jitter from other jobs), so the CPU limit here is 0.5, the same for both targets:
a limit that made everything `too_noisy` would pass the A/A target trivially and miss the
slowed-arm target. Prints every comparison and the counts; exit 1 when a target is missed.

    python tests/benchmarks/bench_timing_verdicts.py [--repeats 20] [--slow 10] [--launches 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.timing import stats  # noqa: E402

MAX_CV = 0.5
EXTRA = 3
SHAPE = ["--ep", "2", "--ranks", "2", "--layers", "2", "--hidden", "256", "--experts", "16",
         "--topk", "4", "--expert-ffn", "24", "--seq", "512", "--capacity", "2.00",
         "--timed", "--warmup", "2", "--iters", "8", "--trials", "6"]
PHASES = ("dispatch", "combine")


class Launcher:
    """Starts one launch: a fresh interpreter, or a fork of the pre-imported server."""

    def __init__(self, how: str, tmp: Path) -> None:
        self.how, self.tmp, self.n = how, tmp, 0
        self.server = None
        if how == "forked":
            from harness.launch.forkserver import ForkServer
            self.server = ForkServer(["backends.reference.worker"], str(ROOT), dict(os.environ))

    def __call__(self, personality: str, extra: int, seed: int) -> dict[str, list[float]]:
        """One launch; its per-trial medians per phase (ms)."""
        argv = [sys.executable, "-m", "backends.reference", *SHAPE, "--personality",
                personality, "--seed", str(seed), "--extra-dispatch-passes", str(extra)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        self.n += 1
        log = self.tmp / f"launch{self.n}.log"
        if self.server is not None:
            code = self.server.start(argv, env, str(ROOT), str(log)).wait(timeout=300)
        else:
            with open(log, "wb") as out:
                code = subprocess.run(argv, cwd=ROOT, env=env, stdout=out,
                                      stderr=subprocess.STDOUT, timeout=300).returncode
        text = log.read_text()
        for line in text.splitlines():
            if "[EPCAP_TIMING] " in line:
                out = json.loads(line.split("[EPCAP_TIMING] ", 1)[1])
                return {p: [t[f"{p}_ms_median"] for t in out["per_trial"]] for p in PHASES}
        raise RuntimeError(f"no [EPCAP_TIMING] line (exit {code}):\n{text[-2000:]}")


def repeat(launch: Launcher, arms: dict[str, tuple[str, int]], launches: int,
           seed: int) -> dict[str, dict[str, stats.Comparison]]:
    """Every arm in rotated order per round; each non-baseline arm against arm "A"."""
    names = list(arms)
    got = {n: {p: [] for p in PHASES} for n in names}
    for i in range(launches):
        for n in names[i % len(names):] + names[:i % len(names)]:
            medians = launch(*arms[n], seed)
            for p in PHASES:
                got[n][p].append(medians[p])
    return {n: {p: stats.compare(got[n][p], got["A"][p], max_cv=MAX_CV) for p in PHASES}
            for n in names if n != "A"}


def show(label: str, res: dict[str, stats.Comparison]) -> None:
    print(label + "  " + "  ".join(
        f"{p}: {c.verdict} ratio {c.ratio_median:.3f} CI [{c.ci_low:.3f}, {c.ci_high:.3f}] "
        f"cv {c.cv_backend:.3f}/{c.cv_baseline:.3f}" for p, c in res.items()), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20, help="A/A comparisons")
    ap.add_argument("--slow", type=int, default=10, help="repeats that also time the slowed arm")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--launch", choices=("forked", "fresh"), default="forked")
    a = ap.parse_args()
    t0 = time.perf_counter()
    winners = {p: 0 for p in PHASES}
    aa_false = slower = 0
    with tempfile.TemporaryDirectory(prefix="epcap-verdicts-") as tmp:
        launch = Launcher(a.launch, Path(tmp))
        for r in range(a.repeats):
            arms = {"A": ("echo", 0), "B": ("echo", 0)}
            if r < a.slow:
                arms["S"] = ("echo", EXTRA)
            res = repeat(launch, arms, a.launches, seed=1000 + r)
            show(f"A/A  {r + 1:2d}", res["B"])
            hits = [p for p, c in res["B"].items() if c.verdict in (stats.FASTER, stats.SLOWER)]
            for p in hits:
                winners[p] += 1
            aa_false += bool(hits)
            if "S" in res:
                show(f"slow {r + 1:2d}", res["S"])
                slower += res["S"]["dispatch"].verdict == stats.SLOWER
        if launch.server is not None:
            launch.server.close()
    aa_limit = a.repeats // 20
    slow_need = -(-8 * a.slow // 10)
    print(f"A/A: {aa_false}/{a.repeats} comparisons with a faster/slower verdict "
          f"(dispatch {winners['dispatch']}, combine {winners['combine']}); target <= {aa_limit}")
    print(f"slowed arm (--extra-dispatch-passes {EXTRA}): dispatch `slower` in {slower}/{a.slow};"
          f" target >= {slow_need}")
    print(f"launches per arm {a.launches} ({a.launch}), max_cv {MAX_CV}, wall "
          f"{time.perf_counter() - t0:.0f} s, load average {os.getloadavg()[0]:.2f}")
    ok = aa_false <= aa_limit and slower >= slow_need
    print("PASS" if ok else "MISS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
