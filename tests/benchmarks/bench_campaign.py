"""Benchmark: run the default campaign (runbooks/local-cpu.yaml) and report the harness's cost.

Prints: wall time of the campaign, summed wall time of the backend runs (launcher-measured,
submit -> exit of every rank), the harness overhead as a share of wall time (target <= 10%),
and the ETA's error (estimated / actual remaining wall time) at 25%, 50% and 75% of the runs
(target within +-20%, i.e. 0.8 .. 1.2). Usage: python tests/benchmarks/bench_campaign.py
[RUNBOOK] (results go to a temporary directory that is removed afterwards).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.results.events import campaign_stats, read_events  # noqa: E402


def main(argv: list[str]) -> int:
    runbook = argv[1] if len(argv) > 1 else str(ROOT / "runbooks" / "local-cpu.yaml")
    with tempfile.TemporaryDirectory(prefix="epcap-bench-") as tmp:
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", runbook,
                               "--results", tmp], cwd=ROOT, capture_output=True, text=True)
        total = time.monotonic() - t0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = usage.ru_utime + usage.ru_stime
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr)
            print(f"campaign failed with exit {proc.returncode}")
            return 1
        # the runbook's own campaign: a ladder's step campaigns (docs/ladder.md) lie beside
        # it under longer names; their runs count in the whole command's time only
        camp = min((p for p in Path(tmp).iterdir() if (p / "events.jsonl").is_file()),
                   key=lambda p: (len(p.name), p.name))
        stats = campaign_stats(camp)
        events = read_events(camp)
    runs = [e for e in events if e["ev"] == "cell_finish"]
    wall = stats["wall_span_s"]
    busy = stats["busy_s"]
    overhead = (wall - busy) / wall if wall else float("nan")
    print(f"runbook: {runbook}")
    print(f"runs: {len(runs)} (failures by class: {stats['failures_by_class'] or 'none'})")
    print(f"wall time (campaign events span): {wall:.1f} s; whole command incl. interpreter "
          f"start and report: {total:.1f} s")
    print(f"summed backend run time: {busy:.1f} s ({busy / max(1, len(runs)):.2f} s per run)")
    by_purpose: dict[str, list[float]] = {}
    for e in runs:
        by_purpose.setdefault(e["purpose"], []).append(float(e.get("wall_s") or 0.0))
    print("mean run time by purpose: " + ", ".join(
        f"{p} {sum(v) / len(v):.2f} s (n={len(v)})" for p, v in by_purpose.items()))
    print(f"CPU time of all processes: {cpu:.1f} s (= {cpu / 2:.1f} s on 2 fully used cores); "
          f"load average at start {load:.2f} (other work on the machine slows every figure)")
    print(f"harness overhead: {wall - busy:.1f} s = {100 * overhead:.1f}% of wall "
          f"(target <= 10%): {'PASS' if overhead <= 0.10 else 'FAIL'}")
    failed = overhead > 0.10 or total > 120
    for key, ratio in stats["eta_error_at"].items():
        verdict = "n/a" if ratio is None else ("PASS" if 0.8 <= ratio <= 1.2 else "FAIL")
        failed = failed or verdict == "FAIL"
        shown = "n/a" if ratio is None else f"{ratio:.3f} ({100 * (ratio - 1):+.1f}%)"
        print(f"ETA estimated/actual at {key} of runs: {shown} (target +-20%): {verdict}")
    print(f"target total <= 120 s on 2 cores: {'PASS' if total <= 120 else 'FAIL'} "
          f"({total:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
