"""Uploads made by another epcap version (docs/audit.md#uploads-made-by-another-epcap-version).

The rules marked `version_bound` (harness/audit/model.py `Rule`) compare the upload's tables
with what today's code derives from its cells: the pipeline replayed, each cell's command
rebuilt, its routing regenerated. Their verdict holds only where the upload was made with
today's definitions: its provenance's `analysis_version` (harness/pipeline/version.py) is
this audit's. Otherwise a difference may be a definition that changed, not a lie:

- without a clone of epcap, a version-bound rule that failed or could not decide is
  UNKNOWN (`other-version`, naming both versions), never INVALID;
- with `--git-repo epcap=PATH`, the recorded `harness.commit` is checked out (git archive)
  into `$EPCAP_CACHE/versions/<sha>/` and that commit's own `epcap audit --json` runs on the
  upload in a subprocess: its verdict decides the version-bound rules ("by its own code at
  <sha>"); a commit the clone lacks is UNKNOWN naming it.

`version-mismatch`, with the clone: could the recorded commit have written this evidence?
Every table, header column, provenance key and log tag of the upload that today's code knows
must be named somewhere in that commit's own code (`git grep` at the commit, no checkout).
An upload with no `harness.commit` (the earlier, non-harness layout) is not another epcap
version: judged as before.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.audit.errata import GitClones, is_commit, provenance_sources
from harness.audit.model import FAIL, NOT_APPLICABLE, PASS, UNKNOWN, Check, Upload, first
from harness.audit.vocab import OTHER_VERSION, PROVENANCE_INCOMPLETE, TABLES, VERSION_MISMATCH
from harness.io.boundary.tools import run_tool
from harness.io.safeio import open_stream
from harness.pipeline.version import ANALYSIS_VERSION, PROVENANCE_KEY
from harness.results.layout import (
    ATTEMPTS_TSV,
    CAMPAIGN_JSON,
    COMPARISON_TSV,
    EVENTS_JSONL,
    FRONTIER_TSV,
    SELECTION_TSV,
    TIMING_LAUNCHES_TSV,
    TIMING_TRIALS_TSV,
    TIMING_TSV,
)
from harness.results.provenance import harness_facts
from harness.results.rows import (
    ATTEMPT_COLUMNS,
    COMPARISON_COLUMNS,
    FRONTIER_COLUMNS,
    SELECTION_COLUMNS,
    TIMING_COLUMNS,
    TIMING_LAUNCH_COLUMNS,
    TIMING_TRIAL_COLUMNS,
)

EPCAP = "epcap"                          # the --git-repo name of epcap's own repository
VERSIONS_DIR = "versions"                # $EPCAP_CACHE/versions/<full sha>/
COMPLETE = ".epcap-complete"
AUDIT_TIMEOUT_S = 900.0                  # one earlier commit's audit of one upload
ARCHIVE_TIMEOUT_S = 120.0
GIT_TIMEOUT_S = 60.0
CLI_MODULE = "harness.cli"               # what `epcap` runs, at the recorded commit
CODE_PATHS = ("harness", "backends")
VERSION_FILE = "harness/pipeline/version.py"    # where a commit sets its ANALYSIS_VERSION     # where a commit's code names what it writes
# what today's code knows, by kind: a word an upload holds outside these (a column a user
# appended, a file of their own) is no claim about the version that made it
KNOWN_COLUMNS = {ATTEMPTS_TSV: set(ATTEMPT_COLUMNS), SELECTION_TSV: set(SELECTION_COLUMNS),
                 TIMING_TSV: set(TIMING_COLUMNS), COMPARISON_TSV: set(COMPARISON_COLUMNS),
                 TIMING_LAUNCHES_TSV: set(TIMING_LAUNCH_COLUMNS),
                 TIMING_TRIALS_TSV: set(TIMING_TRIAL_COLUMNS),
                 FRONTIER_TSV: set(FRONTIER_COLUMNS)}
KNOWN_FILES = (*TABLES, EVENTS_JSONL, CAMPAIGN_JSON)
KNOWN_KEYS = (PROVENANCE_KEY, "harness.commit_date", "harness.dirty", "gpu.source",
              "runbook.sha256")
LOG_TAG = re.compile(rb"\[(EPCAP_[A-Z][A-Z0-9_]*)\]")
KNOWN_TAGS = ("EPCAP_ASSERT", "EPCAP_COMBINE", "EPCAP_HEALTH", "EPCAP_MEGATRON_CORE",
              "EPCAP_OVERFLOW", "EPCAP_RANK", "EPCAP_REFERENCE", "EPCAP_SLURM",
              "EPCAP_TIMING")   # the tags today's code prints (tests/unit/test_audit_versions.py)
LOG_SCAN_BYTES = 64 << 20                 # tags are looked for in each log's first 64 MiB
LOG_SUFFIXES = (".log", ".out", ".err")


@dataclass(frozen=True)
class Version:
    """An epcap version: the commit and the analysis version it records."""

    commit: str
    analysis: str | None                  # None: not recorded (made before the number)
    dirty: bool = False

    @property
    def label(self) -> str:
        short = self.commit[:7] if is_commit(self.commit) else self.commit
        analysis = (f"analysis {self.analysis}" if self.analysis is not None
                    else "analysis unrecorded")
        return f"epcap {short}{' (dirty)' if self.dirty else ''} ({analysis})"

    @property
    def current(self) -> bool:
        return self.analysis == str(ANALYSIS_VERSION)


def own_version() -> Version:
    """This audit's own version."""
    facts = harness_facts()
    return Version(facts.get("harness.commit", "unknown"), str(ANALYSIS_VERSION),
                   facts.get("harness.dirty") == "true")


