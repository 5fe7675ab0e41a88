"""The errata registry (docs/spec.md#command-line shape) and the `predates-fix:<id>` rule: does a
run-scripts commit named in provenance contain each fix? Ancestry from a --git-repo clone,
else commit dates, else UNKNOWN."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Protocol

from harness.audit.model import FAIL, NOT_APPLICABLE, PASS, UNKNOWN, Check, Upload, verdict_of
from harness.audit.vocab import COMMIT_IMPOSSIBLE, PREDATES
from harness.errors import BadInput
from harness.io.safeio import RUNBOOK_MAX_BYTES, read_text
from harness.io.yamldoc import Doc
from harness.results.provenance import git_why, parse_repo_line, run_git

DEFAULT_ERRATA = Path(__file__).resolve().parents[2] / "provenance" / "errata.yaml"
COMMIT_CHARS = "0123456789abcdefABCDEF"


def is_commit(text: str) -> bool:
    """4 to 64 hex digits."""
    return 4 <= len(text) <= 64 and all(c in COMMIT_CHARS for c in text)


def repository_key(name: str) -> str:
    """A repository's name as compared: one repository under any spelling (NFKC and case
    folded; the last part of a path, URL or ssh spec; no trailing '/' or '.git'; '-' as
    '_'), so `https://github.com/org/Blackwell-Run-Scripts.git/` is `blackwell_run_scripts`."""
    text = unicodedata.normalize("NFKC", name).casefold().strip().rstrip("/")
    text = text.removesuffix(".git").rstrip("/")
    text = text.rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    return text.replace("-", "_")


def is_fix_id(text: str) -> bool:
    """A word of letters, digits, '.', '_' or '-' starting with a letter or digit."""
    return bool(text) and text[0].isascii() and text[0].isalnum() and all(
        c.isascii() and (c.isalnum() or c in "._-") for c in text)


@dataclass(frozen=True)
class Fix:
    """One errata entry."""

    id: str
    repository: str
    commit: str | None
    date: str | None
    summary: str = ""
    invalidates: tuple[str, ...] = ()

    @property
    def code(self) -> str:
        return f"{PREDATES}:{self.id}"


@dataclass(frozen=True)
class Errata:
    """The errata registry: the repository its commits belong to, and the fixes."""

    repository: str
    fixes: tuple[Fix, ...]
    path: str = ""


def parse_date(text: str | None) -> datetime | None:
    """An ISO 8601 date with a timezone (naive dates read as UTC), or None."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def load_errata(path: Path | str | None = None) -> Errata:
    """Read and check an errata registry; BadInput names file:line: field."""
    path = Path(path) if path is not None else DEFAULT_ERRATA
    text = read_text(path, max_bytes=RUNBOOK_MAX_BYTES, field="errata")  # regular, bounded
    return errata_from(Doc(path, text))       # the bounded YAML reader (harness.io)


def errata_from(doc: Doc) -> Errata:
    """Validate the parsed registry; errors carry the line of the key they are about."""
    data, path = doc.data, str(doc.path)

    def bad(message: str, fieldname: str, *keys) -> BadInput:
        return BadInput(message, path=path, line=doc.lines.get(keys), field=fieldname)

    if not isinstance(data, dict):
        raise BadInput("must be a mapping with repository and fixes", path=path)
    repository = data.get("repository")
    if not isinstance(repository, str) or not repository.strip():
        raise bad("must be a repository name", "repository", "repository")
    fixes_data = data.get("fixes")
    if not isinstance(fixes_data, list):
        raise bad("must be a list of fixes", "fixes", "fixes")
    fixes, seen = [], set()
    for i, item in enumerate(fixes_data):
        fix = fix_from(item, repository, lambda m, f, i=i: bad(m, f"fixes[{i}].{f}", "fixes", i, f))
        if fix.id in seen:
            raise bad(f"duplicate fix id {fix.id!r}", f"fixes[{i}].id", "fixes", i, "id")
        seen.add(fix.id)
        fixes.append(fix)
    return Errata(repository.strip(), tuple(fixes), path)


