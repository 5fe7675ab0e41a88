"""The recipe "add a stage that only decides" (harness/pipeline/README.md), followed on a
scratch branch of a copy of this repository: three files in harness/ change, nothing in
harness/audit/. The new stage (`margin`) raises every selection one grid rung before it is
validated, so its campaign's tables differ from what the unchanged pipeline would make.

- the scratch tree's campaign audits VALID with the scratch tree's own audit: the audit
  replays the pipeline, so a new decision needs no second home;
- the same campaign audited by this tree's audit (which lacks the stage) is INVALID: the
  comparison is real, and this test would fail if the audit restated decisions of its own;
- the stage's decision edited in a copy of the results (the selection put back one rung)
  is INVALID under the scratch tree's audit.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_stage", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

REPO = corpus.REPO
pytestmark = pytest.mark.slow

# The recipe's three edits: (file, the text it follows, the text added after it).
VOCAB = ("harness/vocab.py", '    SELECT = "select"\n', '    MARGIN = "margin"\n')
TABLE = ("harness/pipeline/stages.py", "    StageSpec(Stage.SELECT, None, SELECT, PAIR),\n",
         "    StageSpec(Stage.MARGIN, None, SELECT, PAIR),\n")
STEP = ("harness/pipeline/decisions.py", "def validate_step(", '''def margin_step(ctx: Context, model: str, backend: str, state: dict) -> bool:
    """One grid rung of margin above the selection, before it is validated."""
    row: SelectionRow = state["row"]
    rb = ctx.runbook
    capacity = cap.step_up(row.selected_capacity, ctx.n_of(model), rb.capacity.pad_multiple,
                           rb.capacity.decimals)
    budget = cap.budget_tokens(capacity, ctx.n_of(model))
    row = dataclasses.replace(row, selected_capacity=capacity, selected_budget_tokens=budget,
                              over_provision=cap.over_provision(budget,
                                                                row.peak_actual_valid_recv))
    ctx.set_selection(model, backend, row)
    state["row"] = row
    return True


''')
REGISTER = ("harness/pipeline/decisions.py", "Stage.SELECT: select_step,",
            " Stage.MARGIN: margin_step,")


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout


def insert(tree: Path, edit: tuple[str, str, str], before: bool = False) -> None:
    path, anchor, added = edit
    text = (tree / path).read_text()
    assert text.count(anchor) == 1, f"{path}: the recipe's anchor {anchor!r} moved"
    new = added + anchor if before else anchor + added
    (tree / path).write_text(text.replace(anchor, new))


def epcap(tree: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def audit_json(tree: Path, root: Path) -> dict:
    run = epcap(tree, "audit", str(root), "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    (upload,) = json.loads(run.stdout)["uploads"]
    return upload


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> tuple[Path, Path]:
    """A copy of this tree on a scratch branch with the stage added, and its campaign."""
    tree = tmp_path_factory.mktemp("scratch") / "epcap"
    files = git(REPO, "ls-files", "-z", "harness", "backends", "runbooks", "provenance",
                "pyproject.toml", "setup.py").split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, tree / name)
    for built in (REPO / "harness" / "telemetry").glob("_scan*.so"):
        shutil.copy2(built, tree / "harness" / "telemetry" / built.name)
    git(tree, "init", "-q", "-b", "main")
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", "base")
    git(tree, "checkout", "-qb", "scratch-margin-stage")
    insert(tree, VOCAB)
    insert(tree, TABLE)
    insert(tree, STEP, before=True)
    insert(tree, REGISTER)
    git(tree, "commit", "-qam", "a stage that only decides: one rung of margin")
    changed = git(tree, "diff", "--name-only", "main").split()
    assert sorted(changed) == ["harness/pipeline/decisions.py", "harness/pipeline/stages.py",
                               "harness/vocab.py"]
    runbook = tree / "short.yaml"
    runbook.write_text(corpus.short_runbook_text().replace(str(REPO), str(tree)))
    results = tree.parent / "results"
    run = epcap(tree, "run", str(runbook), "--results", str(results))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (root,) = [p.parent for p in results.rglob("capacity_selection.tsv")]
    return tree, root


def test_the_stage_decided_and_its_campaign_audits_valid(scratch):
    tree, root = scratch
    rows = corpus.read_rows(root / "capacity_selection.tsv")
    stepped = [r for r in rows if r["selected_capacity"]]
    assert stepped, "no pair was selected"
    for row in stepped:            # one rung above the peak's own rung: the margin stage ran
        peak = int(row["peak_actual_valid_recv"])
        assert int(row["selected_budget_tokens"]) > -(-peak // 128) * 128, row
    upload = audit_json(tree, root)
    assert (upload["verdict"], upload["why"]) == ("VALID", []), upload["why"]


def test_an_audit_without_the_stage_calls_the_campaign_invalid(scratch):
    """This tree's audit replays a pipeline that has no margin stage: it asks for each
    validate at the peak's own rung, and the cells ran one rung above (the check that a
    stage-blind audit can fail)."""
    _, root = scratch
    upload = audit_json(REPO, root)
    assert upload["verdict"] == "INVALID", upload["why"]
    assert "held-out-not-rederived" in upload["reasons"]
    assert any("but the pipeline asks" in w for w in upload["why"]), upload["why"]


def test_the_stages_decision_edited_is_invalid(scratch, tmp_path):
    """The selection put back to the peak's own rung (the margin removed), budget and
    over-provision re-stated to match: the scratch pipeline, replayed, disagrees."""
    tree, root = scratch
    lie = corpus.link_copy(root, tmp_path / "lie")

    def unmargin(row):
        if not row.get("selected_capacity"):
            return row
        n, peak = int(row["uniform_tokens"]), int(row["peak_actual_valid_recv"])
        budget = -(-peak // 128) * 128
        capacity = f"{budget / n:.6g}"
        return {**row, "selected_capacity": capacity, "selected_budget_tokens": str(budget),
                "over_provision": repr(round(budget / peak, 6))}
    corpus.edit(lie, "capacity_selection.tsv", unmargin)
    upload = audit_json(tree, lie)
    assert upload["verdict"] == "INVALID", upload["why"]
    assert "selection-not-rederived" in upload["reasons"]