def made_by(upload: Upload) -> Version | None:
    """The version its campaign-level provenance.txt records; None without `harness.commit`
    (not written by epcap)."""
    fields = upload.provenance or {}
    commit = fields.get("harness.commit")
    if not commit:
        return None
    return Version(commit, fields.get(PROVENANCE_KEY), fields.get("harness.dirty") == "true")


# ---------------------------------------------------------------- the evidence's words

def log_tags(upload: Upload) -> dict[str, str]:
    """Every `[EPCAP_...]` tag today's code prints (KNOWN_TAGS) found in the upload's cell
    logs -> the first file holding it."""
    found: dict[str, str] = {}
    for cell in sorted(upload.cells.values(), key=lambda c: c.path):
        if cell.where is None or cell.problem:
            continue
        for log in sorted(cell.where.iterdir()):
            if not log.name.endswith(LOG_SUFFIXES) or log.is_symlink() or not log.is_file():
                continue
            try:
                with open_stream(log) as handle:
                    data = handle.read(LOG_SCAN_BYTES)
            except OSError:
                continue
            for tag in {t.decode() for t in LOG_TAG.findall(data)} & set(KNOWN_TAGS):
                found.setdefault(tag, f"{cell.path}/{log.name}")
    return found


def evidence_words(upload: Upload) -> dict[str, str]:
    """word -> what in the upload holds it (files, provenance keys, log tags, then header
    columns: the order the why lists them): the evidence files present, provenance keys,
    log tags and table columns, each only where today's code knows it."""
    words: dict[str, str] = {}
    folder = upload.folder
    for name in KNOWN_FILES:
        if folder is not None and (folder / name).is_file():
            words.setdefault(name, f"{name}: {{short}}'s code never writes it")
    for label, fields in provenance_sources(upload).items():
        for key in fields:
            if key in KNOWN_KEYS:
                words.setdefault(key, f"{label} key {key}: {{short}}'s code never writes it")
    for tag, where in log_tags(upload).items():
        words.setdefault(tag, f"[{tag}] ({where}): {{short}}'s code never prints it")
    for name, table in upload.tables.items():
        for column in table.columns:
            if column in KNOWN_COLUMNS.get(name, ()):
                words.setdefault(column, f"{name} column {column}: {{short}}'s code never "
                                         f"names it")
    return words


def git_run(repo: Path, *args: str, timeout_s: float = GIT_TIMEOUT_S):
    """git in the --git-repo clone, through the tools boundary (argv list, never a shell)."""
    return run_tool(["git", "-C", str(repo), *args], timeout_s=timeout_s)


