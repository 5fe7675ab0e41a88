"""epcap audit: every reason code, ignored cells, commit order through a real git repo,
older uploads with fewer columns, untrusted input, hf:// targets and the CLI outputs."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.audit import audit_target, load_errata, parse_hf_target, readers
from harness.cli import main
from harness.errors import BadInput
from harness.results.layout import ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

REPO = Path(__file__).resolve().parents[2]
ERRATA_IDS = ["executable-capacity", "oom-excludes-pair", "measured-echo-requirement",
              "lowest-zero-drop-rung", "saturation-drop-detector"]


def only(result, path="."):
    """The verdict of the upload at path."""
    return next(u for u in result.uploads if u.path == path)


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> Path:
    return corpus.write_valid(tmp_path_factory.mktemp("valid") / "campaign")


@pytest.fixture
def mutant(valid, tmp_path):
    """A fresh copy of the valid upload to mutate."""
    return corpus.copy(valid, tmp_path / "mutant")


# ------------------------------------------------------------------ valid and ignored

def test_valid_upload_is_valid_and_ignores_cap1p75(valid):
    u = only(audit_target(valid))
    assert (u.verdict, u.reasons, u.why) == ("VALID", [], [])
    assert u.ignored_cells == ["QWEN3_30B__echo__natural__cap1p75__a1"]


def test_ignored_cell_counts_when_not_tagged_cap1p75(mutant):
    """The ignored natural row is what keeps the upload VALID: retagged, it is counted."""
    def retag(row):
        if row["capacity_tag"] == "cap1p75":
            row.update(capacity="1.50", capacity_tag="cap1p50", budget_tokens="6144",
                       cell_dir="cells/QWEN3_30B__echo__natural__cap1p50__a1")
            corpus.write_cell(mutant, row, provenance=corpus.provenance_fields())
        return row
    corpus.edit(mutant, ATTEMPTS_TSV, retag)
    u = only(audit_target(mutant))
    assert u.verdict == "INVALID" and u.reasons == ["natural-selection"]


# ------------------------------------------------------------------ one upload per reason code

def test_natural_selection(mutant):
    corpus.edit(mutant, ATTEMPTS_TSV, corpus.set_where("purpose", "natural", backend="echo",
                                                       purpose="measure", model="QWEN3_30B"))
    u = only(audit_target(mutant))
    assert u.verdict == "INVALID" and "natural-selection" in u.reasons


def test_backend_names_compare_case_insensitively(mutant):
    corpus.edit(mutant, ATTEMPTS_TSV, corpus.set_where("backend", "ECHO", backend="echo"))
    assert only(audit_target(mutant)).verdict == "VALID"
    corpus.edit(mutant, ATTEMPTS_TSV, corpus.set_where("purpose", "Natural", backend="echo",
                                                       purpose="validate"))
    assert "natural-selection" in only(audit_target(mutant)).reasons


def test_no_measure_validate(mutant):
    corpus.edit(mutant, ATTEMPTS_TSV, lambda r: None if (r["backend"], r["purpose"], r["model"])
                == ("echo", "validate", "DEEPSEEK_V2_LITE") else r)
    u = only(audit_target(mutant))
    assert u.reasons == ["no-measure-validate", "unvalidated-selection"]
    assert any("DEEPSEEK_V2_LITE: ECHO has no purpose=validate" in w for w in u.why)


def test_does_not_fit_measure_needs_no_validate(mutant):
    """OOM is data: a pair whose measure did not fit has no validate row, and that is fine."""
    def oom(row):
        if row["model"] == "DEEPSEEK_V2_LITE" and row["backend"] == "echo":
            if row["purpose"] == "validate":
                return None
            if row["purpose"] == "measure":
                row.update(status="does_not_fit", required_capacity="",
                           peak_actual_valid_recv="", rows="0")
                (mutant / row["cell_dir"] / "rank0.log").unlink()    # killed at start:
                (mutant / row["cell_dir"] / "cell.json").write_text(   # the launcher's oom
                    '{"launcher": {"state": "oom", "exit_code": null}}')
        return row
    corpus.edit(mutant, ATTEMPTS_TSV, oom)
    corpus.edit(mutant, SELECTION_TSV, lambda r: None if (r["model"], r["backend"]) ==
                ("DEEPSEEK_V2_LITE", "echo") else r)
    assert only(audit_target(mutant)).verdict == "VALID"


def test_fabricated_requirement(mutant):
    for table in (ATTEMPTS_TSV, SELECTION_TSV):
        corpus.edit(mutant, table, corpus.set_where("required_capacity", "1.0", backend="echo"))
    u = only(audit_target(mutant))       # 1.0 is not the rows' own peak / N either
    assert u.verdict == "INVALID"
    assert u.reasons == ["fabricated-requirement", "inconsistent-requirement"]


@pytest.mark.parametrize("table", [ATTEMPTS_TSV, SELECTION_TSV])
def test_fabricated_requirement_from_either_table(mutant, table):
    corpus.edit(mutant, table, corpus.set_where("required_capacity", "1.00", backend="echo"))
    assert only(audit_target(mutant)).reasons == ["fabricated-requirement",
                                                  "inconsistent-requirement"]


def test_one_model_at_exactly_one_is_not_fabricated(mutant):
    """Boundary: 'for every model' -- one model measured at exactly 1.0 is a measurement."""
    for table in (ATTEMPTS_TSV, SELECTION_TSV):
        corpus.edit(mutant, table, corpus.set_where("required_capacity", "1.0", backend="echo",
                                                    model="QWEN3_30B"))
    assert "fabricated-requirement" not in only(audit_target(mutant)).reasons


def test_unexecutable_capacity_at_n_65536(mutant):
    row = corpus.attempt("QWEN3_30B", "ultraep", "validate", "1.02", status="crash", n=65536)
    corpus.append(mutant, ATTEMPTS_TSV, row)
    corpus.write_cell(mutant, row, provenance=corpus.provenance_fields())
    u = only(audit_target(mutant))
    assert u.reasons == ["unexecutable-capacity"]
    assert "capacity 1.02 at N=65536" in " ".join(u.why)


def test_executable_boundary_at_n_65536(mutant):
    """1.03125 x 65536 = 67584 = 528 x 128: executable, so VALID (1.02 is not)."""
    row = corpus.attempt("QWEN3_30B", "ultraep", "validate", "1.03125", "1.0293", n=65536)
    row["peak_actual_valid_recv"] = 67457
    corpus.append(mutant, ATTEMPTS_TSV, row)
    corpus.write_cell(mutant, row, provenance=corpus.provenance_fields())
    assert only(audit_target(mutant)).verdict == "VALID"


def test_unexecutable_crash_cell_without_a_row(mutant):
    """Legacy crash evidence: a __cap1p02 cell directory no row names, at N = 65536."""
    cell = mutant / "cells" / "QWEN3_30B__ultraep__validate__cap1p02"
    cell.mkdir()
    (cell / "cell.json").write_text('{"shape": {"seq": 8192, "micro_batch": 1, "topk": 8}}')
    (cell / "provenance.txt").write_text("harness.version: 0.1.0\n")
    u = only(audit_target(mutant))
    assert u.reasons == ["unexecutable-capacity"]
    assert "cells/QWEN3_30B__ultraep__validate__cap1p02: capacity 1.02 at N=65536" in u.why[0]
    (cell / "cell.json").write_text("{}")          # shape from the model's rows: N = 4096
    assert "capacity 1.02 at N=4096" in only(audit_target(mutant)).why[0]
    cell.rename(cell.with_name("QWEN3_30B__ultraep__validate__cap1p25"))
    assert only(audit_target(mutant)).verdict == "VALID"


def test_unexecutable_from_budget_when_no_uniform_tokens(mutant):
    corpus.edit(mutant, ATTEMPTS_TSV, corpus.set_where("budget_tokens", "66846",
                                                       purpose="time", backend="moonep"))
    corpus.drop_columns(mutant, ATTEMPTS_TSV, "uniform_tokens")
    for cell in (mutant / "cells").glob("*__moonep__time__*"):     # no N in the cells either
        (cell / "cell.json").unlink()
        (cell / "rank0.log").unlink()
    u = only(audit_target(mutant))
    assert u.reasons == ["unexecutable-capacity"], u.why


def test_mixed_timing_capacity(mutant):
    corpus.edit(mutant, TIMING_TSV, corpus.set_where("timing_capacity", "1.50",
                                                     backend="moonep", model="QWEN3_30B"))
    u = only(audit_target(mutant))
    assert u.reasons == ["mixed-timing-capacity", "timing-not-max"]
    assert "QWEN3_30B timed at 1.25, 1.50" in " ".join(u.why)


def test_same_capacity_written_differently_is_not_mixed(mutant):
    corpus.edit(mutant, TIMING_TSV, corpus.set_where("timing_capacity", "1.250",
                                                     backend="moonep", model="QWEN3_30B"))
    assert only(audit_target(mutant)).verdict == "VALID"


def test_mixed_timing_from_attempts_without_timing_tsv(mutant):
    (mutant / TIMING_TSV).unlink()
    corpus.edit(mutant, ATTEMPTS_TSV, corpus.set_where("capacity", "1.21875", backend="moonep",
                                                       purpose="time", model="QWEN3_30B"))
    # the row now names a cell at another capacity: cell-identity too (issue 23)
    assert only(audit_target(mutant)).reasons == ["mixed-timing-capacity",
                                                  "inconsistent-requirement", "timing-not-max",
                                                  "cell-identity"]


def test_missing_provenance(mutant):
    (mutant / "provenance.txt").unlink()
    u = only(audit_target(mutant))
    assert u.verdict == "INVALID" and "missing-provenance" in u.reasons


def test_missing_cell_provenance(mutant):
    """A cell without its own provenance.txt is covered by the nearest one above it."""
    (mutant / "cells" / "QWEN3_30B__echo__measure__cap2p00__a1" / "provenance.txt").unlink()
    assert only(audit_target(mutant)).verdict == "VALID"
    (mutant / "provenance.txt").unlink()
    u = only(audit_target(mutant))
    assert u.reasons == ["missing-provenance"]
    assert "cells/QWEN3_30B__echo__measure__cap2p00__a1: no provenance.txt" in " ".join(u.why)
    assert sum("no provenance.txt in it or above it" in w for w in u.why[0].split("; ")) == 1


def test_empty_provenance_is_missing(mutant):
    (mutant / "provenance.txt").write_text("\n\n")
    assert only(audit_target(mutant)).reasons == ["missing-provenance"]


# ------------------------------------------------------------------ older uploads, precedence

def test_older_upload_without_purpose_column_is_unknown_naming_it(mutant):
    corpus.drop_columns(mutant, ATTEMPTS_TSV, "purpose")
    u = only(audit_target(mutant))
    assert u.verdict == "UNKNOWN"
    assert {"natural-selection", "no-measure-validate"} <= set(u.reasons)
    assert "capacity_attempts.tsv lacks column purpose" in " ".join(u.why)


def test_invalid_beats_unknown(mutant):
    corpus.drop_columns(mutant, ATTEMPTS_TSV, "purpose")
    (mutant / "provenance.txt").unlink()
    u = only(audit_target(mutant))
    assert u.verdict == "INVALID" and u.reasons == ["missing-provenance"]
    assert "natural-selection" in u.unknown


def test_selection_only_upload(mutant):
    (mutant / ATTEMPTS_TSV).unlink()
    u = only(audit_target(mutant))
    assert u.verdict == "UNKNOWN"
    assert "no capacity_attempts.tsv in the upload" in " ".join(u.why)


# ------------------------------------------------------------------ provenance and the registry

def test_default_errata_registry():
    errata = load_errata()
    assert errata.repository == "blackwell_run_scripts"
    assert [f.id for f in errata.fixes] == ERRATA_IDS
    commits = {f.id: f.commit for f in errata.fixes}
    assert commits["executable-capacity"] == "e3f7c0b"
    assert commits["oom-excludes-pair"] == "4e4081f"
    assert [f.code for f in errata.fixes][0] == "predates-fix:executable-capacity"


def test_epcap_provenance_without_run_scripts_is_valid_foreign_is_unknown(mutant):
    """epcap lists every repository a run used; a foreign provenance that names none is
    undecidable against fixes with a commit."""
    u = only(audit_target(mutant))
    assert u.verdict == "VALID"
    (mutant / "provenance.txt").write_text("command_line: run.sh\nhost: a\n")
    for cell in (mutant / "cells").iterdir():
        if (cell / "provenance.txt").exists():
            (cell / "provenance.txt").write_text("command_line: run.sh\n")
    u = only(audit_target(mutant))
    assert u.verdict == "UNKNOWN"
    assert u.reasons == ["predates-fix:executable-capacity", "predates-fix:oom-excludes-pair"]


def test_run_scripts_commit_without_clone_or_dates_is_unknown(tmp_path):
    root = corpus.write_valid(tmp_path / "u", run_scripts="0123abcd" * 5 +
                              " 2024-01-01T00:00:00+00:00 main dirty=false")
    u = only(audit_target(root))
    assert u.verdict == "UNKNOWN"
    assert "pass --git-repo blackwell_run_scripts=PATH" in " ".join(u.why)


def test_missing_run_scripts_clone_is_unknown(tmp_path):
    root = corpus.write_valid(tmp_path / "u", run_scripts="missing /opt/blackwell_run_scripts")
    u = only(audit_target(root))
    assert u.verdict == "UNKNOWN" and "(no commit)" in " ".join(u.why)


def git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    done = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True,
                          text=True, check=True)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def run_scripts(tmp_path_factory) -> dict:
    """A real repository: old -> fix -> new on main; `side` branches from old after the fix
    date (newer by date, but without the fix)."""
    repo = tmp_path_factory.mktemp("blackwell_run_scripts")
    git(repo, "init", "-q", "-b", "main")
    shas = {}
    for name, when in (("old", "2024-01-01T00:00:00+00:00"), ("fix", "2024-02-01T00:00:00+00:00"),
                       ("new", "2024-03-01T00:00:00+00:00")):
        (repo / "run.sh").write_text(f"# {name}\n")
        git(repo, "add", "run.sh")
        git(repo, "commit", "-q", "-m", name, date=when)
        shas[name] = (git(repo, "rev-parse", "HEAD"), when)
    git(repo, "checkout", "-q", "-b", "side", shas["old"][0])
    (repo / "side.sh").write_text("# side\n")
    git(repo, "add", "side.sh")
    git(repo, "commit", "-q", "-m", "side", date="2024-04-01T00:00:00+00:00")
    shas["side"] = (git(repo, "rev-parse", "HEAD"), "2024-04-01T00:00:00+00:00")
    return {"repo": repo, "shas": shas}


def errata_file(path: Path, commit: str, date: str | None = None) -> Path:
    path.write_text("repository: blackwell_run_scripts\nfixes:\n"
                    f"  - id: executable-capacity\n    commit: '{commit}'\n"
                    f"    date: {date or 'null'}\n    summary: stand-in fix\n")
    return path


@pytest.fixture(scope="module")
def ordered_corpus(run_scripts, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ordered")
    for name, (sha, when) in run_scripts["shas"].items():
        corpus.write_valid(root / name, run_scripts=f"{sha} {when} main dirty=false")
    return root


def test_commit_order_through_git_ancestry(run_scripts, ordered_corpus, tmp_path):
    shas = run_scripts["shas"]
    errata = errata_file(tmp_path / "errata.yaml", shas["fix"][0][:7])
    result = audit_target(ordered_corpus, errata,
                          {"blackwell_run_scripts": run_scripts["repo"]})
    verdicts = {u.path: (u.verdict, u.reasons) for u in result.uploads}
    assert verdicts == {"fix": ("VALID", []), "new": ("VALID", []),
                        "old": ("INVALID", ["predates-fix:executable-capacity"]),
                        "side": ("INVALID", ["predates-fix:executable-capacity"])}


def test_commit_order_from_dates_without_clone(run_scripts, ordered_corpus, tmp_path):
    """Dates are the weaker fallback: the side branch, dated after the fix, passes by date."""
    shas = run_scripts["shas"]
    errata = errata_file(tmp_path / "errata.yaml", shas["fix"][0], shas["fix"][1])
    verdicts = {u.path: u.verdict for u in audit_target(ordered_corpus, errata).uploads}
    assert verdicts == {"fix": "VALID", "new": "VALID", "old": "INVALID", "side": "VALID"}


def test_commit_order_unknown_without_clone_or_date(run_scripts, ordered_corpus, tmp_path):
    errata = errata_file(tmp_path / "errata.yaml", run_scripts["shas"]["fix"][0])
    verdicts = {u.path: u.verdict for u in audit_target(ordered_corpus, errata).uploads}
    assert verdicts == {"fix": "VALID", "new": "UNKNOWN", "old": "UNKNOWN", "side": "UNKNOWN"}


def test_cli_with_git_repo_and_errata_json(run_scripts, ordered_corpus, tmp_path):
    errata = errata_file(tmp_path / "errata.yaml", run_scripts["shas"]["fix"][0][:7])
    res = CliRunner().invoke(main, ["audit", str(ordered_corpus), "--errata", str(errata),
                                    "--git-repo", f"blackwell_run_scripts={run_scripts['repo']}",
                                    "--json", "--strict"])
    assert res.exit_code == 1, (res.stderr, res.exception)
    doc = json.loads(res.stdout)
    assert doc["summary"] == {"VALID": 2, "INVALID": 2, "UNKNOWN": 0}
    assert {u["path"] for u in doc["uploads"]} == {"fix", "new", "old", "side"}
    assert set(doc["uploads"][0]) >= {"path", "verdict", "reasons", "ignored_cells"}


def test_bad_errata_names_file_line_and_field(tmp_path):
    path = tmp_path / "errata.yaml"
    path.write_text("repository: r\nfixes:\n  - id: a\n    commit: 12345678\n")
    with pytest.raises(BadInput, match=r"errata.yaml:4: fixes\[0\].commit"):
        load_errata(path)
    path.write_text("repository: r\nfixes:\n  - id: a\n    commit: null\n  - id: a\n")
    with pytest.raises(BadInput, match="duplicate fix id"):
        load_errata(path)


def test_bad_git_repo_option(tmp_path, valid):
    res = CliRunner().invoke(main, ["audit", str(valid), "--git-repo", f"x={tmp_path}"])
    assert res.exit_code == 2 and "not a git checkout" in res.stderr


# ------------------------------------------------------------------ untrusted input

def test_uploads_found_at_any_depth_not_through_links(valid, tmp_path):
    root = tmp_path / "target"
    corpus.copy(valid, root / "a" / "b" / "c")
    (root / "linked").symlink_to(valid, target_is_directory=True)
    result = audit_target(root)
    assert [u.path for u in result.uploads] == ["a/b/c"]


def test_table_linked_out_of_target_is_not_read(mutant, valid):
    (mutant / ATTEMPTS_TSV).unlink()
    (mutant / ATTEMPTS_TSV).symlink_to(valid / ATTEMPTS_TSV)
    u = only(audit_target(mutant))
    assert u.verdict == "UNKNOWN" and "link out of TARGET" in " ".join(u.why)


def test_cell_linked_is_not_followed(mutant, valid):
    (mutant / "cells" / "X__echo__measure__cap2p00__a9").symlink_to(valid / "cells")
    u = only(audit_target(mutant))
    assert u.verdict == "UNKNOWN" and "a link (not followed)" in " ".join(u.why)


def test_malformed_row_makes_unknown_naming_the_line(mutant):
    with open(mutant / ATTEMPTS_TSV, "a") as fh:
        fh.write("corpus\tQWEN3_30B\techo\tmeas")          # truncated last line
    u = only(audit_target(mutant))
    assert u.verdict == "UNKNOWN"
    assert f"capacity_attempts.tsv:{len((mutant / ATTEMPTS_TSV).read_text().splitlines())}" \
        in " ".join(u.why)


def test_malformed_row_does_not_hide_a_violation(mutant):
    corpus.edit(mutant, ATTEMPTS_TSV, corpus.set_where("purpose", "natural", backend="echo",
                                                       purpose="measure"))
    with open(mutant / ATTEMPTS_TSV, "a") as fh:
        fh.write("garbage\n")
    assert "natural-selection" in only(audit_target(mutant)).reasons


@pytest.mark.parametrize("data", [b"\x00\x01\x02pickle", b"\xff\xfe bad utf8\n", b"",
                                  b"a\ta\nx\ty\n"])
def test_garbage_tables_are_reasoned_unknown(mutant, data):
    (mutant / ATTEMPTS_TSV).write_bytes(data)
    u = only(audit_target(mutant))
    assert u.verdict == "UNKNOWN" and any("capacity_attempts.tsv" in w for w in u.why)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(["echo", "ECHO", "natural", "measure", "validate",
                                          "1.0", "1.02", "2.00", "", "x", "65536", "\r",
                                          "cells/a__cap1p75__a1", "\u00e9", "-1", "nan",
                                          "1e400", "9" * 50, "1e999999999"]),
                         max_size=25), max_size=8))
def test_any_table_text_gives_a_verdict_never_a_traceback(valid, tmp_path, rows):
    """Property: whatever the attempts table holds, audit returns a reasoned verdict."""
    target = tmp_path / "fuzz"                      # reused across examples: only the table changes
    if not target.exists():
        corpus.copy(valid, target)
    header = "\t".join(corpus.COLUMNS[ATTEMPTS_TSV])
    (target / ATTEMPTS_TSV).write_text("\n".join([header, *("\t".join(r) for r in rows)]))
    u = only(audit_target(target))
    assert u.verdict in ("VALID", "INVALID", "UNKNOWN")
    assert u.verdict == "VALID" or u.why


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(["echo", "ＥＣＨＯ", "true", "false", "1.0", "1.02",
                                          "1.21875", "4936", "4096", "", "x", "-1", "nan",
                                          "1e400", "0", "9" * 50, "1e999999999", "-0",
                                          "QWEN3_30B", "\u00e9"]),
                         max_size=21), max_size=6))
def test_any_selection_text_gives_a_verdict_never_a_traceback(valid, tmp_path, rows):
    """Property: whatever the selection table holds, audit returns a reasoned verdict."""
    target = tmp_path / "fuzz-selection"
    if not target.exists():
        corpus.copy(valid, target)
    header = "\t".join(corpus.COLUMNS[SELECTION_TSV])
    (target / SELECTION_TSV).write_text("\n".join([header, *("\t".join(r) for r in rows)]))
    u = only(audit_target(target))
    assert u.verdict in ("VALID", "INVALID", "UNKNOWN")
    assert u.verdict == "VALID" or u.why


@pytest.mark.parametrize(("table", "column", "value"), [
    (SELECTION_TSV, "selected_capacity", "1e400"), (ATTEMPTS_TSV, "capacity", "1e400"),
    (ATTEMPTS_TSV, "peak_actual_valid_recv", "9" * 400), (SELECTION_TSV, "uniform_tokens", "9" * 30),
    (ATTEMPTS_TSV, "capacity", "1e999999999"), (SELECTION_TSV, "drop_risk_95", "1e-999999999")])
def test_absurd_numbers_are_reasoned_not_a_traceback(mutant, table, column, value):
    corpus.edit(mutant, table, corpus.set_where(column, value, model="QWEN3_30B"))
    u = only(audit_target(mutant))
    assert u.verdict in ("INVALID", "UNKNOWN") and u.why


def test_oversized_table_is_not_read(mutant, monkeypatch):
    monkeypatch.setattr(readers, "TSV_CAP_BYTES", 100)
    u = only(audit_target(mutant))
    assert u.verdict == "UNKNOWN" and "over the 100-byte cap" in " ".join(u.why)


def test_fifo_named_like_a_table_does_not_hang(mutant):
    (mutant / TIMING_TSV).unlink()
    os.mkfifo(mutant / TIMING_TSV)
    u = only(audit_target(mutant))
    assert "timing.tsv is not a regular file" in " ".join(u.why)


def test_no_upload_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="no upload found"):
        audit_target(tmp_path)


# ------------------------------------------------------------------ hf:// targets

def test_parse_hf_target():
    assert parse_hf_target("hf://datasets/org/name") == ("org/name", None)
    assert parse_hf_target("hf://datasets/my-org/ep.runs@v1.2") == ("my-org/ep.runs", "v1.2")
    assert parse_hf_target("hf://datasets/o/n@refs/pr/3") == ("o/n", "refs/pr/3")
    assert parse_hf_target("results/x") is None
    for bad in ("hf://models/o/n", "hf://datasets/o", "hf://datasets/o/n/extra", "hf://datasets/o/n@"):
        with pytest.raises(BadInput):
            parse_hf_target(bad)


# the fetch itself, through the real huggingface_hub: tests/unit/test_audit_hf.py


# ------------------------------------------------------------------ CLI outputs

def test_cli_table_tsv_and_strict(valid, mutant, tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["audit", str(valid), "--strict", "--out", str(tmp_path / "v.tsv")])
    assert res.exit_code == 0 and "VALID" in res.stdout and "audited in" in res.stdout
    lines = (tmp_path / "v.tsv").read_text().splitlines()
    assert lines[0] == "path\tverdict\treasons\tignored_cells\twhy\tnotes\tsample_seed"
    assert lines[1].startswith(".\tVALID\t\tQWEN3_30B__echo__natural__cap1p75__a1")
    (mutant / "provenance.txt").unlink()
    res = runner.invoke(main, ["audit", str(mutant)])
    assert res.exit_code == 0 and "INVALID" in res.stdout
    assert runner.invoke(main, ["audit", str(mutant), "--strict"]).exit_code == 1


def test_cli_json_is_one_document(valid):
    res = subprocess.run([sys.executable, "-m", "harness.cli", "audit", str(valid), "--json"],
                         capture_output=True, text=True, cwd=REPO, check=False)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["summary"] == {"VALID": 1, "INVALID": 0, "UNKNOWN": 0}
    assert doc["uploads"][0]["ignored_cells"] == ["QWEN3_30B__echo__natural__cap1p75__a1"]


# ------------------------------------------------------------------ the harness's own results

REDUCED = REPO / "tests" / "fixtures" / "runbooks" / "reduced.yaml"
CAMPAIGN_SECRET = corpus.CAMPAIGN_SECRET


def rewrite(path: Path, change) -> None:
    """Rewrite a TSV keeping its own header; change(row) edits a row in place."""
    lines = path.read_text().splitlines()
    header = lines[0].split("\t")
    out = [lines[0]]
    for line in lines[1:]:
        row = dict(zip(header, line.split("\t"), strict=True))
        change(row)
        out.append("\t".join(row[c] for c in header))
    path.write_text("\n".join(out) + "\n")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    """The reduced default campaign run for real by `epcap run` (reference backends, CPU),
    shared with the other audit modules (corpus.harness_campaign): tests copy before editing."""
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


@pytest.mark.slow
def test_harness_campaign_audits_valid_and_mutations_do_not(campaign, tmp_path):
    u = only(audit_target(campaign))         # its speed: tests/benchmarks/bench_audit.py
    assert (u.verdict, u.why) == ("VALID", [])

    unvalidated = corpus.copy(campaign, tmp_path / "unvalidated")
    dropped = []

    def no_ultraep_validate(row):
        if not dropped and row["backend"] == "ultraep" and row["purpose"] == "validate":
            dropped.append(row)
            return None
        return row
    corpus.edit(unvalidated, ATTEMPTS_TSV, no_ultraep_validate)
    # the dropped row's finished cell now has no row: cell-identity (issue 23); the
    # selection's own check is the replay's here (unvalidated-selection is the earlier
    # layout's rule: n/a where the runbook as run is in the upload)
    assert dropped and only(audit_target(unvalidated)).reasons == ["cell-identity"]
    cell_dir = unvalidated / dropped[0]["cell_dir"]
    shutil.rmtree(cell_dir)                     # and its cell: the replay misses the evidence
    gone = only(audit_target(unvalidated))
    assert gone.verdict == "INVALID" and "held-out-not-rederived" in gone.reasons, gone.reasons
    assert any(cell_dir.name in w for w in gone.why), gone.why

    saturated = corpus.copy(campaign, tmp_path / "saturated")
    (cell,) = [p for p in (saturated / "cells").iterdir()
               if "__echo__validate__" in p.name and p.name.startswith("QWEN3_30B")]
    log = next(cell.glob("rank*.log"))
    lines = log.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "[MOE_DROP_DEBUG][dispatch]" in line)
    budget = lines[at].rsplit("budget=", 1)[1].split()[0]
    lines[at] = lines[at].replace("actual_valid_recv=", "was=").replace(
        " budget=", f" actual_valid_recv={budget} budget=")
    log.write_text("\n".join(lines) + "\n")
    bad = only(audit_target(saturated))
    assert bad.verdict == "INVALID" and "validated-but-saturated" in bad.reasons
    for path in campaign.rglob("*"):                          # no secret value anywhere
        if path.is_file():
            assert CAMPAIGN_SECRET.encode() not in path.read_bytes(), path

    natural = corpus.copy(campaign, tmp_path / "natural")
    flipped = []

    def one_natural(row):
        if not flipped and row["backend"].lower() == "echo" and row["purpose"] == "validate":
            row["purpose"] = "natural"
            flipped.append(row)
    rewrite(natural / ATTEMPTS_TSV, one_natural)
    assert flipped and "natural-selection" in only(audit_target(natural)).reasons

    fabricated = corpus.copy(campaign, tmp_path / "fabricated")
    for table in (ATTEMPTS_TSV, SELECTION_TSV):
        rewrite(fabricated / table, lambda r: r.update(required_capacity="1.0")
                if r["backend"].lower() == "echo" and r["required_capacity"] else None)
    bad = only(audit_target(fabricated))
    assert bad.verdict == "INVALID" and "fabricated-requirement" in bad.reasons


@pytest.mark.slow
def test_campaign_stopped_after_preflight_is_nothing_to_judge(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(REDUCED),
                           "--results", str(tmp_path), "--until", "preflight"], cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (root,) = [p.parent for p in tmp_path.rglob(ATTEMPTS_TSV)]
    u = only(audit_target(root))
    assert (u.verdict, u.reasons) == ("UNKNOWN", ["nothing-to-judge"])


@pytest.mark.slow
def test_publish_dry_run_on_the_harness_campaign(campaign, capsys, monkeypatch):
    import huggingface_hub

    from harness.publish import cli_publish

    class Offline:
        def list_repo_files(self, *a, **k):
            raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "HfApi", Offline)
    assert cli_publish(str(campaign), "org/runs", dry_run=True) == 0
    assert "-> " in capsys.readouterr().out


def test_every_rule_code_is_a_documented_reason_code():
    """A rule row's code must be one of REASON_CODES (harness/audit/rules/README.md)."""
    from harness.audit import CATALOGUE, REASON_CODES

    codes = [r.code for r in CATALOGUE]
    assert codes and set(codes) <= {c.split(":")[0] for c in REASON_CODES}
