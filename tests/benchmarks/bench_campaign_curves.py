"""Benchmark: the default campaign with the capacity frontier and the imbalance ladder
(runbooks/local-cpu-curves.yaml) beside the default campaign (runbooks/local-cpu.yaml), both
run here one after the other and measured as bench_campaign.py measures one: wall time of the
whole command, CPU (user + sys of every process the command started and reaped: the driver,
the captures, the fork servers and their forked ranks), the load average at start and end,
the runs and wall span of each campaign (the runbook's own, then each ladder step), the
curves' cost over the default, and (before the curves' results are removed) their
frontier.tsv and ladder.tsv recomputed with pandas from the cells, as the e2e tests do on the
reduced fixture. Target (issue 43): the curves runbook's whole command
<= 120 s on 2 cores. Wall time on a loaded machine says little; CPU is the figure to compare
between commits there, and the load is printed beside every figure.
Usage: python tests/benchmarks/bench_campaign_curves.py (results in temporary directories,
removed afterwards); exit 1 when the target is missed or a campaign fails; a recompute
that disagrees raises (a traceback naming the row).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_campaign import ROOT, run_campaign  # noqa: E402

TARGET_S = 120.0
RUNBOOKS = (("default", ROOT / "runbooks" / "local-cpu.yaml"),
            ("curves", ROOT / "runbooks" / "local-cpu-curves.yaml"))


def recompute_curves(results: Path) -> str:
    """frontier.tsv and ladder.tsv of the curves runbook recomputed with pandas from their
    cells (the e2e tests' checks, tests/e2e/test_frontier_campaign.py and
    test_ladder_campaign.py, run on the shipped runbook's output); raises on a mismatch."""
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from test_frontier_campaign import check_frontier
    from test_ladder_campaign import check_ladder

    from harness.runbook.load import load_runbook
    rb = load_runbook(RUNBOOKS[1][1])
    # ladder.tsv's arms: the steps' timed backends (every one when ladder.backends is unset)
    arms = [b.name for b in rb.backends
            if b.time and (not rb.ladder_backends or b.name in rb.ladder_backends)]
    arms += [f"{rb.baseline}~control"] if rb.timing.control else []
    front = check_frontier(results / rb.campaign, rb.frontier_rungs)
    ladder = check_ladder(results, rb.campaign, rb.ladder_sigmas, arms)
    return (f"pandas recompute from the cells: frontier.tsv {front} rows, ladder.tsv "
            f"{ladder} rows, all equal")


def describe(name: str, r: dict) -> None:
    """One command's figures, then one line per campaign it ran."""
    print(f"[{name}] whole command {r['total']:.1f} s wall, CPU {r['cpu']:.1f} s; load "
          f"average {r['load']:.2f} at start, {r['load_end']:.2f} at end")
    for camp, stats in r["campaigns"].items():
        print(f"[{name}]   {camp}: {stats['runs_done']} runs, wall span "
              f"{stats['wall_span_s']:.1f} s, summed run time {stats['busy_s']:.1f} s, "
              f"failures {stats['failures_by_class'] or 'none'}")


def main() -> int:
    done = {}
    for name, runbook in RUNBOOKS:
        r = run_campaign(ROOT, str(runbook), recompute_curves if name == "curves" else None)
        if r is None:
            return 1
        done[name] = r
        describe(name, r)
        if r["check"]:
            print(f"[{name}] {r['check']}")
    base, curves = done["default"], done["curves"]
    print(f"curves over default: +{curves['total'] - base['total']:.1f} s wall "
          f"({curves['total'] / base['total']:.2f}x), +{curves['cpu'] - base['cpu']:.1f} s CPU "
          f"({curves['cpu'] / base['cpu']:.2f}x)")
    met = curves["total"] <= TARGET_S
    print(f"target curves total <= {TARGET_S:.0f} s on 2 cores: {'PASS' if met else 'FAIL'} "
          f"({curves['total']:.1f} s at load {curves['load']:.2f} -> {curves['load_end']:.2f})")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
