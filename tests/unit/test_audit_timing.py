"""Issue 23, the timing layer: `timing.tsv`, `comparison.tsv` and `timing_launches.tsv` are
re-derived with the harness's own code from the time cells of a real campaign (the reduced
runbook, and a one-backend campaign with the A/A control arm, both run by `epcap run`). Each
planted lie is not VALID with its code, and is VALID again with that rule disabled (the check
is the one that catches it); random single changes to those tables (hypothesis) are never
VALID."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.audit import audit_target, engine
from harness.results.layout import (
    ATTEMPTS_TSV,
    COMPARISON_TSV,
    SELECTION_TSV,
    TIMING_LAUNCHES_TSV,
    TIMING_TRIALS_TSV,
    TIMING_TSV,
)

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_timing", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

pytestmark = pytest.mark.slow

CONTROL_RUNBOOK = corpus.REPO / "tests" / "fixtures" / "runbooks" / "control.yaml"
NOT_REDERIVED, INCOMPLETE = "timing-not-rederived", "timing-incomplete"
QWEN, DEEP = "QWEN3_30B", "DEEPSEEK_V2_LITE"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


def run_killed_then_resumed(runbook: Path, results: Path, at: str) -> None:
    """`epcap run`, its driver killed (SIGKILL) once a cell whose name holds `at` has
    started, then `epcap run` again: a resumed campaign (the cell abandoned, re-run as a new
    attempt)."""
    cmd = [sys.executable, "-m", "harness.cli", "run", str(runbook), "--results", str(results)]
    first = subprocess.Popen(cmd, cwd=corpus.REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and first.poll() is None:
            events = list(results.rglob("events.jsonl"))
            text = events[0].read_text(encoding="utf-8") if events else ""
            if any('"cell_start"' in x and at in x for x in text.splitlines()):
                break
            time.sleep(0.1)
    finally:
        first.kill()
        first.wait()
    run = subprocess.run(cmd, cwd=corpus.REPO, capture_output=True, text=True, timeout=600,
                         check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


@pytest.fixture(scope="module")
def control(tmp_path_factory) -> Path:
    """control.yaml run once per session: echo and echo~control, 2 launches each, on the
    decimals-2 grid, moonep out of memory at measure; the driver killed while echo's
    validate ran, then resumed."""
    results = tmp_path_factory.getbasetemp() / "control-campaign"
    if not (results / ".complete").exists():
        if results.exists():
            shutil.rmtree(results)
        run_killed_then_resumed(CONTROL_RUNBOOK, results, "__echo__validate__")
        (results / ".complete").touch()
    (root,) = [p.parent for p in results.rglob(ATTEMPTS_TSV)]
    return root


@pytest.fixture
def lie(campaign, tmp_path) -> Path:
    return corpus.link_copy(campaign, tmp_path / "lie")


@pytest.fixture
def control_lie(control, tmp_path) -> Path:
    return corpus.link_copy(control, tmp_path / "lie")


def audit(root: Path):
    (u,) = audit_target(root).uploads
    return u


def without(monkeypatch, code: str) -> None:
    """The audit with one rule disabled: how a check is seen failing on its lie."""
    monkeypatch.setattr(engine, "RULES", tuple(r for r in engine.RULES if r.code != code))


def caught_only_by(root: Path, code: str, monkeypatch) -> None:
    """The lie is not VALID with `code` among the reasons, and VALID without that rule."""
    u = audit(root)
    assert u.verdict in ("INVALID", "UNKNOWN") and code in u.reasons, (u.verdict, u.why)
    with monkeypatch.context() as m:
        without(m, code)
        again = audit(root)
        assert (again.verdict, again.why) == ("VALID", []), again.why


def drop_rows(root: Path, table: str, **match) -> None:
    corpus.edit(root, table, lambda r: None if all(r.get(k) == v for k, v in match.items())
                else r)


def remove_arm(root: Path, model: str, arm: str) -> None:
    """Every trace of one timed arm of one model: its rows in every table, its cells and the
    events naming them (a careful forger edits events.jsonl too: it is not hashed)."""
    for table in (TIMING_TSV, COMPARISON_TSV, TIMING_LAUNCHES_TSV, TIMING_TRIALS_TSV):
        drop_rows(root, table, model=model, backend=arm)
    drop_rows(root, ATTEMPTS_TSV, model=model, backend=arm, purpose="time")
    names = []
    for cell in root.glob(f"cells/{model}__{arm}__time__*"):
        names.append(cell.name)
        shutil.rmtree(cell)
    events = root / "events.jsonl"
    kept = [line for line in events.read_text().splitlines(keepends=True)
            if not any(f'"{name}"' in line for name in names)]
    corpus.replace_file(events, "".join(kept).encode())


# ------------------------------------------------------------ the untouched campaigns

def test_the_campaigns_timing_layer_is_rederived_and_valid(campaign, control):
    for root in (campaign, control):
        u = audit(root)
        assert (u.verdict, u.why) == ("VALID", [])
        states = {c.code: c.state for c in u.checks}
        assert states[NOT_REDERIVED] == states[INCOMPLETE] == "pass"


def test_variety_resumed_out_of_memory_at_measure_decimals_2_grid_stays_valid(control):
    """The control campaign also holds legitimate variety: a resumed campaign (its first
    validate abandoned when the driver was killed, re-run as attempt 2: an extra cell and
    attempt number), a select backend (moonep) out of memory at measure (its empty
    selection row re-derived as select_step writes it) and the legacy decimals-2 grid (echo
    selected 1.25, not the exact grid's 1.125)."""
    abandoned = json.loads((control / "cells" / "QWEN3_30B__echo__validate__cap1p25__a1" /
                            "cell.json").read_text())
    assert abandoned["status"] == "abandoned"
    rows = corpus.read_rows(control / ATTEMPTS_TSV)
    assert [r["attempt"] for r in rows if r["purpose"] == "validate"] == ["2"]
    assert [r["status"] for r in rows if r["backend"] == "moonep"] == ["does_not_fit"]
    sel = {r["backend"]: r for r in corpus.read_rows(control / SELECTION_TSV)}
    assert sel["echo"]["selected_capacity"] == "1.25" and sel["moonep"]["selected_capacity"] == ""
    u = audit(control)
    assert (u.verdict, u.why) == ("VALID", [])
    assert {c.code: c.state for c in u.checks}["held-out-not-rederived"] == "pass"


@pytest.mark.parametrize("column,value,code", [
    ("validated", "true", "held-out-not-rederived"),
    ("measured_at_capacity", "1.25", "selection-not-rederived")])
def test_empty_selection_row_of_an_out_of_memory_pair_filled_in(control_lie, monkeypatch,
                                                                column, value, code):
    corpus.set_row(control_lie, SELECTION_TSV, {"backend": "moonep"}, **{column: value})
    u = audit(control_lie)
    assert u.verdict == "INVALID" and code in u.reasons, u.why


def test_a_selection_emptied_as_if_its_measure_had_failed(control_lie):
    """echo's measure ended ok: blanking its selection row is no empty row the harness
    writes."""
    keep = ("campaign", "model", "backend", "measured_at_capacity", "uniform_tokens",
            "timing_capacity")
    row = next(r for r in corpus.read_rows(control_lie / SELECTION_TSV) if r["backend"] == "echo")
    corpus.set_row(control_lie, SELECTION_TSV, {"backend": "echo"},
            **{**{c: "" for c in row if c not in keep}, "validated": "false",
               "validate_attempts": "0"})
    u = audit(control_lie)
    assert u.verdict == "INVALID" and "selection-not-rederived" in u.reasons, u.why


# ------------------------------------------------------------ timing.tsv

@pytest.mark.parametrize("column,value", [
    ("dispatch_ms_median", "3.0"), ("combine_ms_p90", "0.5"), ("launches", "3"),
    ("backend_impl", "deepep"), ("status", "drops"), ("peak_mem_bytes", "1")])
def test_timing_tsv_value_not_rederived(lie, monkeypatch, column, value):
    corpus.set_row(lie, TIMING_TSV, {"model": QWEN, "backend": "echo"}, **{column: value})
    caught_only_by(lie, NOT_REDERIVED, monkeypatch)


def test_timing_tsv_figures_of_a_does_not_fit_arm_invented(lie, monkeypatch):
    """QWEN3_30B moonep ran out of memory at its first launch: no figures, 0 launches."""
    corpus.set_row(lie, TIMING_TSV, {"model": QWEN, "backend": "moonep"}, status="ok",
            dispatch_ms_median="3.1", launches="2")
    caught_only_by(lie, NOT_REDERIVED, monkeypatch)


# ------------------------------------------------------------ comparison.tsv

@pytest.mark.parametrize("column,value", [
    ("verdict", "faster"), ("ratio_median", "0.5"), ("ci_low", "1.01"), ("launches", "5"),
    ("reason", "95% CI [0.5, 0.9] below 1"), ("baseline", "ultraep")])
def test_comparison_value_not_rederived(lie, monkeypatch, column, value):
    corpus.set_row(lie, COMPARISON_TSV, {"model": QWEN, "backend": "ultraep", "phase": "dispatch"},
            **{column: value})
    caught_only_by(lie, NOT_REDERIVED, monkeypatch)


def test_comparison_row_for_an_out_of_memory_arm_given_a_verdict(lie, monkeypatch):
    corpus.set_row(lie, COMPARISON_TSV, {"model": QWEN, "backend": "moonep", "phase": "combine"},
            launches="2", ratio_median="0.9", verdict="indistinguishable")
    caught_only_by(lie, NOT_REDERIVED, monkeypatch)


def test_comparison_deleted_or_a_row_removed(lie, monkeypatch):
    drop_rows(lie, COMPARISON_TSV, model=DEEP, backend="moonep", phase="dispatch")
    caught_only_by(lie, INCOMPLETE, monkeypatch)
    (lie / COMPARISON_TSV).unlink()
    caught_only_by(lie, INCOMPLETE, monkeypatch)


def test_comparison_row_the_harness_does_not_derive(lie, monkeypatch):
    corpus_row = {"campaign": "reduced", "model": DEEP, "backend": "echo", "baseline": "echo",
                  "phase": "dispatch", "launches": "2", "ratio_median": "1.0",
                  "verdict": "indistinguishable", "reason": "95% CI [0.9, 1.1] includes 1"}
    corpus.append(lie, COMPARISON_TSV, corpus_row)
    caught_only_by(lie, NOT_REDERIVED, monkeypatch)


# ------------------------------------------------------------ timing_launches.tsv

@pytest.mark.parametrize("column,value", [("median_ms", "1.0"), ("launch", "3"),
                                          ("cell_dir", "cells/elsewhere")])
def test_timing_launches_value_not_rederived(lie, monkeypatch, column, value):
    corpus.set_row(lie, TIMING_LAUNCHES_TSV, {"model": QWEN, "backend": "ultraep", "launch": "2",
                                       "phase": "dispatch"}, **{column: value})
    u = audit(lie)
    assert u.verdict == "INVALID" and NOT_REDERIVED in u.reasons, u.why


# ------------------------------------------------------------ timing_trials.tsv

@pytest.mark.parametrize("column,value", [("ms", "0.001"), ("cell_dir", "cells/elsewhere")])
def test_timing_trials_value_not_rederived(lie, monkeypatch, column, value):
    """timing_trials.tsv is one of the tables the replayed pipeline builds: a changed trial
    median or cell is caught by the same rule as timing.tsv's figures."""
    corpus.set_row(lie, TIMING_TRIALS_TSV, {"model": QWEN, "backend": "ultraep", "launch": "2",
                                            "phase": "dispatch", "trial": "1"},
                   **{column: value})
    caught_only_by(lie, NOT_REDERIVED, monkeypatch)


def test_timing_trials_row_renumbered(lie):
    corpus.set_row(lie, TIMING_TRIALS_TSV, {"model": QWEN, "backend": "ultraep", "launch": "2",
                                            "phase": "dispatch", "trial": "1"}, trial="9")
    u = audit(lie)
    assert u.verdict == "INVALID" and NOT_REDERIVED in u.reasons, u.why


def test_timing_trials_row_missing(lie, monkeypatch):
    drop_rows(lie, TIMING_TRIALS_TSV, model=QWEN, backend="ultraep", launch="1", trial="2")
    caught_only_by(lie, INCOMPLETE, monkeypatch)


# ------------------------------------------------------------ arms and launches

def test_a_timed_backend_removed_for_one_model(lie, monkeypatch):
    """Every trace of DEEPSEEK_V2_LITE's moonep timing removed, consistently."""
    remove_arm(lie, DEEP, "moonep")
    caught_only_by(lie, INCOMPLETE, monkeypatch)


def test_a_launch_removed(lie):
    """The second moonep launch of DEEPSEEK_V2_LITE gone with its rows; the aggregate
    re-stated over the one launch left would still need the launch the runbook asked for."""
    name = f"{DEEP}__moonep__time__cap1p167__a2"
    drop_rows(lie, ATTEMPTS_TSV, cell_dir=f"cells/{name}")
    drop_rows(lie, TIMING_LAUNCHES_TSV, cell_dir=f"cells/{name}")
    shutil.rmtree(lie / "cells" / name)
    u = audit(lie)
    assert u.verdict == "INVALID" and INCOMPLETE in u.reasons
    assert any("launch 2 of 2" in w for w in u.why)


def test_a_launch_missing_from_a_campaign_that_did_not_finish_is_unknown(lie):
    """The same missing launch in a campaign whose last run stopped (campaign_stopped, not
    campaign_done in events.jsonl): runs not made, not a lie: UNKNOWN."""
    name = f"{DEEP}__moonep__time__cap1p167__a2"
    drop_rows(lie, ATTEMPTS_TSV, cell_dir=f"cells/{name}")
    drop_rows(lie, TIMING_LAUNCHES_TSV, cell_dir=f"cells/{name}")
    shutil.rmtree(lie / "cells" / name)
    events = (lie / "events.jsonl").read_text().replace('"ev": "campaign_done"',
                                                        '"ev": "campaign_stopped"')
    corpus.replace_file(lie / "events.jsonl", events.encode())
    u = audit(lie)
    assert INCOMPLETE in u.unknown            # (timing.tsv still aggregates the launch: a lie)
    assert any("without campaign_done" in w for w in u.why)


def test_time_cells_at_another_capacity_than_the_models_timing_capacity(lie, monkeypatch):
    """The selection (and so max(ECHO, UltraEP)) re-stated as 1.25 for QWEN3_30B; its time
    cells ran at 1.125. The pipeline replayed on the cells selects 1.125 and times there:
    the selection is the lie, and the timing rows, which agree with the cells, are not."""
    corpus.set_row(lie, SELECTION_TSV, {"model": QWEN, "backend": "ultraep"},
            selected_capacity="1.25", selected_budget_tokens="1280")
    u = audit(lie)
    assert u.verdict == "INVALID" and "selection-not-rederived" in u.reasons
    assert any("selected_capacity '1.25' but the pipeline replayed on the cells gives "
               "'1.125'" in w for w in u.why), u.why


def test_a_time_cell_that_answers_at_another_capacity(lie, monkeypatch):
    """A launch's cell renamed to run at 1.25 (its cell.json, argv and rows re-stated): the
    pipeline asks for QWEN3_30B's launches at its timing capacity 1.125."""
    name = f"{QWEN}__ultraep__time__cap1p125__a1"
    moved = name.replace("cap1p125", "cap1p25")
    (lie / "cells" / name).rename(lie / "cells" / moved)

    def restated(d):
        d["name"] = moved
        d["cell"]["capacity"] = "1.25"
        d["argv"][d["argv"].index("--capacity") + 1] = "1.25"
    path = lie / "cells" / moved / "cell.json"
    data = json.loads(path.read_text())
    restated(data)
    corpus.replace_file(path, json.dumps(data, indent=1).encode())
    for table in (ATTEMPTS_TSV, TIMING_LAUNCHES_TSV, TIMING_TSV):
        corpus.edit(lie, table, lambda r: {**r, "cell_dir": r["cell_dir"].replace(name, moved)}
                    if r.get("cell_dir") else r)
    corpus.set_row(lie, ATTEMPTS_TSV, {"cell_dir": f"cells/{moved}"}, capacity="1.25",
                   capacity_tag="cap1p25", budget_tokens="1280")
    u = audit(lie)
    assert u.verdict == "INVALID" and NOT_REDERIVED in u.reasons, u.why
    assert any("ran at 1.25, but the pipeline asks" in w and "timing capacity" in w
               for w in u.why), u.why


# ------------------------------------------------------------ the A/A control arm

def test_control_arm_verdict_made_indistinguishable(control_lie, monkeypatch):
    """An A/A control that came out too_noisy re-stated as indistinguishable (which makes
    the report call the whole timing table reliable)."""
    corpus.set_row(control_lie, COMPARISON_TSV, {"backend": "echo~control"},
            verdict="indistinguishable", reason="95% CI [0.9, 1.1] includes 1")
    caught_only_by(control_lie, NOT_REDERIVED, monkeypatch)


def test_control_arm_deleted(control_lie, monkeypatch):
    remove_arm(control_lie, QWEN, "echo~control")
    caught_only_by(control_lie, INCOMPLETE, monkeypatch)


# ------------------------------------------------------------ legitimate variety

def test_crlf_bom_extra_columns_in_every_table_stay_valid(lie):
    """Every TSV (comparison.tsv and timing_launches.tsv included) re-saved with a BOM, CRLF
    line ends and an extra column; an extra file beside them."""
    for table in (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV, COMPARISON_TSV, TIMING_LAUNCHES_TSV):
        lines = (lie / table).read_text().splitlines()
        lines = [lines[0] + "\tnote"] + [x + "\textra" for x in lines[1:]]
        corpus.replace_file(lie / table, ("\ufeff" + "\r\n".join(lines) + "\r\n").encode())
    (lie / "notes.md").write_text("an extra file\n")
    u = audit(lie)
    assert (u.verdict, u.why) == ("VALID", [])


def restate(root: Path, key: str) -> None:
    """A cell's attempts row, cell.json status and summary as the harness derives them."""
    from fractions import Fraction

    from harness.audit.load import load_upload
    from harness.audit.rules.rederive import SUMMARY_KEYS, derive
    from harness.results.tables import cell_text
    upload = load_upload(root.parent, root, 128)
    got = derive(upload, upload.cells[key])
    assert got.problem is None, got.problem
    corpus.set_row(root, ATTEMPTS_TSV, {"cell_dir": key}, **{
        c: cell_text(float(v) if isinstance(v, Fraction) else v)
        for c, v in got.columns.items() if c != "campaign"})
    data = json.loads((root / key / "cell.json").read_text())
    data["status"] = got.columns["status"]
    data["summary"] = None if got.summary is None else {
        **(data.get("summary") or {}), **{k: getattr(got.summary, k) for k in SUMMARY_KEYS}}
    corpus.replace_file(root / key / "cell.json", json.dumps(data, indent=1).encode())


def test_an_infra_failure_retried_stays_valid(lie):
    """QWEN3_30B echo's second launch first died with its node (launcher state node_fail:
    infra, no logs) and was retried as attempt 3, as the driver does (limits.infra_retries
    1): timing_launches numbers that retry launch 3, timing_trials keeps it launch 2 (its
    round); the tables are otherwise unchanged."""
    old, infra, retry = (f"cells/{QWEN}__echo__time__cap1p125__a{i}" for i in (2, 2, 3))
    (lie / old).rename(lie / retry)
    data = json.loads((lie / retry / "cell.json").read_text())
    data.update(name=Path(retry).name)
    data["cell"]["attempt"] = 3
    corpus.replace_file(lie / retry / "cell.json", json.dumps(data, indent=1).encode())
    corpus.set_row(lie, ATTEMPTS_TSV, {"cell_dir": old}, attempt="3", cell_dir=retry)
    corpus.set_row(lie, TIMING_LAUNCHES_TSV, {"cell_dir": old}, launch="3", cell_dir=retry)
    # timing_trials.tsv numbers launches by round: the retry is still round 2's launch
    corpus.set_row(lie, TIMING_TRIALS_TSV, {"cell_dir": old}, cell_dir=retry)
    (lie / infra).mkdir()
    shutil.copy(lie / retry / "provenance.txt", lie / infra / "provenance.txt")
    data.update(name=Path(infra).name, launcher={"state": "node_fail", "exit_code": None,
                                                 "detail": "node lost", "wall_s": 1.0},
                status="infra", summary=None, timing=None)
    data["cell"]["attempt"] = 2
    (lie / infra / "cell.json").write_text(json.dumps(data, indent=1))
    row = next(r for r in corpus.read_rows(lie / ATTEMPTS_TSV) if r["cell_dir"] == retry)
    corpus.append(lie, ATTEMPTS_TSV, {**row, "attempt": "2", "cell_dir": infra, "status": "infra",
                                      "rows": "0", "saturated_rows": "0", "malformed_rows": "0",
                                      "peak_actual_valid_recv": "", "required_capacity": ""})
    restate(lie, infra)
    assert next(r for r in corpus.read_rows(lie / ATTEMPTS_TSV)
                if r["cell_dir"] == infra)["status"] == "infra"
    u = audit(lie)
    assert (u.verdict, u.why) == ("VALID", [])


# ------------------------------------------------------------ generated lies

NUMERIC = {TIMING_TSV: ("dispatch_ms_median", "dispatch_ms_p90", "combine_ms_median",
                        "combine_ms_p90", "step_cv", "noise_floor_pct", "algbw_gbps",
                        "dispatch_ms_p10", "combine_ms_p10", "launches", "trials", "iters"),
           COMPARISON_TSV: ("ratio_median", "ci_low", "ci_high", "cv_backend", "cv_baseline",
                            "launches"),
           TIMING_LAUNCHES_TSV: ("median_ms", "p10_ms", "p90_ms", "trials")}


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=st.sampled_from(sorted(NUMERIC)), data=st.data())
def test_any_single_timing_figure_changed_is_not_valid(campaign, tmp_path_factory, table, data):
    """Hypothesis picks a table, a row with figures and a numeric column, and a new value
    that is a different number at the precision the harness writes."""
    root = corpus.link_copy(campaign, tmp_path_factory.mktemp("gen") / "u")
    rows = corpus.read_rows(root / table)
    filled = [(i, c) for i, r in enumerate(rows) for c in NUMERIC[table] if r.get(c)]
    i, column = data.draw(st.sampled_from(filled))
    old = float(rows[i][column])
    new = data.draw(st.floats(min_value=0, max_value=1e6, allow_nan=False).filter(
        lambda v: round(v, 6) != round(old, 6)))
    text = str(int(new)) if column in ("launches", "trials", "iters") else repr(round(new, 6))
    if text == rows[i][column] or (column in ("launches", "trials", "iters")
                                   and int(new) == int(old)):
        text = str(int(old) + 1) if column in ("launches", "trials", "iters") else text
    corpus.set_row(root, table, dict(rows[i]), **{column: text})
    u = audit(root)
    assert u.verdict != "VALID", (table, i, column, text)


