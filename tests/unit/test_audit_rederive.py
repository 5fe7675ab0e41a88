"""Issue 23: each lie the forger planted, by hand, in a copy of a real harness campaign (the
reduced runbook, run by `epcap run`) gives INVALID or UNKNOWN with its reason code; the
untouched campaign, and legitimate variety, stay VALID."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from harness.audit import audit_target
from harness.results.layout import ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_rederive", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

pytestmark = pytest.mark.slow

QV = "cells/QWEN3_30B__echo__validate__cap1p125__a1"
QM = "cells/QWEN3_30B__echo__measure__cap2p00__a1"
DM = "cells/DEEPSEEK_V2_LITE__echo__measure__cap2p00__a1"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


@pytest.fixture
def lie(campaign, tmp_path) -> Path:
    return corpus.link_copy(campaign, tmp_path / "lie")


def verdict(root: Path) -> tuple[str, list[str]]:
    (u,) = audit_target(root).uploads
    return u.verdict, u.reasons


def json_edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    corpus.replace_file(path, json.dumps(data, indent=1).encode())


SEAM = "\n<<epcap-test: next rank log>>\n"


def log_edit(cell: Path, change) -> None:
    """Apply `change` to the cell's rank logs as one text (each rank<R>.log holds rank R only,
    and an edit may move slots between ranks), then write each file's part back."""
    logs = sorted(cell.glob("rank*.log"))
    parts = change(SEAM.join(p.read_text() for p in logs)).split(SEAM)
    parts += [""] * (len(logs) - len(parts))     # a cut that ends in an earlier rank's log
    for log, text in zip(logs, parts, strict=True):
        corpus.replace_file(log, text.encode())


def test_the_harness_campaign_is_valid(campaign):
    (u,) = audit_target(campaign).uploads
    assert (u.verdict, u.why) == ("VALID", [])
    assert {c.code for c in u.checks if c.state == "pass"} >= {
        "runbook-altered", "provenance-incomplete", "cell-identity", "not-rederived",
        "incomplete-telemetry", "selection-not-rederived", "timing-cell"}


# ------------------------------------------------------------ which cell a row is

def test_row_naming_another_models_cell(lie):
    corpus.set_row(lie, ATTEMPTS_TSV, {"cell_dir": QM}, cell_dir=DM)
    v, codes = verdict(lie)
    assert v == "INVALID" and "cell-identity" in codes


def test_phantom_model(lie):
    corpus.set_row(lie, SELECTION_TSV, {"model": "QWEN3_30B", "backend": "echo"}, model="QWEN9_1T")
    v, codes = verdict(lie)
    assert v == "INVALID" and "cell-identity" in codes


def test_model_name_with_an_invisible_character(lie):
    corpus.set_row(lie, SELECTION_TSV, {"model": "QWEN3_30B", "backend": "ultraep"},
            model="QWEN3_30B\u200b")
    v, codes = verdict(lie)
    assert v == "INVALID" and "cell-identity" in codes


# ------------------------------------------------------------ completeness and status

def test_validate_lacking_an_iteration(lie):
    log_edit(lie / QV, lambda t: "\n".join(
        x for x in t.splitlines() if "iter=4 " not in x) + "\n")
    v, codes = verdict(lie)
    assert v == "INVALID" and "incomplete-telemetry" in codes


def test_validate_with_a_malformed_row(lie):
    log_edit(lie / QV, lambda t: t.replace("actual_valid_recv=", "actual_valid_recv=x", 1))
    v, codes = verdict(lie)
    assert v == "INVALID" and "incomplete-telemetry" in codes


def test_cell_json_says_crash_row_says_ok(lie):
    def crash(d):
        d["status"] = "crash"
        d["launcher"]["exit_code"] = 1
    json_edit(lie / QV / "cell.json", crash)
    v, codes = verdict(lie)
    assert v == "INVALID" and "not-rederived" in codes


def test_does_not_fit_without_an_out_of_memory_in_its_log(lie):
    corpus.set_row(lie, ATTEMPTS_TSV, {"cell_dir": QM}, status="does_not_fit")
    json_edit(lie / QM / "cell.json", lambda d: d.update(status="does_not_fit"))
    v, codes = verdict(lie)
    assert v == "INVALID" and "not-rederived" in codes


def test_does_not_fit_whose_log_shows_an_assertion(lie):
    oom = "cells/QWEN3_30B__moonep__time__cap1p125__a1"
    log_edit(lie / oom, lambda t: t + "AssertionError: expert index out of range\n")
    v, codes = verdict(lie)
    assert v == "INVALID" and "not-rederived" in codes


