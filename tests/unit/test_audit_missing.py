"""Missing evidence is UNKNOWN, contradicted evidence INVALID: Git LFS pointers in place of
evidence files (`lfs-pointer`), cells that ran with their logs gone (`missing-logs`), on the
synthetic corpus, the earlier layout and the reduced campaign run by `epcap run`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness.audit import audit_target
from harness.audit.readers import lfs_pointer
from harness.results.layout import ATTEMPTS_TSV, SELECTION_TSV

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

POINTER = (b"version https://git-lfs.github.com/spec/v1\n"
           b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
           b"size 123456\n")
def only(result):
    (u,) = result.uploads
    return u


def point(root: Path, pattern: str = "*.log") -> list[Path]:
    """Replace every matching file with a Git LFS pointer (a clone without git-lfs)."""
    files = sorted(root.rglob(pattern))
    for f in files:
        corpus.replace_file(f, POINTER)
    return files


def unlink(root: Path, pattern: str) -> None:
    for f in root.rglob(pattern):
        f.unlink()


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> Path:
    return corpus.write_valid(tmp_path_factory.mktemp("valid") / "campaign")


@pytest.fixture(scope="module")
def legacy(tmp_path_factory) -> Path:
    return corpus.write_legacy(tmp_path_factory.mktemp("legacy") / "campaign")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


def test_lfs_pointer_is_recognised(tmp_path):
    f = tmp_path / "rank0.log"
    f.write_bytes(POINTER)
    assert lfs_pointer(f)
    f.write_bytes(POINTER.replace(b"\n", b"\r\n"))
    assert lfs_pointer(f)
    f.write_bytes(POINTER + b"x" * 1024)              # a pointer is under 1024 bytes
    assert not lfs_pointer(f)
    f.write_bytes(b"[EPCAP_DISPATCH] version https://git-lfs.github.com/spec/v1\n")
    assert not lfs_pointer(f)


def test_pointer_logs_are_unknown_naming_files_and_fix(valid, tmp_path):
    up = corpus.link_copy(valid, tmp_path / "u")
    files = point(up)
    u = only(audit_target(up))
    assert (u.verdict, "lfs-pointer" in u.reasons) == ("UNKNOWN", True)
    why = next(w for w in u.why if w.startswith("lfs-pointer"))
    assert f"{len(files)} evidence file(s)" in why and "git lfs pull" in why
    assert files[0].relative_to(up).as_posix() in why and f"and {len(files) - 5} more" in why


def test_pointer_tables_are_unknown_not_invalid(valid, tmp_path):
    up = corpus.link_copy(valid, tmp_path / "u")
    point(up, SELECTION_TSV)
    u = only(audit_target(up))
    assert u.verdict == "UNKNOWN" and "lfs-pointer" in u.reasons
    assert f"{SELECTION_TSV} is a Git LFS pointer" in " ".join(u.why)


def test_pointer_logs_of_the_earlier_layout_are_unknown(legacy, tmp_path):
    up = corpus.link_copy(legacy, tmp_path / "u")
    point(up)
    u = only(audit_target(up))
    assert u.verdict == "UNKNOWN" and "lfs-pointer" in u.reasons


def test_deleted_logs_are_unknown(valid, tmp_path):
    up = corpus.copy(valid, tmp_path / "u")
    unlink(up, "*.log")
    u = only(audit_target(up))
    assert (u.verdict, u.reasons) == ("UNKNOWN", ["missing-logs"])
    assert "hold no log" in u.why[0]


def test_deleted_logs_of_the_earlier_layout_are_unknown(legacy, tmp_path):
    """Seen INVALID (earlier-not-rederived: status 'ok' but the harness derives 'crash')
    before rules.legacy took a measured run without logs as missing evidence."""
    up = corpus.copy(legacy, tmp_path / "u")
    unlink(up, "*.log")
    u = only(audit_target(up))
    assert u.verdict == "UNKNOWN" and "missing-logs" in u.reasons
    assert "earlier-not-rederived" in u.unknown


def test_a_present_log_that_contradicts_stays_invalid(legacy, tmp_path):
    """Not weakened: logs gone from every cell but one, whose row lies: INVALID."""
    up = corpus.copy(legacy, tmp_path / "u")
    logs = sorted(up.rglob("rank0.log"))
    kept = logs[0].parent
    for f in logs[1:]:
        f.unlink()
    corpus.edit(up, ATTEMPTS_TSV, lambda r: {**r, "rows": str(int(r["rows"]) + 1)}
                if r["cell_dir"].endswith(kept.name) else r)
    assert only(audit_target(up)).verdict == "INVALID"


def test_campaign_pointer_logs_name_the_fix(campaign, tmp_path):
    up = corpus.link_copy(campaign, tmp_path / "u")
    point(up, "rank*.log")
    u = only(audit_target(up))
    assert "lfs-pointer" in u.unknown and u.verdict != "VALID"
    assert "git lfs pull" in " ".join(u.why)


def test_campaign_deleted_logs_name_the_cells(campaign, tmp_path):
    up = corpus.link_copy(campaign, tmp_path / "u")
    unlink(up, "*.log")      # every log: rank<R>.log and node<T>.log
    u = only(audit_target(up))
    assert "missing-logs" in u.unknown and u.verdict != "VALID"
    assert "hold no log" in " ".join(u.why)


def test_campaign_with_lfs_pointer_logs_is_unknown_not_invalid(campaign, tmp_path):
    up = corpus.link_copy(campaign, tmp_path / "u")
    point(up, "rank*.log")
    u = only(audit_target(up))
    assert u.verdict == "UNKNOWN" and "lfs-pointer" in u.reasons, u.why
    assert any("git lfs pull" in w for w in u.why), u.why


def test_campaign_without_logs_is_unknown_not_invalid(campaign, tmp_path):
    up = corpus.link_copy(campaign, tmp_path / "u")
    unlink(up, "*.log")      # every log: rank<R>.log and node<T>.log
    assert only(audit_target(up)).verdict == "UNKNOWN"
