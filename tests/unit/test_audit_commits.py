"""The lies of issue 23 that once passed, each planted on its own: `over_provision` edited; the
run-scripts repository recorded under another spelling; a commit absent from the
`--git-repo` clone; a commit dated after the run (harness/audit/errata.py: `predates-fix`,
`commit-impossible`). Each test also shows the lie VALID with its check switched off."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from harness.audit import audit_target, engine, errata
from harness.audit.vocab import COMMIT_IMPOSSIBLE
from harness.results.layout import SELECTION_TSV

CORPUS_PY = Path(__file__).resolve().parents[1] / "fixtures" / "uploads" / "corpus.py"
_spec = importlib.util.spec_from_file_location("upload_corpus_commits", CORPUS_PY)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

RUN_SCRIPTS = "blackwell_run_scripts"
FAKE_SHA = "0badc0de" * 5


def git(repo: Path, *args: str, date: str | None = None) -> str:
    """git in a test repository, with a fixed identity and optional commit date."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    done = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True,
                          text=True, check=True)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def scripts(tmp_path_factory) -> dict:
    """A real run-scripts repository: old -> fix -> new, with their shas and dates."""
    repo = tmp_path_factory.mktemp(RUN_SCRIPTS)
    git(repo, "init", "-q", "-b", "main")
    shas = {}
    for name, when in (("old", "2024-01-01T00:00:00+00:00"),
                       ("fix", "2024-02-01T00:00:00+00:00"),
                       ("new", "2024-03-01T00:00:00+00:00")):
        (repo / "run.sh").write_text(f"# {name}\n")
        git(repo, "add", "run.sh")
        git(repo, "commit", "-q", "-m", name, date=when)
        shas[name] = (git(repo, "rev-parse", "HEAD"), when)
    return {"repo": repo, "shas": shas}


@pytest.fixture
def registry(scripts, tmp_path) -> Path:
    """An errata registry whose one fix is the repository's `fix` commit (no date)."""
    path = tmp_path / "errata.yaml"
    path.write_text(f"repository: {RUN_SCRIPTS}\nfixes:\n  - id: the-fix\n"
                    f"    commit: '{scripts['shas']['fix'][0][:7]}'\n    date: null\n")
    return path


def upload(root: Path, line: str) -> Path:
    """The corpus's VALID harness-like upload naming `line` as its run-scripts commit."""
    return corpus.write_valid(root, run_scripts=line)


def respell(root: Path, key: str) -> None:
    """Every provenance.txt records the run scripts under `repo.<key>` instead."""
    for path in root.rglob("provenance.txt"):
        text = path.read_text()
        path.write_text(text.replace(f"repo.{RUN_SCRIPTS}:", f"repo.{key}:"))


def verdict(root: Path, registry: Path, clones: dict | None = None):
    """The one upload's verdict."""
    (u,) = audit_target(root, registry, clones).uploads
    return u


def without_commit_check(monkeypatch) -> None:
    """Switch commit-impossible off (the lie must then pass: the check is what catches it)."""
    monkeypatch.setattr(engine, "RULES", tuple(r for r in engine.RULES
                                               if r.code != COMMIT_IMPOSSIBLE))


# ------------------------------------------------------------ over_provision edited

