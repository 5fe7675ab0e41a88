"""Benchmark (not a test): peak memory of `epcap report`, `epcap audit` and `epcap forecast`
on inputs 1x and 100x a campaign's, through the bounded readers (docs/reliability.md).

The campaign is the reliability suite's tiny one (tests/reliability/fixtures/tiny.yaml, run
by the fake rank: no torch), and a copy 100x its size in bytes (every rank log's lines
repeated); the trace is an epcap routing trace of the default campaign's
shape (4 ranks x 256 tokens x top-8 of 128 experts, 3 MoE layers, 7 iterations) and one of
100x its iterations. Each command runs in a child process; its peak RSS comes from
getrusage(RUSAGE_CHILDREN) of a wrapper. Prints one row per (command, scale) and exits 1
when a 100x run grows by more than GROWTH_LIMIT_MIB over its 1x run (bounded: the readers
stream, so memory follows the largest line or array, not the input's size).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "reliability" / "fixtures"
SCALE = 100
GROWTH_LIMIT_MIB = 256          # a 100x input may add at most this to the peak RSS
EXPERTS, TOPK, TOKENS, LAYERS, RANKS, ITERS = 128, 8, 256, 3, 4, 7
_PROBE = ("import resource, subprocess, sys\n"
          "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
          "sys.stderr.write(r.stderr.decode(errors='replace')[-300:])\n"
          "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")


def peak(*argv: str) -> tuple[float, float, int]:
    """(peak RSS MiB, seconds, exit code) of `python -m harness.cli ARGV` in a child."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _PROBE, sys.executable, "-m", "harness.cli",
                           *argv], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=1800)
    rss = int(done.stdout.strip().splitlines()[-1]) / 1024
    return rss, time.perf_counter() - t0, done.returncode


def campaign(folder: Path) -> Path:
    """The tiny campaign, run by fake ranks; its directory."""
    book = folder / "book"
    book.mkdir(parents=True)
    for name in ("tiny.yaml", "models.yaml"):
        shutil.copy(FIXTURES / name, book / name)
    subprocess.run([sys.executable, str(ROOT / "tests" / "reliability" / "run_fake.py"), "run",
                    str(book / "tiny.yaml"), "--results", str(folder / "r")], check=True,
                   capture_output=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return folder / "r" / "tiny"


def scaled(root: Path, dest: Path, factor: int) -> Path:
    """A copy of the campaign `factor` x its size: every rank log repeated so many times
    that the whole directory is `factor` x the original's bytes."""
    shutil.copytree(root, dest)
    logs = sorted(dest.glob("cells/*/rank*.log"))
    total, in_logs = size_mib(root), sum(p.stat().st_size for p in logs) / 2**20
    repeat = max(factor, int(round((factor * total - (total - in_logs)) / max(in_logs, 1e-9))))
    for log in logs:
        data = log.read_bytes()
        with open(log, "wb") as fh:
            for _ in range(repeat):
                fh.write(data)
    return dest


def trace(path: Path, iters: int) -> Path:
    """An epcap routing trace of `iters` iterations of the default campaign's shape."""
    rng = np.random.default_rng(0)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"format": "epcap-routing-trace", "version": 1,
                             "experts": EXPERTS, "topk": TOPK, "tokens": TOKENS, "ep": RANKS,
                             "seq": TOKENS}) + "\n")
        for it in range(iters):
            for layer in range(LAYERS):
                for rank in range(RANKS):
                    first = rng.integers(0, EXPERTS, TOKENS)
                    ids = (first[:, None] + np.arange(TOPK)) % EXPERTS
                    fh.write(json.dumps({"iter": it, "layer": layer, "rank": rank,
                                         "topk_ids": ids.tolist()}) + "\n")
    return path


def size_mib(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-boundary-"))
    try:
        base = campaign(work / "one")
        big = scaled(base, work / "hundred" / "tiny", SCALE)
        small_trace = trace(work / "t1.jsonl", ITERS)
        big_trace = trace(work / "t100.jsonl", ITERS * SCALE)
        cases = {
            "report": (lambda d: ("report", str(d), "--out", str(d.parent / f"rep-{d.name}")),
                       base, big),
            "audit": (lambda d: ("audit", str(d)), base, big),
            "forecast": (lambda t: ("forecast", str(t), "--ep", "4,8"), small_trace, big_trace),
        }
        failed = False
        print(f"{'command':9} {'scale':>5} {'input MiB':>10} {'peak RSS MiB':>13} {'s':>7}")
        for name, (argv, one, hundred) in cases.items():
            rows = []
            for scale, target in ((1, one), (SCALE, hundred)):
                rss, secs, code = peak(*argv(target))
                rows.append(rss)
                print(f"{name:9} {scale:>4}x {size_mib(target):10.1f} {rss:13.1f} {secs:7.1f}"
                      + ("" if code in (0, 1) else f"  exit {code}"))
                failed |= code not in (0, 1)
            if rows[1] - rows[0] > GROWTH_LIMIT_MIB:
                print(f"  {name}: grew {rows[1] - rows[0]:.0f} MiB at {SCALE}x "
                      f"(limit {GROWTH_LIMIT_MIB})")
                failed = True
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
