"""The audit believes nothing it can re-derive (issue 16): one planted lie per new rule in
an otherwise VALID upload gives INVALID with exactly the expected reason codes, and the
untouched upload stays VALID. Plus nothing-to-judge, names, the audit's own pad multiple,
the held-out note, step-level provenance and the earlier campaign's layout."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from harness.audit import audit_target, readers
from harness.results.layout import ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_lies", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

ECHO_VALIDATE = "cells/QWEN3_30B__echo__validate__cap1p21875__a1"
ECHO_MEASURE = "cells/QWEN3_30B__echo__measure__cap2p00__a1"


def only(result):
    (upload,) = result.uploads
    return upload


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> Path:
    return corpus.write_valid(tmp_path_factory.mktemp("valid") / "campaign")


@pytest.fixture
def lie(valid, tmp_path):
    """A fresh copy of the valid upload to plant a lie in."""
    return corpus.copy(valid, tmp_path / "lie")


def reasons(root: Path, **kwargs) -> tuple[str, list[str]]:
    u = only(audit_target(root, **kwargs))
    return u.verdict, u.reasons


def test_untouched_upload_is_valid(valid):
    u = only(audit_target(valid))
    assert (u.verdict, u.reasons, u.why, u.notes) == ("VALID", [], [], [])


# ------------------------------------------------------------------ validated-but-saturated

def saturate_log(cell: Path) -> None:
    """One dispatch row of the log clipped at its budget (the buffer was full); the other
    ranks of its (iteration, layer) receive less, so the slots are still conserved
    (harness/audit/rules/conservation.py): only the saturation is the lie."""
    lines = (cell / "rank0.log").read_text().splitlines()
    budget = int(lines[-1].rsplit("budget=", 1)[1])
    before = int(lines[-1].split("actual_valid_recv=")[1].split()[0])
    share = -(-(budget - before) // (corpus.RANKS - 1))
    for i in range(-corpus.RANKS, -1):              # the other ranks of the last group
        value = int(lines[i].split("actual_valid_recv=")[1].split()[0])
        lines[i] = lines[i].replace(f"actual_valid_recv={value} ",
                                    f"actual_valid_recv={value - share} ")
    lines[-1] = lines[-1].replace("actual_valid_recv=", "x=").replace(
        " budget=", f" actual_valid_recv={budget} budget=")
    (cell / "rank0.log").write_text("\n".join(lines) + "\n")


def test_validated_but_saturated_from_the_validate_cells_log(lie):
    """The row says 0 saturated rows and status ok; the cell's own log has a clipped row.
    The row also disagrees with its telemetry (peak, saturated rows): both codes."""
    saturate_log(lie / ECHO_VALIDATE)
    verdict, codes = reasons(lie)
    assert (verdict, codes) == ("INVALID", ["inconsistent-requirement",
                                            "validated-but-saturated"])


def test_validated_but_saturated_from_the_attempts_status(lie):
    corpus.edit(lie, ATTEMPTS_TSV, corpus.set_where("status", "drops", model="QWEN3_30B",
                                                    backend="ultraep", purpose="validate"))
    assert reasons(lie) == ("INVALID", ["validated-but-saturated"])


def test_validated_but_saturated_from_validate_peak(lie):
    """issue 12's column: a validate peak at the budget is a clipped buffer."""
    corpus.edit(lie, SELECTION_TSV, corpus.set_where("validate_peak", "4992", model="QWEN3_30B",
                                                     backend="echo"))
    verdict, codes = reasons(lie)
    assert verdict == "INVALID" and "validated-but-saturated" in codes


# ------------------------------------------------------------------ timing-not-max

def test_timing_capacity_not_the_max_of_echo_and_ultraep(lie):
    """Timed at ECHO's 1.21875 where UltraEP selected 1.25 (consistently, so not mixed)."""
    for table, column in ((TIMING_TSV, "timing_capacity"), (SELECTION_TSV, "timing_capacity")):
        corpus.edit(lie, table, corpus.set_where(column, "1.21875", model="QWEN3_30B"))
    assert reasons(lie) == ("INVALID", ["timing-not-max"])


