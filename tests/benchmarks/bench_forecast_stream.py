"""Benchmark (not a test): `epcap forecast` on generated epcap traces of 100k, 1M and 10M
token rows (issue 36: a 10-million-row trace made forecast time out), with its time and peak
RSS (docs/reliability.md, "A 10-million-row trace").

The traces come from tests/reliability/big_trace.py (deterministic, written streaming: 128
experts, top-8, 8 source ranks x 256 tokens, 4 MoE layers; 10M rows is 1220 iterations,
about 270 MB). Each forecast (EP 8 and 16) runs in a child; its peak RSS comes from
getrusage(RUSAGE_CHILDREN) of a wrapper. Targets: the 10M-row forecast finishes within
TIME_TARGET_S and its peak RSS stays within RSS_TARGET_MIB (it streams one step at a time);
exits 1 when either is missed. `--rows N[,N...]` runs other sizes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.reliability.big_trace import write_trace  # noqa: E402

TIME_TARGET_S = 120.0           # the 10M-row forecast, on the shared 2-core sandbox
RSS_TARGET_MIB = 100.0          # whatever the rows: one step in memory
_PROBE = ("import resource, subprocess, sys\n"
          "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
          "sys.stderr.write(r.stderr.decode(errors='replace')[-300:])\n"
          "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
          "sys.exit(r.returncode)\n")


def forecast(trace: Path) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of `epcap forecast TRACE --ep 8,16` in a child."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _PROBE, sys.executable, "-m", "harness.cli",
                           "forecast", str(trace), "--ep", "8,16"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=3600)
    if done.returncode:
        raise SystemExit(f"forecast failed: {done.stderr}")
    return time.perf_counter() - t0, int(done.stdout.strip().splitlines()[-1]) / 1024


def main(argv: list[str] | None = None) -> int:
    """Generate each trace, forecast it, print one row each; 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000,10000000")
    args = parser.parse_args(argv)
    missed = []
    print("| rows | trace MB | write s | forecast s | peak RSS MiB |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for rows in (int(x) for x in args.rows.split(",")):
            path = Path(tmp) / f"trace{rows}.jsonl"
            t0 = time.perf_counter()
            head = write_trace(path, rows)
            wrote = time.perf_counter() - t0
            seconds, rss = forecast(path)
            print(f"| {head['rows']:,} | {head['bytes'] / 1e6:.0f} | {wrote:.1f} | "
                  f"{seconds:.1f} | {rss:.1f} |", flush=True)
            if rss > RSS_TARGET_MIB:
                missed.append(f"{rows} rows: peak RSS {rss:.1f} MiB > {RSS_TARGET_MIB}")
            if rows >= 10_000_000 and seconds > TIME_TARGET_S:
                missed.append(f"{rows} rows: {seconds:.1f} s > {TIME_TARGET_S}")
            path.unlink()
    for line in missed:
        print("MISSED:", line)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
