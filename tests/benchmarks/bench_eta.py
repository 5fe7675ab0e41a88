"""Benchmark: the ETA from the first line (docs/campaign.md: ETA).

Default (a *first* campaign: every results root empty, no history, the cost model is all
the estimator has at the start):
1. a first campaign of the default runbook (runbooks/local-cpu.yaml) in an empty results
   root: estimated / actual remaining wall time at its start (the banner's figure, the cost
   model's) and at 25%, 50%, 75% of its runs (after the canaries);
2. a first campaign in another empty root, interrupted with SIGINT at about a third of its
   runs, then resumed: the same figures for the resume invocation.
Targets: the fresh start within 2x (0.5 .. 2.0); every figure after the canaries have run
(the fresh run's 25/50/75%, all of the resume's) within +-25% (0.75 .. 1.25).
`--with-history`: the earlier bench instead (a seed run, then a fresh campaign and an
interrupted-then-resumed one under the same root, learning from it), every figure +-20%.
Exit 1 when a figure misses its target.
Usage: python tests/benchmarks/bench_eta.py [RUNBOOK] [--keep] [--with-history]
       python tests/benchmarks/bench_eta.py --replay ROOT... (results roots kept by --keep)
`--replay` runs no campaign: it feeds the kept event logs through today's estimator
(history = the campaigns written before, each invocation's actual runs instead of its plan,
timed from its first submit) and prints the same figures, to compare estimators on the
same measured durations.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.results.events import campaign_stats, read_events  # noqa: E402

EPCAP = [sys.executable, "-m", "harness.cli", "run"]
LOW, HIGH = 0.8, 1.2


def newest(root: Path) -> Path:
    """The campaign directory written last under `root`."""
    return max((p for p in root.iterdir() if (p / "events.jsonl").is_file()),
               key=lambda p: p.stat().st_mtime)


def figures(camp: Path) -> dict[str, float | None]:
    """start, 25%, 50%, 75% estimated/actual of the invocation that completed the runs."""
    stats = campaign_stats(camp)
    return {"start": stats["eta_error"], **stats["eta_error_at"]}


def run(runbook: str, root: Path, *extra: str) -> subprocess.CompletedProcess:
    out = subprocess.run([*EPCAP, runbook, "--results", str(root), *extra], cwd=ROOT,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"campaign failed ({out.returncode}):\n{out.stdout}{out.stderr}")
    return out


def interrupted_then_resumed(runbook: str, root: Path) -> tuple[Path, int, int]:
    """A fresh campaign, SIGINT after about a third of its planned runs, then resumed."""
    before = {p.name for p in root.iterdir()}
    proc = subprocess.Popen([*EPCAP, runbook, "--results", str(root), "--fresh"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    camp, planned, done = None, None, 0
    while proc.poll() is None:
        time.sleep(0.2)
        if camp is None:
            new = [p for p in root.iterdir() if p.name not in before
                   and (p / "events.jsonl").is_file()]
            camp = new[0] if new else None
            continue
        events = read_events(camp)
        start = next((e for e in events if e["ev"] == "run_start"), None)
        planned = planned or (start or {}).get("runs_left")
        done = sum(1 for e in events if e["ev"] == "cell_finish")
        if planned and done >= planned / 3:
            proc.send_signal(signal.SIGINT)
            break
    proc.wait(timeout=120)
    if camp is None or proc.returncode != 128 + signal.SIGINT:
        raise SystemExit(f"the interrupted run ended {proc.returncode}, not by SIGINT")
    run(runbook, root)                          # resumes the newest directory
    return camp, done, planned or 0


def show(label: str, figs: dict[str, float | None],
         bounds: dict[str, tuple[float, float]] | None = None) -> bool:
    """Print the figures against their targets (default +-20% each); True when all hold."""
    bounds = bounds or {}
    ok = True
    parts = []
    for k, v in figs.items():
        lo, hi = bounds.get(k, (LOW, HIGH))
        inside = v is not None and lo <= v <= hi
        ok = ok and inside
        parts.append(f"{k} {'n/a' if v is None else f'{v:.2f}'}"
                     + ("" if inside else f" (OUTSIDE {lo:g}..{hi:g})"))
    print(f"{label}: estimated/actual {', '.join(parts)}  [{'within' if ok else 'OUTSIDE'}"
          " target]")
    return ok


FIRST_START = (0.5, 2.0)            # the cost model alone: within 2x
AFTER_CANARIES = (0.75, 1.25)       # once the canaries have run: within +-25%


def first_campaign(runbook: str, tmp: Path) -> bool:
    """A first campaign, fresh and interrupted-then-resumed, each in an empty root."""
    fresh = tmp / "first-fresh"
    fresh.mkdir()
    run(runbook, fresh)
    ok = show("first campaign, fresh (cost model at the start)", figures(newest(fresh)),
              {"start": FIRST_START, "25%": AFTER_CANARIES, "50%": AFTER_CANARIES,
               "75%": AFTER_CANARIES})
    resumed = tmp / "first-resumed"
    resumed.mkdir()
    camp, done, planned = interrupted_then_resumed(runbook, resumed)
    print(f"interrupted at {done} of {planned} planned runs, then resumed")
    figs = figures(camp)
    ok = show("first campaign, resumed", figs, dict.fromkeys(figs, AFTER_CANARIES)) and ok
    return ok


def replay(runbook: str, history: list[list[dict]], events: list[dict]) -> dict[str, float]:
    """start/25/50/75% estimated/actual of the invocation of `events` that completed the runs,
    recomputed by today's EtaEstimator from the durations the logs hold."""
    from harness.campaign.progress import EtaEstimator, model_size
    from harness.campaign.store import iterations_per_purpose
    from harness.runbook.load import load_runbook
    rb = load_runbook(Path(runbook))
    est = EtaEstimator({m.name: model_size(m) for m in rb.models}, iterations_per_purpose(rb))
    paces = []
    for past in history:
        done = [e for e in past if e["ev"] == "cell_finish"]
        for e in done:
            est.add_history(e["backend"], e["model"], e["purpose"], e["span_s"], e["attempt"])
        subs = [e["t"] for e in past if e["ev"] == "cell_submit"]
        ends = [e["t"] for e in past if e.get("runs_complete")]
        if subs and ends:
            paces.append((ends[-1] - subs[0]) / sum(e["span_s"] for e in done))
    pace = min(2.0, max(1.0, sorted(paces)[len(paces) // 2])) if paces else 1.0
    end_i = max(i for i, e in enumerate(events) if e.get("runs_complete"))
    start_i = max(i for i in range(end_i + 1) if events[i]["ev"] == "run_start")
    for e in events[:start_i]:
        if e["ev"] == "cell_finish":
            est.add(e["backend"], e["model"], e["purpose"], e["span_s"], e["attempt"])
    est.begin_invocation()
    mine = [e for e in events[start_i:end_i + 1] if e["ev"] == "cell_finish"]
    end = events[end_i]["t"]
    keys = [(e["backend"], e["model"], e["purpose"], e["attempt"]) for e in mine]
    first = next(e["t"] for e in events[start_i:] if e["ev"] == "cell_submit")
    out = {"start": est.eta(keys) * pace / (end - first)}
    for i, e in enumerate(mine):
        est.add(e["backend"], e["model"], e["purpose"], e["span_s"], e["attempt"])
        for frac in (0.25, 0.5, 0.75):
            name = f"{frac:.0%}"
            if i == max(0, round(frac * len(mine)) - 1) and name not in out:
                out[name] = est.eta(keys[i + 1:]) * pace / (end - e["t"])
    return out


def replay_roots(runbook: str, roots: list[str]) -> int:
    """--replay: every campaign after the first under each root, replayed."""
    outside = total = 0
    for root in map(Path, roots):
        camps = sorted((p for p in root.iterdir() if (p / "events.jsonl").is_file()),
                       key=lambda p: p.name)
        logs = [read_events(c) for c in camps]
        for k in range(1, len(logs)):
            if any(e.get("runs_complete") for e in logs[k]):
                figs = replay(runbook, logs[:k], logs[k])
                outside += 0 if show(f"{root.name}/{camps[k].name}", figs) else 1
                total += 1
    print(f"{total - outside} of {total} invocations within +-20% at every figure")
    return 0 if outside == 0 else 1


def main(argv: list[str]) -> int:
    if "--replay" in argv[1:]:
        roots = [a for a in argv[1:] if a != "--replay"]
        return replay_roots(str(ROOT / "runbooks" / "local-cpu.yaml"), roots)
    args = [a for a in argv[1:] if a not in ("--keep", "--with-history")]
    keep = "--keep" in argv[1:]
    runbook = args[0] if args else str(ROOT / "runbooks" / "local-cpu.yaml")
    tmp = tempfile.mkdtemp(prefix="epcap-bench-eta-")
    root = Path(tmp)
    print(f"runbook: {runbook}; load average {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} cores; results {root}")
    t0 = time.monotonic()
    if "--with-history" not in argv[1:]:
        ok = first_campaign(runbook, root)
        print(f"benchmark wall time {time.monotonic() - t0:.0f} s; load average now "
              f"{os.getloadavg()[0]:.2f}")
        if not keep:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
        return 0 if ok else 1
    run(runbook, root)
    seed = figures(newest(root))
    print("seed run (no earlier campaign: its first figure is after one run): "
          + ", ".join(f"{k} {v}" for k, v in seed.items()))
    run(runbook, root, "--fresh")
    ok = show("fresh run", figures(newest(root)))
    camp, done, planned = interrupted_then_resumed(runbook, root)
    print(f"interrupted at {done} of {planned} planned runs, then resumed")
    ok = show("resume", figures(camp)) and ok
    print(f"benchmark wall time {time.monotonic() - t0:.0f} s")
    if not keep:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
