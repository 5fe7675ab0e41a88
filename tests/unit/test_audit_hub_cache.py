"""The Hub's own cache layout, audited as TARGET: the snapshot folder `huggingface-cli download`
(`snapshot_download`) leaves, its files links into `../../blobs/<hash>`, is read as the files
they stand for (harness.io.boundary.hub, through every reader); Git LFS pointers in it are
evidence the audit does not have (UNKNOWN `lfs-pointer`, never INVALID); any other link stays
refused.

The cache is written by the real huggingface_hub package itself, downloading the reduced
campaign from a tiny Hub on 127.0.0.1 (tests/fixtures/uploads/hub_server.py, `*.log` stored
in LFS as on a dataset repository), then read back offline (`local_files_only=True`) and
checked with `scan_cache_dir`."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from harness.audit import audit_target
from harness.audit.engine import HF_HUB_DIR
from harness.io.boundary.hub import hub_link, snapshot_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "uploads"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"upload_{name}", FIXTURES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


corpus = _load("corpus")
hub_server = _load("hub_server")

REPO = "org/runs"
PREFIX = "reduced"                       # the upload's folder inside the repository
LFS = ("*.log",)                         # as a dataset's .gitattributes stores logs
POINTER = (b"version https://git-lfs.github.com/spec/v1\n"
           b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
           b"size 123456\n")
TIME_LOG = "cells/DEEPSEEK_V2_LITE__moonep__time__cap1p167__a1/rank0.log"
MEASURE_LOG = "cells/QWEN3_30B__ultraep__measure__cap2p00__a1/rank0.log"
VALIDATE_JSON = "cells/DEEPSEEK_V2_LITE__echo__validate__cap1p167__a1/cell.json"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    """The reduced campaign run by `epcap run` (shared, never edited here)."""
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


def repo_files(upload: Path, prefix: str = PREFIX) -> dict[str, bytes]:
    """An upload as repository files (what `epcap publish` or upload_folder would push)."""
    return {f"{prefix}/{p.relative_to(upload).as_posix()}": p.read_bytes()
            for p in sorted(upload.rglob("*")) if p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(upload).parts)}


def download(repos: dict[str, dict[str, bytes]], cache: Path, repo_id: str = REPO) -> Path:
    """`snapshot_download` of one repository from a local Hub serving `repos` into `cache`
    (the real package writes the cache), read back offline; returns the snapshot folder."""
    from huggingface_hub import snapshot_download
    with hub_server.HubServer(repos, lfs=LFS) as hub:
        online = snapshot_download(repo_id, repo_type="dataset", endpoint=hub.url,
                                   cache_dir=cache)
    offline = snapshot_download(repo_id, repo_type="dataset", local_files_only=True,
                                cache_dir=cache)
    assert offline == online
    return Path(offline)


@pytest.fixture(scope="module")
def hub(campaign, tmp_path_factory) -> tuple[Path, Path]:
    """(the hub cache, the snapshot folder) of the honest campaign, plus a second repository
    `org/other` holding the same files (for links into another repository's blobs)."""
    cache = tmp_path_factory.mktemp("hub") / "cache"
    files = repo_files(campaign)
    snapshot = download({REPO: files, "org/other": files}, cache)
    download({REPO: files, "org/other": files}, cache, "org/other")
    return cache, snapshot


def only(result, path: str = PREFIX):
    return next(u for u in result.uploads if u.path == path)


def failed(u) -> list[str]:
    return [c.code for c in u.checks if c.state == "fail"]


def test_the_cache_is_the_hubs_own_layout(hub, campaign):
    """What the real package wrote: blobs named by sha256 (LFS files) or git blob sha1, the
    snapshot's files relative links into ../../blobs, refs/main naming the commit; and the
    package's own scan accepts it."""
    from huggingface_hub import scan_cache_dir
    cache, snapshot = hub
    storage = cache / "datasets--org--runs"
    assert snapshot == storage / "snapshots" / hub_server.COMMIT
    assert (storage / "refs" / "main").read_text() == hub_server.COMMIT
    log = snapshot / PREFIX / TIME_LOG
    table = snapshot / PREFIX / "capacity_attempts.tsv"
    for link, name in ((log, hashlib.sha256((campaign / TIME_LOG).read_bytes()).hexdigest()),
                       (table, hub_server.git_blob_sha1(
                           (campaign / "capacity_attempts.tsv").read_bytes()))):
        assert link.is_symlink() and not os.path.isabs(os.readlink(link))
        assert Path(os.path.realpath(link)) == storage / "blobs" / name
    scan = scan_cache_dir(cache)
    assert not scan.warnings
    (info,) = [r for r in scan.repos if r.repo_id == REPO]
    (revision,) = info.revisions
    assert (info.repo_type, revision.commit_hash, revision.refs) == (
        "dataset", hub_server.COMMIT, frozenset({"main"}))


def test_hub_snapshot_audits_as_the_plain_folder(hub, campaign):
    """Seen INVALID before (missing-provenance, runbook-altered: every file a link out of
    TARGET): the snapshot, or the upload folder inside it, audits as the campaign itself."""
    _, snapshot = hub
    plain = only(audit_target(campaign), ".")
    assert (plain.verdict, plain.why) == ("VALID", [])
    for target, path in ((snapshot, PREFIX), (snapshot / PREFIX, ".")):
        u = only(audit_target(target), path)
        assert (u.verdict, u.reasons, u.why) == (plain.verdict, plain.reasons, plain.why)
        assert u.rules_ran == plain.rules_ran


def test_the_layout_is_recognised_by_its_structure(hub, tmp_path):
    _, snapshot = hub
    found = snapshot_of(snapshot / PREFIX / "cells")
    assert found is not None and found.commit == hub_server.COMMIT
    assert hub_link(snapshot / PREFIX / TIME_LOG) is not None
    assert snapshot_of(tmp_path) is None
    # the same links outside a `<type>s--NAME/snapshots/<commit>/` folder are not followed
    moved = tmp_path / "datasets--org--runs" / "snapshots" / "not-a-commit"
    shutil.copytree(snapshot.parent.parent, tmp_path / "datasets--org--runs", symlinks=True)
    (tmp_path / "datasets--org--runs" / "snapshots" / hub_server.COMMIT).rename(moved)
    assert snapshot_of(moved) is None and hub_link(moved / PREFIX / TIME_LOG) is None


POINTED = [TIME_LOG, MEASURE_LOG, "timing_launches.tsv", "capacity_selection.tsv",
           VALIDATE_JSON, "provenance.txt", "runbook.yaml",
           "cells/QWEN3_30B__moonep__time__cap1p125__a1/launcher.log"]


@pytest.mark.parametrize("rel", POINTED)
def test_an_lfs_pointer_in_a_plain_folder_is_unknown_never_invalid(campaign, tmp_path, rel):
    """The same, in a plain folder (a clone without git-lfs): seen INVALID before for each
    of these but capacity_selection.tsv (the launcher log's: timing-not-rederived)."""
    up = corpus.link_copy(campaign, tmp_path / "u")
    corpus.replace_file(up / rel, POINTER)
    (u,) = audit_target(up).uploads
    assert (u.verdict, failed(u)) == ("UNKNOWN", []), u.why
    why = next(w for w in u.why if w.startswith("lfs-pointer"))
    assert rel in why and "git lfs pull" in why


@pytest.mark.parametrize("rel", POINTED[:-1])
def test_an_lfs_pointer_in_the_snapshot_is_unknown_never_invalid(campaign, tmp_path, rel):
    """One evidence file uploaded as a Git LFS pointer (a clone made without git-lfs), served
    and cached as the repository's file: UNKNOWN with `lfs-pointer` naming it and the fix,
    no rule failed. Seen INVALID before for a time cell's rank log (timing-not-rederived), a
    measure cell's (selection-not-rederived), timing_launches.tsv, a validate cell.json
    (held-out-not-rederived), provenance.txt (missing-provenance) and runbook.yaml
    (runbook-altered)."""
    files = repo_files(campaign)
    files[f"{PREFIX}/{rel}"] = POINTER
    snapshot = download({REPO: files}, tmp_path / "cache")
    u = only(audit_target(snapshot))
    assert (u.verdict, failed(u)) == ("UNKNOWN", []), u.why
    assert "lfs-pointer" in u.reasons
    why = next(w for w in u.why if w.startswith("lfs-pointer"))
    assert rel in why and "git lfs pull" in why


def test_a_contradiction_beside_a_pointer_stays_invalid(campaign, tmp_path):
    """Not weakened: a pointer in one cell, and a re-stated selection elsewhere: INVALID."""
    files = repo_files(campaign)
    files[f"{PREFIX}/{TIME_LOG}"] = POINTER
    table = files[f"{PREFIX}/capacity_selection.tsv"].decode().splitlines(keepends=True)
    header = table[0].rstrip("\n").split("\t")
    row = table[1].rstrip("\n").split("\t")
    row[header.index("peak_actual_valid_recv")] = str(
        int(row[header.index("peak_actual_valid_recv")]) + 1)
    table[1] = "\t".join(row) + "\n"
    files[f"{PREFIX}/capacity_selection.tsv"] = "".join(table).encode()
    u = only(audit_target(download({REPO: files}, tmp_path / "cache")))
    assert u.verdict == "INVALID" and "lfs-pointer" in u.unknown, u.why


def linked_copy(hub, tmp_path) -> Path:
    """A copy of the hub cache (its links copied as links); returns its snapshot folder."""
    cache, snapshot = hub
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy, symlinks=True)
    return copy / snapshot.relative_to(cache)


