"""On the CI Slurm: a torchrun cell (one task, two ranks) leaves rank0.log and rank1.log by
global rank (torchrun's tee with the `[rank${rank}]:` prefix, split by the capture), no rank
line in node0.log (torchrun's own lines), and a token printed by a rank in no file."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.api.backend import LaunchSpec
from harness.launch import slurm as S
from harness.launch.slurm_script import submit_options
from harness.runbook.model import ContainerConfig, SlurmConfig

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
TOKEN = "hf_" + "R4nk" * 8
WORKER = f"""import os, sys
print("[MOE_DROP_DEBUG][dispatch] iter=0 layer=0 rank=" + os.environ["RANK"] + " expected_recv=1"
      " actual_valid_recv=1 budget=2", flush=True)
print("rank", os.environ["RANK"], "says {TOKEN}", file=sys.stderr, flush=True)
"""


class Book:
    slurm = SlurmConfig(gpus_per_node=2)
    container, campaign, path = ContainerConfig(), "ranks", None


def test_torchrun_cell_splits_by_global_rank(tmp_path):
    ok, why = S.slurm_available()
    if not ok:
        pytest.skip(f"no Slurm: {why}")
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists() and shutil.which("torchrun") is None:
        pytest.skip("torchrun not installed next to this Python")
    (tmp_path / "w.py").write_text(WORKER)
    spec = LaunchSpec(argv=[str(torchrun), "--standalone", "--nnodes", "1", "--nproc-per-node",
                            "2", str(tmp_path / "w.py")], ntasks=1, nodes=1, gpus_per_node=2)
    cell = tmp_path / "cell"
    cell.mkdir()
    text = S.SlurmLauncher(Book()).script_text("cellT", spec, cell, 60)
    # the CI Slurm has no GPUs: drop the gres request and the node GPU probe, nothing else
    text = "\n".join(ln for ln in text.splitlines()
                     if ln != "#SBATCH --gres=gpu:2" and "harness.health" not in ln) + "\n"
    (cell / "slurm.sbatch").write_text(text)
    # submitted as the harness submits it: the cell directory is the script's argument
    job = subprocess.run(["sbatch", "--parsable", *submit_options("cellT", cell),
                          str(cell / "slurm.sbatch"), str(cell)],
                         capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    reading = None
    for _ in range(240):
        reading = S.query_state(job)
        if reading and S.map_state(reading):
            break
        time.sleep(1)
    assert reading and reading.state.startswith("COMPLETED"), reading
    for rank in (0, 1):
        log = (cell / f"rank{rank}.log").read_text()
        assert f"[rank{rank}]:[MOE_DROP_DEBUG][dispatch] iter=0 layer=0 rank={rank} " in log
        assert f"[rank{rank}]:rank {rank} says REDACTED" in log
        assert f"rank={1 - rank} " not in log
    node = cell / "node0.log"                   # torchrun's own lines, if it printed any
    assert not node.exists() or "[rank" not in node.read_text()
    assert not [p for p in cell.iterdir() if TOKEN.encode() in p.read_bytes()]


def test_worker_starting_its_own_ranks_splits_by_rank(tmp_path):
    """A reference cell launched as one task that forks its two ranks (`launch: forked` or
    `single` in a runbook run with --launcher slurm): rank<R>.log holds rank R's lines only,
    as under the local launcher (one FIFO and capture per rank); the audit's
    hardware-mismatch reads exactly this (before: every rank's lines in rank0.log)."""
    ok, why = S.slurm_available()
    if not ok:
        pytest.skip(f"no Slurm: {why}")
    argv = [sys.executable, "-m", "backends.reference", "--model", "DEEPSEEK_V2_LITE",
            "--layers", "2", "--first-dense-layers", "1", "--hidden", "32", "--experts", "64",
            "--topk", "6", "--expert-ffn", "22", "--shared-ffn", "44", "--seq", "128",
            "--micro-batch", "1", "--ep", "2", "--capacity", "2.00", "--personality", "echo",
            "--warmup", "0", "--iters", "1", "--trials", "1", "--device", "cpu",
            "--ranks", "2"]
    spec = LaunchSpec(argv=argv, env={"OMP_NUM_THREADS": "1"}, ntasks=1, nodes=1,
                      cwd=str(Path(__file__).resolve().parents[2]), ranks_per_task=2)
    cell = tmp_path / "cell"
    cell.mkdir()
    book = Book()
    book.slurm = SlurmConfig()                  # CPU ranks: no gres
    launcher = S.SlurmLauncher(book)
    started = time.time() - 1
    handle = launcher.submit("cellF", spec, cell, 120)
    result = None
    for _ in range(240):
        result = launcher.poll(handle)
        if result is not None:
            break
        time.sleep(1)
    assert result is not None and result.exit_code == 0, (result, list(cell.iterdir()))
    for rank in (0, 1):
        log = (cell / f"rank{rank}.log").read_text()
        assert f'[EPCAP_RANK] {{"rank":{rank},"world":2' in log, log
        assert f" rank={rank} " in log and f" rank={1 - rank} " not in log, log
    left = [d for d in Path("/tmp").glob("epcap-ranks.*") if d.stat().st_mtime >= started]
    assert not left, left                       # the FIFO directory goes with the job