@pytest.mark.slow
@pytest.mark.parametrize("how", ["nudged", "rounded", "emptied"])
def test_over_provision_edited_is_invalid(tmp_path_factory, tmp_path, monkeypatch, how):
    """The pipeline's replayed select step writes over_provision = budget / peak; an edited
    one (a digit nudged, rounded to two decimals, emptied) is selection-not-rederived, and
    VALID with the replay's column comparison switched off: with the runbook as run no
    restated "field empty" rule catches the emptied one, the replay's row does."""
    valid = corpus.harness_campaign(tmp_path_factory.getbasetemp())
    lie = corpus.link_copy(valid, tmp_path / "lie")

    def edit(row):
        if row["over_provision"] and not getattr(edit, "done", False):
            edit.done = True
            value = row["over_provision"]
            row["over_provision"] = {"nudged": value[:-1] + str((int(value[-1]) + 1) % 10),
                                     "rounded": f"{float(value):.2f}", "emptied": ""}[how]
            assert row["over_provision"] != value
        return row
    corpus.edit(lie, SELECTION_TSV, edit)
    (u,) = audit_target(lie).uploads
    assert u.verdict == "INVALID" and "selection-not-rederived" in u.reasons, u.why
    assert any("over_provision" in w for w in u.why), u.why
    if how == "emptied":
        assert any("over_provision '' but the pipeline replayed" in w for w in u.why), u.why
    from harness.audit.rules import pipeline
    monkeypatch.setattr(pipeline, "column_problems", lambda *a, **k: [])
    (blind,) = audit_target(lie).uploads
    assert blind.verdict == "VALID", blind.why


# ------------------------------------------------------------ the repository respelt

@pytest.mark.parametrize("key", ["Blackwell_Run_Scripts", "blackwell-run-scripts",
                                 "blackwell_run_scripts.git", "blackwell_run_scripts/",
                                 "https://github.com/org/blackwell_run_scripts.git",
                                 "git@github.com:org/Blackwell-Run-Scripts.git",
                                 "ＢＬＡＣＫＷＥＬＬ_run_scripts"])
def test_scripts_repository_under_another_spelling(scripts, registry, tmp_path, monkeypatch,
                                                   key):
    """A commit older than the fix, recorded as `repo.<another spelling>`: still the run
    scripts, still predates the fix. Seen failing: with names compared exactly (the code
    before repository_key), the epcap provenance looked as if it used no run scripts: VALID."""
    sha, when = scripts["shas"]["old"]
    root = upload(tmp_path / "u", f"{sha} {when} main dirty=false")
    respell(root, key)
    u = verdict(root, registry, {RUN_SCRIPTS: scripts["repo"]})
    assert u.verdict == "INVALID" and "predates-fix:the-fix" in u.reasons, u.why
    monkeypatch.setattr(errata, "repository_key", lambda name: name)
    blind = verdict(root, registry, {RUN_SCRIPTS: scripts["repo"]})
    assert blind.verdict == "VALID", blind.why


def test_repository_key_is_one_name_per_repository():
    keys = {errata.repository_key(k) for k in (
        "blackwell_run_scripts", "Blackwell-Run-Scripts", "org/blackwell_run_scripts",
        "https://github.com/org/blackwell_run_scripts.git/",
        "git@github.com:org/blackwell_run_scripts.git", "ssh://git@host/org/blackwell_run_scripts")}
    assert keys == {RUN_SCRIPTS}
    assert errata.repository_key("megatron-lm") != errata.repository_key("blackwell_run_scripts")


def test_a_clone_given_under_another_spelling_orders_commits(scripts, registry, tmp_path):
    """--git-repo names the repository as the user spells it: ancestry is still read."""
    sha, when = scripts["shas"]["new"]
    root = upload(tmp_path / "u", f"{sha} {when} main dirty=false")
    u = verdict(root, registry, {"Blackwell-Run-Scripts.git": scripts["repo"]})
    assert (u.verdict, u.why) == ("VALID", [])
    assert any("contains" in w for c in u.checks if c.code == "predates-fix:the-fix"
               for w in c.why)


# ------------------------------------------------------------ commits that cannot be

def test_honest_commit_with_its_clone_is_valid(scripts, registry, tmp_path):
    sha, when = scripts["shas"]["new"]
    root = upload(tmp_path / "u", f"{sha} {when} main dirty=false")
    u = verdict(root, registry, {RUN_SCRIPTS: scripts["repo"]})
    assert (u.verdict, u.why) == ("VALID", [])
    assert COMMIT_IMPOSSIBLE in u.rules_ran


