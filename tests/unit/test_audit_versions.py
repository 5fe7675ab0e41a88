"""Uploads made by another epcap version (docs/audit.md#uploads-made-by-another-epcap-version).

The fixtures in tests/fixtures/uploads/versions/<sha>/ were made by those commits' own code
(scripts/make_version_uploads.py). Without a clone of epcap, today's replay may not judge
them (`other-version`, UNKNOWN, never INVALID); with `--git-repo epcap=<this repository>`
each is judged by its own commit's audit and is VALID. A campaign made by today's code and
re-stamped as 6f93e2d's is `version-mismatch`: its evidence names files, columns and tags
6f93e2d's code never writes.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from harness.audit import audit_target, engine, versions
from harness.audit.model import PASS, Check
from harness.audit.vocab import OTHER_VERSION, VERSION_MISMATCH
from harness.pipeline.version import ANALYSIS_VERSION

UPLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "uploads"
_spec = importlib.util.spec_from_file_location("upload_corpus_versions", UPLOADS / "corpus.py")
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)
VERSIONS = UPLOADS / "versions"
COMMITS = ("6f93e2d", "7e6eb72", "a6e7b91")


def toplevel() -> Path:
    return Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=VERSIONS,
                               capture_output=True, text=True, check=True).stdout.strip())


def full_sha(short: str) -> str | None:
    """The commit in this repository, or None (a shallow clone lacks it)."""
    done = subprocess.run(["git", "-C", str(toplevel()), "rev-parse", "--verify", "-q",
                           f"{short}^{{commit}}"], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def need(short: str) -> str:
    sha = full_sha(short)
    if sha is None:
        pytest.skip(f"commit {short} is not in this clone (shallow?): `git fetch --unshallow`")
    return sha


@pytest.fixture
def cache(tmp_path_factory, monkeypatch) -> Path:
    """One $EPCAP_CACHE for the session: each commit is checked out once."""
    path = tmp_path_factory.getbasetemp() / "epcap-cache"
    monkeypatch.setenv("EPCAP_CACHE", str(path))
    return path


def one(target: Path, **kw):
    (u,) = audit_target(target, **kw).uploads
    return u


@pytest.mark.parametrize("short", COMMITS)
def test_earlier_upload_without_the_repository_is_never_invalid(short):
    """No clone: an upload of another analysis version is UNKNOWN (`other-version`, naming
    both versions), whether or not today's replay agrees with it: today's definitions are
    not known to be its own; the version-bound rules today's replay doubts are UNKNOWN."""
    upload = VERSIONS / short
    assert (upload / "provenance.txt").read_text().count(f"harness.commit: {short}") == 1
    u = one(upload)
    assert u.verdict == "UNKNOWN", u.why
    assert OTHER_VERSION in u.reasons, u.why
    (said,) = [w for w in u.why if w.startswith(f"{OTHER_VERSION} ")]
    assert f"made by epcap {short} (analysis unrecorded)" in said
    assert f"(analysis {ANALYSIS_VERSION})" in said
    assert "--git-repo epcap=PATH" in said


@pytest.mark.parametrize("short", ("6f93e2d", "7e6eb72"))
def test_earlier_upload_was_invalid_by_todays_rules(short, monkeypatch):
    """Today's behaviour before this rule (no version judged) makes these uploads INVALID:
    the check above is what keeps them out of INVALID."""
    monkeypatch.setattr(engine, "judge_versions", lambda upload, checks, bound, order:
                        (checks, []))
    u = one(VERSIONS / short)
    assert u.verdict == "INVALID"
    assert {"held-out-not-rederived", "timing-not-rederived"} <= set(u.reasons), u.reasons


@pytest.mark.slow
@pytest.mark.parametrize("short", COMMITS)
def test_earlier_upload_is_valid_by_its_own_code(short, cache):
    """With the repository, the recorded commit's own audit judges the version-bound rules:
    each commit's own campaign is VALID, and the version-mismatch rule finds every word of
    its evidence in its own code."""
    need(short)
    u = one(VERSIONS / short, git_repos={"epcap": toplevel()})
    assert u.verdict == "VALID", u.why
    assert OTHER_VERSION in u.rules_ran and VERSION_MISMATCH in u.rules_ran
    assert any(f"judged by its own audit at {short}, which says VALID" in n
               for n in u.notes), u.notes
    assert (cache / "versions" / need(short) / ".epcap-complete").exists()
    if short != "a6e7b91":       # rules it did not have: not judged by today's definitions
        for code in ("routing-not-from-seed", "launch-not-runbook"):
            assert f"{code}: epcap {short} has no rule {code}" in " ".join(
                u.rules_not_applicable), u.rules_not_applicable