def names_in_code(repo: Path, sha: str, words: list[str]) -> set[str] | None:
    """The words that occur in the commit's code (CODE_PATHS): one `git grep -F -o` for
    all, then `git grep -q` for each word it did not show (its output may have been cut);
    None when git cannot answer."""
    args = ["grep", "-F", "-o", "-h", "--no-color"]
    for word in words:
        args += ["-e", word]
    done = git_run(repo, *args, sha, "--", *CODE_PATHS)
    if done.code not in (0, 1):
        return None
    found = set(done.out.split("\n")) & set(words)
    for word in [w for w in words if w not in found]:
        one = git_run(repo, "grep", "-q", "-F", "-e", word, sha, "--", *CODE_PATHS)
        if one.code not in (0, 1):
            return None
        if one.code == 0:
            found.add(word)
    return found


def check_mismatch(upload: Upload, made: Version, clones: GitClones) -> Check:
    """version-mismatch: every word of the evidence is named by the recorded commit's code."""
    repo = clones.repos.get(EPCAP)
    if repo is None:
        return Check(VERSION_MISMATCH, NOT_APPLICABLE, [
            f"made by {made.label}: without --git-repo {EPCAP}=PATH the words that "
            f"commit's code names are not known"])
    if not is_commit(made.commit):
        return Check(VERSION_MISMATCH, NOT_APPLICABLE,
                     [f"harness.commit {made.commit[:40]!r} names no commit"])
    if not clones.has(EPCAP, made.commit):
        return Check(VERSION_MISMATCH, UNKNOWN, [
            f"harness.commit {made.commit[:12]} is not in the --git-repo {EPCAP} clone "
            f"({repo}): `git fetch` it"])
    words = evidence_words(upload)
    known = names_in_code(repo, made.commit, list(words))
    if known is None:
        return Check(VERSION_MISMATCH, UNKNOWN, [f"git grep at {made.commit[:12]} in {repo} "
                                                 f"gave no answer"])
    short = made.commit[:7]
    missing = [said.replace("{short}", short) for w, said in words.items() if w not in known]
    answered, theirs = commit_analysis(repo, made.commit)
    if answered and theirs is not None and theirs != made.analysis:
        missing.insert(0, f"provenance.txt {PROVENANCE_KEY}: {short}'s code sets "
                          f"ANALYSIS_VERSION = {theirs}; the upload records "
                          f"{'none' if made.analysis is None else repr(made.analysis)}")
    if missing and made.dirty:
        return Check(VERSION_MISMATCH, UNKNOWN, [
            f"made by a dirty checkout of {short}, whose own code may name them: "
            + first(missing, 8)])
    if missing:
        return Check(VERSION_MISMATCH, FAIL, [first(missing, 8)])
    return Check(VERSION_MISMATCH, PASS, [f"{len(words)} words of the evidence are named "
                                          f"by {short}'s code"])


# ---------------------------------------------------------------- that version's own audit

def full_sha(repo: Path, commit: str) -> str | None:
    """The full id of a (hex, possibly short) commit in the clone, or None."""
    if not is_commit(commit):
        return None
    done = git_run(repo, "rev-parse", "--verify", "-q", f"{commit}^{{commit}}")
    sha = done.out.strip()
    return sha if done.ok and is_commit(sha) else None


