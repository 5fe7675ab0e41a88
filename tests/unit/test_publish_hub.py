"""epcap publish of a real campaign (the reduced campaign `epcap run` ran, shared with the
audit tests): what a reader needs is uploaded, the dataset card is what the real
huggingface_hub reads, and the upload as the hub holds it audits as the campaign did."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import huggingface_hub
import pytest

from harness import publish
from harness.audit import audit_target
from harness.audit.vocab import ROUTING_NOT_FROM_SEED

pytestmark = pytest.mark.slow       # the shared reduced campaign (run once per session)

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)


class CommitRecorder:
    """Stands in for HfApi: keeps each create_commit's operations (no network)."""

    commits: list[dict] = []

    def list_repo_files(self, repo_id, repo_type=None):
        return []

    def create_commit(self, **kwargs):
        CommitRecorder.commits.append(kwargs)
        return type("Info", (), {"commit_url": "http://127.0.0.1/fake/commit"})()


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


@pytest.fixture
def hub(monkeypatch):
    CommitRecorder.commits = []
    monkeypatch.setattr(huggingface_hub, "HfApi", CommitRecorder)
    monkeypatch.setattr(publish, "hub_reachable", lambda: "")
    return CommitRecorder


def as_the_hub_holds_it(commit: dict, repo: Path) -> dict[str, bytes]:
    """Write a commit's files at their paths in the repository, as a fetch would see them."""
    files = {}
    for op in commit["operations"]:
        with op.as_file() as handle:
            files[op.path_in_repo] = data = handle.read()
        (repo / op.path_in_repo).parent.mkdir(parents=True, exist_ok=True)
        (repo / op.path_in_repo).write_bytes(data)
    return files


def routing_check(result):
    (upload,) = result.uploads
    (check,) = [c for c in upload.checks if c.code == ROUTING_NOT_FROM_SEED]
    return upload, check


def test_card_reads_back_with_every_tsv_and_the_upload_audits_valid(campaign, hub, tmp_path):
    """The card the real DatasetCard.load reads: a tab-separated configs entry for every TSV
    uploaded (tables, forecast.tsv, demand.tsv), license, tags, the verdict rule by rule, how
    to reproduce. The upload as the hub holds it audits VALID with its traces compared (fails
    when the report's TSVs or the traces are left out, or a config is missing)."""
    local = audit_target(campaign).uploads[0]
    assert local.verdict == "VALID", local.why
    assert publish.cli_publish(str(campaign), "org/runs") == 0
    (commit,) = hub.commits
    files = as_the_hub_holds_it(commit, tmp_path / "repo")
    tsvs = sorted(p for p in files if p.endswith(".tsv"))
    assert any(p.endswith("/report/forecast.tsv") for p in tsvs)
    assert any(p.endswith("/report/demand.tsv") for p in tsvs)
    assert any(p.endswith("/report/report.md") for p in files)
    assert sum(p.endswith(".png") for p in files) >= 3
    card = huggingface_hub.DatasetCard.load(tmp_path / "repo" / "README.md")
    configs = card.data.to_dict()["configs"]
    assert sorted(c["data_files"][0]["path"] for c in configs) == tsvs
    assert all(c["sep"] == "\t" for c in configs) and len({c["config_name"]
                                                           for c in configs}) == len(tsvs)
    assert card.data.license == "cc-by-4.0" and "reference-emulation" in card.data.tags
    assert "## Audit: VALID" in card.text and "epcap audit hf://datasets/org/runs@" in card.text
    for check in local.checks:
        assert f"- `{check.code}`: " in card.text
    upload, check = routing_check(audit_target(tmp_path / "repo"))
    assert (upload.verdict, upload.why) == ("VALID", [])
    traces = sum(p.endswith("/routing_trace.jsonl") for p in files)
    assert traces >= 2 and f"{traces} recorded traces agree" in check.why[0]


