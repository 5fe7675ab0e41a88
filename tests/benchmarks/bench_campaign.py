"""Benchmark: run the default campaign (runbooks/local-cpu.yaml) and report the harness's cost.

Prints: wall time of the campaign, summed wall time of the backend runs (launcher-measured,
submit -> exit of every rank), the harness overhead (wall beyond the runs' own time) and its
parts (start-up to the first submit, the driver's gaps between runs, the report), CPU time,
and the ETA's error (estimated / actual remaining wall time, the report included) at the
banner (target within +-25%) and at 25%, 50% and 75% of the runs (target +-20%).
With EPCAP_BENCH_OLD=DIR (a checkout of another commit, e.g. `git worktree add --detach
/tmp/old 223ed55`, its venv linked and its scanner built there) the same runbook is run by
that checkout right after, and the overheads are printed side by side with their ratio
(issue 44's target: this checkout's overhead <= 0.5 x the old one's). Both run with
PYTHONPATH set to their own checkout (the shared venv's editable install points elsewhere).
Each campaign starts once the 1-minute load average is below 0.5 (waiting at most 150 s,
said). Usage: python tests/benchmarks/bench_campaign.py [RUNBOOK] (results go to a temporary
directory that is removed afterwards).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bytecode import compile_bytecode  # noqa: E402

from harness.results.events import campaign_stats, elapsed, read_events  # noqa: E402


def run_campaign(checkout: Path, runbook: str,
                 check: Callable[[Path], str] | None = None) -> dict | None:
    """`epcap run RUNBOOK` by `checkout`'s harness in a temporary results root: its figures;
    `check(results root)`, when given, runs on the results before they are removed (its
    line is kept under "check"). The checkout's bytecode is compiled first (bytecode.py)."""
    print(compile_bytecode(checkout))
    settle()
    with tempfile.TemporaryDirectory(prefix="epcap-bench-") as tmp:
        load = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", runbook,
                               "--results", tmp], cwd=checkout, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(checkout)})
        total = time.monotonic() - t0
        load_end = os.getloadavg()[0]
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            print(proc.stdout[-3000:] + proc.stderr[-3000:])
            print(f"campaign by {checkout} failed with exit {proc.returncode}")
            return None
        # the runbook's own campaign: a ladder's step campaigns (docs/ladder.md) lie beside
        # it under longer names; their runs count in the whole command's time only
        camps = sorted((p for p in Path(tmp).iterdir() if (p / "events.jsonl").is_file()),
                       key=lambda p: (len(p.name), p.name))
        camp = camps[0]
        stats = campaign_stats(camp)
        events = read_events(camp)
        steps = {p.name: campaign_stats(p) for p in camps}
        checked = check(Path(tmp)) if check is not None else ""
    return {"check": checked, "load": load, "load_end": load_end, "total": total, "stats": stats,
            "events": events, "campaigns": steps,
            "cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            **overhead_parts(events)}


IDLE_LOAD, SETTLE_S = 0.5, 150.0


def settle() -> None:
    """Wait (at most SETTLE_S) for the 1-minute load average to fall below IDLE_LOAD: the
    targets are for an idle machine, and the campaign's first ETA scales with the load it
    reads at its start (a campaign run right after another read ~2 and planned for it)."""
    t0, load = time.monotonic(), os.getloadavg()[0]
    while load >= IDLE_LOAD and time.monotonic() - t0 < SETTLE_S:
        time.sleep(5)
        load = os.getloadavg()[0]
    print(f"(waited {time.monotonic() - t0:.0f} s for the load average: {load:.2f})", flush=True)


def overhead_parts(events: list[dict]) -> dict[str, float]:
    """Start-up (run_start -> first submit), gaps (a run's finish -> the next submit), the
    report (runs complete -> report event): where the wall beyond the runs' own time went."""
    start = next(e for e in events if e["ev"] == "run_start")
    submits = [e for e in events if e["ev"] == "cell_submit"]
    gaps, last = 0.0, None
    for e in events:
        if e["ev"] == "cell_finish":
            last = e
        elif e["ev"] == "cell_submit" and last is not None:
            gaps += elapsed(last, e)
            last = None
    done = next((e for e in events if e.get("runs_complete")), None)
    report = next((e for e in events if e["ev"] == "report"), None)
    return {"startup_s": elapsed(start, submits[0]) if submits else 0.0, "gaps_s": gaps,
            "report_s": elapsed(done, report) if done and report else 0.0}


def describe(name: str, r: dict) -> float:
    """Print one campaign's figures; return its harness overhead in seconds."""
    stats, runs = r["stats"], [e for e in r["events"] if e["ev"] == "cell_finish"]
    wall, busy = stats["wall_span_s"], stats["busy_s"]
    over = wall - busy
    print(f"[{name}] runs: {len(runs)} (failures by class: "
          f"{stats['failures_by_class'] or 'none'}); load average at start {r['load']:.2f}")
    print(f"[{name}] wall (events span) {wall:.1f} s; whole command {r['total']:.1f} s; "
          f"summed run time {busy:.1f} s ({busy / max(1, len(runs)):.2f} s per run); "
          f"CPU of all processes {r['cpu']:.1f} s (user + sys of every reaped process)")
    print(f"[{name}] harness overhead {over:.1f} s = {100 * over / wall:.1f}% of wall: start-up "
          f"{r['startup_s']:.1f} s, gaps between runs {r['gaps_s']:.1f} s, report "
          f"{r['report_s']:.1f} s, the rest (finishing each run) "
          f"{over - r['startup_s'] - r['gaps_s'] - r['report_s']:.1f} s")
    return over


def main(argv: list[str]) -> int:
    runbook = argv[1] if len(argv) > 1 else str(ROOT / "runbooks" / "local-cpu.yaml")
    r = run_campaign(ROOT, runbook)
    if r is None:
        return 1
    print(f"runbook: {runbook}")
    over = describe("this", r)
    failed = r["total"] > 120
    first = r["stats"].get("eta_error")
    verdict = "n/a" if first is None else ("PASS" if 0.75 <= first <= 1.25 else "FAIL")
    failed = failed or verdict == "FAIL"
    print(f"ETA estimated/actual from the banner (report included): "
          f"{'n/a' if first is None else f'{first:.3f}'} (target +-25%): {verdict}")
    for key, ratio in r["stats"]["eta_error_at"].items():
        verdict = "n/a" if ratio is None else ("PASS" if 0.8 <= ratio <= 1.2 else "FAIL")
        failed = failed or verdict == "FAIL"
        shown = "n/a" if ratio is None else f"{ratio:.3f} ({100 * (ratio - 1):+.1f}%)"
        print(f"ETA estimated/actual at {key} of runs: {shown} (target +-20%): {verdict}")
    print(f"target total <= 120 s on 2 cores: {'PASS' if r['total'] <= 120 else 'FAIL'} "
          f"({r['total']:.1f} s)")
    old = os.environ.get("EPCAP_BENCH_OLD")
    if old:
        mine = Path(runbook).resolve()      # the old checkout runs its own copy of it
        theirs = Path(old) / mine.relative_to(ROOT) if mine.is_relative_to(ROOT) else mine
        o = run_campaign(Path(old), str(theirs))
        if o is None:
            return 1
        old_over = describe(f"old {Path(old).name}", o)
        ratio = over / old_over if old_over else float("nan")
        met = ratio <= 0.5
        failed = failed or not met
        print(f"overhead this / old: {over:.1f} / {old_over:.1f} s = {ratio:.2f} (target <= 0.5, "
              f"halved): {'PASS' if met else 'MISSED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
