"""Benchmark (not a test): `epcap audit` of a Tier B-sized upload vs `epcap parse` of the same
logs, side by side in one run (issue 23: target ratio < 2).

Generates a harness-shaped upload in a temporary directory: a runbook as run (4 zoo models at
94 MoE layers, 3 reference backends, EP 8, 65 measure iterations), its sha256 in provenance,
and per (model, backend) a measure, a validate and a time cell, each with 8 rank logs (each
rank's [EPCAP_RANK] line, then 8 x 94 x 65 SPEC section 1 dispatch rows) and a cell.json
with the argv the driver records (so `routing-not-from-seed` regenerates each cell's routing);
then times `epcap audit UPLOAD --json` and `epcap parse <every log> --json` (best of
TRIALS, page cache warm), prints both,
the ratio (wall, and CPU seconds of the processes and their workers) and the upload's size,
and deletes it. The upload's verdict is printed, not judged:
the audit does its full work (every cell re-summarised and re-judged) whatever it finds.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("QWEN2_57B", "QWEN3_30B", "QWEN3_235B", "DEEPSEEK_V2_LITE")
BACKENDS = ("echo", "ultraep", "moonep")
RANKS, LAYERS, ITERS = 8, 94, 65
SEQ, TOPK = 4096, 8
N = SEQ * TOPK
TRIALS = 2
TARGET = 2.0
REPO = Path(__file__).resolve().parents[2]


def runbook_text() -> str:
    models = "\n".join(f"  - {{name: {m}, layers: {LAYERS}, first_dense_layers: 0, "
                       f"topk: {TOPK}}}" for m in MODELS)
    backends = "\n".join(f"  - {{name: {b}, kind: reference, module: {b}, "
                         f"select: {'false' if b == 'moonep' else 'true'}, time: true}}"
                         for b in BACKENDS)
    return (f"campaign: tierb\nmodels_file: models.yaml\nmodels:\n{models}\n"
            f"shape: {{seq: {SEQ}, micro_batch: 1, global_batch: 8, ep: {RANKS}}}\n"
            f"backends:\n{backends}\n"
            f"capacity: {{measure: \"2.00\", pad_multiple: 128, grid: exact, "
            f"max_validate_steps: {ITERS}}}\n"
            f"measure: {{warmup: 0, iters: {ITERS}}}\n"
            f"timing: {{warmup: 1, iters: 8, trials: 8, launches: 1}}\n"
            f"launcher: local\nseed: 1234\n")


def write_logs(cell: Path, budget: int, rnd: random.Random) -> None:
    for r in range(RANKS):
        rank = {"rank": r, "world": RANKS, "local_rank": r, "host": "bench", "device": "cpu",
                "device_name": "cpu"}                    # the [EPCAP_RANK] line a rank prints
        parts = [f"[EPCAP_RANK] {json.dumps(rank, separators=(',', ':'))}\n",
                 f"[MOE_DROP_DEBUG][setup_metadata] iter=0 layer=0 rank={r} budget={budget} "
                 f"exact_recv_per_rank=[{','.join([str(N)] * RANKS)}]\n"]
        for it in range(ITERS):
            for layer in range(LAYERS):
                act = N + rnd.randrange(-2000, 2000)
                parts.append(f"[rank{r}]: [MOE_DROP_DEBUG][dispatch] iter={it} layer={layer} "
                             f"rank={r} expected_recv={N} actual_valid_recv={act} "
                             f"budget={budget}\n")
        (cell / f"rank{r}.log").write_text("".join(parts))


def recorded_argv(up: Path, name: str) -> list[str]:
    """The argv the driver records for the cell (RunRequest.for_cell + Backend.command under
    the runbook as run), so the audit regenerates each reference cell's routing."""
    from harness.api.backend import RunRequest
    from harness.api.registry import load_backend
    from harness.results.layout import parse_cell_name
    from harness.runbook.load import load_runbook
    book = load_runbook(up / "runbook.yaml")
    cell = parse_cell_name(name, book.campaign)
    req = RunRequest.for_cell(book, cell, up / "cells" / name)
    return [str(a) for a in load_backend(book.backend(cell.backend)).command(req).argv]