def test_finished_attempt_with_no_row(lie):
    corpus.edit(lie, ATTEMPTS_TSV,
                lambda r: None if r["cell_dir"].endswith("moonep__time__cap1p125__a1") else r)
    v, codes = verdict(lie)
    assert v == "INVALID" and "cell-identity" in codes


def test_one_cell_backing_two_rows(lie):
    corpus.set_row(lie, ATTEMPTS_TSV, {"cell_dir": "cells/QWEN3_30B__ultraep__time__cap1p125__a2"},
            cell_dir="cells/QWEN3_30B__ultraep__time__cap1p125__a1", attempt="1")
    v, codes = verdict(lie)
    assert v == "INVALID" and "cell-identity" in codes


# ------------------------------------------------------------ derived columns

@pytest.mark.parametrize("column,value,code", [
    ("over_provision", "1.2", "selection-not-rederived"),
    ("measured_at_capacity", "1.50", "selection-not-rederived"),
    ("validate_steps", "9", "held-out-not-rederived"),
    ("drop_risk_95", "0.1", "held-out-not-rederived"),
    ("selected_capacity", "1.25", "selection-not-rederived")])
def test_selection_column_not_rederived(lie, column, value, code):
    """Each column is compared with the pipeline replayed on the cells, under the code of
    the step that writes it (select, or validate's step and risk columns)."""
    corpus.set_row(lie, SELECTION_TSV, {"model": "QWEN3_30B", "backend": "echo"}, **{column: value})
    v, codes = verdict(lie)
    assert v == "INVALID" and code in codes


def test_requirement_from_a_saturated_lower_bound_measure(lie):
    """The measure's log clipped at its budget: a lower bound, never a requirement."""
    def clip(text):
        lines = text.splitlines()
        at = next(i for i, x in enumerate(lines) if "[dispatch]" in x)
        budget = lines[at].rsplit("budget=", 1)[1].split()[0]
        head, _, tail = lines[at].partition("actual_valid_recv=")
        lines[at] = head + f"actual_valid_recv={budget} " + tail.split(" ", 1)[1]
        return "\n".join(lines) + "\n"
    log_edit(lie / QM, clip)
    v, codes = verdict(lie)
    assert v == "INVALID" and "selection-not-rederived" in codes


@pytest.mark.parametrize("column,value", [("rows", "99"), ("saturated_rows", "1"),
                                          ("peak_actual_valid_recv", "1040"),
                                          ("budget_tokens", "2049"), ("capacity_tag", "cap2p0"),
                                          ("uniform_tokens", "1025"), ("exit_code", "3"),
                                          ("backend_impl", "other")])
def test_attempt_column_not_rederived(lie, column, value):
    corpus.set_row(lie, ATTEMPTS_TSV, {"cell_dir": QM}, **{column: value})
    v, codes = verdict(lie)
    assert v == "INVALID" and "not-rederived" in codes


# ------------------------------------------------------------ timing layer

def test_timing_row_whose_cell_ran_at_another_capacity(lie):
    corpus.set_row(lie, TIMING_TSV, {"model": "QWEN3_30B", "backend": "echo"},
            cell_dir="cells/QWEN3_30B__echo__validate__cap1p125__a1")
    v, codes = verdict(lie)
    assert v == "INVALID" and "timing-cell" in codes


# ------------------------------------------------------------ the upload's own word

def test_runbook_edited_after_the_run(lie):
    book = lie / "runbook.yaml"
    corpus.replace_file(book, book.read_bytes().replace(b"max_validate_steps: 4",
                                                        b"max_validate_steps: 5"))
    v, codes = verdict(lie)
    assert v == "INVALID" and "runbook-altered" in codes


def test_runbook_deleted(lie):
    (lie / "runbook.yaml").unlink()
    v, codes = verdict(lie)
    assert v == "INVALID" and "runbook-altered" in codes


def test_cell_spliced_from_another_run(lie):
    prov = lie / QV / "provenance.txt"
    other = hashlib.sha256(b"another runbook").hexdigest()
    text = "\n".join(f"runbook.sha256: {other}" if x.startswith("runbook.sha256:") else x
                     for x in prov.read_text().splitlines()) + "\n"
    corpus.replace_file(prov, text.encode())
    v, codes = verdict(lie)
    assert v == "INVALID" and "runbook-altered" in codes


def test_provenance_stripped_to_one_line(lie):
    prov = lie / "provenance.txt"
    keep = [x for x in prov.read_text().splitlines() if x.startswith("runbook.sha256:")]
    corpus.replace_file(prov, ("\n".join(keep) + "\n").encode())
    v, codes = verdict(lie)
    assert v == "INVALID" and "provenance-incomplete" in codes