def test_publish_dry_run_refuses_a_timing_lie(lie, capsys, monkeypatch):
    """publish --dry-run still refuses anything not VALID: a re-stated comparison verdict."""
    import huggingface_hub

    from harness.publish import cli_publish

    class Offline:
        def list_repo_files(self, *a, **k):
            raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "HfApi", Offline)
    corpus.set_row(lie, COMPARISON_TSV, {"model": QWEN, "backend": "ultraep", "phase": "dispatch"},
            verdict="faster")
    assert cli_publish(str(lie), "org/runs", dry_run=True) != 0
    said = capsys.readouterr()
    assert NOT_REDERIVED in said.out + said.err


def test_an_abandoned_cells_partial_group_is_explained_and_only_there(tmp_path, control):
    """The driver killed while echo's validate ran (control.yaml): that abandoned cell's
    last (iteration, layer) group may lack a rank (CI saw it once: UNKNOWN). Cut its last
    row: still VALID (the events and cell.json say it was abandoned; its rows are no
    result). The same cut with the cell_abandoned event removed: undecided, UNKNOWN."""
    lie = corpus.link_copy(control, tmp_path / "lie")
    cell = lie / "cells" / "QWEN3_30B__echo__validate__cap1p25__a1"
    rerun = lie / "cells" / "QWEN3_30B__echo__validate__cap1p25__a2"
    for rank in (0, 1):         # the killed run's logs as far as its rank 1 got: the re-run's
        lines = (rerun / f"rank{rank}.log").read_text().splitlines(keepends=True)
        rows = [i for i, line in enumerate(lines) if "][dispatch]" in line]
        assert rows, "the re-run holds dispatch rows"
        keep = lines[:rows[3]] if rank == 0 else lines[:rows[2]]   # rank 1 one row short
        corpus.replace_file(cell / f"rank{rank}.log", "".join(keep).encode())
    u = audit(lie)
    assert (u.verdict, u.why) == ("VALID", []), u.why
    events = lie / "events.jsonl"
    kept = [line for line in events.read_text().splitlines(keepends=True)
            if not ('"cell_abandoned"' in line and cell.name in line)]
    corpus.replace_file(events, "".join(kept).encode())
    u = audit(lie)
    assert u.verdict == "UNKNOWN" and any("lack or repeat a rank" in w for w in u.why), u.why