def test_commit_absent_from_the_git_repo_clone(scripts, registry, tmp_path, monkeypatch):
    """An invented sha dated after the fix: by dates it contains the fix (VALID without a
    clone, and with commit-impossible switched off); the clone, which holds newer commits
    than it claims, does not have it: INVALID."""
    root = upload(tmp_path / "u", f"{FAKE_SHA} 2024-02-15T00:00:00+00:00 main dirty=false")
    dated = errata.load_errata(registry)
    assert verdict(root, registry).verdict == "UNKNOWN"      # undated fix, no clone
    dated_path = tmp_path / "dated.yaml"
    dated_path.write_text(registry.read_text().replace(
        "date: null", "date: '2024-02-01T00:00:00+00:00'"))
    assert dated.fixes[0].date is None
    assert verdict(root, dated_path).verdict == "VALID"      # dates alone cannot see it
    u = verdict(root, registry, {RUN_SCRIPTS: scripts["repo"]})
    assert u.verdict == "INVALID" and u.reasons == [COMMIT_IMPOSSIBLE], u.why
    assert any("is not in the --git-repo clone" in w for w in u.why)
    without_commit_check(monkeypatch)
    assert verdict(root, registry, {RUN_SCRIPTS: scripts["repo"]}).verdict == "VALID"


def test_commit_newer_than_the_clone_is_unknown(scripts, registry, tmp_path):
    """A sha the clone lacks, dated after the clone's newest commit: the clone may be stale
    (missing evidence, `git fetch`), not a lie."""
    root = upload(tmp_path / "u", f"{FAKE_SHA} 2025-06-01T00:00:00+00:00 main dirty=false")
    u = verdict(root, registry, {RUN_SCRIPTS: scripts["repo"]})
    assert u.verdict == "UNKNOWN" and COMMIT_IMPOSSIBLE in u.reasons, u.why
    assert any("git fetch" in w for w in u.why)


def test_commit_dated_after_the_run(registry, tmp_path, monkeypatch):
    """The corpus's runs started 2026-11-29T10:00:00Z; a commit dated a month later cannot
    have been checked out by them (no clone needed)."""
    root = upload(tmp_path / "u", f"{FAKE_SHA} 2026-12-29T00:00:00+00:00 main dirty=false")
    u = verdict(root, registry)
    assert u.verdict == "INVALID" and COMMIT_IMPOSSIBLE in u.reasons, u.why
    assert any("after the run that recorded it started" in w for w in u.why)
    without_commit_check(monkeypatch)
    assert verdict(root, registry).verdict != "INVALID"


def test_recorded_date_the_clone_contradicts(scripts, registry, tmp_path, monkeypatch):
    """The real `old` commit (before the fix) recorded with a date after the fix: the clone's
    ancestry already says predates-fix; its own date says the line was edited."""
    sha, _ = scripts["shas"]["old"]
    root = upload(tmp_path / "u", f"{sha} 2024-06-01T00:00:00+00:00 main dirty=false")
    u = verdict(root, registry, {RUN_SCRIPTS: scripts["repo"]})
    assert u.verdict == "INVALID" and COMMIT_IMPOSSIBLE in u.reasons, u.why
    assert any("the --git-repo clone dates it 2024-01-01" in w for w in u.why), u.why


def test_a_commit_with_no_run_start_to_order_it_is_unknown(scripts, registry, tmp_path):
    """utc_start deleted from a provenance that names a commit: the commit cannot be ordered
    against its run (missing evidence: UNKNOWN, naming the key; once a survivor of the
    fuzzer, when no rule read utc_start)."""
    sha, when = scripts["shas"]["new"]
    root = upload(tmp_path / "u", f"{sha} {when} main dirty=false")
    prov = root / "provenance.txt"
    prov.write_text("".join(x for x in prov.read_text().splitlines(keepends=True)
                            if not x.startswith("utc_start:")))
    u = verdict(root, registry, {RUN_SCRIPTS: scripts["repo"]})
    assert u.verdict == "UNKNOWN" and u.reasons == [COMMIT_IMPOSSIBLE], u.why
    assert any("no utc_start" in w for w in u.why)