def checkout(repo: Path, sha: str, cache: Path) -> Path:
    """The commit's tree under cache/versions/<sha>/ (`git archive` to a tar file, `tar -x`
    into a temp directory, then renamed into place); reused once complete."""
    final = cache / VERSIONS_DIR / sha
    if (final / COMPLETE).exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}-", dir=final.parent))
    try:
        tar, tree = tmp / "tree.tar", tmp / "tree"
        tree.mkdir()
        for done in (git_run(repo, "archive", "--format=tar", f"--output={tar}", sha,
                             timeout_s=ARCHIVE_TIMEOUT_S),
                     run_tool(["tar", "-x", "-f", str(tar), "-C", str(tree)],
                              timeout_s=ARCHIVE_TIMEOUT_S)):
            if not done.ok:
                raise OSError(done.problem)
        (tree / COMPLETE).touch()
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tree, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def own_audit(repo: Path, sha: str, folder: Path) -> tuple[dict | None, str]:
    """That commit's own `epcap audit FOLDER --json`, run from its checkout: (its upload's
    verdict dict, '') or (None, why not)."""
    from harness.audit.engine import cache_root  # the engine imports this module
    try:
        tree = checkout(repo, sha, cache_root())
    except OSError as exc:
        return None, f"cannot check out {sha[:12]}: {exc}"
    env = {k: v for k, v in os.environ.items() if k not in ("EPCAP_REQUIRE_COMPILED",)}
    env["PYTHONPATH"] = str(tree)
    done = run_tool([sys.executable, "-m", CLI_MODULE, "audit", str(folder), "--json"],
                    timeout_s=AUDIT_TIMEOUT_S, cwd=str(tree), env=env)
    if done.code is None:
        return None, str(done.problem)
    try:
        doc = json.loads(done.out)       # our own tool's JSON document, size-capped
        uploads = doc["uploads"]
        mine = [u for u in uploads if u.get("path") in (".", "")] or uploads[:1]
        return mine[0], ""
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None, f"its audit gave no verdict: {done.problem or 'no JSON on stdout'}"


def check_one_version(upload: Upload) -> Check:
    """provenance-incomplete: the provenance files of one `harness.commit` (the campaign's,
    each cell's) record one analysis version: a commit has one `ANALYSIS_VERSION`, so a file
    stating another, or none beside one that states it, was edited."""
    by_commit: dict[str, dict[str | None, list[str]]] = {}
    for label, fields in provenance_sources(upload).items():
        commit = fields.get("harness.commit")
        if commit:
            by_commit.setdefault(commit, {}).setdefault(fields.get(PROVENANCE_KEY),
                                                        []).append(label)
    bad = []
    for commit, versions in sorted(by_commit.items()):
        if len(versions) > 1:
            said = "; ".join(f"{'unrecorded' if v is None else v!r} in {first(files, 2)}"
                             for v, files in versions.items())
            bad.append(f"harness.commit {commit[:12]} is recorded with more than one "
                       f"{PROVENANCE_KEY} (one commit has one): {said}")
    if not by_commit:
        return Check(PROVENANCE_INCOMPLETE, NOT_APPLICABLE, ["no harness.commit"])
    return Check(PROVENANCE_INCOMPLETE, FAIL, [first(bad, 2)]) if bad else \
        Check(PROVENANCE_INCOMPLETE, PASS, [])


def commit_analysis(repo: Path, sha: str) -> tuple[bool, str | None]:
    """(answered, N): the ANALYSIS_VERSION the commit's own harness/pipeline/version.py sets;
    (True, None) when the commit has no such file (it predates the number)."""
    if git_run(repo, "cat-file", "-e", f"{sha}:{VERSION_FILE}").code not in (0, None):
        return True, None
    shown = git_run(repo, "show", f"{sha}:{VERSION_FILE}")
    if not shown.ok:
        return False, None
    match = re.search(r"^ANALYSIS_VERSION\s*=\s*(\d+)\s*$", shown.out, re.M)
    return (True, match.group(1)) if match else (False, None)


# ---------------------------------------------------------------- rows and the version pass

def check_version_mismatch(upload: Upload, clones: GitClones) -> Check:
    """version-mismatch (a catalogue row): n/a for an upload epcap did not write."""
    made = made_by(upload)
    if made is None:
        return Check(VERSION_MISMATCH, NOT_APPLICABLE,
                     ["no harness.commit in provenance.txt: not written by epcap"])
    return check_mismatch(upload, made, clones)


