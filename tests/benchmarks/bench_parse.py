"""Benchmark (not a test): `epcap parse` vs `grep -c` on a generated ~200 MB log.

Generates a log of 8 ranks x 94 layers x many iterations with torchrun-style prefixes and
non-telemetry noise lines in a temporary directory, times both commands on the same file
(best of five, round robin, page cache warm), prints MB/s, the ratio to grep and epcap's
peak RSS, and deletes the file. Every checkout timed has its bytecode compiled first
(tests/benchmarks/bytecode.py: without it each start compiles the harness again, about
0.04 s of the 0.23 s this log took on 7 Dec 2026). Targets:
ratio >= 0.30, peak RSS < 200 MB; a missed target is printed as MISSED and the exit status
is 1 (`make bench` still runs the other benchmarks first).
Says whether the compiled scanner (harness.telemetry._scan) ran, and times the pure-Python path once
(EPCAP_PURE_PYTHON_PARSE=1) for comparison; that figure is not a target. With
EPCAP_BENCH_OLD=DIR (a checkout of another commit, e.g. `git worktree add /tmp/old 7e6eb72`,
its scanner built there with `python setup.py build_ext --inplace`) it also times that
checkout's `parse` on the same file and prints both ratios to grep side by side. Ours runs
with PYTHONPATH set to the checkout this file is in, so a worktree's bench times that
worktree's harness, not the one the virtual environment's editable install points at.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecode import compile_bytecode

ROOT = Path(__file__).resolve().parents[2]   # the checkout whose `parse` is "ours"
RANKS, LAYERS, TARGET_BYTES = 8, 94, 200 * 1024 * 1024
N, BUDGET = 65536, 131072
TRIALS = 5


def generate(path: Path, target: int = TARGET_BYTES, seed: int = 0) -> int:
    """Write the log; return the number of dispatch rows."""
    rnd = random.Random(seed)
    noise = [f"[rank{r}]: iteration {{it}} | lr 1.0e-4 | loss 2.{r}13 | grad norm 0.9\n"
             for r in range(RANKS)]
    rows = it = size = 0
    with open(path, "w", encoding="utf-8") as fh:
        for r in range(RANKS):
            fh.write(f"[rank{r}]:[MOE_DROP_DEBUG][setup_metadata] iter=0 layer=1 rank={r} "
                     f"budget={BUDGET} exact_recv_per_rank=[{','.join([str(N)] * RANKS)}]\n")
        while size < target:
            parts = []
            for layer in range(1, LAYERS + 1):
                for r in range(RANKS):
                    act = N + rnd.randrange(-2000, 4000)
                    parts.append(f"[rank{r}]:[MOE_DROP_DEBUG][dispatch] iter={it} layer={layer} "
                                 f"rank={r} expected_recv={N} actual_valid_recv={act} "
                                 f"budget={BUDGET} observed_loss={N - act}\n")
                if layer % 10 == 0:
                    parts.append(noise[layer % RANKS].format(it=it))
            parts.extend(line.format(it=it) for line in noise)
            text = "".join(parts)
            fh.write(text)
            size += len(text)
            rows += LAYERS * RANKS
            it += 1
    return rows


def timed(argv: list[str], env: dict | None = None,
          cwd: str | None = None) -> tuple[float, int, bytes]:
    """Run argv; return (wall seconds, the child's peak RSS in bytes, stdout)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, cwd=cwd)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} exited {proc.returncode}")
    return wall, usage.ru_maxrss * 1024, out


def compiled_scanner() -> bool:
    """Whether harness.telemetry._scan imports in this interpreter (what `epcap` will use)."""
    probe = "import harness.telemetry._scan"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode == 0


def main() -> int:
    """Generate, time, print, clean up."""
    epcap = shutil.which("epcap") or str(Path(sys.executable).with_name("epcap"))
    tmp = Path(tempfile.mkdtemp(prefix="epcap-bench-"))
    try:
        log = tmp / "rank-all.log"
        t0 = time.perf_counter()
        rows = generate(log)
        mb = log.stat().st_size / 1e6
        print(f"generated {mb:.1f} MB, {rows} dispatch rows in {time.perf_counter() - t0:.1f} s")
        old = os.environ.get("EPCAP_BENCH_OLD")
        for checkout in (ROOT, *([Path(old)] if old else [])):
            print(compile_bytecode(checkout))
        env = {k: v for k, v in os.environ.items() if k != "EPCAP_PURE_PYTHON_PARSE"}
        env["PYTHONPATH"] = str(ROOT)          # this checkout's harness (see the docstring)
        commands = {"grep": (["grep", "-c", r"\[MOE_DROP_DEBUG\]\[dispatch\]", str(log)],
                             None, None),
                    "ours": ([epcap, "parse", str(log), "--json"], env, None)}
        if old:                      # cwd and PYTHONPATH both the old checkout: its harness
            commands["old"] = ([sys.executable, "-m", "harness.cli", "parse", str(log),
                                "--json"], {**env, "PYTHONPATH": old}, old)
        # round robin: this machine's speed drifts over seconds, so each trial times every
        # command back to back and the best of each is compared
        trials: dict[str, list] = {name: [] for name in commands}
        for _ in range(TRIALS):
            for name, (argv, cmd_env, cwd) in commands.items():
                trials[name].append(timed(argv, cmd_env, cwd=cwd))
        grep, ours = trials["grep"], trials["ours"]
        pure = timed([epcap, "parse", str(log), "--json"], {**env, "EPCAP_PURE_PYTHON_PARSE": "1"})
        g_s, o_s = min(t for t, _, _ in grep), min(t for t, _, _ in ours)
        rss = max(r for _, r, _ in ours)
        assert int(grep[0][2]) == rows, "grep count differs from the generated rows"
        assert f'"rows": {rows},' in ours[0][2].decode(), "epcap rows differ from generated"
        assert pure[2] == ours[0][2], "the pure-Python path gives another result"
        ratio = g_s / o_s
        print(f"grep -c     : {g_s:.3f} s  {mb / g_s:8.1f} MB/s")
        print(f"epcap parse : {o_s:.3f} s  {mb / o_s:8.1f} MB/s  (compiled scanner: "
              f"{'yes' if compiled_scanner() else 'NO, pure Python'})")
        print(f"pure Python : {pure[0]:.3f} s  {mb / pure[0]:8.1f} MB/s  (one run, peak RSS "
              f"{pure[1] / 1e6:.1f} MB; EPCAP_PURE_PYTHON_PARSE=1, for comparison)")
        if old:
            t_s = min(t for t, _, _ in trials["old"])
            print(f"old commit  : {t_s:.3f} s  {mb / t_s:8.1f} MB/s  ({old}); ratio to grep "
                  f"{g_s / t_s:.2f}x beside ours {ratio:.2f}x; ours / old {o_s / t_s:.2f}x time")
        ok_ratio, ok_rss = ratio >= 0.30, rss < 200e6
        print(f"ratio to grep: {ratio:.2f}x (target >= 0.30: {'met' if ok_ratio else 'MISSED'})")
        print(f"epcap peak RSS: {rss / 1e6:.1f} MB (target < 200 MB: "
              f"{'met' if ok_rss else 'MISSED'})")
        return 0 if ok_ratio and ok_rss else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