def fix_from(item, repository: str, bad) -> Fix:
    """One fix entry; `bad(message, field)` builds the BadInput."""
    if not isinstance(item, dict):
        raise bad("must be a mapping (id, commit, date, summary)", "id")
    fix_id = item.get("id")
    if not isinstance(fix_id, str) or not is_fix_id(fix_id):
        raise bad("must be a word of letters, digits, '.', '_' or '-'", "id")
    commit = item.get("commit")
    if commit is not None and not (isinstance(commit, str) and is_commit(commit)):
        raise bad(f"must be a hex commit (quoted) or null, got {commit!r}", "commit")
    when = item.get("date")
    if isinstance(when, (date, datetime)):
        when = when.isoformat()
    if when is not None and parse_date(str(when)) is None:
        raise bad(f"must be an ISO 8601 date or null, got {when!r}", "date")
    invalidates = item.get("invalidates") or []
    if not isinstance(invalidates, list) or not all(isinstance(x, str) for x in invalidates):
        raise bad("must be a list of rule codes", "invalidates")
    return Fix(id=fix_id, repository=str(item.get("repository") or repository),
               commit=commit.lower() if commit else None, date=when,
               summary=str(item.get("summary") or ""), invalidates=tuple(invalidates))


class CommitOrder(Protocol):
    """Ancestry and commit dates from a clone (GitClones)."""

    def contains(self, repository: str, fix_commit: str, run_sha: str) -> bool | None: ...

    def commit_date(self, repository: str, commit: str) -> str | None: ...


def git(path: Path, *args: str) -> subprocess.CompletedProcess | None:
    """git in a --git-repo clone (ancestry may walk long histories: 30 s limit)."""
    return run_git(path, *args, timeout=30)


class GitClones:
    """Ancestry and commit dates read from the clones given with --git-repo NAME=PATH."""

    def __init__(self, repos: dict[str, Path] | None = None) -> None:
        self.repos = {repository_key(k): Path(v) for k, v in (repos or {}).items()}
        self._cache: dict[tuple, object] = {}

    def _has(self, path: Path, commit: str) -> bool:
        done = git(path, "cat-file", "-e", f"{commit}^{{commit}}")
        return done is not None and done.returncode == 0

    def contains(self, repository: str, fix_commit: str, run_sha: str) -> bool | None:
        """True if run_sha has fix_commit as ancestor; None when the clone cannot tell."""
        path = self.repos.get(repository_key(repository))
        if path is None or not (is_commit(fix_commit) and is_commit(run_sha)):
            return None
        key = ("contains", repository, fix_commit, run_sha)
        if key not in self._cache:
            answer = None
            if self._has(path, fix_commit) and self._has(path, run_sha):
                done = git(path, "merge-base", "--is-ancestor", fix_commit, run_sha)
                answer = {0: True, 1: False}.get(done.returncode) if done else None
            self._cache[key] = answer
        return self._cache[key]

    def commit_date(self, repository: str, commit: str) -> str | None:
        """ISO commit date of a commit in the clone, or None."""
        path = self.repos.get(repository_key(repository))
        if path is None or not is_commit(commit):
            return None
        done = git(path, "show", "-s", "--format=%cI", f"{commit}^{{commit}}")
        return done.stdout.strip() if done and done.returncode == 0 else None

    def has(self, repository: str, commit: str) -> bool | None:
        """Whether the clone given for the repository holds the commit; None without one."""
        path = self.repos.get(repository_key(repository))
        if path is None or not is_commit(commit):
            return None
        key = ("has", str(path), commit)
        if key not in self._cache:
            self._cache[key] = self._has(path, commit)
        return bool(self._cache[key])

    def newest_date(self, repository: str) -> str | None:
        """ISO committer date of the newest commit on any ref of the clone, or None."""
        path = self.repos.get(repository_key(repository))
        if path is None:
            return None
        done = git(path, "log", "--all", "--date-order", "-1", "--format=%cI")
        return (done.stdout.strip() or None) if done and done.returncode == 0 else None