# ------------------------------------------------------------------ inconsistent-requirement

def test_requirement_105_where_peak_over_n_is_1205(lie):
    """4936 / 4096 = 1.205; the rows say 1.05 (in both tables)."""
    for table in (ATTEMPTS_TSV, SELECTION_TSV):
        corpus.edit(lie, table, corpus.set_where("required_capacity", "1.05", model="QWEN3_30B",
                                                 backend="echo"))
    verdict, codes = reasons(lie)
    assert (verdict, codes) == ("INVALID", ["inconsistent-requirement"])
    why = " ".join(only(audit_target(lie)).why)
    assert "required_capacity 1.05 but peak_actual_valid_recv / uniform_tokens = 4936/4096" in why


def test_peak_that_disagrees_with_the_cells_telemetry(lie):
    """Row, summary and required_capacity edited together: the log still says 4936."""
    def lower(row):
        if row["cell_dir"] == ECHO_MEASURE:
            row.update(peak_actual_valid_recv="4800", required_capacity="1.171875")
        return row
    corpus.edit(lie, ATTEMPTS_TSV, lower)
    data = json.loads((lie / ECHO_MEASURE / "cell.json").read_text())
    data["summary"]["peak_actual_valid_recv"] = 4800
    (lie / ECHO_MEASURE / "cell.json").write_text(json.dumps(data))
    assert reasons(lie) == ("INVALID", ["inconsistent-requirement"])
    assert "peak_actual_valid_recv 4800 but logs says 4936" in " ".join(
        only(audit_target(lie)).why)


def test_budget_that_disagrees_with_the_cell(lie):
    data = json.loads((lie / ECHO_MEASURE / "cell.json").read_text())
    data["summary"]["budget"] = 4096
    (lie / ECHO_MEASURE / "cell.json").write_text(json.dumps(data))
    assert reasons(lie) == ("INVALID", ["inconsistent-requirement"])


def test_earlier_campaigns_four_decimals_agree():
    from fractions import Fraction

    from harness.audit.model import agrees
    assert agrees("1.0293", Fraction(67457, 65536))
    assert agrees("1.179199", Fraction(2415, 2048)) and agrees("1.0", Fraction(1))
    assert agrees("1.282227", Fraction(2626, 2048))       # rounded up, as the harness writes
    assert not agrees("1.05", Fraction(4936, 4096)) and not agrees("1.0294", Fraction(67457, 65536))
    assert not agrees("1", Fraction(4936, 4096))          # a whole number only when exact


# ------------------------------------------------------------------ selection-below-peak

def test_selected_budget_below_the_peak(lie):
    """4864 < the measured 4936 (no longer int(1.21875 x 4096), and below validate_peak)."""
    corpus.edit(lie, SELECTION_TSV, corpus.set_where("selected_budget_tokens", "4864",
                                                     model="QWEN3_30B", backend="echo"))
    assert reasons(lie) == ("INVALID", ["inconsistent-requirement", "validated-but-saturated",
                                        "selection-below-peak"])


def test_selection_below_a_peak_no_measure_saw(lie):
    """Without issue 12's columns, a budget below the peak is that code and the budget one."""
    corpus.drop_columns(lie, SELECTION_TSV, *corpus.HELD_OUT)
    def lower(row):
        if (row["model"], row["backend"]) == ("QWEN3_30B", "echo"):
            row.update(peak_actual_valid_recv="5000", required_capacity="1.220703")
        return row
    corpus.edit(lie, SELECTION_TSV, lower)         # the peak no measure attempt saw
    assert reasons(lie) == ("INVALID", ["inconsistent-requirement", "selection-below-peak"])


