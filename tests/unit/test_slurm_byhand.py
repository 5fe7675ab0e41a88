"""A written slurm.sbatch can be resubmitted by hand as is (no Slurm needed here; the real
submission is tests/e2e/test_slurm_scale.py): it states its output and --export, names
MASTER_ADDR/MASTER_PORT only where the ranks rendezvous by them, asks --kill-on-bad-exit only
of several tasks, and the dry run says which of its paths lie on this host's own disks."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.api.backend import LaunchSpec
from harness.io.boundary.paths import file_system, node_local
from harness.launch import slurm_script as SS
from harness.runbook.model import SlurmConfig


def script(spec: LaunchSpec, gpus: int = 0, home: Path | None = None,
           cell: Path = Path("/r/c/cells/C")) -> str:
    opts = SS.sbatch_options(SlurmConfig(gpus_per_node=gpus), spec, "N", cell)
    return SS.batch_script(opts, spec, cell, "/usr/bin/python3", gpus, home=home)


@pytest.mark.parametrize("ntasks, nodes, gpus, ranks_per_task, rendezvous", [
    (4, 1, 0, 1, True),         # four single-rank tasks (reference backend): env://
    (1, 1, 0, 1, True),         # one single-rank task: the reference rank asks for them
    (1, 1, 8, 1, False),        # one torchrun --standalone hosting 8 ranks
    (2, 2, 8, 1, True),         # torchrun per node: the multi-node trampoline's endpoint
    (1, 1, 0, 4, False),        # a worker forking its 4 ranks on 127.0.0.1
])
def test_master_addr_only_where_the_ranks_rendezvous_by_it(ntasks, nodes, gpus,
                                                           ranks_per_task, rendezvous):
    """Catches MASTER_ADDR/MASTER_PORT exported for a step that never reads them (one
    torchrun --standalone task, as every Tier B cell) and dropped where the ranks need
    them (several tasks, a single reference rank)."""
    spec = LaunchSpec(argv=["x"], ntasks=ntasks, nodes=nodes, ranks_per_task=ranks_per_task)
    text = script(spec, gpus)
    assert ("export MASTER_ADDR" in text) is rendezvous
    assert ("MASTER_PORT=" in text) is rendezvous


@pytest.mark.parametrize("ntasks", [1, 2, 8])
def test_kill_on_bad_exit_only_for_several_tasks(ntasks):
    """Catches `--kill-on-bad-exit=1` on a one-task step (it ends no peer there)."""
    srun = next(line for line in script(LaunchSpec(argv=["x"], ntasks=ntasks)).splitlines()
                if line.startswith("( srun --export=ALL --ntasks="))
    assert ("--kill-on-bad-exit=1" in srun) is (ntasks > 1)


def test_the_script_states_its_export_and_a_by_hand_output_beside_its_home(tmp_path):
    """Catches a script relying on the cluster's default --export, and one whose by-hand
    batch log goes to the submitting directory (no --output) or into the cell (whose
    slurm-*.out classify reads)."""
    home = tmp_path / "plan.dry-run" / "cells" / "C"
    lines = script(LaunchSpec(argv=["x"], ntasks=1), home=home).splitlines()
    sbatch = [line for line in lines if line.startswith("#SBATCH ")]
    assert "#SBATCH --export=ALL" in sbatch
    assert f"#SBATCH --output={home}.rerun.%j.out" in sbatch
    assert not any("/r/c/cells/C/" in line and "--output" in line for line in sbatch)


def test_a_by_hand_run_after_a_dry_run_creates_its_directory(tmp_path):
    """Catches the mktemp failure: run as `bash slurm.sbatch` (as Slurm runs it) with no
    argument, where only the dry run's folder exists, it makes `<home>.rerun.<job id>`."""
    home = tmp_path / "plan.dry-run" / "cells" / "C"
    home.mkdir(parents=True)
    cell = tmp_path / "plan" / "cells" / "C"          # never created by a dry run
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text("#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in --*) shift;; "
                                 "*) break;; esac; done\nexport SLURM_PROCID=0 SLURM_NTASKS=1 "
                                 "SLURM_LOCALID=0\nexec \"$@\"\n")
    (bindir / "srun").chmod(0o755)
    spec = LaunchSpec(argv=["sh", "-c", f"echo ran > {cell}/out.txt"], ntasks=2)
    (home / SS.SCRIPT_NAME).write_text(script(spec, home=home, cell=cell))
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_JOB_ID": "41",
           "SLURM_JOB_NODELIST": "n", "SLURM_JOB_NUM_NODES": "1",
           "PYTHONPATH": str(Path(SS.__file__).resolve().parents[2])}
    (bindir / "scontrol").write_text("#!/bin/sh\necho n\n")
    (bindir / "scontrol").chmod(0o755)
    proc = subprocess.run(["bash", str(home / SS.SCRIPT_NAME)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    made = home.parent / "C.rerun.41"
    assert (made / "out.txt").read_text() == "ran\n" and not cell.exists()


MOUNTS = ["/", "/lustre", "/lustre/fsw", "/home", "/lus", "/scratch local"]
TYPES = ["ext4", "xfs", "overlay", "tmpfs", "nfs4", "lustre", "gpfs"]


def mountinfo(table: dict[str, str]) -> str:
    """A /proc/self/mountinfo (proc(5)) holding these mount points and types."""
    return "".join(f"{20 + i} 1 0:{i} / {point.replace(' ', chr(92) + '040')} rw,relatime "
                   f"shared:1 - {kind} dev{i} rw\n" for i, (point, kind) in enumerate(table.items()))


@settings(max_examples=60, deadline=None)
@given(kinds=st.lists(st.sampled_from(TYPES), min_size=len(MOUNTS), max_size=len(MOUNTS)),
       path=st.sampled_from(["/lustre/fsw/moe/epcap", "/lustre/x", "/lusty/a", "/lus/b",
                             "/home/u/.venv", "/opt/epcap", "/scratch local/r"]))
def test_the_deepest_mount_holding_a_path_decides(kinds, path):
    """Catches the shortest (or first) matching mount taken (`/` for a checkout on Lustre:
    a false warning) and a prefix taken for a parent (`/lus` holding `/lusty`)."""
    table = dict(zip(MOUNTS, kinds, strict=True))
    want = max((p for p in MOUNTS if path == p or path.startswith(p.rstrip("/") + "/")),
               key=len)
    assert file_system(Path(path), mountinfo(table)) == (want, table[want])
    local = node_local(Path(path), mountinfo(table))
    assert (local is None) is (table[want] in ("nfs4", "lustre", "gpfs"))


def test_unreadable_mounts_say_nothing():
    """Catches a warning made up where the mounts cannot be read."""
    assert node_local(Path("/x"), "") is None


@pytest.mark.parametrize("per_rank, ntasks, gpus, ranks_per_task, want", [
    (14, 1, 8, 1, 112),        # one torchrun task hosting 8 GPU ranks: 14 cores each
    (2, 4, 0, 1, 2),           # four single-rank tasks
    (3, 1, 0, 4, 12),          # a worker forking its 4 ranks
])
def test_cores_per_rank_times_ranks_per_task(per_rank, ntasks, gpus, ranks_per_task, want):
    """Catches `--cpus-per-task` left at one core per rank (8 GPU ranks sharing 8 cores of
    an exclusive node) when the runbook gives each rank its own cores, and a step without
    the explicit binding."""
    spec = LaunchSpec(argv=["x"], ntasks=ntasks, ranks_per_task=ranks_per_task)
    cfg = SlurmConfig(gpus_per_node=gpus, cpus_per_rank=per_rank)
    assert f"--cpus-per-task={want}" in SS.sbatch_options(cfg, spec, "N", Path("/c"))
    text = SS.batch_script([], spec, Path("/c"), "python3", gpus, bind=True)
    assert "--cpu-bind=cores" in text and "# binding: each task on its own cores" in text
    assert "--cpu-bind" not in SS.batch_script([], spec, Path("/c"), "python3", gpus)


def test_cores_per_rank_and_per_task_are_not_both_set():
    """Catches two answers to one question taken silently."""
    from harness.errors import BadInput
    with pytest.raises(BadInput) as err:
        SS.sbatch_options(SlurmConfig(cpus_per_rank=2, cpus_per_task=4),
                          LaunchSpec(argv=["x"], ntasks=1), "N", Path("/c"))
    assert err.value.field == "slurm.cpus_per_rank"