def parse_git_repos(specs: tuple[str, ...] | list[str]) -> dict[str, Path]:
    """NAME=PATH options -> {name: path}; each path must be a git checkout."""
    repos: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise BadInput(f"expected NAME=PATH, got {spec!r}", field="--git-repo")
        why = git_why(Path(path))           # git missing, dubious ownership, not a checkout
        if why is not None:
            raise BadInput(why, field="--git-repo")
        repos[name.strip()] = Path(path)
    return repos


def run_contains_fix(fix: Fix, run: dict[str, str], order: CommitOrder) -> tuple[str, str]:
    """(state, why) for one run commit against one fix: ancestry, else dates, else unknown."""
    sha, label = run["sha"], f"{fix.repository} {run['sha'][:12]}"
    if fix.commit and (sha.startswith(fix.commit.lower()) or fix.commit.lower().startswith(sha)):
        return PASS, f"{label} is the fix commit"
    if fix.commit:
        contained = order.contains(fix.repository, fix.commit, sha)
        if contained is not None:
            return ((PASS, f"{label} contains {fix.commit}") if contained else
                    (FAIL, f"{label} does not contain fix {fix.id} ({fix.commit}) [git ancestry]"))
    fix_date = parse_date(fix.date) or (parse_date(order.commit_date(fix.repository, fix.commit))
                                        if fix.commit else None)
    run_date = parse_date(run.get("date"))
    if fix_date and run_date:
        if run_date < fix_date:
            return FAIL, (f"{label} dated {run['date']} is older than fix {fix.id} "
                          f"({fix_date.isoformat()}) [commit dates]")
        return PASS, f"{label} is not older than fix {fix.id} [commit dates]"
    return UNKNOWN, (f"cannot order {label} against fix {fix.id}: pass --git-repo "
                     f"{fix.repository}=PATH or give the fix a date in the registry")


def provenance_sources(upload: Upload) -> dict[str, dict[str, str]]:
    """Every readable provenance.txt covering the upload (the campaign's, each cell's
    nearest), by its path inside the upload."""
    sources = {"provenance.txt": upload.provenance}
    for cell in sorted(upload.cells.values(), key=lambda c: c.path):
        if cell.provenance_at:
            sources.setdefault(cell.provenance_at, cell.provenance)
    return {label: fields for label, fields in sources.items() if fields is not None}


URL_REST = re.compile(r"(\S+):\s+(\S.*)")


def repo_entries(fields: dict[str, str]) -> list[tuple[str, str]]:
    """(repository name, value) of every `repo.<name>` line; a name holding ':' (a URL or
    ssh spec: `repo.https://host/org/name.git: <sha> ...`) is cut at its first ':' by the
    `key: value` reader, and is joined back here."""
    out = []
    for key, value in fields.items():
        if not key.startswith("repo."):
            continue
        rest = URL_REST.fullmatch(value)
        if rest and parse_repo_line(value) is None:
            out.append((f"{key[5:]}:{rest.group(1)}", rest.group(2)))
        else:
            out.append((key[5:], value))
    return out


def repo_values(upload: Upload, repository: str) -> tuple[dict[str, str], list[str]]:
    """Distinct `repo.<repository>` values across the provenance files covering the upload;
    and files whose provenance is not epcap's and does not name the repository."""
    wanted = repository_key(repository)
    values: dict[str, str] = {}
    silent: list[str] = []
    for label, fields in provenance_sources(upload).items():
        named = [v for name, v in repo_entries(fields) if repository_key(name) == wanted]
        for value in named:
            values.setdefault(value, label)
        if not named and "harness.version" not in fields:
            silent.append(label)
    return values, silent