def generate(root: Path) -> tuple[Path, list[Path]]:
    """The upload and its log files."""
    up = root / "tierb"
    (up / "cells").mkdir(parents=True)
    book = runbook_text().encode()
    (up / "runbook.yaml").write_bytes(book)
    shutil.copyfile(REPO / "runbooks" / "models.yaml", up / "models.yaml")
    sha = hashlib.sha256(book).hexdigest()
    prov = (f"harness.version: 0.1.0\nharness.commit: bench\ncommand_line: epcap run\n"
            f"utc_start: 2026-12-01T00:00:00Z\nhostnames: bench\ngpu.model: no-gpu\n"
            f"gpu.count: 0\ngpu.driver: no-gpu\ntorch: none\ncuda: not-installed\n"
            f"nccl: not-installed\nnvshmem: not-installed\npython: 3\nrunbook.sha256: {sha}\n")
    (up / "provenance.txt").write_text(prov)
    rnd = random.Random(0)
    header = ["campaign", "model", "backend", "purpose", "attempt", "capacity",
              "capacity_tag", "uniform_tokens", "budget_tokens", "status", "rows",
              "malformed_rows", "saturated_rows", "peak_actual_valid_recv",
              "required_capacity", "cell_dir"]
    rows, logs = ["\t".join(header)], []
    for m in MODELS:
        for b in BACKENDS:
            for purpose, cap, tag in (("measure", "2.00", "cap2p00"),
                                      ("validate", "1.0625", "cap1p0625"),
                                      ("time", "1.0625", "cap1p0625")):
                name = f"{m}__{b}__{purpose}__{tag}__a1"
                cell = up / "cells" / name
                cell.mkdir()
                budget = int(float(cap) * N)
                write_logs(cell, budget, rnd)
                logs += sorted(cell.glob("rank*.log"))
                (cell / "cell.json").write_text(json.dumps({
                    "cell": {"campaign": "tierb", "model": m, "backend": b,
                             "purpose": purpose, "capacity": cap, "attempt": 1},
                    "name": name, "status": "ok", "argv": recorded_argv(up, name),
                    "launcher": {"state": "completed", "exit_code": 0}}))
                (cell / "provenance.txt").write_text(prov)
                rows.append("\t".join(["tierb", m, b, purpose, "1", cap, tag, str(N),
                                       str(budget), "ok", str(RANKS * LAYERS * ITERS), "0",
                                       "0", "", "", f"cells/{name}"]))
    (up / "capacity_attempts.tsv").write_text("\n".join(rows) + "\n")
    return up, logs


def children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far (their forked
    workers included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str]) -> tuple[float, bytes, float]:
    """(wall seconds, stdout, CPU seconds) of one command: wall is what a user waits; CPU is
    the work done, which a machine shared with others disturbs far less."""
    start, cpu = time.perf_counter(), children_cpu()
    done = subprocess.run(argv, capture_output=True, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{argv[:3]} exited {done.returncode}: {done.stderr[-500:]!r}")
    return time.perf_counter() - start, done.stdout, children_cpu() - cpu


def main() -> int:
    epcap = [sys.executable, "-m", "harness.cli"]
    tmp = Path(tempfile.mkdtemp(prefix="epcap-bench-audit-"))
    try:
        t0 = time.perf_counter()
        up, logs = generate(tmp)
        mb = sum(p.stat().st_size for p in logs) / 1e6
        print(f"generated {len(logs)} logs, {mb:.1f} MB, "
              f"{len(MODELS) * len(BACKENDS) * 3} cells in {time.perf_counter() - t0:.1f} s")
        env_ok = os.environ.get("PYTHONPATH")
        parse, audit, parse_cpu, audit_cpu = [], [], [], []
        for _ in range(TRIALS):                    # side by side, alternating
            wall, _, cpu = timed([*epcap, "parse", *map(str, logs), "--json"])
            parse.append(wall)
            parse_cpu.append(cpu)
            wall, out, cpu = timed([*epcap, "audit", str(up), "--json"])
            audit.append(wall)
            audit_cpu.append(cpu)
        doc = json.loads(out)
        p_s, a_s = min(parse), min(audit)
        ratio = a_s / p_s
        print(f"epcap parse : {p_s:.2f} s  ({mb / p_s:.1f} MB/s), CPU {min(parse_cpu):.2f} s")
        print(f"epcap audit : {a_s:.2f} s  (verdict {doc['uploads'][0]['verdict']}, "
              f"{len(doc['uploads'][0]['reasons'])} reason codes; PYTHONPATH={env_ok}), "
              f"CPU {min(audit_cpu):.2f} s")
        print(f"ratio audit / parse: {ratio:.2f}x wall (target < {TARGET}: "
              f"{'met' if ratio < TARGET else 'MISSED'}); "
              f"{min(audit_cpu) / min(parse_cpu):.2f}x CPU")
        return 0 if ratio < TARGET else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