@pytest.mark.parametrize("how", ["absent", "respelt", "twice"])
def test_runbook_repository_absent_respelt_or_twice(lie, how):
    prov = lie / "provenance.txt"
    lines = prov.read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("repo.epcap:"))
    if how == "absent":
        del lines[at]
    elif how == "respelt":
        lines[at] = lines[at].replace("repo.epcap:", "repo.EPCAP:")
    else:
        lines.append(lines[at])
    corpus.replace_file(prov, ("\n".join(lines) + "\n").encode())
    v, codes = verdict(lie)
    assert v == "INVALID" and "provenance-incomplete" in codes


def test_decoy_telemetry_tags_in_the_runbook(lie):
    """Tags in the upload's runbook are never used; editing the runbook is caught anyway."""
    book = lie / "runbook.yaml"
    text = book.read_bytes()
    decoy = re.sub(rb"options: \{launch: (\w+)\}",
                   rb"options: {launch: \1, telemetry_tags: {dispatch: '[DECOY]'}}", text, count=1)
    assert decoy != text, "the runbook was not edited: the test would judge the original"
    corpus.replace_file(book, decoy)
    v, codes = verdict(lie)
    assert v in ("INVALID", "UNKNOWN") and "runbook-altered" in codes


def test_cell_json_without_launcher_is_unknown_with_file_and_field(lie):
    json_edit(lie / QM / "cell.json", lambda d: d.pop("launcher"))
    (u,) = audit_target(lie).uploads
    assert u.verdict == "UNKNOWN" and "not-rederived" in u.reasons
    assert any("cell.json: field launcher.state missing" in w for w in u.why)


# ------------------------------------------------------------ legitimate variety

def test_crlf_bom_and_extra_columns_and_files_stay_valid(lie):
    path = lie / ATTEMPTS_TSV
    lines = path.read_text().splitlines()
    lines = [lines[0] + "\tnote"] + [x + "\textra" for x in lines[1:]]
    corpus.replace_file(path, ("\ufeff" + "\r\n".join(lines) + "\r\n").encode())
    (lie / "README.txt").write_text("extra file\n")
    (u,) = audit_target(lie).uploads
    assert (u.verdict, u.why) == ("VALID", [])


def test_nested_and_side_by_side_uploads_stay_valid(campaign, tmp_path):
    corpus.link_copy(campaign, tmp_path / "a" / "x")
    corpus.link_copy(campaign, tmp_path / "b")
    result = audit_target(tmp_path)
    assert [u.verdict for u in result.uploads] == ["VALID", "VALID"]


def test_publish_dry_run_refuses_a_new_lie(lie, capsys, monkeypatch):
    """publish --dry-run still refuses anything not VALID, the new codes included."""
    import huggingface_hub

    from harness.publish import cli_publish

    class Offline:
        def list_repo_files(self, *a, **k):
            raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "HfApi", Offline)
    book = lie / "runbook.yaml"
    corpus.replace_file(book, book.read_bytes() + b"# edited after the run\n")
    assert cli_publish(str(lie), "org/runs", dry_run=True) != 0
    said = capsys.readouterr()
    assert "runbook-altered" in said.out + said.err


# ------------------------------------------------------------ the validate step, held out

def without_codes(monkeypatch, *codes: str) -> None:
    """The audit with these rules disabled: how a check is seen failing on its lie."""
    from harness.audit import engine
    monkeypatch.setattr(engine, "RULES", tuple(r for r in engine.RULES if r.code not in codes))


def caught_by(root: Path, monkeypatch, *codes: str) -> None:
    """Each code is among the reasons, and the upload is VALID with all of them disabled."""
    (u,) = audit_target(root).uploads
    assert u.verdict == "INVALID" and set(codes) <= set(u.reasons), u.why
    with monkeypatch.context() as m:
        without_codes(m, *codes)
        (again,) = audit_target(root).uploads
        assert (again.verdict, again.why) == ("VALID", []), again.why


def restate(root: Path, key: str) -> None:
    """The careful forger: re-state a cell's attempts row, cell.json status and summary from
    the harness's own derivation of its (edited) logs."""
    from fractions import Fraction

    from harness.audit.load import load_upload
    from harness.audit.rules.rederive import SUMMARY_KEYS, derive
    from harness.results.tables import cell_text
    upload = load_upload(root.parent, root, 128)
    got = derive(upload, upload.cells[key])

    def text(v):
        return cell_text(float(v) if isinstance(v, Fraction) else v)
    corpus.set_row(root, ATTEMPTS_TSV, {"cell_dir": key},
            **{c: text(v) for c, v in got.columns.items() if c != "campaign"})

    def change(d):
        d["status"] = got.columns["status"]
        d["summary"].update({k: getattr(got.summary, k) for k in SUMMARY_KEYS})
    json_edit(root / key / "cell.json", change)