@pytest.mark.parametrize("where", ["outside", "other-repo", "blob-link-out"])
def test_a_link_out_of_the_repositorys_cache_is_refused(hub, tmp_path, campaign, where):
    """A snapshot link to a file outside the repository's cache folder is refused even when
    that file holds the very bytes of the log it replaces: another repository's blob, a file
    elsewhere, or a blob of this repository that is itself a link out."""
    snapshot = linked_copy(hub, tmp_path)
    storage = snapshot.parent.parent
    link = snapshot / PREFIX / TIME_LOG
    data = (campaign / TIME_LOG).read_bytes()
    if where == "outside":
        target = tmp_path / "elsewhere.log"
        target.write_bytes(data)
    elif where == "other-repo":
        target = storage.parent / "datasets--org--other" / "blobs" / \
            hashlib.sha256(data).hexdigest()
        assert target.is_file()
    else:
        outside = tmp_path / "elsewhere.log"
        outside.write_bytes(data)
        target = storage / "blobs" / ("f" * 64)
        target.symlink_to(outside)
    link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))
    assert hub_link(link) is None
    u = only(audit_target(snapshot))
    assert u.verdict != "VALID"
    assert any("rank0.log is a link out of TARGET (not followed)" in w for w in u.why), u.why


def test_a_link_to_a_system_file_is_refused(hub, tmp_path):
    snapshot = linked_copy(hub, tmp_path)
    link = snapshot / PREFIX / "provenance.txt"
    link.unlink()
    link.symlink_to("/etc/hostname")
    assert hub_link(link) is None
    u = only(audit_target(snapshot))
    assert u.verdict != "VALID"
    assert any("provenance.txt is a link out of TARGET (not followed)" in w for w in u.why)