def check_predates(upload: Upload, fix: Fix, order: CommitOrder) -> Check:
    """predates-fix:<id>: a run-scripts commit named in provenance lacks a registry fix.

    Provenance written by epcap lists every repository a run used (docs/spec.md#provenance), so an
    epcap provenance without `repo.<repository>` (under any spelling: repository_key) did not
    use that repository: not applicable.
    Provenance not written by epcap that does not name the repository cannot be ordered.
    """
    if not fix.commit and not fix.date:
        return Check(fix.code, NOT_APPLICABLE, ["fix has no commit and no date"])
    values, silent = repo_values(upload, fix.repository)
    fails, unknown, passes = [], [], []
    for value, label in values.items():
        run = parse_repo_line(value)
        if run is None:
            unknown.append(f"{label}: repo.{fix.repository} is {value!r} (no commit)")
            continue
        state, why = run_contains_fix(fix, run, order)
        {FAIL: fails, UNKNOWN: unknown, PASS: passes}[state].append(f"{label}: {why}")
    unknown += [f"{label}: provenance not written by epcap names no repo.{fix.repository}"
                for label in silent]
    if not values and not silent and upload.provenance is None:
        unknown.append("no provenance to read the run-scripts commit from")
    if not fails and not unknown and not passes:
        return Check(fix.code, NOT_APPLICABLE,
                     [f"epcap provenance: the run used no {fix.repository}"])
    return verdict_of(fails, passes, fix.code, unknown)


COMMIT_SKEW_S = 3600.0    # a committer's clock may run this far ahead of the run host's


class CloneFacts(Protocol):
    """What a --git-repo clone says of a commit (GitClones)."""

    def has(self, repository: str, commit: str) -> bool | None: ...

    def commit_date(self, repository: str, commit: str) -> str | None: ...

    def newest_date(self, repository: str) -> str | None: ...


def commit_problems(name: str, run: dict[str, str], started: str | None,
                    clones: CloneFacts) -> tuple[list[str], list[str]]:
    """(contradictions, undecided) for one `repo.<name>` line: its commit dated after the run
    that recorded it; with a clone of the repository, a commit the clone lacks though it
    holds newer ones, or a recorded date the clone contradicts."""
    bad, unknown = [], []
    sha, stated = run["sha"], parse_date(run.get("date"))
    begun = parse_date(started)
    if begun is None:
        unknown.append(f"repo.{name} commit {sha[:12]}: no utc_start (ISO 8601) in the same "
                       f"provenance to order it against the run")
    if stated and begun and (stated - begun).total_seconds() > COMMIT_SKEW_S:
        bad.append(f"repo.{name} commit {sha[:12]} dated {run['date']}, after the run that "
                   f"recorded it started ({started})")
    present = clones.has(name, sha)
    if present is False:
        newest = parse_date(clones.newest_date(name))
        if newest and stated and newest >= stated:
            bad.append(f"repo.{name} commit {sha[:12]} is not in the --git-repo clone, which "
                       f"holds commits up to {newest.isoformat()} (the commit is dated "
                       f"{run['date']})")
        else:
            unknown.append(f"repo.{name} commit {sha[:12]} is not in the --git-repo clone, "
                           f"whose newest commit is older than it: `git fetch` the clone")
    elif present:
        actual = parse_date(clones.commit_date(name, sha))
        if actual and stated and actual != stated:
            bad.append(f"repo.{name} commit {sha[:12]} recorded as dated {run['date']}; the "
                       f"--git-repo clone dates it {actual.isoformat()}")
        if actual and begun and (actual - begun).total_seconds() > COMMIT_SKEW_S:
            bad.append(f"repo.{name} commit {sha[:12]} is dated {actual.isoformat()} in the "
                       f"--git-repo clone, after the run that recorded it started ({started})")
    return bad, unknown


def check_commits(upload: Upload, clones: CloneFacts) -> Check:
    """commit-impossible: every `repo.<name>` commit in every covering provenance.txt is one
    the run could have checked out: dated before its `utc_start` (+ COMMIT_SKEW_S), and, where
    a clone of the repository is given (--git-repo, any spelling of the name), a commit of
    that clone with the date recorded."""
    bad, unknown, seen = [], [], 0
    for label, fields in provenance_sources(upload).items():
        for name, value in repo_entries(fields):
            run = parse_repo_line(value)
            if run is None:
                continue                         # `missing <path>`: predates-fix says so
            seen += 1
            b, u = commit_problems(name, run, fields.get("utc_start"), clones)
            bad += [f"{label}: {w}" for w in b]
            unknown += [f"{label}: {w}" for w in u]
    if not seen:
        return Check(COMMIT_IMPOSSIBLE, NOT_APPLICABLE, ["no provenance names a commit"])
    return verdict_of(bad, [f"{seen} recorded commits possible"], COMMIT_IMPOSSIBLE, unknown)
