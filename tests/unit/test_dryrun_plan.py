"""`epcap run --dry-run` is the plan: --stage/--until honoured, launch numbers, scripts
(batch script + repro.sh) under <results>/<campaign>.dry-run that pass shellcheck and the CI
Slurm's `sbatch --test-only`, memory warnings from the memory model, one closing summary."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.launch.slurm import slurm_available

ROOT = Path(__file__).resolve().parents[2]
TIERB = ROOT / "runbooks" / "tierb-b200-gbs8.yaml"
REDUCED = ROOT / "tests" / "fixtures" / "runbooks" / "reduced.yaml"


def dry(tmp_path: Path, runbook: Path, *args: str) -> str:
    """The dry run's output (exit 0); Tier B's placeholder partition is not asked about."""
    extra = ("--no-test-only",) if runbook == TIERB else ()
    out = CliRunner().invoke(main, ["run", str(runbook), "--dry-run", "--results",
                                    str(tmp_path), *extra, *args])
    assert out.exit_code == 0, out.output
    return out.output


def scripts(tmp_path: Path, campaign: str) -> list[Path]:
    return sorted((tmp_path / f"{campaign}.dry-run" / "cells").glob("*/*"))


def test_tierb_memory_warnings_name_exactly_the_pairs_over_the_device(tmp_path):
    text = dry(tmp_path, TIERB)
    warned = sorted(ln.split(":")[1].strip() for ln in text.splitlines()
                    if ln.startswith("WARNING:") and "modelled" in ln)
    assert warned == ["QWEN3_235B echo", "QWEN3_235B mcore-alltoall", "QWEN3_235B mcore-deepep",
                      "QWEN3_235B mcore-hybridep", "QWEN3_235B moonep", "QWEN3_235B ultraep"]
    assert "94 layers" in text and "> device 180.00 GiB" in text
    assert "== summary ==" in text and "runs planned: 106 of 106" in text
    assert "estimated GPU-hours: 212.00" in text and "time estimate: 26 h 30 min" in text
    assert "cell_wall_hours (your estimate, not a measurement)" in text
    assert "ceiling (slurm.time_limit" in text and "106 runs x 1 h = 106 h serial" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tierb-b200-gbs8.dry-run"]


def test_memory_warning_agrees_with_the_runs_does_not_fit(tmp_path):
    """The reduced runbook's QWEN3_30B moonep is does_not_fit by design (its comment; the e2e
    campaign records it): the dry run warns for it and for nothing else."""
    warned = [ln for ln in dry(tmp_path, REDUCED).splitlines() if ln.startswith("WARNING:")]
    assert len(warned) == 1 and warned[0].startswith("WARNING: QWEN3_30B moonep: modelled")


def test_until_and_stage_restrict_the_plan(tmp_path):
    text = dry(tmp_path, REDUCED, "--until", "measure")
    assert "[validate]" not in text and "[time]" not in text and "[measure]" in text
    assert "not run now: time, validate" in text
    only = dry(tmp_path, REDUCED, "--stage", "time")
    assert "[measure]" not in only and "[time]" in only


def test_launches_are_numbered(tmp_path):
    text = dry(tmp_path, REDUCED)
    assert text.count("QWEN3_30B echo time launch 1/2") == 1
    assert text.count("QWEN3_30B echo time launch 2/2") == 1


def test_scripts_written_and_nothing_in_the_campaign_dir(tmp_path):
    dry(tmp_path, REDUCED, "--launcher", "slurm")
    files = scripts(tmp_path, "reduced")
    names = {p.name for p in files}
    assert names == {"repro.sh", "slurm.sbatch"}
    assert not (tmp_path / "reduced").exists()
    repro = next(p for p in files if p.name == "repro.sh").read_text()
    assert "export OMP_NUM_THREADS=1" in repro and "-m backends.reference" in repro
    assert f"cd {ROOT}" in repro


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck not installed (scripts/ci-slurm.sh installs it)")
@pytest.mark.parametrize("runbook", [TIERB, REDUCED], ids=["tierb", "reduced"])
def test_every_dry_run_script_passes_shellcheck(tmp_path, runbook):
    dry(tmp_path, runbook, "--launcher", "slurm")
    files = [p for p in tmp_path.glob("*.dry-run/cells/*/*")]
    assert files
    proc = subprocess.run(["shellcheck", "-s", "bash", *map(str, files)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[:3000]


@pytest.mark.slurm
def test_dry_run_batch_scripts_accepted_by_sbatch_test_only(tmp_path):
    ok, why = slurm_available()
    if not ok:
        pytest.skip(f"no Slurm: {why}")
    dry(tmp_path, REDUCED, "--launcher", "slurm", "--until", "measure")
    batch = [p for p in scripts(tmp_path, "reduced") if p.name == "slurm.sbatch"]
    assert len(batch) == 3 + 4                     # canaries + measure cells
    for path in batch:
        proc = subprocess.run(["sbatch", "--test-only", str(path)], capture_output=True,
                              text=True, check=False, timeout=60, cwd=tmp_path)
        assert proc.returncode == 0 and "to start at" in proc.stderr, (path, proc.stderr)


def test_a_second_dry_run_replaces_the_first(tmp_path):
    dry(tmp_path, REDUCED, "--launcher", "slurm")
    first = len(scripts(tmp_path, "reduced"))
    dry(tmp_path, REDUCED, "--launcher", "slurm", "--until", "preflight")
    assert len(scripts(tmp_path, "reduced")) < first
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_selectors_restrict_the_plan(tmp_path, capsys):
    """--model/--backend (the CLI passes them as a PlanFilter): only those pairs, the A/A
    control arm following its baseline; an unknown name is exit 2."""
    from harness.campaign.dryrun import PlanFilter, print_dry_run
    from harness.errors import BadInput
    from harness.runbook.load import load_runbook
    rb = load_runbook(REDUCED)
    print_dry_run(rb, tmp_path / "reduced", "local",
                  PlanFilter(models=("QWEN3_30B",), backends=("moonep",)))
    text = capsys.readouterr().out
    heads = [ln for ln in text.splitlines() if ln.startswith("[")]
    assert heads and all(" QWEN3_30B moonep " in h for h in heads)
    assert "selectors: --model QWEN3_30B --backend moonep" in text
    with pytest.raises(BadInput) as err:
        print_dry_run(rb, tmp_path / "reduced", "local", PlanFilter(models=("NOPE",)))
    assert err.value.field == "--model"


def test_repro_writes_the_cells_paths_into_its_own_directory(tmp_path):
    """A measure cell records its routing into the cell directory; its repro.sh points that
    path into OUT_DIR (the old script wrote into a cell directory that did not exist and
    exited 0 on the crash) and returns the ranks' status."""
    dry(tmp_path, ROOT / "runbooks" / "local-cpu.yaml", "--until", "measure")
    script = next(p for p in scripts(tmp_path, "local-cpu")
                  if "__measure__" in str(p) and p.name == "repro.sh").read_text()
    assert '"$OUT"/routing_trace.jsonl' in script and str(tmp_path) not in script
    assert 'exit "$status"' in script and "set -e" not in script


def test_selectors_never_give_negative_counts(tmp_path):
    """--model/--backend restrict the plan; the timing line counts the timed runs planned
    (the old one subtracted the full plan's launches from the selection's: -9 runs)."""
    import re
    full = dry(tmp_path, REDUCED)
    for args in (("--model", "QWEN3_30B"), ("--backend", "moonep"),
                 ("--model", "QWEN3_30B", "--backend", "echo")):
        text = dry(tmp_path, REDUCED, *args)
        planned = int(re.search(r"runs planned: (\d+) of", text).group(1))
        added = int(re.search(r"control add (-?\d+) of them", text).group(1))
        timed = int(re.search(r"timing: (\d+) timed runs planned", text).group(1))
        assert 0 < planned < int(re.search(r"runs planned: (\d+) of", full).group(1))
        assert 0 <= added <= timed <= planned
        assert "-" not in re.search(r"time estimate: ([^(]*)", text).group(1)