def test_a_blob_in_the_shared_store_is_followed(hub, tmp_path):
    """huggingface_hub's cache-wide store for Xet files: the repository's blob is a link into
    `<cache>/blobs/<2 hex>/<64 hex>` (marked by `.huggingface-shared-blobs`). Followed only
    with the store's marker, never into an unmarked folder of that name, nor through a
    prefix folder that is a link."""
    snapshot = linked_copy(hub, tmp_path)
    storage = snapshot.parent.parent
    blob = Path(os.path.realpath(snapshot / PREFIX / TIME_LOG))
    xet = hashlib.sha256(b"xet" + blob.read_bytes()).hexdigest()
    store = storage.parent / "blobs"
    entry = store / xet[:2] / xet
    entry.parent.mkdir(parents=True)
    shutil.copyfile(blob, entry)
    blob.unlink()
    blob.symlink_to(os.path.relpath(entry, blob.parent))
    assert hub_link(snapshot / PREFIX / TIME_LOG) is None          # no marker: refused
    (store / ".huggingface-shared-blobs").write_text("1\n")
    assert hub_link(snapshot / PREFIX / TIME_LOG) == entry
    assert only(audit_target(snapshot)).verdict == "VALID"
    # a prefix folder that is itself a link (to a folder elsewhere, same name) is not the store
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copyfile(entry, elsewhere / xet)
    shutil.rmtree(entry.parent)
    entry.parent.symlink_to(elsewhere)
    assert hub_link(snapshot / PREFIX / TIME_LOG) is None


def test_hf_target_audits_the_cache_the_package_wrote(hub, tmp_path, monkeypatch):
    """hf://: the cache written online by the package, then fetched offline by the audit
    (HF_HUB_OFFLINE=1) through the same link rule: VALID, as the snapshot itself."""
    from huggingface_hub import constants
    cache, _ = hub
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("EPCAP_CACHE", str(tmp_path / "epcap"))
    shutil.copytree(cache, tmp_path / "epcap" / HF_HUB_DIR, symlinks=True)
    u = only(audit_target(f"hf://datasets/{REPO}"))
    assert (u.verdict, u.why) == ("VALID", [])
