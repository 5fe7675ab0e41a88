#!/usr/bin/env python3
"""`make mutation`: run mutmut 3.x on the capacity core and print the mutation score.

Mutates harness/grid/capacity.py, harness/grid/selection.py, harness/telemetry/summary.py and
harness/telemetry/lines.py (pyproject
`[tool.mutmut]`), runs their fast unit tests per mutant, then prints killed / total and the
percentage, and the surviving mutants. A timed-out mutant counts as killed (the tests did not pass), as in
mutmut's own badge; skipped mutants are left out of the total. Exit 1 below the threshold
(default 90%), 2 when mutmut itself failed. mutmut caches verdicts in mutants/; --fresh
starts over.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATS = ROOT / "mutants" / "mutmut-cicd-stats.json"


def mutmut(*args: str) -> subprocess.CompletedProcess:
    """Run the venv's mutmut in the repository root."""
    exe = Path(sys.executable).with_name("mutmut")
    cmd = [str(exe) if exe.exists() else "mutmut", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, text=True, capture_output=args[0] != "run")


def score(stats: dict) -> tuple[int, int, float]:
    """(killed, total, percent): timeouts count as killed, skipped mutants are not counted."""
    killed = int(stats.get("killed", 0)) + int(stats.get("timeout", 0))
    total = int(stats.get("total", 0)) - int(stats.get("skipped", 0))
    return killed, total, (100.0 * killed / total if total else 0.0)


def main(argv: list[str] | None = None) -> int:
    """Run, score, report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-children", type=int, default=2, help="parallel mutant workers")
    parser.add_argument("--threshold", type=float, default=90.0, help="minimum percent killed")
    parser.add_argument("--fresh", action="store_true", help="delete cached mutants/ first")
    args = parser.parse_args(argv)
    if args.fresh:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    run = mutmut("run", "--max-children", str(args.max_children))
    if run.returncode != 0:
        print(f"mutation: mutmut run exited {run.returncode}", file=sys.stderr)
        return 2
    export = mutmut("export-cicd-stats")
    if export.returncode != 0 or not STATS.exists():
        print(f"mutation: mutmut export-cicd-stats failed: {export.stderr}", file=sys.stderr)
        return 2
    stats = json.loads(STATS.read_text())
    killed, total, percent = score(stats)
    survivors = [line.strip() for line in mutmut("results").stdout.splitlines() if line.strip()]
    print("\nsurviving mutants (inspect with: .venv/bin/mutmut show NAME):")
    for line in survivors:
        print(f"  {line}")
    print(f"\nmutation stats: {json.dumps(stats)}")
    print(f"mutation score: {killed} / {total} killed = {percent:.1f}% "
          f"(threshold {args.threshold:.0f}%)")
    return 0 if percent >= args.threshold else 1


if __name__ == "__main__":
    sys.exit(main())
