"""`epcap classify` over the corpus in tests/fixtures/classify/ (issue 15).

Every case is a cell directory whose logs were built from upstream message formats
(generate.py; cases.json names the sources); the expectation (class, deciding line, survived
lines, first failed rank, stated demand) was marked where each line was written. One run of
the real command line classifies all of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import BadInput
from harness.taxonomy.cli import classify_cell, cli_classify
from harness.taxonomy.signatures import load_table

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "classify"
CASES = json.loads((CORPUS / "cases.json").read_text(encoding="utf-8"))
CLI = [sys.executable, "-m", "harness.cli", "classify"]
# Issue 33 changed what decides these cases, not their class: the table now holds CPython's
# faulthandler report (Modules/faulthandler.c), so the crash is decided by that line instead
# of by "no signature" (generate.py wrote no deciding line for them), and its rank (0) is
# the first failed rank (it was None: no line decided).
DECIDES_SINCE_ISSUE33 = {"crash_segfault": ("rank0.log", 4),
                         "crash_after_survived_oom": ("rank0.log", 26)}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=120)


@pytest.fixture(scope="module")
def cli_doc() -> dict:
    proc = run_cli(*(str(CORPUS / c["name"]) for c in CASES), "--json")
    assert proc.returncode == 0, proc.stderr
    return {Path(c["path"]).name: c for c in json.loads(proc.stdout)["cells"]}


def test_corpus_is_big_and_covers_every_class_and_shape():
    statuses = {c["status"] for c in CASES}
    assert len(CASES) >= 30
    assert statuses >= {"ok", "drops", "lower_bound", "does_not_fit", "assert", "badflag",
                        "crash", "timeout", "infra"}
    assert sum(1 for c in CASES if c["warnings"]) >= 3          # recoveries
    texts = "".join((CORPUS / c["name"] / f).read_bytes().decode("utf-8", "replace")
                    for c in CASES for f in os.listdir(CORPUS / c["name"]) if f != "cell.json")
    for shape in ("[rank3]:", "[default5]:", "\n1: ", "\r\n", "\x1b["):
        assert shape in texts, shape


def test_every_source_names_repository_file_commit():
    known = {s["id"] for s in load_table().sources} | {"epcap-dispatch-row", "megatron-iteration"}
    for case in CASES:
        for src in case["sources"]:
            assert src["id"] in known and src["repo"] and src["file"], (case["name"], src)
            if src["repo"] != "epcap":
                want = 64 if src["repo"].startswith("pypi:") else 40
                assert len(src["commit"]) == want, (case["name"], src)
    for src in load_table().sources:
        # a git commit, or for a binary package (pypi:name==version) the wheel's sha256;
        # the harness's own lines (repo epcap, e.g. its Slurm setup check) name their file
        assert src["repo"] and src["file"], src
        if src["repo"] != "epcap":
            want = 64 if src["repo"].startswith("pypi:") else 40
            assert len(src["commit"]) == want, src


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_cli_classifies_case_as_documented(case, cli_doc):
    got = cli_doc[case["name"]]
    assert got["status"] == case["status"], got["reason"]
    decides = case["decides"]
    if case["name"] in DECIDES_SINCE_ISSUE33:
        name, line_no = DECIDES_SINCE_ISSUE33[case["name"]]
        decides = {"file": name, "line_no": line_no}
    if decides:
        want = (str(CORPUS / case["name"] / decides["file"]), decides["line_no"])
        assert got["line"] and (got["line"]["path"], got["line"]["line_no"]) == want, got
        assert "\r" not in got["line"]["text"] and "\x1b" not in got["line"]["text"]
    else:
        assert got["line"] is None, got
    assert [(Path(w["path"]).name, w["line_no"]) for w in got["warnings"]] == [
        (w["file"], w["line_no"]) for w in case["warnings"]]
    want_rank = "0" if case["name"] in DECIDES_SINCE_ISSUE33 else case["first_failed_rank"]
    assert got["first_failed_rank"] == want_rank
    assert got["stated_demand"] == case["stated_demand"]
    if case.get("attributed"):
        assert got["deciding"]["attributed_by"] == case["attributed"], got["deciding"]
    if case.get("decided_by"):          # the table's row by source, not a backend's regex
        assert got["deciding"]["source"]["id"] == case["decided_by"], got["deciding"]


def test_issue24_cases_cover_every_flaw():
    """At least 30 multi-rank cases for issue 24, each flaw shown, ECHO/UltraEP/MoonEP."""
    new = [c for c in CASES if c.get("issue")]
    assert len(new) >= 30
    assert {c["issue"] for c in new} == {"survival", "spliced", "fallout", "wrapper", "ranks",
                                         "family"}
    backends = {json.loads((CORPUS / c["name"] / "cell.json").read_text())["cell"]["backend"]
                for c in new}
    assert backends >= {"echo", "ultraep", "moonep"}


def test_false_does_not_fit_is_infra():
    """Handled OOM, 27 more iterations, then an InfiniBand failure. The first-signature
    classifier of main (f92c902) said does_not_fit here: a false data point."""
    got = classify_cell(CORPUS / "oom_survived_then_ib_failure")
    assert got["status"] == "infra" and got["first_failed_rank"] == "0"
    assert "NET/IB" in got["line"]["text"]
    assert [w["class"] for w in got["warnings"]] == ["does_not_fit"]


def test_options_override_cell_json_and_bad_input(tmp_path, capsys):
    case = CORPUS / "c10_check_one_rank_others_hang"
    assert classify_cell(case, state="failed", exit_code=1)["status"] == "assert"
    # failed after telemetry rows with no signature and no structural evidence: issue 33's
    # honest `unclassified` (it was `crash`, a guess)
    got = classify_cell(CORPUS / "ok_two_ranks", state="failed", exit_code=1)
    assert got["status"] == "unclassified", got["reason"]
    bare = tmp_path / "cell"
    bare.mkdir()
    (bare / "rank0.log").write_text("[rank0]: torch.OutOfMemoryError: CUDA out of memory.\n")
    with pytest.raises(BadInput, match="launcher state"):
        classify_cell(bare)
    assert classify_cell(bare, state="failed", exit_code=1)["status"] == "does_not_fit"
    (bare / "cell.json").write_text("{not json")
    with pytest.raises(BadInput, match=r"cell\.json:1: not JSON"):
        classify_cell(bare)
    with pytest.raises(BadInput, match="not a cell directory"):
        classify_cell(tmp_path / "missing")
    assert cli_classify((str(case),)) == 0
    text = capsys.readouterr().out
    assert "assert" in text and "first failed rank: 3" in text and "rank3.log:" in text


def test_cli_bad_input_exits_2():
    proc = run_cli(str(CORPUS / "does-not-exist"))
    assert proc.returncode == 2 and "not a cell directory" in proc.stderr


def test_campaign_analysis_records_the_richer_outcome(tmp_path):
    """The campaign's run analysis goes through the same judge: an overflow trap is drops
    (validate) or lower_bound (measure) with the stated demand, deciding line, first failed
    rank and warnings in the failure dict that cell.json and events.jsonl record."""
    import shutil

    from harness.api.backend import RunRequest
    from harness.api.launcher import JobResult
    from harness.api.registry import load_backend
    from harness.grid import capacity as cap
    from harness.grid import selection
    from harness.pipeline.analysis import analyse
    from harness.pipeline.decisions import Outcome, lower_bound_peak
    from harness.results.layout import Cell
    from harness.runbook.load import load_runbook

    rb = load_runbook(ROOT / "tests" / "fixtures" / "runbooks" / "reduced.yaml")
    model = rb.models[0].name
    for purpose, want in (("validate", "drops"), ("measure", "lower_bound")):
        cell = Cell(rb.campaign, model, rb.backends[0].name, purpose, "2.00", 1)
        cdir = tmp_path / purpose
        shutil.copytree(CORPUS / "nccl_ep_overflow_trap", cdir)
        req = RunRequest.for_cell(rb, cell, cdir)
        backend = load_backend(rb.backend(cell.backend))
        out = analyse(req, backend, JobResult("failed", 1, sorted(cdir.glob("rank*.log"))),
                      cdir, "2026-12-01T07:00:00Z")
        assert out.status == want
        assert out.failure["stated_demand"] == 70211 and out.failure["first_failed_rank"] == "5"
        assert "actual recv tokens 70211" in out.failure["line"]
        assert out.row.failure_line == out.failure["line"]
    # the re-measure after an overflow report covers the stated demand, not only the rows
    assert lower_bound_peak(out) == max(out.summary.peak_actual_valid_recv, 70211)
    demand_only = Outcome(cell, "lower_bound", None, None, out.row, {"stated_demand": 70211})
    assert lower_bound_peak(demand_only) == 70211
    n = rb.shape.uniform_tokens(rb.models[0].topk)
    again = selection.remeasure_capacity("2.00", n, rb.capacity.pad_multiple,
                                         lower_bound_peak(demand_only))
    assert cap.budget_tokens(again, n) >= 70211
    assert lower_bound_peak(Outcome(cell, "lower_bound", None, None, out.row, {})) == 0


@pytest.mark.parametrize("name", ["time_limit_teardown_echo", "slurm_node_file_assert_global_rank"])
def test_campaign_and_classify_read_the_same_files(tmp_path, name):
    """Issue 24: the campaign's analysis (given only the launcher's rank<T>.log paths) and
    `epcap classify` read the same files (slurm-*.out too) with the same rank map, so they
    agree on the class, the deciding line and the first failed rank."""
    import shutil

    from harness.api.backend import RunRequest
    from harness.api.launcher import JobResult
    from harness.api.registry import load_backend
    from harness.pipeline.analysis import analyse
    from harness.results.layout import Cell
    from harness.runbook.load import load_runbook

    rb = load_runbook(ROOT / "tests" / "fixtures" / "runbooks" / "reduced.yaml")
    cell = Cell(rb.campaign, rb.models[0].name, rb.backends[0].name, "validate", "2.00", 1)
    cdir = tmp_path / name
    shutil.copytree(CORPUS / name, cdir)
    doc = json.loads((cdir / "cell.json").read_text())
    req = RunRequest.for_cell(rb, cell, cdir)
    backend = load_backend(rb.backend(cell.backend))
    launcher = JobResult(doc["launcher"]["state"], doc["launcher"]["exit_code"],
                         sorted(cdir.glob("rank*.log")))
    out = analyse(req, backend, launcher, cdir, "2026-12-01T07:00:00Z")
    cli = classify_cell(cdir, backend=rb.backends[0].name)
    case = next(c for c in CASES if c["name"] == name)
    assert out.status == cli["status"] == case["status"]
    assert out.failure["path"] == cli["line"]["path"]
    assert Path(out.failure["path"]).name == case["decides"]["file"]
    assert out.failure["first_failed_rank"] == cli["first_failed_rank"] == case["first_failed_rank"]


def test_cli_prints_the_deciding_rank_its_rule_and_source(capsys):
    """Issue 24: for the deciding line, its rank, how the rank was attributed, and its
    source (repository, file, commit, and the family member)."""
    assert cli_classify((str(CORPUS / "slurm_node_file_assert_global_rank"),
                         str(CORPUS / "watchdog_carries_cuda_fault_echo"))) == 0
    text = capsys.readouterr().out
    assert "deciding rank: 6 (launcher map: rank1.log is node 1 x 4 ranks per node" in text
    assert ("source: pytorch-c10-exception (pytorch/pytorch c10/util/Exception.h @ "
            "0109fc4eac46a2f56a2197a9f757ed42d5a817aa)") in text
    assert "deciding rank: 3 (torchrun [rankN]: prefix (global rank))" in text
    assert "source: cuda-runtime-errors cudaErrorIllegalAddress (pypi:nvidia-cuda-runtime" in text


def test_cli_prints_the_member_own_source_when_it_has_one(capsys):
    """A family member read from another file or commit than its family's (PyTorch's host
    allocator; a Slurm srun message) is printed with its own file and commit."""
    assert cli_classify((str(CORPUS / "cpu_allocator_oom_ultraep"),
                         str(CORPUS / "srun_task_out_of_memory_two_nodes"))) == 0
    text = capsys.readouterr().out
    assert ("source: pytorch-out-of-memory cpu-allocator-posix-memalign (pytorch/pytorch "
            "c10/core/impl/alloc_cpu.cpp @ 0803da8282cbd1bfea99f8bdd19f1dcf49a7ca0f)") in text
    assert ("source: slurm-step-messages launch.c:377 (SchedMD/slurm src/srun/launch.c @ "
            "284c3b95f08a2dc2478499837b03355e1b9c5c75)") in text
