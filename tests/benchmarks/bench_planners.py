"""Benchmark: required capacity per zoo model and personality, from routing + planners alone.

At the Tier B shape (seq 8192, micro batch 1, EP 8, 65 steps, every MoE layer; N = 65536 for
top-8, 49152 for DeepSeek-V2-Lite's top-6), prints peak demand / N for raw, echo, ultraep and
moonep, and checks the documented bands (docs/reference-backend.md, "Calibration"):
echo 1.02-1.06, ultraep 1.005-1.02, moonep exactly 1.0, raw above both. No data moves, so it
runs in seconds. Exit 1 when a band is missed. Usage:
    python tests/benchmarks/bench_planners.py [--steps 65] [--seed 1234] [--sigma M=S ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.loadmodel.loadsim import zoo_requirements  # noqa: E402

BANDS = {"echo": (1.02, 1.06), "ultraep": (1.005, 1.02), "moonep": (1.0, 1.0)}


def check(results) -> list[str]:
    """The band violations of a {model: LoadResult} table."""
    bad = []
    for name, res in results.items():
        req = {p: res.required(p) for p in res.peak}
        for p, (lo, hi) in BANDS.items():
            if not lo <= req[p] <= hi:
                bad.append(f"{name} {p} {req[p]:.4f} outside {lo}-{hi}")
        if not req["raw"] > max(req["echo"], req["ultraep"]):
            bad.append(f"{name} raw {req['raw']:.4f} not above echo and ultraep")
    return bad


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=65)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--sigma", action="append", default=[], help="override MODEL=SIGMA")
    args = ap.parse_args(argv[1:])
    zoo = yaml.safe_load((ROOT / "runbooks" / "models.yaml").read_text())["models"]
    for item in args.sigma:
        name, val = item.split("=")
        zoo[name]["routing_sigma"] = float(val)
    t0 = time.monotonic()
    results = zoo_requirements(zoo, seq=8192, ep=8, steps=args.steps, seed=args.seed)
    secs = time.monotonic() - t0
    print(f"{'model':<18}{'sigma':>6}{'N':>7}  {'raw':>7}{'echo':>8}{'ultraep':>9}{'moonep':>8}")
    for name, res in results.items():
        print(f"{name:<18}{zoo[name]['routing_sigma']:>6}{res.n:>7}  "
              + "".join(f"{res.required(p):>{w}.4f}" for p, w in
                        (("raw", 7), ("echo", 8), ("ultraep", 9), ("moonep", 8))))
    print(f"EP 8, seq 8192, {args.steps} steps, every MoE layer, seed {args.seed}: {secs:.1f} s")
    bad = check(results)
    for line in bad:
        print("MISSED:", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
