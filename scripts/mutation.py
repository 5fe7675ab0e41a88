#!/usr/bin/env python3
"""`make mutation`: run mutmut 3.x on the capacity core and print the mutation score.

Mutates the core's files listed in pyproject `[tool.mutmut]` only_mutate (capacity,
selection, telemetry summary and lines, the pipeline's decisions and analysis), runs their
fast unit tests per mutant, then prints killed / total and the percentage, and the surviving
mutants. `--only FILE...` tests the mutants of some of those files only and scores them alone
(each file's mutants are named by its module path, e.g. harness.pipeline.decisions.*). A
timed-out mutant counts as killed (the tests did not pass), as in mutmut's own badge;
skipped mutants are left out of the total. Exit 1 below the threshold (default 95%, the
project's goal), 2 when mutmut itself failed. mutmut caches verdicts in mutants/; --fresh
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


def module_prefix(path: str) -> str:
    """The mutant-name prefix of a mutated file: harness/grid/selection.py -> harness.grid.selection."""
    rel = Path(path).as_posix().removeprefix("./")
    if not rel.endswith(".py") or not (ROOT / rel).is_file():
        raise ValueError(f"--only {path}: not a Python file of the repository")
    return rel.removesuffix(".py").replace("/", ".") + "."


def statuses(prefixes: list[str]) -> dict[str, str]:
    """{mutant: status} of every mutant whose name starts with one of `prefixes` (mutmut
    results --all: '    harness.grid.selection.x_steps_up__mutmut_1: survived')."""
    out = {}
    for line in mutmut("results", "--all", "true").stdout.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name.startswith(tuple(prefixes)):
            out[name] = status
    return out


def report_subset(prefixes: list[str], threshold: float) -> int:
    """Score the mutants of the --only files alone, as score() does the whole set."""
    found = statuses(prefixes)
    counts: dict[str, int] = {}
    for status in found.values():
        counts[status] = counts.get(status, 0) + 1
    stats = {"killed": counts.get("killed", 0), "timeout": counts.get("timeout", 0),
             "skipped": counts.get("skipped", 0), "total": len(found)}
    killed, total, percent = score(stats)
    print("\nnot killed (inspect with: .venv/bin/mutmut show NAME):")
    for name, status in sorted(found.items()):
        if status not in ("killed", "timeout", "skipped"):
            print(f"  {name}: {status}")
    print(f"\nmutation counts ({', '.join(p.rstrip('.') for p in prefixes)}): "
          f"{json.dumps(counts, sort_keys=True)}")
    print(f"mutation score: {killed} / {total} killed = {percent:.1f}% "
          f"(threshold {threshold:.0f}%)")
    return 0 if total and percent >= threshold else 1


def main(argv: list[str] | None = None) -> int:
    """Run, score, report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-children", type=int, default=2, help="parallel mutant workers")
    parser.add_argument("--threshold", type=float, default=95.0, help="minimum percent killed")
    parser.add_argument("--fresh", action="store_true", help="delete cached mutants/ first")
    parser.add_argument("--only", nargs="+", metavar="FILE", default=(),
                        help="mutate-and-score only these files of only_mutate")
    args = parser.parse_args(argv)
    if args.fresh:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    try:
        prefixes = [module_prefix(f) for f in args.only]
    except ValueError as exc:
        print(f"mutation: {exc}", file=sys.stderr)
        return 2
    run = mutmut("run", "--max-children", str(args.max_children),
                 *(f"{p}*" for p in prefixes))
    if run.returncode != 0:
        print(f"mutation: mutmut run exited {run.returncode}", file=sys.stderr)
        return 2
    if prefixes:
        return report_subset(prefixes, args.threshold)
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
