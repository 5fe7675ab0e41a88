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

A second scratch branch follows the recipe with a **gate** (`review`): a stage that lets a
pair go on to validate only when its selection's over-provision is below a limit, else ends
the pair by stating its Stop (`ctx.stop(...)`, then `return False`). The limit splits the
short runbook's pairs (both kinds are asserted), so the gate really ends some pairs and lets
others through:

- its campaign audits VALID with the scratch tree's own audit: a pair the gate ended has no
  validate run and empty validate columns, and no audit line restates that a selected pair
  must be validated (the audit compares against the replayed pipeline and its Stops);
- the gate's decision edited in the results (a stopped pair given a validated selection; a
  passed pair made to look stopped, its validate cells, rows and events removed) is INVALID,
  naming the rule.
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


def scratch_campaign(base: Path, branch: str, edits: tuple, message: str
                     ) -> tuple[Path, Path]:
    """A copy of this tree on a scratch branch with the recipe's `edits` ((edit, before)
    pairs) committed, and the short runbook's campaign run by that tree."""
    tree = base / "epcap"
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
    git(tree, "checkout", "-qb", branch)
    for edit, before in edits:
        insert(tree, edit, before=before)
    git(tree, "commit", "-qam", message)
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


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> tuple[Path, Path]:
    """A copy of this tree on a scratch branch with the stage added, and its campaign."""
    return scratch_campaign(tmp_path_factory.mktemp("scratch"), "scratch-margin-stage",
                            ((VOCAB, False), (TABLE, False), (STEP, True), (REGISTER, False)),
                            "a stage that only decides: one rung of margin")


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


# ---------------------------------------------------------------- a gate that ends pairs

# The short runbook's selections are over-provisioned 1.10 (QWEN3_30B) and 1.14
# (DEEPSEEK_V2_LITE): the gate's limit lies between, so it ends some pairs and not others.
REVIEW_LIMIT = 1.12
GATE_VOCAB = ("harness/vocab.py", '    SELECT = "select"\n', '    REVIEW = "review"\n')
GATE_TABLE = ("harness/pipeline/stages.py", "    StageSpec(Stage.SELECT, None, SELECT, PAIR),\n",
              "    StageSpec(Stage.REVIEW, None, SELECT, PAIR),\n")
GATE_STEP = ("harness/pipeline/decisions.py", "def validate_step(", f'''def review_step(ctx: Context, model: str, backend: str, state: dict) -> bool:
    """A gate: a selection over-provisioned by {REVIEW_LIMIT} or more ends its pair (no
    validate); the others go on."""
    row: SelectionRow = state["row"]
    if row.over_provision >= {REVIEW_LIMIT}:
        ctx.stop(model, backend, Stage.REVIEW,
                 f"over-provision {{row.over_provision:.4f}} >= {REVIEW_LIMIT}")
        return False
    return True


''')
GATE_REGISTER = ("harness/pipeline/decisions.py", "Stage.SELECT: select_step,",
                 " Stage.REVIEW: review_step,")
VALIDATE_FILLED = ("validate_seed", "validate_steps", "validate_peak", "headroom",
                   "drop_risk_95", "held_out")


@pytest.fixture(scope="module")
def gated(tmp_path_factory) -> tuple[Path, Path]:
    """A copy of this tree on a scratch branch with the review gate added, and its campaign."""
    return scratch_campaign(tmp_path_factory.mktemp("gate"), "scratch-review-gate",
                            ((GATE_VOCAB, False), (GATE_TABLE, False), (GATE_STEP, True),
                             (GATE_REGISTER, False)),
                            "a stage that only decides: a review gate that ends pairs")


def gate_split(root: Path) -> tuple[list[dict], list[dict]]:
    """(the pairs the gate ended, the pairs it let through), from capacity_selection.tsv."""
    rows = [r for r in corpus.read_rows(root / "capacity_selection.tsv")
            if r["selected_capacity"]]
    ended = [r for r in rows if float(r["over_provision"]) >= REVIEW_LIMIT]
    return ended, [r for r in rows if r not in ended]