def judge_versions(upload: Upload, checks: list[Check], bound: set[str],
                   clones: GitClones) -> tuple[list[Check], list[str]]:
    """The version pass, after the catalogue's rows: the checks with the version-bound ones
    (codes in `bound`) judged for the version that made the upload, plus `other-version`;
    and notes."""
    made = made_by(upload)
    if made is None:
        return checks + [Check(OTHER_VERSION, NOT_APPLICABLE, [
            "no harness.commit in provenance.txt: not written by epcap"])], []
    own = own_version()
    if made.current:
        return checks + [Check(OTHER_VERSION, NOT_APPLICABLE,
                               [f"made by {made.label}: this audit's analysis"])], []
    doubted = [c for c in checks if c.code in bound and c.state in (FAIL, UNKNOWN)]
    if upload.runbook is None and not doubted:   # no runbook as run: nothing replayed
        return checks + [Check(OTHER_VERSION, NOT_APPLICABLE, [
            f"made by {made.label}: no runbook as run, no replay"])], []
    repo = clones.repos.get(EPCAP)
    if repo is not None and is_commit(made.commit):
        return by_own_code(upload, checks, bound, made, repo, clones)
    if not doubted:     # agreeing with today's definitions does not say they were its own
        return checks + [Check(OTHER_VERSION, UNKNOWN, [
            f"made by {made.label}; this audit is {own.label}: today's replay agrees, but "
            f"whether its own definitions were today's is not known (pass --git-repo "
            f"{EPCAP}=PATH to judge it by its own code)"])], []
    head = (f"made by {made.label}; this audit is {own.label}: the replay's differences may "
            f"be definitions that changed (pass --git-repo {EPCAP}=PATH to judge them by "
            f"its own code)")
    out = [Check(c.code, UNKNOWN, [f"{head}: {w}" for w in c.why[:1]])
           if c in doubted else c for c in checks]
    summary = "; ".join(f"{c.code}: {first(c.why, 1)}" for c in doubted)
    return out + [Check(OTHER_VERSION, UNKNOWN, [f"{head}: {summary}"])], []


def by_own_code(upload: Upload, checks: list[Check], bound: set[str], made: Version,
                repo: Path, clones: GitClones) -> tuple[list[Check], list[str]]:
    """The version-bound rules as the recorded commit's own audit judges the upload."""
    short = made.commit[:7]
    if not clones.has(EPCAP, made.commit):
        why = (f"made by {made.label}: the --git-repo {EPCAP} clone ({repo}) has no commit "
               f"{made.commit[:12]}; `git fetch` it")
        return [Check(c.code, UNKNOWN, [why]) if c.code in bound and c.state == FAIL else c
                for c in checks] + [Check(OTHER_VERSION, UNKNOWN, [why])], []
    sha = full_sha(repo, made.commit) or made.commit
    theirs, problem = own_audit(repo, sha, upload.folder or Path("."))
    if theirs is None:
        why = f"made by {made.label}: its own audit at {short} gave no verdict: {problem}"
        return [Check(c.code, UNKNOWN, [why]) if c.code in bound and c.state != PASS
                and c.state != NOT_APPLICABLE else c
                for c in checks] + [Check(OTHER_VERSION, UNKNOWN, [why])], []
    verdict = str(theirs.get("verdict"))
    reasons = {str(r) for r in theirs.get("reasons") or []}
    their_why = [str(w) for w in theirs.get("why") or []]
    state = {"INVALID": FAIL, "UNKNOWN": UNKNOWN}.get(verdict)
    its_rules = names_in_code(repo, sha, sorted(bound))
    its_rules = set(bound) if its_rules is None else its_rules     # git gave no answer
    out = []
    for check in checks:
        if check.code not in bound or check.state == NOT_APPLICABLE:
            out.append(check)
        elif check.code not in its_rules:
            out.append(Check(check.code, NOT_APPLICABLE, [
                f"epcap {short} has no rule {check.code}: its own audit does not judge it, "
                f"and today's definitions are not its"]))
        elif state is not None and check.code in reasons:
            said = [w.split(": ", 1)[-1] for w in their_why if w.startswith(check.code)]
            out.append(Check(check.code, state, [f"by its own code at {short}: {w}"
                                                 for w in said or [verdict]]))
        else:
            out.append(Check(check.code, PASS, [f"by its own code at {short}: passes"]))
    notes = [f"made by {made.label}: the version-bound rules ({', '.join(sorted(bound))}) "
             f"are judged by its own audit at {short}, which says {verdict}"
             + (f" ({', '.join(sorted(reasons))})" if reasons else "")]
    other = sorted(reasons - bound)
    if other:
        notes.append(f"its own audit at {short} also says: "
                     + first([w for w in their_why if w.split(":", 1)[0].split(" ")[0]
                              in other], 3))
    return out + [Check(OTHER_VERSION, PASS, [f"judged by its own code at {short}"])], notes
