"""Provenance: what a run recorded about its own origin, held against the upload
(docs/spec.md#provenance). Every rule here reads files, not one table's columns, so each row
is an `UploadRule`:

- `missing-provenance`: the tables' provenance.txt, and one covering every (not ignored)
  cell directory (its own, or the nearest at or above it inside the upload);
- `runbook-altered` and the keys of `provenance-incomplete`: rules.rederive's
  `check_runbook` and `check_provenance_keys` (the runbook as run against its hash);
- `provenance-incomplete`: `repo.<name>` lines of a harness-written provenance.txt (the
  campaign's and every cell's) have the one form harness.results.provenance.repo_line
  writes: `<sha> <commit-iso-date> <branch> dirty=<true|false>`, `missing <path>` or
  `not-a-git-checkout <path>`;
- `predates-fix:<id>` (one row per fix of the errata registry) and `commit-impossible`:
  harness.audit.errata's checks, with the registry and the --git-repo clones.
"""

from __future__ import annotations

import re
from datetime import datetime

from harness.audit.errata import check_commits, check_predates
from harness.audit.model import (
    NOT_APPLICABLE,
    AuditContext,
    Check,
    Source,
    Upload,
    UploadRule,
    verdict_of,
)
from harness.audit.readers import withheld
from harness.audit.rules.rederive import as_run, check_provenance_keys, check_runbook
from harness.audit.vocab import (
    COMMIT_IMPOSSIBLE,
    MISSING_PROVENANCE,
    PREDATES,
    PROVENANCE_INCOMPLETE,
    RUNBOOK_ALTERED,
)
from harness.results.layout import EVENTS_JSONL, PROVENANCE_TXT, RUNBOOK_YAML

SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")           # git's full sha-1 or sha-256 (%H)
BRANCH = re.compile(r"\S+")
NOT_A_COMMIT = ("missing", "not-a-git-checkout", "git-missing", "git-refused")   # repo_line's
#                                                       other forms: no commit could be read


def repo_value_problem(value: str) -> str | None:
    """Why a `repo.<name>` value is not in repo_line's form (None when it is)."""
    head, _, rest = value.partition(" ")
    if head in NOT_A_COMMIT:
        return None if rest.strip() else "names no path"
    parts = value.split(" ")
    if len(parts) != 4:
        return "is not '<sha> <commit-iso-date> <branch> dirty=<bool>'"
    sha, date, branch, dirty = parts
    if not SHA.fullmatch(sha):
        return f"sha {sha[:48]!r} is not a full commit id"
    try:
        datetime.fromisoformat(date)
    except ValueError:
        return f"commit date {date[:40]!r} is not ISO 8601"
    if not BRANCH.fullmatch(branch):
        return "names no branch"
    if dirty not in ("dirty=true", "dirty=false"):
        return f"{dirty[:40]!r} is not dirty=true or dirty=false"
    return None


def check_repo_lines(upload: Upload) -> Check:
    """Every `repo.<name>` line of a harness-written upload's provenance files (the
    campaign's, every cell's) in the form the harness writes."""
    if not as_run(upload):
        return Check(PROVENANCE_INCOMPLETE, NOT_APPLICABLE, ["no runbook as run"])
    files = {"provenance.txt": upload.provenance or {}}
    for cell in upload.cells.values():
        if cell.provenance_at and cell.provenance is not None:
            files.setdefault(cell.provenance_at, cell.provenance)
    bad = [f"{where}: field {key} {problem}"
           for where, fields in sorted(files.items())
           for key, value in sorted(fields.items()) if key.startswith("repo.")
           for problem in [repo_value_problem(value)] if problem]
    return verdict_of(bad, [], PROVENANCE_INCOMPLETE, [])


def check_missing_provenance(upload: Upload, ctx: AuditContext | None = None) -> Check:
    """The tables' provenance.txt, and one covering every (not ignored) cell directory: its
    own, or the nearest at or above it inside the upload (the earlier campaign wrote one per
    step, not one per cell)."""
    bad, unknown = [], []
    if upload.provenance is None:
        (unknown if withheld(upload.provenance_problem) else bad).append(
            upload.provenance_problem or "no provenance.txt")
    for key, cell in sorted(upload.cells.items()):
        if cell.problem:
            unknown.append(f"{key}: {cell.problem}")
        elif cell.provenance is None and withheld(cell.provenance_problem):
            unknown.append(f"{key}: {cell.provenance_problem}")
        elif cell.provenance is None:
            bad.append(f"{key}: no provenance.txt in it or above it")
    return verdict_of(bad, [], MISSING_PROVENANCE, unknown)


def runbook_row(upload: Upload, ctx: AuditContext) -> Check:
    """`runbook-altered` (rules.rederive.check_runbook)."""
    return check_runbook(upload)


def keys_row(upload: Upload, ctx: AuditContext) -> Check:
    """The keys of `provenance-incomplete` (rules.rederive.check_provenance_keys)."""
    return check_provenance_keys(upload)


def repo_lines_row(upload: Upload, ctx: AuditContext) -> Check:
    """The `repo.<name>` lines of `provenance-incomplete`."""
    return check_repo_lines(upload)


def predates_row(upload: Upload, ctx: AuditContext, fix=None) -> Check:
    """`predates-fix:<id>` for the one fix its expanded row names (errata.check_predates)."""
    return check_predates(upload, fix, ctx.clones)


def commits_row(upload: Upload, ctx: AuditContext) -> Check:
    """`commit-impossible` against the --git-repo clones (errata.check_commits)."""
    return check_commits(upload, ctx.clones)


PROVENANCE = Source(PROVENANCE_TXT, ())                 # the tables' and every cell's
REPO_LINES = Source(PROVENANCE_TXT, ("repo.<name>",))

RULES: tuple[UploadRule, ...] = (
    UploadRule(MISSING_PROVENANCE, "a table or (not ignored) cell with no provenance.txt in "
               "its own directory or any directory above it inside the upload",
               (PROVENANCE,), check_missing_provenance, "results nobody can trace to a commit"),
    UploadRule(RUNBOOK_ALTERED, "runbook.yaml does not hash to the sha256 provenance, "
               "events.jsonl and each cell's provenance recorded",
               (Source(RUNBOOK_YAML, ()), Source(PROVENANCE_TXT, ("runbook.sha256",)),
                Source(EVENTS_JSONL, ("runbook_sha256",))), runbook_row,
               "a runbook edited after the run, so that the rules derive from another one"),
    UploadRule(PROVENANCE_INCOMPLETE, "a harness-written provenance.txt lacks a "
               "docs/spec.md#provenance key, writes one twice, or lacks a runbook "
               "repository's repo.<name>",
               (Source(PROVENANCE_TXT, ("<spec keys>", "repo.<name>")),
                Source(RUNBOOK_YAML, ("repositories",))), keys_row,
               "provenance stripped to one line"),
    UploadRule(PROVENANCE_INCOMPLETE, "a repo.<name> line not in repo_line's form",
               (REPO_LINES,), repo_lines_row,
               "a scripts repository's commit written by hand"),
    UploadRule(PREDATES, "a repo.<registry repository> commit older than a fix in the "
               "errata registry (one row per fix)", (REPO_LINES,), predates_row,
               "results produced by run scripts older than a fix in the errata registry",
               per_fix=True),
    UploadRule(COMMIT_IMPOSSIBLE, "a repo.<name> commit the run could not have checked out: "
               "dated after its utc_start, or absent from the --git-repo clone",
               (Source(PROVENANCE_TXT, ("repo.<name>", "utc_start")),), commits_row,
               "a commit id written into provenance after the run"),
)