def clip_first_dispatch_row(text: str) -> str:
    """One dispatch row clipped at its budget: the buffer was full (a drop). The slots it
    gains are taken from another rank of its (iteration, layer), as a dispatch conserves
    them (harness/audit/rules/conservation.py)."""
    lines = text.splitlines()
    at = next(i for i, x in enumerate(lines) if "[dispatch]" in x)
    budget = lines[at].rsplit("budget=", 1)[1].split()[0]
    head, _, tail = lines[at].partition("actual_valid_recv=")
    before, rest = tail.split(" ", 1)
    lines[at] = head + f"actual_valid_recv={budget} " + rest
    group = lines[at].split("iter=")[1].split()[0], lines[at].split("layer=")[1].split()[0]
    peer = next(i for i, x in enumerate(lines) if i != at and "[dispatch]" in x
                and (x.split("iter=")[1].split()[0], x.split("layer=")[1].split()[0]) == group)
    head, _, tail = lines[peer].partition("actual_valid_recv=")
    value, rest = tail.split(" ", 1)
    lines[peer] = head + f"actual_valid_recv={int(value) - int(budget) + int(before)} " + rest
    return "\n".join(lines) + "\n"


def test_dropping_validate_hidden_behind_a_later_pass(lie, monkeypatch):
    """QWEN3_30B echo's validate at 1.125 dropped (a1, its row and cell.json re-stated from
    its logs); a later passing validate at the same 1.125 (a2) is the one accepted. The
    harness steps up after drops: the selection must be 1.25, and a2 cannot have run (the
    edited row is also no longer its seed's routing: routing-not-from-seed)."""
    a2 = QV.replace("__a1", "__a2")
    shutil.copytree(lie / QV, lie / a2)
    json_edit(lie / a2 / "cell.json", lambda d: (d.update(name=Path(a2).name),
                                                 d["cell"].update(attempt=2)))
    row = next(r for r in corpus.read_rows(lie / ATTEMPTS_TSV) if r["cell_dir"] == QV)
    corpus.append(lie, ATTEMPTS_TSV, {**row, "attempt": "2", "cell_dir": a2})
    log_edit(lie / QV, clip_first_dispatch_row)
    restate(lie, QV)
    corpus.set_row(lie, SELECTION_TSV, {"model": "QWEN3_30B", "backend": "echo"},
            validate_attempts="2")
    caught_by(lie, monkeypatch, "held-out-not-rederived", "routing-not-from-seed")
    (u,) = audit_target(lie).uploads
    assert any("validate__cap1p125__a2: ran at 1.125, but the pipeline asks QWEN3_30B/echo "
               "for a validate run at 1.25" in w for w in u.why), u.why


def test_held_out_claim_whose_validate_cell_ran_the_measure_seed(lie, monkeypatch):
    """The validate cell's argv says it ran --seed 1234, the measure seed; the runbook gives
    validate runs 1235 and the selection claims held_out=true (also an argv that is not the
    backend's command for the cell: launch-not-runbook; and logs that are not the routing of
    the seed it states: routing-not-from-seed)."""
    def measure_seed(d):
        d["argv"][d["argv"].index("--seed") + 1] = "1234"
    json_edit(lie / QV / "cell.json", measure_seed)
    caught_by(lie, monkeypatch, "held-out-not-rederived", "launch-not-runbook",
              "routing-not-from-seed")


@pytest.mark.parametrize("column,value", [("validate_attempts", "2"), ("validate_seed", "1234"),
                                          ("held_out", "false"),
                                          ("predicted_drop_risk", "0.0001")])
def test_validate_step_column_not_rederived(lie, monkeypatch, column, value):
    corpus.set_row(lie, SELECTION_TSV, {"model": "QWEN3_30B", "backend": "echo"}, **{column: value})
    (u,) = audit_target(lie).uploads
    assert u.verdict == "INVALID" and "held-out-not-rederived" in u.reasons, u.why


# ------------------------------------------------------------ the rest of the named lies

