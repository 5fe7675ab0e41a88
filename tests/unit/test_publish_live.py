"""Live publishing (harness/publish/live.py) and the audit of a repository's history
(`history-rewritten`, harness/audit/rules/history.py), through the real huggingface_hub and
the Hub on 127.0.0.1 (tests/fixtures/hubserver.py): an honest live-published campaign is
VALID with its history read; a launch replaced after its first commit is INVALID naming both
commits; a parent that moved stops live publishing, the campaign going on."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.audit.history import History
from harness.audit.model import AuditContext, Upload
from harness.audit.rules.history import check_history
from harness.audit.vocab import HISTORY_REWRITTEN

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


corpus = _load(FIXTURES / "uploads" / "corpus.py", "upload_corpus")


# ---------------------------------------------------------------- the judge, on generated histories

def judge(h: History):
    return check_history(Upload(path=".", history=h), AuditContext())


CELL_FILES = st.sampled_from([f"cells/c{i}/{f}" for i in range(4)
                              for f in ("cell.json", "rank0.log", "rank1.log")])


@settings(max_examples=60, deadline=None)
@given(adds=st.lists(st.lists(CELL_FILES, max_size=4), min_size=2, max_size=6),
       data=st.data())
def test_a_cell_file_changed_after_its_first_commit_names_both(adds, data):
    """Commits that only add cell files (and keep the ones before): pass. Then one file first
    published at commit i replaced (or removed) at commit j > i: fail naming the file and
    both commits (fails when the comparison is made with the previous commit only, or
    against the last version instead of the first published)."""
    commits = [f"{n:02d}" * 20 for n in range(1, len(adds) + 1)]   # distinct in 12 digits
    trees: list[dict[str, str]] = []
    for batch in adds:
        tree = dict(trees[-1]) if trees else {}
        tree.update({rel: tree.get(rel, f"blob-{rel}") for rel in batch})
        trees.append(tree)
    assert judge(History("org/x", commits, trees)).state == "pass"
    published = [(i, rel) for i, tree in enumerate(trees[:-1]) for rel in tree
                 if i == 0 or rel not in trees[i - 1]]
    if not published:
        return
    i, rel = data.draw(st.sampled_from(published))
    j = data.draw(st.integers(i + 1, len(trees) - 1))
    removed = data.draw(st.booleans())
    for tree in trees[j:j + 1]:
        if removed:
            tree.pop(rel)
        else:
            tree[rel] = "another-blob"
    result = judge(History("org/x", commits, trees))
    assert result.state == "fail", result.why
    assert f"{rel}: first published in {commits[i][:12]}, " \
           f"{'removed' if removed else 'replaced'} in {commits[j][:12]}" in result.why[0]


def test_launch_rows_and_events_once_published_stay():
    """A launch row replaced, events.jsonl rewritten: fail naming both commits; rows and
    events only appended: pass (fails when the tables are compared whole, an honest append
    then reading as a rewrite)."""
    head = b"campaign\tcell_dir\tstatus\n"
    row1, row2 = b"r\tcells/a\tok\n", b"r\tcells/b\tok\n"
    commits = ["1" * 40, "2" * 40, "3" * 40]
    trees = [{"capacity_attempts.tsv": "x1", "events.jsonl": "e1"},
             {"capacity_attempts.tsv": "x2", "events.jsonl": "e2"},
             {"capacity_attempts.tsv": "x3", "events.jsonl": "e3"}]
    texts = {(0, "capacity_attempts.tsv"): head + row1, (0, "events.jsonl"): b"{}\n",
             (1, "capacity_attempts.tsv"): head + row1 + row2, (1, "events.jsonl"): b"{}\n{}\n",
             (2, "capacity_attempts.tsv"): head + row1 + row2 + b"r\tcells/c\tok\n",
             (2, "events.jsonl"): b"{}\n{}\n{}\n"}
    assert judge(History("org/x", commits, trees, dict(texts))).state == "pass"
    rerun = dict(texts)
    rerun[(2, "capacity_attempts.tsv")] = head + row1 + b"r\tcells/b\tdrops\n"
    result = judge(History("org/x", commits, trees, rerun))
    assert result.state == "fail" and "the row of cells/b first published in 222222222222, " \
        "replaced in 333333333333" in result.why[0], result.why
    rewritten = dict(texts)
    rewritten[(2, "events.jsonl")] = b"{}\n"
    result = judge(History("org/x", commits, trees, rewritten))
    assert result.state == "fail" and "events.jsonl: as published in 222222222222" \
        in result.why[0]


def test_a_local_target_has_no_history_and_a_truncated_one_is_unknown():
    """n/a off the Hub; a history over the bound with nothing found: UNKNOWN (never pass)."""
    assert check_history(Upload(path="."), AuditContext()).state == "n/a"
    assert judge(History("org/x", ["1" * 40], [{}], problem="300 commits")).state == "unknown"


# ---------------------------------------------------------------- through a Hub on 127.0.0.1

def finished_cell(root: Path, name: str, log: bytes) -> None:
    cell = root / "cells" / name
    cell.mkdir(parents=True, exist_ok=True)
    (cell / "cell.json").write_text('{"status": "ok"}')
    (cell / "rank0.log").write_bytes(log)


def test_a_moved_parent_stops_live_publishing_and_says_the_campaign_goes_on(local_hub,
                                                                            tmp_path):
    """Commit 1 by the live publisher, another client's commit, then the next stage: the hub
    refuses the parent, publishing stops with the mismatch named and the campaign told it
    continues locally; a running cell is never published (fails when live commits are made
    without parent_commit: the second is taken over the other client's)."""
    from huggingface_hub import CommitOperationAdd, HfApi

    from harness.publish.live import LivePublisher
    root = tmp_path / "camp"
    finished_cell(root, "m__b__measure__cap2p00__a1", b"one\n")
    (root / "cells" / "m__b__time__cap2p00__a1").mkdir(parents=True)
    (root / "cells" / "m__b__time__cap2p00__a1" / "cell.json").write_text(
        '{"status": "running"}')
    said: list[str] = []
    live = LivePublisher(root, "org/live", said.append)
    first = live.publish("stage measure finished")
    assert first and local_hub.repos["org/live"].head()["oid"] == first
    held = local_hub.repos["org/live"].head()["files"]
    assert any(p.endswith("measure__cap2p00__a1/cell.json") for p in held)
    assert not any("__time__" in p for p in held)            # still running
    HfApi().create_commit(repo_id="org/live", repo_type="dataset", commit_message="other",
                          operations=[CommitOperationAdd("notes.txt", b"x\n")])
    finished_cell(root, "m__b__validate__cap2p00__a1", b"two\n")
    assert live.publish("stage validate finished") is None
    assert len(local_hub.repos["org/live"].commits) == 2
    assert "parent commit mismatch" in said[-1] and "continues locally" in said[-1]
    assert LivePublisher(root, "org/live", said.append).stopped      # kept across a resume


@pytest.mark.slow
def test_live_published_campaign_valid_then_a_launch_rerun_is_invalid(local_hub, tmp_path):
    """`epcap run --publish org/live` of the reduced runbook (one run) against the local Hub:
    a commit per finished stage and one at the end, each the child of the one before; the
    audit of the last commit VALID with history-rewritten run. Then a launch re-run after its
    first commit (its rank log replaced, published on by the same live publisher, as a
    resumed campaign would): INVALID from the history, naming the file, the commit that first
    published it and the one that replaced it (fails when the audit does not read the
    history, or live publishing commits only at the end)."""
    from harness.audit import audit_target
    from harness.publish.live import LivePublisher
    results = tmp_path / "results"
    env = {**os.environ, "HF_ENDPOINT": local_hub.endpoint, "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HOME": str(tmp_path / "hf-home")}
    run = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(corpus.REDUCED),
                          "--results", str(results), "--publish", "org/live"],
                         cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=600,
                         check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    commits = local_hub.repos["org/live"].commits
    assert len(commits) >= 4, [c["title"] for c in commits]
    assert any("stage measure finished" in c["title"] for c in commits)
    assert "campaign done" in commits[-1]["title"]
    assert "live publishing stopped" not in run.stdout
    head = commits[-1]["oid"]
    (upload,) = audit_target(f"hf://datasets/org/live@{head}").uploads
    (check,) = [c for c in upload.checks if c.code == HISTORY_REWRITTEN]
    assert (upload.verdict, upload.why) == ("VALID", []) and check.state == "pass", check.why
    (root,) = [p.parent for p in results.rglob("capacity_attempts.tsv")]
    live = LivePublisher(root, "org/live")
    log = sorted(root.glob("cells/*__time__*__a1/rank0.log"))[0]
    rel = log.relative_to(root).as_posix()
    first = next(c["oid"] for c in commits if live.prefix + rel in c["files"])
    data = log.read_bytes()
    log.write_bytes(data.replace(b"[EPCAP_TIMING]", b"[EPCAP_TIMING] ", 1))   # the re-run's
    replaced = live.publish("resumed: the launch ran again")
    assert replaced
    (upload,) = audit_target(f"hf://datasets/org/live@{replaced}").uploads
    (check,) = [c for c in upload.checks if c.code == HISTORY_REWRITTEN]
    assert upload.verdict == "INVALID" and HISTORY_REWRITTEN in upload.reasons
    assert f"{rel}: first published in {first[:12]}, replaced in {replaced[:12]}" \
        in check.why[0], check.why


def test_an_unreachable_hub_stops_live_publishing_at_once(monkeypatch, tmp_path):
    """A hub that refuses connections: live publishing stops with the host named, before
    the client's retries, and the campaign is told it continues (fails without the
    reachability check: the client's own error after its retries, another message)."""
    import socket

    from huggingface_hub import constants

    from harness.publish.live import LivePublisher
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    root = tmp_path / "camp"
    finished_cell(root, "m__b__measure__cap2p00__a1", b"one\n")
    said: list[str] = []
    assert LivePublisher(root, "org/live", said.append).publish("stage measure") is None
    assert "cannot be reached" in said[-1] and "continues locally" in said[-1]
