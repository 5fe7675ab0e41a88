"""Benchmark: the local launcher's `submit` for one run of the default campaign.

Builds the QWEN3_30B echo measure run of runbooks/local-cpu.yaml (4 gloo ranks forked from
the fork server by one worker, `launch: forked`), submits it N times in a row (default 15)
and waits for each, then prints the median time `submit` took (the fork request, the captures'
starts, the server naming the pid) and the part spent starting captures, the first submit
(the fork server's import) left out. No target: the figure feeds docs/campaign.md. With
EPCAP_BENCH_OLD=DIR the same is run by that checkout right after (its own harness on
PYTHONPATH). Usage: python tests/benchmarks/bench_submit.py [N]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def measure(root: Path, n: int) -> str:
    """Submit the run `n` times with `root`'s launcher (imported from there); one line."""
    sys.path.insert(0, str(root))
    from harness.api.backend import RunRequest
    from harness.api.registry import load_backend
    from harness.launch import local
    from harness.results.layout import Cell
    from harness.runbook.load import load_runbook

    rb = load_runbook(root / "runbooks" / "local-cpu.yaml")
    cell = Cell(rb.campaign, "QWEN3_30B", "echo", "measure", "1.50", 1)
    spent = {"captures": 0.0}
    real = local.start_capture

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent["captures"] += time.perf_counter() - t0

    local.start_capture = timed
    launcher = local.LocalLauncher()
    submits, captures, walls = [], [], []
    with tempfile.TemporaryDirectory(prefix="epcap-bench-submit-") as tmp:
        try:
            for i in range(n + 1):
                cdir = Path(tmp) / f"c{i}"
                spec = load_backend(rb.backend("echo")).command(RunRequest.for_cell(rb, cell, cdir))
                spent["captures"] = 0.0
                t0 = time.perf_counter()
                handle = launcher.submit(cell.name, spec, cdir, timeout_s=120)
                took = time.perf_counter() - t0
                while (result := launcher.poll(handle)) is None:
                    time.sleep(0.01)
                if result.exit_code != 0:
                    return f"{root}: run {i} ended {result.state} {result.exit_code}"
                if i:
                    submits.append(took)
                    captures.append(spent["captures"])
                    walls.append(result.wall_s)
        finally:
            launcher.close()
    ms = lambda xs: f"{1000 * statistics.median(xs):.1f} ms"      # noqa: E731
    return (f"{root}: submit {ms(submits)} median of {n} (starting captures {ms(captures)}); "
            f"run wall {ms(walls)}; load average {os.getloadavg()[0]:.2f}")


def main(argv: list[str]) -> int:
    n = int(argv[1]) if len(argv) > 1 else 15
    if len(argv) > 2:                       # a child: measure this root
        print(measure(Path(argv[2]), n))
        return 0
    roots = [ROOT] + ([Path(os.environ["EPCAP_BENCH_OLD"])]
                      if os.environ.get("EPCAP_BENCH_OLD") else [])
    for root in roots:                      # each in its own interpreter: its own imports
        proc = subprocess.run([sys.executable, __file__, str(n), str(root)], text=True,
                              capture_output=True, env={**os.environ, "PYTHONPATH": str(root)})
        print(proc.stdout.strip() or proc.stderr[-2000:])
        if proc.returncode != 0:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
