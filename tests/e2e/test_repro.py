"""repro.sh reproduces one cell: the same argv, environment and working directory as the
harness ran it with, writing only into the directory given (or a new one beside the script),
the ranks' exit status as its own. Run here for reference cells the campaign ran: the
telemetry rows of the repro equal the cell's, and so does the exit status (a run that fails
included)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.api.backend import RunRequest
from harness.api.registry import load_backend
from harness.campaign.dryrun import repro_script
from harness.cli import main
from harness.results.layout import Cell
from harness.runbook.load import load_runbook

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TAG = "[MOE_DROP_DEBUG]"
RUNBOOK = """campaign: repro
models_file: {zoo}
models:
  - {{name: QWEN3_30B, layers: 2, hidden: 32, expert_ffn: 16, routing_sigma: 0.2}}
shape: {{seq: 128, micro_batch: 1, global_batch: 2, ep: 2}}
backends:
  - {{name: echo, kind: reference, module: echo, options: {{launch: single}}}}
capacity: {{measure: "2.00", pad_multiple: 128, grid: exact}}
measure: {{warmup: 0, iters: 3}}
limits: {{run_timeout_s: 60, infra_retries: 0}}
{extra}seed: 1234
"""


def campaign(tmp_path: Path, until: str, flags: str = "", exit_code: int = 0
             ) -> tuple[Path, Path]:
    book = tmp_path / "repro.yaml"
    text = RUNBOOK.format(zoo=ROOT / "runbooks" / "models.yaml", extra="")
    if flags:
        text = text.replace("options: {launch: single}", f"options: {{launch: single}}, "
                                                         f"flags: [{flags}]")
    book.write_text(text)
    res = CliRunner().invoke(main, ["run", str(book), "--results", str(tmp_path / "r"),
                                    "--until", until])
    assert res.exit_code == exit_code, res.output
    return book, tmp_path / "r" / "repro"


def rows(folder: Path) -> list[str]:
    """Every telemetry row of a folder's rank logs, sorted (ranks interleave)."""
    return sorted(ln[ln.index(TAG):] for log in folder.glob("rank*.log")
                  for ln in log.read_text(errors="replace").splitlines() if TAG in ln)


def repro_of(book: Path, cell_dir: Path, where: Path) -> Path:
    """repro.sh of a finished cell, from the spec the driver builds for it."""
    rb = load_runbook(book)
    doc = json.loads((cell_dir / "cell.json").read_text())
    cell = Cell(**doc["cell"])
    spec = load_backend(rb.backend(cell.backend)).command(RunRequest.for_cell(rb, cell,
                                                                              cell_dir))
    assert [str(a) for a in spec.argv] == doc["argv"]       # what the cell ran
    script = where / "repro.sh"
    script.write_text(repro_script(cell.name, spec, cell_dir))
    return script


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_repro_of_a_measure_cell_gives_its_rows_and_status(tmp_path):
    book, camp = campaign(tmp_path, "measure")
    cell_dir = next((camp / "cells").glob("*__measure__*"))
    assert json.loads((cell_dir / "cell.json").read_text())["launcher"]["exit_code"] == 0
    script = repro_of(book, cell_dir, tmp_path)
    out, cwd = tmp_path / "out", tmp_path / "cwd"
    cwd.mkdir()
    before, cells_before = listing(tmp_path), listing(camp)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # no harness installed
    res = subprocess.run(["bash", str(script), str(out)], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert rows(out) and rows(out) == rows(cell_dir)
    assert (out / "routing_trace.jsonl").is_file()           # the cell's own output, in OUT
    assert listing(camp) == cells_before and not any(cwd.iterdir())
    assert {p.split("/")[0] for p in listing(tmp_path) - before} == {"out"}


def test_repro_default_directory_is_new_and_beside_the_script(tmp_path):
    book, camp = campaign(tmp_path, "preflight")
    cell_dir = next((camp / "cells").glob("*__canary__*"))
    where = tmp_path / "plan"
    where.mkdir()
    script = repro_of(book, cell_dir, where)
    res = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    made = [p for p in tmp_path.iterdir() if p.name.startswith("plan.repro.")]
    assert len(made) == 1 and rows(made[0]) == rows(cell_dir)


def test_repro_of_a_failing_cell_returns_the_ranks_status(tmp_path):
    """A canary given a flag its worker refuses exits non-zero (badflag: the campaign stops,
    exit 3); its repro exits with the same status."""
    book, camp = campaign(tmp_path, "preflight", flags="--no-such-flag", exit_code=3)
    cell_dir = next((camp / "cells").glob("*__canary__*"))
    doc = json.loads((cell_dir / "cell.json").read_text())
    code = doc["launcher"]["exit_code"]
    assert doc["status"] == "badflag" and code not in (0, None)
    script = repro_of(book, cell_dir, tmp_path)
    res = subprocess.run(["bash", str(script), str(tmp_path / "out")], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == code, res.stderr