# ------------------------------------------------------------------ unvalidated-selection

def test_ultraep_validate_row_removed(lie):
    corpus.edit(lie, ATTEMPTS_TSV, lambda r: None if (r["model"], r["backend"], r["purpose"])
                == ("QWEN3_30B", "ultraep", "validate") else r)
    assert reasons(lie) == ("INVALID", ["unvalidated-selection"])


def test_measured_backend_without_a_selection_row(lie):
    corpus.edit(lie, SELECTION_TSV, lambda r: None if (r["model"], r["backend"])
                == ("DEEPSEEK_V2_LITE", "ultraep") else r)
    assert reasons(lie) == ("INVALID", ["unvalidated-selection"])


# ------------------------------------------------------------------ unexecutable, pad multiple

def crash_row(n_written: int) -> dict:
    """UltraEP at 1.02: int(1.02 x 4096) = 4177, not a multiple of 128; it crashed."""
    row = corpus.attempt("QWEN3_30B", "ultraep", "validate", "1.02", status="crash",
                         attempt_no=2)
    row.update(uniform_tokens=n_written, budget_tokens=int(1.02 * n_written))
    return row


def test_unexecutable_made_executable_by_a_false_uniform_tokens(lie):
    """uniform_tokens 6400 makes 1.02 -> 6528 = 51 x 128; cell.json's shape says N = 4096."""
    row = crash_row(6400)
    corpus.append(lie, ATTEMPTS_TSV, row)
    corpus.write_cell(lie, {**row, "uniform_tokens": 4096, "budget_tokens": 4177},
                      shape=corpus.SHAPE, provenance=corpus.provenance_fields())
    assert reasons(lie) == ("INVALID", ["unexecutable-capacity", "inconsistent-requirement"])


def test_unexecutable_made_executable_by_pad_multiple_1_in_the_runbook(lie):
    corpus.append(lie, ATTEMPTS_TSV, row := crash_row(4096))
    corpus.write_cell(lie, row, shape=corpus.SHAPE, provenance=corpus.provenance_fields())
    (lie / "runbook.yaml").write_text("campaign: corpus\ncapacity:\n  pad_multiple: 1\n")
    u = only(audit_target(lie))
    assert (u.verdict, u.reasons) == ("INVALID", ["unexecutable-capacity"])
    assert "capacity 1.02 at N=4096" in " ".join(u.why) and "pad 128" in " ".join(u.why)
    assert any("pad_multiple: 1" in n and "never the upload's" in n for n in u.notes)


def test_runbook_pad_multiple_is_reported_never_used(lie):
    (lie / "runbook.yaml").write_text("campaign: corpus\ncapacity:\n  pad_multiple: 1\n")
    u = only(audit_target(lie))
    assert u.verdict == "VALID" and len(u.notes) == 1