def test_a_trace_too_large_is_its_digest_and_its_comparison_unknown(campaign, hub, tmp_path):
    """Traces over the cap are uploaded as `<trace>.sha256` (sha256sum format) and the audit
    of the upload says routing-not-from-seed could not compare them (UNKNOWN, naming the
    file), never that it ran and found nothing (fails with the withheld check removed from
    audit.rules.routing.read_trace: the upload then reads VALID)."""
    import hashlib
    assert publish.cli_publish(str(campaign), "org/runs", trace_cap=1000) == 0
    (commit,) = hub.commits
    files = as_the_hub_holds_it(commit, tmp_path / "repo")
    assert not any(p.endswith("/routing_trace.jsonl") for p in files)
    stand_ins = {p: d for p, d in files.items() if p.endswith("/routing_trace.jsonl.sha256")}
    assert len(stand_ins) >= 2
    for path, data in stand_ins.items():
        cell = path.split("/cells/", 1)[1].rsplit("/", 1)[0]
        real = (campaign / "cells" / cell / "routing_trace.jsonl").read_bytes()
        assert data == f"{hashlib.sha256(real).hexdigest()}  routing_trace.jsonl\n".encode()
    upload, check = routing_check(audit_target(tmp_path / "repo"))
    assert upload.verdict == "UNKNOWN" and check.state == "unknown"
    assert "withheld: only its sha256" in check.why[0]
    assert "Routing traces too large to publish" in files["README.md"].decode()


def test_a_trace_missing_from_an_upload_is_said_not_compared(campaign, tmp_path):
    """A trace its argv names but the upload lacks is stated as not compared, never counted
    among the traces that agree (fails on the earlier message, silent about it)."""
    copy = corpus.link_copy(campaign, tmp_path / "c")
    gone = sorted(copy.glob("cells/*/routing_trace.jsonl"))
    for trace in gone:
        trace.unlink()
    _, check = routing_check(audit_target(copy))
    assert f"{len(gone)} traces their argv recorded are not in the upload: not compared" \
        in check.why[0] and "0 recorded traces agree" in check.why[0]


# ---------------------------------------------------------------- through a Hub on 127.0.0.1



def test_published_through_a_local_hub_reads_back_and_audits_valid(campaign, local_hub,
                                                                   tmp_path):
    """The whole way through real HTTP: publish (validate-yaml, preupload, commit), the card
    fetched and read by the real DatasetCard.load with a config for every TSV of the commit,
    and `epcap audit hf://...@<commit>` VALID with the traces compared (fails when publish
    leaves the traces out: "0 recorded traces agree")."""
    from huggingface_hub import DatasetCard, hf_hub_download
    assert publish.cli_publish(str(campaign), "org/runs") == 0
    head = local_hub.repos["org/runs"].head()
    card = DatasetCard.load(hf_hub_download("org/runs", "README.md", repo_type="dataset",
                                            revision=head["oid"], cache_dir=tmp_path / "hf"))
    tsvs = sorted(p for p in head["files"] if p.endswith(".tsv"))
    assert sorted(c["data_files"][0]["path"] for c in card.data.to_dict()["configs"]) == tsvs
    upload, check = routing_check(audit_target(f"hf://datasets/org/runs@{head['oid']}"))
    assert (upload.verdict, upload.why) == ("VALID", [])
    traces = sum(p.endswith("/routing_trace.jsonl") for p in head["files"])
    assert traces >= 2 and f"{traces} recorded traces agree" in check.why[0]


def test_two_concurrent_publishes_the_second_is_refused(campaign, local_hub, monkeypatch,
                                                        capsys):
    """Both read the head, then both commit: the hub takes one and refuses the other's
    parent, which publish reports as a parent commit mismatch (fails when publish commits
    without parent_commit: both are taken, interleaved)."""
    import threading

    from huggingface_hub import CommitOperationAdd, HfApi
    HfApi().create_commit(repo_id="org/runs", repo_type="dataset", commit_message="start",
                          operations=[CommitOperationAdd("notes.txt", b"start\n")])
    both_read = threading.Barrier(2, timeout=60)
    real_upload = publish.upload

    def upload_after_both_read(*args, **kwargs):
        both_read.wait()
        return real_upload(*args, **kwargs)

    monkeypatch.setattr(publish, "upload", upload_after_both_read)
    codes: list[int] = []
    runs = [threading.Thread(target=lambda: codes.append(
        publish.cli_publish(str(campaign), "org/runs"))) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(120)
    assert sorted(codes) == [0, 1]
    assert "parent commit mismatch" in capsys.readouterr().err
    assert len(local_hub.repos["org/runs"].commits) == 2
