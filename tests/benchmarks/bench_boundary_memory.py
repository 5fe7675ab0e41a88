"""Benchmark (not a test): peak memory of `epcap report`, `epcap audit` and `epcap forecast`
on inputs 1x and 100x the default campaign's, through the bounded readers (docs/reliability.md,
"Memory on 100x inputs").

1x is the default campaign as `epcap run runbooks/local-cpu.yaml --results DIR` writes it
(104 runs of 4 gloo ranks: 76 cells with rank logs, 8 measure cells with a recorded
`routing_trace.jsonl`; about 2.5 min on 2 cores): the bench runs it once into a temporary
directory, or reads an existing one given with `--campaign DIR` (DIR = the campaign directory,
`.../local-cpu`, left untouched). It prints which.

100x is a copy of that campaign with every cell's evidence 100x as long, as a run of 100x the
iterations would write it: in every rank log the dispatch and setup_metadata rows are
repeated 100 times as further iterations (copy k has `iter` + k x the cell's iteration count,
so every (iter, layer, rank) is distinct, as in a longer run; the banner, EPCAP_TIMING and
`done` lines stay once), and every measure cell's routing trace has its records repeated 100
times the same way. The cells, tables, events and runbook stay the 1x campaign's: the readers
whose input grows with a campaign's length are the rank-log reader (report's demand.tsv,
heatmaps and balance section, audit's summaries and re-derivation) and the trace reader
(report's forecast section, `epcap forecast`); the tables are read whole by design (capped at
64 MiB) and grow with the number of cells, not with what each cell ran. What each command
reads at 100x:
- report: all 76 cells' logs (demand.tsv is 100x as long) and the 8 traces (2684 MiB at 100x).
- audit: all 76 cells' logs; the verdict is INVALID (`inconsistent-requirement`: the tables
  say 56 rows where the logs now hold 5600), found after every log was summarised: the
  bench prints the verdict line and the first finding, whose row count shows the logs were
  read to their end, and fails if the audit did not finish with its verdict.
- forecast: the default campaign's largest recorded routing (QWEN3_235B, echo measure cell:
  128 experts, top-8, 4 MoE layers, 4 ranks x 256 tokens, 7 iterations) and the 100x copy
  of it (700 iterations), at EP 4 and 8.

Each command runs in a child process; "peak RSS" is getrusage(RUSAGE_CHILDREN).ru_maxrss of
a wrapper (the largest single process of the command's tree). The audit summarises large
logs on forked workers (harness/audit/load.py, rules/rederive.py: at 64 MiB of logs, which
the 100x input passes), so the bench also samples the whole tree's proportional set size
every 50 ms ("tree PSS", the sum over the command's processes, shared pages split between
them). Prints one row per (command, scale) and exits 1 when a 100x run's peak RSS or tree
PSS grows by more than GROWTH_LIMIT_MIB over its 1x run, or a command fails. The 100x
campaign takes 2795 MiB of disk for the run of the bench (removed afterwards).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "runbooks" / "local-cpu.yaml"
SCALE = 100
GROWTH_LIMIT_MIB = 256          # a 100x input may add at most this to the peak
TRACE_CELL = "QWEN3_235B__echo__measure__cap2p00__a1"   # forecast's input (largest routing)
TRACE = "routing_trace.jsonl"
TAG = b"[MOE_DROP_DEBUG]"
ITER = re.compile(rb"(?<=\biter=)\d+")
TRACE_ITER = re.compile(rb'^\{"iter":(\d+)')
_PROBE = ("import resource, subprocess, sys\n"
          "r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
          "out = r.stdout.decode(errors='replace').splitlines()\n"
          "sys.stderr.write('\\n'.join(out[-40:]) + '\\n' + r.stderr.decode(errors='replace')"
          "[-300:])\n"
          "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
          "sys.exit(r.returncode)\n")


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return int(stat[stat.rindex(b")") + 2:].split()[3])    # field 6: session id
    except (OSError, ValueError, IndexError):
        return None


def _tree_sampler(wrapper: int, stop: threading.Event, peak: list[int]) -> None:
    """Sum of PSS over the processes of the wrapper's session (the wrapper excluded)."""
    while not stop.wait(0.05):
        total = 0
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != wrapper and _session(int(name)) == wrapper:
                total += _pss_kib(int(name))
        peak[0] = max(peak[0], total)