def restamp(root: Path, sha: str, date: str, keep_analysis: bool = False) -> None:
    """Every provenance.txt of the upload as epcap `sha` would have written it: its commit,
    date and a clean tree, repo.epcap the same commit, and no analysis_version (that commit
    recorded none) unless `keep_analysis`."""
    for path in sorted(root.rglob("provenance.txt")):
        out = []
        for line in path.read_text().splitlines():
            key = line.split(": ", 1)[0]
            if key == "analysis_version" and not keep_analysis:
                continue
            out.append({"harness.commit": f"{key}: {sha}",
                        "harness.commit_date": f"{key}: {date}",
                        "harness.dirty": f"{key}: false",
                        "repo.epcap": f"{key}: {sha} {date} detached dirty=false"}.get(key, line))
        corpus.replace_file(path, ("\n".join(out) + "\n").encode())


@pytest.fixture
def restamped(tmp_path, tmp_path_factory) -> Path:
    sha = need("6f93e2d")
    date = subprocess.run(["git", "-C", str(toplevel()), "show", "-s", "--format=%cI", sha],
                          capture_output=True, text=True, check=True).stdout.strip()
    root = corpus.link_copy(corpus.harness_campaign(tmp_path_factory.getbasetemp()),
                            tmp_path / "restamped")
    assert "analysis_version: " in (root / "provenance.txt").read_text()   # today's code
    restamp(root, sha, date)
    return root


@pytest.mark.slow
def test_head_upload_restamped_as_an_earlier_commit_is_version_mismatch(restamped, cache,
                                                                       monkeypatch):
    """A campaign of today's code, every provenance.txt re-stamped with 6f93e2d and its real
    date: 6f93e2d's code never writes timing_launches.tsv or timing_trials.tsv, nor prints
    [EPCAP_RANK]. Without the rule (mismatch passing) the forgery is not INVALID."""
    repos = {"epcap": toplevel()}
    u = one(restamped, git_repos=repos)
    assert u.verdict == "INVALID", u.why
    assert VERSION_MISMATCH in u.reasons
    (said,) = [w for w in u.why if w.startswith(f"{VERSION_MISMATCH}: ")]
    for word in ("timing_launches.tsv: 6f93e2d's code never writes it",
                 "timing_trials.tsv: 6f93e2d's code never writes it",
                 "[EPCAP_RANK] ("):
        assert word in said, said
    monkeypatch.setattr(versions, "check_mismatch", lambda upload, made, clones:
                        Check(VERSION_MISMATCH, PASS, ["disabled"]))
    without = one(restamped, git_repos=repos)
    assert without.verdict != "INVALID", without.why        # the rule is what catches it


@pytest.mark.slow
def test_restamped_keeping_todays_analysis_version_is_version_mismatch(restamped, cache):
    """Re-stamped with 6f93e2d but still claiming today's analysis version (so judged as
    today): 6f93e2d never wrote the key."""
    sha = need("6f93e2d")
    text = (restamped / "provenance.txt").read_text().replace(
        "harness.dirty: false\n", f"harness.dirty: false\nanalysis_version: {ANALYSIS_VERSION}\n")
    corpus.replace_file(restamped / "provenance.txt", text.encode())
    assert f"harness.commit: {sha}" in text
    u = one(restamped, git_repos={"epcap": toplevel()})
    assert u.verdict == "INVALID", u.why
    (said,) = [w for w in u.why if w.startswith(f"{VERSION_MISMATCH}: ")]
    assert "provenance.txt key analysis_version: 6f93e2d's code never writes it" in said


def test_restamped_without_the_repository_is_not_decided(restamped):
    """Without the repository the mismatch rule cannot decide: n/a, never INVALID."""
    u = one(restamped)
    assert VERSION_MISMATCH not in u.reasons
    assert any(r.startswith(f"{VERSION_MISMATCH}: ") for r in u.rules_not_applicable)


