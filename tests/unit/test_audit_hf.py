"""`epcap audit hf://datasets/ORG/NAME[@REV]` through the real huggingface_hub: an upload laid
out as `snapshot_download` writes its cache (blobs, snapshot links into them, refs), fetched
by the audit with the hub in offline mode, must audit as the directory itself does; the
fetch takes exactly the evidence files (harness.audit.evidence.EVIDENCE_FILES)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

import pytest

from harness.audit import audit_target, evidence
from harness.audit.engine import HF_DATASETS_DIR, HF_HUB_DIR
from harness.errors import BadInput

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
PREFIX = "reduced/20261129T100000Z-abc"            # where `epcap publish` would put it
LOG_GLOBS = {f"*{s}" for s in (".log", ".out", ".err")}
LFS_POINTER = (b"version https://git-lfs.github.com/spec/v1\n"
               b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
               b"size 123456\n")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    """The reduced campaign run by `epcap run` (shared, never edited here)."""
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


def hub_cache(upload: Path, cache: Path, repo_id: str = "org/runs", commit: str = COMMIT,
              prefix: str = PREFIX, extra: dict[str, bytes] | None = None) -> Path:
    """Lay `upload` out as huggingface_hub's snapshot_download leaves a dataset in its cache:
    `datasets--ORG--NAME/blobs/<sha256>`, `snapshots/<commit>/<prefix>/...` as relative links
    into blobs, `refs/main` naming the commit. Every file is there (as after a fetch without
    patterns); `extra` adds files by repository path. Returns the storage folder."""
    storage = cache / ("datasets--" + repo_id.replace("/", "--"))
    files = {f"{prefix}/{p.relative_to(upload).as_posix()}": p.read_bytes()
             for p in sorted(upload.rglob("*"))
             if p.is_file() and not any(part.startswith(".") for part in
                                        p.relative_to(upload).parts)}
    files.update(extra or {})
    for rel, data in files.items():
        blob = storage / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = storage / "snapshots" / commit / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / "main").write_text(commit)
    return storage


@pytest.fixture
def offline_hub(tmp_path, monkeypatch) -> Path:
    """The epcap cache, with the real hub told to stay offline (HF_HUB_OFFLINE=1): it answers
    from its cache under <cache>/hf-hub. Returns the hub cache directory."""
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("EPCAP_CACHE", str(tmp_path / "epcap-cache"))
    return tmp_path / "epcap-cache" / HF_HUB_DIR


def fetched(tmp_path: Path, commit: str = COMMIT) -> Path:
    return tmp_path / "epcap-cache" / HF_DATASETS_DIR / "org--runs" / commit


def verdict(result, path: str = PREFIX):
    return next(u for u in result.uploads if u.path == path)


def test_the_fetch_list_is_the_evidence_list():
    """The one list reaches the hub: the logs, events, campaign.json and the zoo are in it
    (the old fetch list lacked all of them)."""
    patterns = evidence.evidence_patterns()
    assert LOG_GLOBS | {"*events.jsonl", "*campaign.json", "*.yaml", "*cell.json",
                        "*provenance.txt", "*capacity_attempts.tsv"} <= set(patterns)
    for path in ("reduced/x/cells/A__echo__measure__cap2p00__a1/rank0.log",
                 "x/cells/c/slurm-42.out", "x/runbook.yaml", "x/models.yaml",
                 "x/events.jsonl", "x/timing_launches.tsv"):
        assert evidence.is_evidence(path), path
    assert not evidence.is_evidence("x/cells/c/routing_trace.jsonl")


def test_honest_campaign_fetched_from_the_hub_cache_is_valid(campaign, tmp_path, offline_hub):
    hub_cache(campaign, offline_hub, extra={"README.md": b"# runs\n",
                                            ".gitattributes": b"*.log filter=lfs\n"})
    result = audit_target("hf://datasets/org/runs")
    u = verdict(result)
    assert (u.verdict, u.reasons, u.why) == ("VALID", [], [])
    local = fetched(tmp_path)
    assert not any(p.is_symlink() for p in local.rglob("*"))       # plain files, audited
    got = {p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()}
    assert f"{PREFIX}/events.jsonl" in got and f"{PREFIX}/campaign.json" in got
    assert any(g.endswith("/rank0.log") for g in got)
    assert "README.md" not in got                                   # not evidence: not taken
    # the measure cells' traces are fetched beside the evidence (evidence.HUB_EXTRA_FILES),
    # so routing-not-from-seed compares them from the hub too, never "found nothing"
    traces = sum(g.endswith("/routing_trace.jsonl") for g in got)
    (routing,) = [c for c in u.checks if c.code == "routing-not-from-seed"]
    assert traces >= 2 and f"{traces} recorded traces agree" in routing.why[0]


def test_a_fetch_list_without_the_logs_is_not_valid(campaign, tmp_path, offline_hub,
                                                    monkeypatch):
    """The guard's own check: the same upload fetched with a list lacking the logs (the
    list the audit had before) cannot be VALID, so the test above can fail."""
    hub_cache(campaign, offline_hub)
    monkeypatch.setattr(evidence, "EVIDENCE_FILES",
                        {k: v for k, v in evidence.EVIDENCE_FILES.items() if k not in LOG_GLOBS})
    u = verdict(audit_target("hf://datasets/org/runs"))
    assert u.verdict != "VALID"
    assert not list(fetched(tmp_path).rglob("*.log"))


def test_commit_revision_is_reused_without_the_hub(campaign, tmp_path, offline_hub):
    """A commit is immutable: once materialised, the hub (and its cache) is not asked again."""
    storage = hub_cache(campaign, offline_hub)
    assert verdict(audit_target(f"hf://datasets/org/runs@{COMMIT}")).verdict == "VALID"
    import shutil
    shutil.rmtree(storage)
    assert verdict(audit_target(f"hf://datasets/org/runs@{COMMIT}")).verdict == "VALID"
    with pytest.raises(BadInput, match="cannot fetch dataset org/runs@main"):
        audit_target("hf://datasets/org/runs")          # a branch is resolved by the hub


def test_a_cache_link_out_of_the_blobs_is_refused(campaign, tmp_path, offline_hub):
    storage = hub_cache(campaign, offline_hub)
    outside = tmp_path / "secret.log"
    outside.write_text("not the repository's\n")
    link = storage / "snapshots" / COMMIT / PREFIX / "cells" / "x.log"
    link.symlink_to(outside)
    with pytest.raises(BadInput, match="not a file of the repository's blobs"):
        audit_target("hf://datasets/org/runs")


def test_hf_fetch_failure_is_reported(tmp_path, monkeypatch):
    import huggingface_hub

    def offline(**kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    monkeypatch.setenv("EPCAP_CACHE", str(tmp_path))
    with pytest.raises(BadInput, match="cannot fetch dataset org/runs@main"):
        audit_target("hf://datasets/org/runs")


def test_lfs_pointer_logs_fetched_from_the_hub_are_unknown(campaign, tmp_path, offline_hub):
    """Logs uploaded as Git LFS pointers (a clone without git-lfs): UNKNOWN, naming the fix."""
    pointers = {f"{PREFIX}/{p.relative_to(campaign).as_posix()}": LFS_POINTER
                for p in campaign.rglob("rank*.log")}
    copy = corpus.copy(campaign, tmp_path / "nolog")
    for p in copy.rglob("rank*.log"):
        p.unlink()
    hub_cache(copy, offline_hub, extra=pointers)
    u = verdict(audit_target("hf://datasets/org/runs"))
    assert (u.verdict, "lfs-pointer" in u.reasons) == ("UNKNOWN", True), u.why
    assert not [c.code for c in u.checks if c.state == "fail"]
    assert "git lfs pull" in " ".join(u.why)
