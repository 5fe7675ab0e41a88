"""epcap publish: audit-gated, never-used paths, dry run, no secrets; only the hub is faked."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import huggingface_hub
import pytest

from harness import publish
from harness.errors import BadInput
from harness.publish import cli_publish
from harness.results.layout import ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)


class FakeApi:
    """Stands in for HfApi: records calls; never touches the network."""

    calls: list = []
    existing: list[str] | Exception = OSError("offline")

    def list_repo_files(self, repo_id, repo_type=None):
        FakeApi.calls.append(("list", repo_id, repo_type))
        if isinstance(FakeApi.existing, Exception):
            raise FakeApi.existing
        return FakeApi.existing

    def create_commit(self, **kwargs):
        FakeApi.calls.append(("upload", kwargs))
        return type("Info", (), {"commit_url": "https://hf.co/fake/commit"})()


@pytest.fixture(autouse=True)
def fake_hub(monkeypatch):
    FakeApi.calls, FakeApi.existing = [], OSError("offline")
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(publish, "hub_reachable", lambda: "")
    return FakeApi


@pytest.fixture
def valid(tmp_path) -> Path:
    return corpus.write_valid(tmp_path / "campaign")


def uploads(api) -> list[dict]:
    return [c[1] for c in api.calls if c[0] == "upload"]


def test_refuses_invalid(valid, capsys, fake_hub):
    corpus.edit(valid, ATTEMPTS_TSV, corpus.set_where("purpose", "natural", backend="echo",
                                                      purpose="measure"))
    assert cli_publish(str(valid), "org/runs", dry_run=False) == 1
    err = capsys.readouterr().err
    assert "refused" in err and "natural-selection" in err
    assert uploads(fake_hub) == []


def test_refuses_unknown(valid, capsys, fake_hub):
    corpus.drop_columns(valid, ATTEMPTS_TSV, "purpose")
    assert cli_publish(str(valid), "org/runs", dry_run=True) == 1
    assert "UNKNOWN" in capsys.readouterr().err


@pytest.mark.parametrize("lie", ["header-only", "after-preflight", "invalid"])
def test_dry_run_refuses_unknown_and_invalid_with_verdict_and_reasons(valid, capsys, fake_hub,
                                                                      lie):
    """Nothing to judge is never uploaded, nor a planted lie (issue 16)."""
    if lie == "invalid":             # UltraEP's validate row removed
        corpus.edit(valid, ATTEMPTS_TSV, lambda r: None if (r["backend"], r["purpose"]) ==
                    ("ultraep", "validate") else r)
    else:
        for table in (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV):
            corpus.edit(valid, table, lambda r: None)
        if lie == "after-preflight":
            shutil.rmtree(valid / "cells")
    assert cli_publish(str(valid), "org/runs", dry_run=True) == 1
    captured = capsys.readouterr()
    expected = ("audit verdict INVALID: unvalidated-selection" if lie == "invalid" else
                "audit verdict UNKNOWN: nothing-to-judge")
    assert expected in captured.err and "would upload" not in captured.out
    assert uploads(fake_hub) == []


def test_dry_run_lists_target_paths(valid, capsys, fake_hub):
    assert cli_publish(str(valid), "org/runs", dry_run=True) == 0
    out = capsys.readouterr().out
    prefix = out.split("hf://datasets/org/runs/", 1)[1].split()[0]
    assert prefix.startswith("corpus/") and prefix.endswith("/")
    stamp, run_id = prefix.split("/")[1].split("-")
    assert len(stamp) == 16 and stamp.endswith("Z") and len(run_id) == 12
    assert f"-> {prefix}capacity_attempts.tsv" in out
    assert f"-> {prefix}cells/QWEN3_30B__echo__measure__cap2p00__a1/provenance.txt" in out
    assert "existing paths not checked" in out
    assert uploads(fake_hub) == []


def test_upload_goes_to_a_new_prefix_with_exact_files(valid, capsys, fake_hub):
    (valid / "link.tsv").symlink_to(valid / ATTEMPTS_TSV)
    fake_hub.existing = ["corpus/20200101T000000Z-aaaaaaaaaaaa/capacity_attempts.tsv"]
    assert cli_publish(str(valid), "org/runs", dry_run=False) == 0
    (call,) = uploads(fake_hub)
    assert call["repo_type"] == "dataset" and call["repo_id"] == "org/runs"
    paths = [op.path_in_repo for op in call["operations"]]
    assert all(p.startswith("corpus/") for p in paths if p != "README.md") and "token" not in call
    assert any(p.endswith("/capacity_attempts.tsv") for p in paths)
    assert not any(p.endswith("link.tsv") for p in paths)
    assert "uploaded" in capsys.readouterr().out


def test_refuses_a_used_path(valid, monkeypatch, capsys, fake_hub):
    monkeypatch.setattr(publish, "target_prefix", lambda root: "corpus/T-1/")
    fake_hub.existing = ["corpus/T-1/capacity_attempts.tsv"]
    assert cli_publish(str(valid), "org/runs", dry_run=False) == 1
    assert "already used" in capsys.readouterr().err and uploads(fake_hub) == []


def test_refuses_files_holding_a_secret_value(valid, monkeypatch, capsys, fake_hub):
    monkeypatch.setenv("HF_TOKEN", "hf_uniqueSecretValue0123456789")
    with open(valid / "cells" / "QWEN3_30B__echo__measure__cap2p00__a1" / "rank0.log", "a") as fh:
        fh.write("argv --token hf_uniqueSecretValue0123456789\n")     # the rows stay as they were
    assert cli_publish(str(valid), "org/runs", dry_run=True) == 1
    assert "rank0.log contains the value" in capsys.readouterr().err


def test_refuses_a_tree_of_several_uploads(valid, tmp_path, capsys):
    corpus.copy(valid, tmp_path / "campaign" / "nested")
    assert cli_publish(str(tmp_path / "campaign"), "org/runs", dry_run=True) == 1
    assert "one campaign directory" in capsys.readouterr().err


def test_bad_repo_id(valid):
    with pytest.raises(BadInput, match="ORG/NAME"):
        cli_publish(str(valid), "not a repo", dry_run=True)


def test_unreachable_hub_is_not_listed(valid, monkeypatch, capsys, fake_hub):
    from huggingface_hub import constants
    monkeypatch.undo()
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    assert publish.hub_reachable(timeout_s=1) != ""
    assert cli_publish(str(valid), "org/runs", dry_run=True) == 0
    assert "127.0.0.1 unreachable" in capsys.readouterr().out
    assert ("list", "org/runs", "dataset") not in fake_hub.calls


def test_dry_run_opens_with_verdict_and_summary(valid, capsys, fake_hub):
    assert cli_publish(str(valid), "org/runs", dry_run=True) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "audit: VALID"
    assert lines[1].startswith("summary: ") and " cells, 4 of 4 pairs measured" in lines[1]
    assert " files (" in lines[1] and lines[1].endswith(" bytes")
    assert lines[2].startswith("dry run: would upload")


def test_refuses_a_campaign_where_nothing_was_measured(valid, capsys, fake_hub, monkeypatch):
    """Every pair without a selected capacity (all does_not_fit): refused unless
    --allow-empty. The audit is held VALID here so the check itself is what refuses."""
    import harness.publish as publish
    from harness.audit import AuditResult
    from harness.audit.engine import UploadVerdict
    from harness.results.layout import SELECTION_TSV
    corpus.edit(valid, SELECTION_TSV, lambda r: {**r, "selected_capacity": ""})
    monkeypatch.setattr(publish, "audit_target", lambda root: AuditResult(str(root), [
        UploadVerdict(".", "VALID", measured_pairs=0, selection_pairs=4)]))
    assert cli_publish(str(valid), "org/runs", dry_run=True) == 1
    assert "nothing measured" in capsys.readouterr().err
    assert cli_publish(str(valid), "org/runs", dry_run=True, allow_empty=True) == 0
    assert "0 of 4 pairs measured" in capsys.readouterr().out


def test_uploads_are_the_evidence_list_and_what_a_reader_needs(valid, capsys, fake_hub):
    """What is published is what the audit judged (audit.evidence's manifest, the list the
    hub fetch uses) and what a reader needs (report, figures, forecast and demand tables,
    routing traces); anything else is listed as not uploaded. Fails on the earlier list
    (evidence only: no report, no trace) and on a walk that uploads notes.txt."""
    from harness.audit.evidence import evidence_manifest
    (valid / "notes.txt").write_text("not evidence\n")
    trace = valid / "cells" / "QWEN3_30B__echo__measure__cap2p00__a1" / "routing_trace.jsonl"
    trace.write_text("{}\n")
    (valid / "report").mkdir()
    for name in ("report.md", "fig1_capacity.png", "forecast.tsv", "demand.tsv", "scratch.txt"):
        (valid / "report" / name).write_text("x\n")
    assert cli_publish(str(valid), "org/runs", dry_run=False) == 0
    (call,) = uploads(fake_hub)
    prefix = next(op.path_in_repo for op in call["operations"]
                  if op.path_in_repo.endswith(ATTEMPTS_TSV)).rsplit("/", 1)[0] + "/"
    sent = sorted(op.path_in_repo.removeprefix(prefix) for op in call["operations"])
    reader = ["cells/QWEN3_30B__echo__measure__cap2p00__a1/routing_trace.jsonl",
              "report/demand.tsv", "report/fig1_capacity.png", "report/forecast.tsv",
              "report/report.md"]
    assert sent == sorted([*evidence_manifest(valid), *reader, "README.md"])
    capsys.readouterr()
    assert cli_publish(str(valid), "org/runs", dry_run=True) == 0
    out = capsys.readouterr().out
    assert "notes.txt (not on the evidence list" in out
    assert "report/scratch.txt (not on the evidence list" in out
    assert "other paths not uploaded" in out.splitlines()[1]


def test_bad_parent_commit(valid):
    """A parent that is not a commit id is bad input naming the option, never sent."""
    with pytest.raises(BadInput, match="--parent-commit"):
        cli_publish(str(valid), "org/runs", parent_commit="main")