def test_the_gate_ends_some_pairs_and_its_campaign_audits_valid(gated):
    tree, root = gated
    ended, through = gate_split(root)
    assert ended and through, "the gate's limit must split the pairs"
    validates = {(r["model"], r["backend"]) for r in
                 corpus.read_rows(root / "capacity_attempts.tsv") if r["purpose"] == "validate"}
    for row in ended:              # ended by the gate: no validate run, validate columns empty
        assert (row["model"], row["backend"]) not in validates, row
        assert (row["validated"], row["validate_attempts"]) == ("false", "0"), row
        assert not any(row[c] for c in VALIDATE_FILLED), row
    for row in through:
        assert (row["model"], row["backend"]) in validates and row["validated"] == "true", row
    upload = audit_json(tree, root)
    assert (upload["verdict"], upload["why"]) == ("VALID", []), upload["why"]


def test_a_pair_the_gate_ended_given_a_validated_selection_is_invalid(gated, tmp_path):
    """The gate's decision overturned in the table: a stopped pair's row says it validated,
    its validate columns filled as a passed pair's are."""
    tree, root = gated
    ended, through = gate_split(root)
    lie = corpus.link_copy(root, tmp_path / "lie")
    victim, donor = ended[0], through[0]

    def validated(row):
        if (row["model"], row["backend"]) != (victim["model"], victim["backend"]):
            return row
        return {**row, "validated": "true", "validate_attempts": "1",
                **{c: donor[c] for c in VALIDATE_FILLED}}
    corpus.edit(lie, "capacity_selection.tsv", validated)
    upload = audit_json(tree, lie)
    assert upload["verdict"] == "INVALID", upload["why"]
    assert "held-out-not-rederived" in upload["reasons"], upload["why"]
    assert any("validated 'true'" in w and "review step ended" in w and "over-provision" in w
               for w in upload["why"]), upload["why"]      # the gate's own Stop, named


def test_a_pair_the_gate_let_through_made_to_look_stopped_is_invalid(gated, tmp_path):
    """The gate's decision overturned the other way, consistently: a passed pair's validate
    cells, attempts rows and events removed and its row written as the gate's stopped rows
    are. Only the replayed gate (which lets the pair through, so asks for its validate) can
    see it."""
    tree, root = gated
    _, through = gate_split(root)
    lie = corpus.copy(root, tmp_path / "lie")
    victim = (through[0]["model"], through[0]["backend"])
    gone = {r["cell_dir"].rsplit("/", 1)[-1]
            for r in corpus.read_rows(lie / "capacity_attempts.tsv")
            if (r["model"], r["backend"], r["purpose"]) == (*victim, "validate")}
    assert gone
    for name in gone:
        shutil.rmtree(lie / "cells" / name)
    corpus.edit(lie, "capacity_attempts.tsv",
                lambda r: None if r["cell_dir"].rsplit("/", 1)[-1] in gone else r)
    events = [line for line in (lie / "events.jsonl").read_text().splitlines()
              if not any(name in line for name in gone)]
    (lie / "events.jsonl").write_text("\n".join(events) + "\n")

    def stopped(row):
        if (row["model"], row["backend"]) != victim:
            return row
        return {**row, "validated": "false", "validate_attempts": "0",
                **{c: "" for c in (*VALIDATE_FILLED, "predicted_drop_risk",
                                   "predicted_drop_risk_hi")}}
    corpus.edit(lie, "capacity_selection.tsv", stopped)
    upload = audit_json(tree, lie)
    assert upload["verdict"] == "INVALID", upload["why"]
    assert "held-out-not-rederived" in upload["reasons"], upload["why"]
    assert any("the pipeline asks for a validate run" in w for w in upload["why"]), \
        upload["why"]


def test_a_validate_run_for_a_pair_the_gate_ended_is_invalid(gated, tmp_path):
    """A validate cell added for a pair the gate ended (a passed pair's cell copied under the
    stopped pair's name): the replayed gate asks for no such run, and says why."""
    tree, root = gated
    ended, through = gate_split(root)
    lie = corpus.copy(root, tmp_path / "lie")
    (source,) = [r["cell_dir"] for r in corpus.read_rows(lie / "capacity_attempts.tsv")
                 if (r["model"], r["backend"], r["purpose"])
                 == (through[0]["model"], through[0]["backend"], "validate")]
    victim = ended[0]
    name = (f"{victim['model']}__{victim['backend']}__validate__"
            f"cap{victim['selected_capacity'].replace('.', 'p')}__a1")
    shutil.copytree(lie / source, lie / "cells" / name)
    upload = audit_json(tree, lie)
    assert upload["verdict"] == "INVALID", upload["why"]
    assert "held-out-not-rederived" in upload["reasons"], upload["why"]
    assert any(name in w and "never asks for" in w and "review step ended" in w
               for w in upload["why"]), upload["why"]