def test_current_version_is_judged_as_today(tmp_path_factory):
    """A campaign made now records today's analysis version: judged as today, VALID."""
    root = corpus.harness_campaign(tmp_path_factory.getbasetemp())
    for path in root.rglob("provenance.txt"):
        assert f"analysis_version: {ANALYSIS_VERSION}\n" in path.read_text(), path
    u = one(root)
    assert u.verdict == "VALID", u.why
    assert any(r.startswith(f"{OTHER_VERSION}: ") for r in u.rules_not_applicable)


@pytest.mark.slow
def test_current_version_with_the_repository_is_valid(tmp_path_factory):
    """Today's campaign with the repository: judged as today, and its own commit's code
    names every word of its evidence (version-mismatch passes)."""
    root = corpus.harness_campaign(tmp_path_factory.getbasetemp())
    u = one(root, git_repos={"epcap": toplevel()})
    assert u.verdict == "VALID", u.why
    assert VERSION_MISMATCH in u.rules_ran, u.rules_not_applicable + u.not_checked


def set_analysis(root: Path, value: str | None, only: str | None = None) -> None:
    """analysis_version set to `value` (None: the line deleted) in every provenance.txt of
    the upload, or only in the one at `only`."""
    for path in sorted(root.rglob("provenance.txt")):
        if only is not None and path != root / only:
            continue
        lines = [ln for ln in path.read_text().splitlines()
                 if not (ln.startswith("analysis_version:") and value is None)]
        lines = [f"analysis_version: {value}" if ln.startswith("analysis_version:") else ln
                 for ln in lines]
        corpus.replace_file(path, ("\n".join(lines) + "\n").encode())


@pytest.mark.parametrize("value", [None, str(ANALYSIS_VERSION + 1)])
def test_one_commit_records_one_analysis_version(value, tmp_path, tmp_path_factory):
    """The campaign's provenance.txt says another analysis version (or none) than its cells',
    under the same harness.commit: an edit (provenance-incomplete), without any clone."""
    root = corpus.link_copy(corpus.harness_campaign(tmp_path_factory.getbasetemp()),
                            tmp_path / "edited")
    set_analysis(root, value, only="provenance.txt")
    u = one(root)
    assert u.verdict == "INVALID", u.why
    assert "provenance-incomplete" in u.reasons
    assert any("is recorded with more than one analysis_version" in w for w in u.why), u.why


@pytest.mark.slow
def test_analysis_version_other_than_its_commits_is_version_mismatch(tmp_path,
                                                                      tmp_path_factory):
    """Every provenance.txt re-stated with analysis_version 2 (consistently), from a clean
    tree: the recorded commit's own harness/pipeline/version.py says otherwise."""
    root = corpus.link_copy(corpus.harness_campaign(tmp_path_factory.getbasetemp()),
                            tmp_path / "edited")
    set_analysis(root, str(ANALYSIS_VERSION + 1))
    corpus.set_provenance(root, harness__dirty="false")     # a test tree may be dirty
    u = one(root, git_repos={"epcap": toplevel()})
    assert u.verdict == "INVALID", u.why
    assert any(w.startswith(f"{VERSION_MISMATCH}: ") and
               f"sets ANALYSIS_VERSION = {ANALYSIS_VERSION}; the upload records "
               f"'{ANALYSIS_VERSION + 1}'" in w for w in u.why), u.why
    assert one(root).verdict != "INVALID"        # without the clone: other-version at most


def test_known_tags_are_todays():
    """KNOWN_TAGS is every `[EPCAP_...]` tag today's harness and backends print."""
    import re
    root = toplevel()
    named = {m for folder in ("harness", "backends") for path in (root / folder).rglob("*.py")
             for m in re.findall(r"\[(EPCAP_[A-Z][A-Z0-9_]*)\]?", path.read_text())
             if path.name != "versions.py"}
    assert set(versions.KNOWN_TAGS) == named


def test_commit_the_repository_lacks_is_unknown_naming_it(tmp_path):
    """An earlier upload naming a commit the given clone does not hold: UNKNOWN, naming it."""
    root = corpus.copy(VERSIONS / "7e6eb72", tmp_path / "elsewhere")
    corpus.set_provenance(root, harness__commit="0123456789abcdef0123456789abcdef01234567")
    u = one(root, git_repos={"epcap": toplevel()})
    assert u.verdict == "UNKNOWN", u.why
    assert OTHER_VERSION in u.reasons
    assert any("has no commit 0123456789ab" in w for w in u.why), u.why