def test_audits_own_pad_multiple_option(valid):
    """--pad-multiple 256: 1.21875 x 4096 = 4992 is not a multiple of 256."""
    assert reasons(valid, pad_multiple=256) == ("INVALID", ["unexecutable-capacity"])
    from click.testing import CliRunner

    from harness.cli import main
    res = CliRunner().invoke(main, ["audit", str(valid), "--json", "--pad-multiple", "256"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["uploads"][0]["reasons"] == ["unexecutable-capacity"]
    assert CliRunner().invoke(main, ["audit", str(valid), "--pad-multiple", "0"]).exit_code == 2


# ------------------------------------------------------------------ names

def test_model_name_in_another_case_does_not_split_a_model(lie):
    """moonep timed QWEN3 at 1.50 under the name qwen3_30b: still one model."""
    corpus.edit(lie, TIMING_TSV, lambda r: r.update(model="qwen3_30b", timing_capacity="1.50")
                or r if (r["model"], r["backend"]) == ("QWEN3_30B", "moonep") else r)
    assert reasons(lie) == ("INVALID", ["mixed-timing-capacity", "timing-not-max"])


def test_full_width_echo_does_not_hide_a_natural_selection(lie):
    """A natural-selection attempt under ＥＣＨＯ (NFKC: ECHO), with a cell that agrees."""
    row = corpus.attempt("QWEN3_30B", "ＥＣＨＯ", "natural", "2.00", "1.205078125",
                         attempt_no=2)
    corpus.append(lie, ATTEMPTS_TSV, row)
    shutil.copytree(lie / ECHO_MEASURE, lie / row["cell_dir"])
    cell_json = lie / row["cell_dir"] / "cell.json"            # the cell says what it is
    data = json.loads(cell_json.read_text())
    data["cell"].update(backend="ＥＣＨＯ", purpose="natural", attempt=2)
    data["name"] = Path(row["cell_dir"]).name
    cell_json.write_text(json.dumps(data))
    # natural-selection is not hidden; the full-width name is also not one the harness writes
    # (names are printable ASCII: harness/io/bounds.py path_component_problem)
    assert reasons(lie) == ("INVALID", ["natural-selection", "cell-identity"])


def test_names_spelled_otherwise_stay_valid(lie):
    corpus.edit(lie, ATTEMPTS_TSV, corpus.set_where("backend", "ＥＣＨＯ", backend="echo"))
    corpus.edit(lie, SELECTION_TSV, corpus.set_where("backend", "Echo", backend="echo"))
    corpus.edit(lie, SELECTION_TSV, corpus.set_where("model", "qwen3_30b", model="QWEN3_30B"))
    corpus.edit(lie, TIMING_TSV, corpus.set_where("model", "Ｑwen3_30B", model="QWEN3_30B"))
    assert reasons(lie) == ("VALID", [])


# ------------------------------------------------------------------ missing-cell

def test_cells_deleted(lie):
    shutil.rmtree(lie / "cells")
    verdict, codes = reasons(lie)
    assert (verdict, codes) == ("INVALID", ["missing-cell"])


def test_timing_row_naming_a_cell_not_in_the_upload(lie):
    """The moonep timing run's attempts row and cell removed; timing.tsv still names it."""
    corpus.edit(lie, ATTEMPTS_TSV, lambda r: None if (r["model"], r["backend"]) ==
                ("QWEN3_30B", "moonep") else r)
    shutil.rmtree(lie / "cells" / "QWEN3_30B__moonep__time__cap1p25__a1")
    assert reasons(lie) == ("INVALID", ["missing-cell"])


def test_row_without_a_cell_dir(lie):
    corpus.edit(lie, ATTEMPTS_TSV, corpus.set_where("cell_dir", "", cell_dir=ECHO_MEASURE))
    assert reasons(lie) == ("INVALID", ["missing-cell"])


def test_unreadable_cell_json_is_unknown_with_why(lie):
    (lie / ECHO_MEASURE / "cell.json").write_text("{not json")
    u = only(audit_target(lie))
    # cell-identity cannot read the cell's name in it either (issue 23): UNKNOWN too
    assert (u.verdict, u.reasons) == ("UNKNOWN", ["inconsistent-requirement", "cell-identity"])
    assert "cell.json is not JSON" in " ".join(u.why)


def test_oversized_log_is_unknown_with_why(lie, monkeypatch):
    monkeypatch.setattr(readers, "LOG_CAP_BYTES", 100)
    u = only(audit_target(lie))
    assert u.verdict == "UNKNOWN" and "over the 100-byte cap" in " ".join(u.why)


def test_log_linked_out_of_target_is_not_read(lie, tmp_path):
    outside = tmp_path / "outside.log"
    outside.write_text((lie / ECHO_MEASURE / "rank0.log").read_text())
    (lie / ECHO_MEASURE / "rank0.log").unlink()
    (lie / ECHO_MEASURE / "rank0.log").symlink_to(outside)
    u = only(audit_target(lie))
    assert u.verdict == "UNKNOWN" and "link out of TARGET" in " ".join(u.why)


# ------------------------------------------------------------------ nothing to judge

def test_header_only_tables_are_nothing_to_judge(lie):
    for table in (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV):
        corpus.edit(lie, table, lambda r: None)
    assert reasons(lie) == ("UNKNOWN", ["nothing-to-judge"])


def test_campaign_stopped_after_preflight_is_nothing_to_judge(lie):
    """As `epcap run --until preflight` leaves it: header-only tables, canary cells only."""
    for table in (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV):
        corpus.edit(lie, table, lambda r: None)
    shutil.rmtree(lie / "cells")
    corpus.write_cell(lie, corpus.attempt("QWEN3_30B", "echo", "canary", "2.00", "1.205078125"),
                      provenance=corpus.provenance_fields())
    assert reasons(lie) == ("UNKNOWN", ["nothing-to-judge"])


def test_campaign_stopped_after_measure_is_nothing_to_judge(lie):
    corpus.edit(lie, ATTEMPTS_TSV, lambda r: r if r["purpose"] == "measure" else None)
    corpus.edit(lie, SELECTION_TSV, lambda r: None)
    (lie / TIMING_TSV).unlink()
    assert reasons(lie) == ("UNKNOWN", ["nothing-to-judge"])


# ------------------------------------------------------------------ held-out note, columns

def test_held_out_false_is_a_stated_note_not_invalid(lie):
    corpus.edit(lie, SELECTION_TSV, corpus.set_where("held_out", "false", model="QWEN3_30B",
                                                     backend="echo"))
    u = only(audit_target(lie))
    assert (u.verdict, u.reasons) == ("VALID", [])
    assert len(u.notes) == 1 and "held_out=false" in u.notes[0] and "QWEN3_30B echo" in u.notes[0]


def test_upload_without_the_held_out_columns_is_judged_as_before(lie):
    corpus.drop_columns(lie, SELECTION_TSV, *corpus.HELD_OUT)
    u = only(audit_target(lie))
    assert (u.verdict, u.reasons, u.notes) == ("VALID", [], [])


def test_rule_needing_a_missing_column_is_unknown_naming_it(lie):
    corpus.drop_columns(lie, SELECTION_TSV, "validated")
    u = only(audit_target(lie))
    assert (u.verdict, u.reasons) == ("UNKNOWN", ["validated-but-saturated"])
    assert "capacity_selection.tsv lacks column validated" in " ".join(u.why)


def test_drop_risk_that_is_not_the_rule_of_three(lie):
    corpus.edit(lie, SELECTION_TSV, corpus.set_where("drop_risk_95", "0.01", model="QWEN3_30B",
                                                     backend="echo"))
    assert reasons(lie) == ("INVALID", ["inconsistent-requirement"])


# ------------------------------------------------------------------ provenance, legacy layout

DATED_ERRATA = ("repository: blackwell_run_scripts\nfixes:\n"
                "  - {id: executable-capacity, commit: 'e3f7c0b', date: null}\n"
                "  - {id: oom-excludes-pair, commit: '4e4081f', date: '2025-01-01T00:00:00Z'}\n")


@pytest.fixture
def legacy(tmp_path) -> tuple[Path, Path]:
    errata = tmp_path / "errata.yaml"
    errata.write_text(DATED_ERRATA)
    return corpus.write_legacy(tmp_path / "legacy"), errata


def test_earlier_campaign_layout_audits_valid(legacy):
    """Per-step provenance (none per cell), cells under step folders, 1.0293 at N=65536."""
    root, errata = legacy
    u = only(audit_target(root, errata=errata))
    assert (u.verdict, u.reasons, u.why) == ("VALID", [], [])


def test_step_provenance_is_the_one_read_for_its_cells(legacy):
    root, errata = legacy
    text = (root / "validate" / "provenance.txt").read_text()
    (root / "validate" / "provenance.txt").write_text(
        text.replace("e3f7c0b1d2 2025-06-01", "0badc0de12 2024-06-01"))
    u = only(audit_target(root, errata=errata))
    assert (u.verdict, u.reasons) == ("INVALID", ["predates-fix:oom-excludes-pair"])
    assert "validate/provenance.txt" in " ".join(u.why)


def test_cell_covered_by_no_provenance_is_missing(legacy):
    root, errata = legacy
    (root / "time" / "provenance.txt").unlink()
    assert only(audit_target(root, errata=errata)).verdict == "VALID"   # the root's covers it
    (root / "provenance.txt").unlink()
    u = only(audit_target(root, errata=errata))
    assert u.verdict == "INVALID" and "missing-provenance" in u.reasons
    assert "time/cells/" in " ".join(u.why) and "measure/cells/" not in " ".join(u.why)


def test_unnamed_crash_cell_in_a_step_folder_is_seen(legacy):
    """A __cap1p02 crash directory no row names, under the earlier layout's measure/cells/."""
    root, errata = legacy
    cell = root / "measure" / "cells" / "QWEN3_30B__ultraep__validate__cap1p02__a1"
    cell.mkdir()
    (cell / "cell.json").write_text('{"shape": {"seq": 8192, "micro_batch": 1, "topk": 8}}')
    u = only(audit_target(root, errata=errata))
    assert (u.verdict, u.reasons) == ("INVALID", ["unexecutable-capacity"])
    assert "measure/cells/QWEN3_30B__ultraep__validate__cap1p02__a1" in u.why[0]


def test_saturated_measure_may_state_the_pre_drop_demand(lie):
    """A lower_bound measure whose log clipped at the budget may record the demand an
    overflow report stated (above the clipped log peak); below the log peak it may not."""
    row = corpus.attempt("QWEN3_30B", "echo", "measure", "1.00", "", status="lower_bound",
                         attempt_no=2)
    # at budget = N an unsaturated (iteration, layer) could not conserve its slots: every
    # one of them has a full buffer (corpus.log_text)
    row.update(saturated_rows=corpus.ITERS * corpus.LAYERS, peak_actual_valid_recv=4300,
               required_capacity="1.049805")
    corpus.append(lie, ATTEMPTS_TSV, row)
    cell = corpus.write_cell(lie, {**row, "peak_actual_valid_recv": 4096},   # clipped: 4096
                             provenance=corpus.provenance_fields())            # = the budget
    data = json.loads((cell / "cell.json").read_text())
    data["summary"]["peak_actual_valid_recv"] = 4300
    (cell / "cell.json").write_text(json.dumps(data))
    assert reasons(lie) == ("VALID", [])
    corpus.edit(lie, ATTEMPTS_TSV, corpus.set_where("peak_actual_valid_recv", "4000",
                                                    status="lower_bound"))
    assert "inconsistent-requirement" in reasons(lie)[1]


def test_validate_peak_no_validate_run_saw(lie):
    """A lowered validate_peak (and the headroom to match) is no peak of the validate run."""
    def lower(row):
        if (row["model"], row["backend"]) == ("QWEN3_30B", "echo"):
            row.update(validate_peak="4800", headroom="1.04")
        return row
    corpus.edit(lie, SELECTION_TSV, lower)
    assert reasons(lie) == ("INVALID", ["inconsistent-requirement"])
    assert "validate_peak 4800 but its validate run's peak is 4936" in " ".join(
        only(audit_target(lie)).why)


# ------------------------------------------------------------ issue 23: every named lie

REDERIVE, TIMING = "test_audit_rederive.py", "test_audit_timing.py"
# Each lie the issue names, planted by hand, and the test(s) that plant it (the harness
# campaign's lies are slow: they run on a real `epcap run` campaign).
NAMED_LIES: dict[str, tuple[tuple[str, str], ...]] = {
    "a row naming another model's cell": ((REDERIVE, "test_row_naming_another_models_cell"),),
    "one cell backing two models' rows": ((REDERIVE, "test_one_cell_backing_two_models_rows"),
                                          (REDERIVE, "test_one_cell_backing_two_rows")),
    "a phantom model in no runbook": ((REDERIVE, "test_phantom_model"),),
    "a model name with an invisible character":
        ((REDERIVE, "test_model_name_with_an_invisible_character"),),
    "a validate whose telemetry lacks iterations":
        ((REDERIVE, "test_validate_lacking_an_iteration"),),
    "a validate whose telemetry lacks a rank": ((REDERIVE, "test_validate_lacking_a_rank"),),
    "a validate with malformed rows": ((REDERIVE, "test_validate_with_a_malformed_row"),),
    "cell.json says crash, ok recorded": ((REDERIVE, "test_cell_json_says_crash_row_says_ok"),),
    "cell.json says assert, ok recorded": ((REDERIVE, "test_cell_json_says_assert_row_says_ok"),),
    "a does_not_fit whose log shows an assertion":
        ((REDERIVE, "test_does_not_fit_whose_log_shows_an_assertion"),),
    "a does_not_fit with no out-of-memory at all":
        ((REDERIVE, "test_does_not_fit_without_an_out_of_memory_in_its_log"),),
    "a finished crash attempt with no row": ((REDERIVE, "test_finished_crash_attempt_with_no_row"),
                                             (REDERIVE, "test_finished_attempt_with_no_row")),
    "a dropping validate hidden behind a later passing one":
        ((REDERIVE, "test_dropping_validate_hidden_behind_a_later_pass"),),
    "over_provision, measured_at_capacity, the drop risk columns, validate_steps":
        ((REDERIVE, "test_selection_column_not_rederived"),
         (REDERIVE, "test_validate_step_column_not_rederived"),
         ("test_audit_lies.py", "test_drop_risk_that_is_not_the_rule_of_three")),
    "a held-out claim whose validate cell ran the measure seed":
        ((REDERIVE, "test_held_out_claim_whose_validate_cell_ran_the_measure_seed"),),
    "the selection not the lowest zero-drop rung of the grid":
        ((REDERIVE, "test_selection_column_not_rederived"),),
    "a requirement taken from a saturated lower-bound measure":
        ((REDERIVE, "test_requirement_from_a_saturated_lower_bound_measure"),),
    "comparison.tsv not read at all": ((TIMING, "test_comparison_value_not_rederived"),
                                       (TIMING, "test_comparison_deleted_or_a_row_removed")),
    "timing.tsv medians": ((TIMING, "test_timing_tsv_value_not_rederived"),),
    "timing.tsv launch counts": ((TIMING, "test_timing_tsv_value_not_rederived"),
                                 (TIMING, "test_a_launch_removed")),
    "the A/A control arm": ((TIMING, "test_control_arm_verdict_made_indistinguishable"),
                            (TIMING, "test_control_arm_deleted")),
    "a timed backend removed for one model": ((TIMING, "test_a_timed_backend_removed_for_one_model"),),
    "backend_impl": ((TIMING, "test_timing_tsv_value_not_rederived"),
                     (REDERIVE, "test_attempt_column_not_rederived")),
    "timing rows whose cells ran at another capacity":
        ((REDERIVE, "test_timing_row_whose_cell_ran_at_another_capacity"),
         (TIMING, "test_time_cells_at_another_capacity_than_the_models_timing_capacity")),
    "a runbook.yaml edited after the run": ((REDERIVE, "test_runbook_edited_after_the_run"),),
    "a cell spliced from another run": ((REDERIVE, "test_cell_spliced_from_another_run"),),
    "provenance stripped to one line": ((REDERIVE, "test_provenance_stripped_to_one_line"),),
    "a scripts repository absent from provenance, spelt differently, or named twice":
        ((REDERIVE, "test_runbook_repository_absent_respelt_or_twice"),),
    "telemetry tags in the upload's runbook pointing at decoy rows":
        ((REDERIVE, "test_decoy_telemetry_tags_in_the_runbook"),),
    "numbers the audit cannot read skipped here and INVALID there":
        (("test_audit_lies.py", "test_unreadable_numbers_are_unknown_everywhere"),),
    "the upload's YAML read without the bounded reader":
        ((REDERIVE, "test_runbook_read_only_through_the_bounded_reader"),),
}


def test_every_named_lie_has_its_planted_test():
    """Issue 23's list, one entry per lie: each names tests that exist (a test renamed or
    removed fails here)."""
    import ast
    here = Path(__file__).resolve().parent
    defined = {}
    for name in {f for tests in NAMED_LIES.values() for f, _ in tests}:
        tree = ast.parse((here / name).read_text(encoding="utf-8"))
        defined[name] = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    absent = [f"{lie}: {f}::{t}" for lie, tests in NAMED_LIES.items() for f, t in tests
              if t not in defined[f]]
    assert absent == []


# ------------------------------------------------------------ one treatment of unreadable numbers

def typed_evidence() -> list[tuple[str, str, str]]:
    """(table, column, kind) of every evidence column the harness writes as a number or a
    boolean (harness/results/rows.py field types) that the corpus's tables state."""
    from dataclasses import fields

    from harness.audit.evidence import evidence_columns
    from harness.results.rows import ROW_TYPES
    out = []
    for table, rows in zip((ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV), corpus.all_rows(),
                           strict=True):
        kinds = {f.name: str(f.type) for f in fields(ROW_TYPES[table])}
        out += [(table, c, kinds[c]) for c in evidence_columns(table)
                if any(k in kinds.get(c, "") for k in ("int", "float", "bool"))
                and any(str(r.get(c, "")) for r in rows)]
    return out


def plant_unreadable(root: Path, table: str, column: str) -> int:
    """'n/a' in the first row that states the column; returns that row's line."""
    rows = corpus.read_rows(root / table)
    index = next(i for i, r in enumerate(rows) if r.get(column))
    counter = iter(range(len(rows)))

    def change(row: dict) -> dict:
        if next(counter) == index:
            row[column] = "n/a"
        return row
    corpus.edit(root, table, change)
    return index + 2


@pytest.mark.parametrize("table,column,kind", typed_evidence())
def test_unreadable_numbers_are_unknown_everywhere(lie, table, column, kind):
    """A value the audit cannot read is UNKNOWN with file, line and field, whichever rule
    reads it (rules.apply.blank_unreadable): never skipped by one rule and INVALID by
    another."""
    line = plant_unreadable(lie, table, column)
    u = only(audit_target(lie))
    assert u.verdict == "UNKNOWN", u.why
    assert any(f"{table}:{line}: field {column} 'n/a' unreadable" in w for w in u.why)


def test_unreadable_numbers_without_the_one_treatment(valid, tmp_path, monkeypatch):
    """Seen failing: without rules.apply.blank_unreadable the same plant is passed over
    (VALID) in one column and INVALID in another, and no message names the field."""
    from harness.audit.rules import apply
    monkeypatch.setattr(apply, "blank_unreadable", lambda upload: None)
    got = {}
    for table, column in ((SELECTION_TSV, "selected_budget_tokens"),
                          (ATTEMPTS_TSV, "peak_actual_valid_recv")):
        root = corpus.copy(valid, tmp_path / column)
        plant_unreadable(root, table, column)
        u = only(audit_target(root))
        assert not any("unreadable" in w for w in u.why)
        got[column] = u.verdict
    assert got == {"selected_budget_tokens": "VALID", "peak_actual_valid_recv": "INVALID"}