def peak(*argv: str) -> tuple[float, float, float, int, str]:
    """(peak RSS MiB, tree PSS MiB, seconds, exit code, the command's last output lines) of
    `python -m harness.cli ARGV` in a child (its own session, so its workers are found)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _PROBE, sys.executable, "-m", "harness.cli",
                             *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    stop, tree = threading.Event(), [0]
    sampler = threading.Thread(target=_tree_sampler, args=(proc.pid, stop, tree), daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=1800)
    finally:
        stop.set()
        sampler.join()
    lines = out.strip().splitlines()
    rss = int(lines[-1]) / 1024 if lines and lines[-1].isdigit() else float("nan")
    return rss, tree[0] / 1024, time.perf_counter() - t0, proc.returncode, err


def run_campaign(folder: Path) -> Path:
    """The default campaign, run by `epcap run runbooks/local-cpu.yaml`; its directory."""
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(RUNBOOK),
                           "--results", str(folder)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"epcap run failed (exit {done.returncode}): {done.stderr[-500:]}")
    found = [p.parent for p in folder.glob("*/runbook.yaml")]
    if len(found) != 1:
        sys.exit(f"epcap run left {len(found)} campaign directories under {folder}")
    return found[0]


def scale_logs(cell: Path, dest: Path, factor: int) -> None:
    """The cell's *.log files with their telemetry rows `factor` x as further iterations."""
    logs = {p: p.read_bytes().splitlines(keepends=True) for p in sorted(cell.glob("*.log"))}
    iters = [int(m.group()) for lines in logs.values() for line in lines
             if TAG in line and (m := ITER.search(line))]
    span = max(iters) + 1 if iters else 1
    for path, lines in logs.items():
        rows = [i for i, line in enumerate(lines) if TAG in line and ITER.search(line)]
        with open(dest / path.name, "wb") as fh:
            if not rows:
                fh.writelines(lines)
                continue
            middle = lines[rows[0]:rows[-1] + 1]
            block = [line for line in middle if TAG in line and ITER.search(line)]
            fh.writelines(lines[:rows[0]])
            for k in range(factor):
                fh.writelines(ITER.sub(lambda m, off=k * span: b"%d" % (int(m.group()) + off),
                                       line) for line in block)
            fh.writelines(line for line in middle if not (TAG in line and ITER.search(line)))
            fh.writelines(lines[rows[-1] + 1:])


def scale_trace(src: Path, dest: Path, factor: int) -> None:
    """An epcap routing trace with its records `factor` x as further iterations."""
    with open(src, "rb") as fh:
        header, records = fh.readline(), fh.readlines()
    found = [TRACE_ITER.match(r) for r in records]
    if not records or None in found:
        sys.exit(f"{src}: not an epcap routing trace of {{\"iter\": ...}} records")
    span = max(int(m.group(1)) for m in found) + 1
    with open(dest, "wb") as out:
        out.write(header)
        for k in range(factor):
            for record, m in zip(records, found, strict=True):
                out.write(b'{"iter":%d' % (int(m.group(1)) + k * span))
                out.write(record[m.end():])


def scaled(root: Path, dest: Path, factor: int) -> Path:
    """A copy of the campaign whose logs and routing traces are `factor` x as long."""
    shutil.copytree(root, dest, ignore=lambda _, names: [
        n for n in names if n.endswith(".log") or n == TRACE or n == ".epcap.lock"])
    for cell in sorted((root / "cells").iterdir()):
        if cell.is_dir():
            scale_logs(cell, dest / "cells" / cell.name, factor)
            if (cell / TRACE).is_file():
                scale_trace(cell / TRACE, dest / "cells" / cell.name / TRACE, factor)
    return dest