def test_validate_lacking_a_rank(lie, monkeypatch):
    """Every telemetry row of rank 1 removed from the validate's log (rows and cell.json
    summary re-stated from the edited log by the harness's own code). The selection's
    validate_peak, no longer its validate run's, is the replay's to compare
    (held-out-not-rederived; inconsistent-requirement restates it only in the earlier
    layout)."""
    log_edit(lie / QV, lambda t: "\n".join(
        x for x in t.splitlines() if "[dispatch]" not in x or " rank=1 " not in x) + "\n")
    restate(lie, QV)
    caught_by(lie, monkeypatch, "incomplete-telemetry", "held-out-not-rederived",
              "conservation-broken")


def test_cell_json_says_assert_row_says_ok(lie):
    def assertion(d):
        d["status"] = "assert"
        d["launcher"]["exit_code"] = 1
    json_edit(lie / QV / "cell.json", assertion)
    v, codes = verdict(lie)
    assert v == "INVALID" and "not-rederived" in codes


def test_finished_crash_attempt_with_no_row(lie, monkeypatch):
    """A crashed second measure of QWEN3_30B echo (exit 1, cell.json says crash) whose row
    was deleted: every finished cell has its row."""
    a2 = QM.replace("__a1", "__a2")
    shutil.copytree(lie / QM, lie / a2)

    def crashed(d):
        d.update(name=Path(a2).name, status="crash")
        d["cell"].update(attempt=2)
        d["launcher"].update(exit_code=1)
    json_edit(lie / a2 / "cell.json", crashed)
    log_edit(lie / a2, lambda t: "\n".join(t.splitlines()[: len(t.splitlines()) // 2]) + "\n")
    restate(lie, a2)
    (u,) = audit_target(lie).uploads
    assert u.verdict == "INVALID" and "cell-identity" in u.reasons
    assert any("a finished attempt" in w and a2 in w for w in u.why)


def test_one_cell_backing_two_models_rows(lie):
    """DEEPSEEK_V2_LITE's measure row names QWEN3_30B's measure cell."""
    corpus.set_row(lie, ATTEMPTS_TSV, {"cell_dir": DM}, cell_dir=QM)
    v, codes = verdict(lie)
    assert v == "INVALID" and "cell-identity" in codes


def test_runbook_read_only_through_the_bounded_reader(lie):
    """A billion-laughs runbook.yaml: the bounded YAML reader refuses it (no expansion, no
    hang), and the edit itself is a runbook-altered."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True))
    corpus.replace_file(lie / "runbook.yaml", bomb.encode())
    (u,) = audit_target(lie).uploads
    assert u.verdict == "INVALID" and "runbook-altered" in u.reasons


# ------------------------------------------------------------ a real step-up

STEPUP = corpus.REPO / "tests" / "fixtures" / "runbooks" / "stepup.yaml"
DROPPED = "cells/QWEN3_30B__echo__validate__cap1p0938__a1"


@pytest.fixture(scope="module")
def stepup(tmp_path_factory) -> Path:
    """stepup.yaml run once per session with --until validate: a validate that drops and
    the step-up that passes (also a campaign stopped before its time stage)."""
    import subprocess
    import sys
    results = tmp_path_factory.getbasetemp() / "stepup-campaign"
    if not (results / ".complete").exists():
        if results.exists():
            shutil.rmtree(results)
        run = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(STEPUP),
                              "--results", str(results), "--until", "validate"],
                             cwd=corpus.REPO, capture_output=True, text=True, timeout=600,
                             check=False)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        (results / ".complete").touch()
    (root,) = [p.parent for p in results.rglob(ATTEMPTS_TSV)]
    return root


def test_a_step_up_stays_valid(stepup):
    rows = [r for r in corpus.read_rows(stepup / ATTEMPTS_TSV) if r["purpose"] == "validate"]
    assert [(r["capacity"], r["status"]) for r in rows] == [("1.0938", "drops"),
                                                            ("1.1094", "ok")]
    (sel,) = corpus.read_rows(stepup / SELECTION_TSV)
    assert (sel["selected_capacity"], sel["validate_attempts"]) == ("1.1094", "2")
    (u,) = audit_target(stepup).uploads
    assert (u.verdict, u.why) == ("VALID", [])


def test_a_selection_that_ignores_its_dropping_validate(stepup, tmp_path):
    """The selection re-stated at the lower rung 1.0938 whose validate dropped (the cells
    kept): the lowest zero-drop rung given all validate attempts is 1.1094."""
    lie = corpus.link_copy(stepup, tmp_path / "lie")
    corpus.set_row(lie, SELECTION_TSV, {"model": "QWEN3_30B"}, selected_capacity="1.0938",
            selected_budget_tokens="8960", validate_attempts="1")
    (u,) = audit_target(lie).uploads
    assert u.verdict == "INVALID", u.why
    assert {"selection-not-rederived", "held-out-not-rederived"} <= set(u.reasons)