def size_mib(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


def audit_says(output: str) -> tuple[str, str]:
    """(the audit's verdict line, its first INVALID/UNKNOWN finding) from its last lines."""
    verdict = next((ln.strip() for ln in reversed(output.splitlines())
                    if ln.strip().startswith("VALID=")), "")
    finding = next((" | ".join(f.strip() for f in ln.split("│") if f.strip())
                    for ln in output.splitlines() if "│ INVALID" in ln or "│ UNKNOWN" in ln), "")
    return verdict, finding


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaign", type=Path, help="an existing default campaign directory "
                    "(epcap run runbooks/local-cpu.yaml --results R writes R/local-cpu)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-boundary-"))
    started = time.perf_counter()
    try:
        if args.campaign is not None:
            base = args.campaign.resolve()
            if not (base / "runbook.yaml").is_file() or not (base / "cells").is_dir():
                sys.exit(f"{base}: not a campaign directory (no runbook.yaml or cells/)")
            print(f"1x: the campaign in {base} (--campaign, not run again)")
        else:
            t0 = time.perf_counter()
            base = run_campaign(work / "one")
            print(f"1x: the default campaign, run now: epcap run {RUNBOOK.relative_to(ROOT)} "
                  f"({time.perf_counter() - t0:.0f} s)")
        if not (base / "cells" / TRACE_CELL / TRACE).is_file():
            sys.exit(f"{base}: no cells/{TRACE_CELL}/{TRACE}: not the default campaign")
        t0 = time.perf_counter()
        big = scaled(base, work / "hundred" / base.name, SCALE)
        print(f"{SCALE}x: logs and routing traces {SCALE}x as further iterations, in {big} "
              f"({size_mib(big):.0f} MiB, written in {time.perf_counter() - t0:.0f} s)")
        cases = {
            "report": (lambda d, s: ("report", str(d), "--out", str(work / f"report-{s}x")),
                       base, big),
            "audit": (lambda d, s: ("audit", str(d)), base, big),
            "forecast": (lambda d, s: ("forecast", str(d / "cells" / TRACE_CELL / TRACE),
                                       "--ep", "4,8"), base, big),
        }
        failed = False
        print(f"{'command':9} {'scale':>5} {'input MiB':>10} {'peak RSS MiB':>13} "
              f"{'tree PSS MiB':>13} {'s':>7}")
        for name, (argv_of, one, hundred) in cases.items():
            rows = []
            for scale, target in ((1, one), (SCALE, hundred)):
                read = target / "cells" / TRACE_CELL / TRACE if name == "forecast" else target
                rss, tree, secs, code, output = peak(*argv_of(target, scale))
                rows.append((rss, tree))
                print(f"{name:9} {scale:>4}x {size_mib(read):10.1f} {rss:13.1f} {tree:13.1f} "
                      f"{secs:7.1f}" + ("" if code in (0, 1) else f"  exit {code}"))
                if code not in (0, 1):
                    print("  " + output.strip()[-300:])
                    failed = True
                if name == "audit":
                    verdict, finding = audit_says(output)
                    print(f"  audit says: {verdict or '(no verdict line)'}"
                          + (f"; first finding: {finding[:160]}" if finding else ""))
                    failed |= not verdict
            for label, one_mib, hundred_mib in (("peak RSS", rows[0][0], rows[1][0]),
                                                 ("tree PSS", rows[0][1], rows[1][1])):
                if not hundred_mib - one_mib <= GROWTH_LIMIT_MIB:
                    print(f"  {name}: {label} grew {hundred_mib - one_mib:.0f} MiB at {SCALE}x "
                          f"(limit {GROWTH_LIMIT_MIB})")
                    failed = True
        print(f"bench wall time: {time.perf_counter() - started:.0f} s")
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
