"""`epcap audit`: sort uploaded results into VALID, INVALID and UNKNOWN (SPEC sections 6, 7).

TARGET is someone else's data. This module never follows a link out of it, never descends
into a linked directory, never executes or unpickles anything from it, caps every file it
reads (TSV 64 MiB; provenance, cell.json and runbook 1 MiB), and turns malformed input into
a reasoned UNKNOWN (or INVALID when another rule already decides), never a traceback.
The rules themselves are data in `harness.audit_rules`; this is the shell around them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

import yaml

from harness import results
from harness.audit_rules import (
    FAIL,
    IGNORED_TAG,
    REASON_CODES,
    RULES,
    UNKNOWN,
    Cell,
    Check,
    Fix,
    Row,
    Table,
    Upload,
    apply_rule,
    check_missing_provenance,
    check_predates,
    ignored_name,
    is_ignored_row,
    parse_date,
)
from harness.errors import BadInput
from harness.provenance import parse_provenance, run_git
from harness.results import ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV, write_table_atomic

__all__ = ["REASON_CODES", "AuditResult", "UploadVerdict", "audit_target", "cli_audit",
           "load_errata", "parse_hf_target"]

TSV_CAP_BYTES = 64 << 20
SMALL_CAP_BYTES = 1 << 20
UPLOAD_MARKERS = (ATTEMPTS_TSV, SELECTION_TSV)
TABLES = (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV)
DEFAULT_ERRATA = Path(__file__).resolve().parent.parent / "provenance" / "errata.yaml"
HF_TARGET = re.compile(r"hf://datasets/(?P<org>[A-Za-z0-9][\w.-]*)/(?P<name>[A-Za-z0-9][\w.-]*)"
                       r"(?:@(?P<rev>[^\s@]+))?")
HF_PATTERNS = ["*.tsv", "*provenance.txt", "*cell.json", "*runbook.yaml"]
COMMIT = re.compile(r"[0-9a-fA-F]{4,64}")
FIX_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
VERDICTS = ("VALID", "INVALID", "UNKNOWN")
AUDIT_COLUMNS = ("path", "verdict", "reasons", "ignored_cells", "why")


@dataclass
class UploadVerdict:
    """One upload's verdict; `reasons` are the failed codes (INVALID) or undecided ones
    (UNKNOWN); `why` says, per code, what was found or why it could not be decided."""

    path: str
    verdict: str
    reasons: list[str] = field(default_factory=list)
    ignored_cells: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    def to_dict(self) -> dict:
        """The SPEC section 7 keys, plus `why` and `unknown`."""
        return {"path": self.path, "verdict": self.verdict, "reasons": self.reasons,
                "ignored_cells": self.ignored_cells, "why": self.why, "unknown": self.unknown}


@dataclass
class AuditResult:
    """All uploads found under a target, and the count per verdict."""

    target: str
    uploads: list[UploadVerdict]

    @property
    def summary(self) -> dict[str, int]:
        return {v: sum(u.verdict == v for u in self.uploads) for v in VERDICTS}

    def to_dict(self) -> dict:
        return {"target": self.target, "uploads": [u.to_dict() for u in self.uploads],
                "summary": self.summary}


@dataclass(frozen=True)
class Errata:
    """The errata registry: the repository its commits belong to, and the fixes."""

    repository: str
    fixes: tuple[Fix, ...]
    path: str = ""


# ---------------------------------------------------------------- errata registry

def load_errata(path: Path | str | None = None) -> Errata:
    """Read and check an errata registry (SPEC section 7 shape); BadInput names file:line."""
    path = Path(path) if path is not None else DEFAULT_ERRATA
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read errata registry: {exc}", path=str(path)) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise BadInput(f"not valid YAML: {getattr(exc, 'problem', exc)}", path=str(path),
                       line=mark.line + 1 if mark else None) from None
    return _errata_from(data, node, str(path))


def _line(node, *keys) -> int | None:
    """1-based line of the YAML node at keys (mapping keys or list indices), if found."""
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == key), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            return None
        if node is None:
            return None
    return node.start_mark.line + 1 if node is not None else None


def _errata_from(data, node, path: str) -> Errata:
    """Validate the parsed registry."""
    def bad(message: str, fieldname: str, *keys) -> BadInput:
        return BadInput(message, path=path, line=_line(node, *keys), field=fieldname)

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
        fix = _fix_from(item, repository, lambda m, f, i=i: bad(m, f"fixes[{i}].{f}", "fixes", i, f))
        if fix.id in seen:
            raise bad(f"duplicate fix id {fix.id!r}", f"fixes[{i}].id", "fixes", i, "id")
        seen.add(fix.id)
        fixes.append(fix)
    return Errata(repository.strip(), tuple(fixes), path)


def _fix_from(item, repository: str, bad) -> Fix:
    """One fix entry; `bad(message, field)` builds the BadInput."""
    if not isinstance(item, dict):
        raise bad("must be a mapping (id, commit, date, summary)", "id")
    fix_id = item.get("id")
    if not isinstance(fix_id, str) or not FIX_ID.fullmatch(fix_id):
        raise bad("must be a word of letters, digits, '.', '_' or '-'", "id")
    commit = item.get("commit")
    if commit is not None and not (isinstance(commit, str) and COMMIT.fullmatch(commit)):
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


# ---------------------------------------------------------------- commit order from clones

def _git(path: Path, *args: str) -> subprocess.CompletedProcess | None:
    """git in a --git-repo clone (ancestry may walk long histories: 30 s limit)."""
    return run_git(path, *args, timeout=30)


class GitClones:
    """Ancestry and commit dates read from the clones given with --git-repo NAME=PATH."""

    def __init__(self, repos: dict[str, Path] | None = None) -> None:
        self.repos = {k: Path(v) for k, v in (repos or {}).items()}
        self._cache: dict[tuple, object] = {}

    def _has(self, path: Path, commit: str) -> bool:
        done = _git(path, "cat-file", "-e", f"{commit}^{{commit}}")
        return done is not None and done.returncode == 0

    def contains(self, repository: str, fix_commit: str, run_sha: str) -> bool | None:
        """True if run_sha has fix_commit as ancestor; None when the clone cannot tell."""
        path = self.repos.get(repository)
        if path is None or not (COMMIT.fullmatch(fix_commit) and COMMIT.fullmatch(run_sha)):
            return None
        key = ("contains", repository, fix_commit, run_sha)
        if key not in self._cache:
            answer = None
            if self._has(path, fix_commit) and self._has(path, run_sha):
                done = _git(path, "merge-base", "--is-ancestor", fix_commit, run_sha)
                answer = {0: True, 1: False}.get(done.returncode) if done else None
            self._cache[key] = answer
        return self._cache[key]

    def commit_date(self, repository: str, commit: str) -> str | None:
        """ISO commit date of a commit in the clone, or None."""
        path = self.repos.get(repository)
        if path is None or not COMMIT.fullmatch(commit):
            return None
        done = _git(path, "show", "-s", "--format=%cI", f"{commit}^{{commit}}")
        return done.stdout.strip() if done and done.returncode == 0 else None


def parse_git_repos(specs: tuple[str, ...] | list[str]) -> dict[str, Path]:
    """NAME=PATH options -> {name: path}; each path must be a git checkout."""
    repos: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise BadInput(f"expected NAME=PATH, got {spec!r}", field="--git-repo")
        done = _git(Path(path), "rev-parse", "--git-dir")
        if done is None or done.returncode != 0:
            raise BadInput(f"{path} is not a git checkout", field="--git-repo")
        repos[name.strip()] = Path(path)
    return repos


# ---------------------------------------------------------------- reading untrusted files

def safe_read(root: Path, path: Path, cap: int) -> tuple[bytes | None, str | None]:
    """Bytes of a regular file inside root, at most cap; else None and why."""
    name = path.name
    try:
        real = path
        if path.is_symlink():
            real = path.resolve(strict=True)
            if not real.is_relative_to(root):
                return None, f"{name} is a link out of TARGET (not followed)"
        info = os.stat(real)
        if not stat.S_ISREG(info.st_mode):
            return None, f"{name} is not a regular file"
        if info.st_size > cap:
            return None, f"{name} is {info.st_size} bytes, over the {cap}-byte cap"
        with open(real, "rb") as handle:
            data = handle.read(cap + 1)
    except (OSError, RuntimeError, ValueError) as exc:
        return None, f"{name} unreadable ({getattr(exc, 'strerror', None) or exc})"
    if len(data) > cap:
        return None, f"{name} is over the {cap}-byte cap"
    return data, None


def parse_table(name: str, data: bytes) -> Table:
    """A tab-separated table; malformed lines are kept aside with their line numbers."""
    parsed = results.parse_table(name, data)
    return Table(name, columns=parsed.columns, unreadable=parsed.unreadable,
                 malformed=parsed.malformed,
                 rows=[Row(n, r) for n, r in zip(parsed.lines, parsed.rows, strict=True)])


def read_table(root: Path, path: Path) -> Table:
    """Read one TSV of an upload (size-capped, links checked)."""
    data, problem = safe_read(root, path, TSV_CAP_BYTES)
    return parse_table(path.name, data) if data is not None else Table(path.name,
                                                                       unreadable=problem)


def read_fields(root: Path, path: Path) -> tuple[dict[str, str] | None, str | None]:
    """A provenance.txt as fields, or None and why (absent, unreadable, empty)."""
    if not os.path.lexists(path):
        return None, "no provenance.txt"
    data, problem = safe_read(root, path, SMALL_CAP_BYTES)
    if data is None:
        return None, problem
    fields = dict(parse_provenance(data.decode("utf-8", errors="replace")))
    return (fields, None) if fields else (None, "provenance.txt has no key: value lines")


def read_json(root: Path, path: Path) -> dict | None:
    """A small JSON object (cell.json), or None."""
    if not os.path.lexists(path):
        return None
    data, _ = safe_read(root, path, SMALL_CAP_BYTES)
    try:
        value = json.loads(data) if data is not None else None
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def read_pad_multiple(root: Path, folder: Path) -> int:
    """capacity.pad_multiple from the upload's runbook.yaml (safe YAML), else 128."""
    data, _ = safe_read(root, folder / "runbook.yaml", SMALL_CAP_BYTES)
    try:
        book = yaml.safe_load(data) if data is not None else None
    except (yaml.YAMLError, RecursionError, ValueError):
        return 128
    pad = (book.get("capacity") or {}).get("pad_multiple") if isinstance(book, dict) else None
    if isinstance(book, dict) and not isinstance(book.get("capacity"), dict):
        pad = None
    return pad if isinstance(pad, int) and not isinstance(pad, bool) and pad > 0 else 128


MAX_UPLOAD_DEPTH = 32      # directory levels searched for uploads under an audit target


def find_uploads(root: Path) -> list[Path]:
    """Directories holding capacity_attempts.tsv and/or capacity_selection.tsv, at any depth;
    linked and hidden (dot) directories are not entered."""
    found = []
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames
                             if not d.startswith(".") and not os.path.islink(os.path.join(folder, d)))
        if len(Path(folder).relative_to(root).parts) >= MAX_UPLOAD_DEPTH:
            dirnames[:] = []            # an upload is never this deep; os.walk would recurse
        if any(m in filenames for m in UPLOAD_MARKERS):
            found.append(Path(folder))
    return sorted(found)


def load_cells(root: Path, folder: Path, upload: Upload) -> None:
    """Cell directories under cells/ (links are not followed; __cap1p75 cells are ignored)."""
    cells = folder / "cells"
    if cells.is_symlink():
        upload.cells["."] = Cell(".", problem="cells/ is a link (not followed)")
        return
    if not cells.is_dir():
        return
    try:
        entries = sorted(os.scandir(cells), key=lambda e: e.name)
    except OSError as exc:
        upload.cells["."] = Cell(".", problem=f"cells/ unreadable ({exc.strerror or exc})")
        return
    for entry in entries:
        if IGNORED_TAG.search(entry.name):
            upload.ignored_cells.append(entry.name)
        elif entry.is_symlink():
            upload.cells[entry.name] = Cell(entry.name, problem="a link (not followed)")
        elif entry.is_dir(follow_symlinks=False):
            path = Path(entry.path)
            fields, _ = read_fields(root, path / "provenance.txt")
            upload.cells[entry.name] = Cell(entry.name, provenance=fields,
                                            cell_json=read_json(root, path / "cell.json"))


def load_upload(root: Path, folder: Path) -> Upload:
    """Everything the rules need from one upload directory."""
    upload = Upload(path=folder.relative_to(root).as_posix())
    for name in TABLES:
        if os.path.lexists(folder / name):
            upload.tables[name] = read_table(root, folder / name)
    for table in upload.tables.values():
        kept = [r for r in table.rows if not is_ignored_row(r)]
        upload.ignored_cells += [ignored_name(r) for r in table.rows if is_ignored_row(r)]
        table.rows = kept
    upload.provenance, upload.provenance_problem = read_fields(root, folder / "provenance.txt")
    load_cells(root, folder, upload)
    upload.ignored_cells = sorted(set(upload.ignored_cells))
    upload.pad_multiple = read_pad_multiple(root, folder)
    return upload


# ---------------------------------------------------------------- verdicts

def audit_upload(upload: Upload, errata: Errata, order: GitClones) -> UploadVerdict:
    """Apply every rule; INVALID beats UNKNOWN beats VALID."""
    checks = [apply_rule(rule, upload) for rule in RULES]
    checks.append(check_missing_provenance(upload))
    checks += [check_predates(upload, fix, order) for fix in errata.fixes]
    failed = [c for c in checks if c.state == FAIL]
    undecided = [c for c in checks if c.state == UNKNOWN]
    why = [f"{c.code}: {w}" for c in failed for w in c.why]
    why += [f"{c.code} (undecided): {w}" for c in undecided for w in c.why]
    verdict = "INVALID" if failed else "UNKNOWN" if undecided else "VALID"
    reasons = [c.code for c in (failed or undecided)]
    return UploadVerdict(upload.path, verdict, reasons, upload.ignored_cells, why,
                         [c.code for c in undecided], checks)


def parse_hf_target(target: str) -> tuple[str, str | None] | None:
    """hf://datasets/ORG/NAME[@REVISION] -> (ORG/NAME, REVISION); None for a local path."""
    if not target.startswith("hf://"):
        return None
    match = HF_TARGET.fullmatch(target)
    if not match:
        raise BadInput(f"expected hf://datasets/ORG/NAME[@REVISION], got {target!r}",
                       field="TARGET")
    return f"{match['org']}/{match['name']}", match["rev"]


def cache_root() -> Path:
    """Where hf:// targets are fetched: $EPCAP_CACHE, else ~/.cache/epcap."""
    return Path(os.environ.get("EPCAP_CACHE") or Path.home() / ".cache" / "epcap")


def fetch_hf(repo_id: str, revision: str | None, cache: Path | None = None) -> Path:
    """Fetch one revision's tables, provenance, cell.json and runbook (no logs) to a cache
    directory; a full commit sha is immutable and reused, anything else is fetched afresh."""
    import huggingface_hub

    slug = re.sub(r"[^A-Za-z0-9._-]", "_", revision or "main").lstrip(".") or "main"
    local = (cache or cache_root()) / "hf-datasets" / repo_id.replace("/", "--") / slug
    done = local / ".epcap-complete"
    immutable = bool(revision and re.fullmatch(r"[0-9a-f]{40}", revision))
    if immutable and done.exists():
        return local
    if local.exists():
        shutil.rmtree(local)
    local.mkdir(parents=True)
    try:
        path = huggingface_hub.snapshot_download(repo_id=repo_id, repo_type="dataset",
                                                 revision=revision, local_dir=local,
                                                 allow_patterns=HF_PATTERNS)
    except Exception as exc:  # noqa: BLE001 -- hub raises many classes; report, never trace
        raise BadInput(f"cannot fetch dataset {repo_id}@{revision or 'main'}: {exc}",
                       field="TARGET") from None
    done.touch()
    return Path(path)


def resolve_target(target: str | Path) -> Path:
    """The local directory to audit: TARGET itself, or an hf:// revision fetched to a cache."""
    hf = parse_hf_target(str(target))
    root = fetch_hf(*hf) if hf else Path(target)
    if not root.is_dir():
        raise BadInput("not a directory", path=str(target))
    return root.resolve()


def audit_target(target: str | Path, errata: Path | None = None,
                 git_repos: dict[str, Path] | None = None) -> AuditResult:
    """Audit every upload under a local directory or hf://datasets/ORG/NAME[@REVISION]."""
    registry = load_errata(errata)
    order = GitClones(git_repos)
    root = resolve_target(target)
    folders = find_uploads(root)
    if not folders:
        raise BadInput(f"no upload found (no {ATTEMPTS_TSV} or {SELECTION_TSV} at any depth)",
                       path=str(target))
    return AuditResult(str(target), [audit_upload(load_upload(root, f), registry, order)
                                     for f in folders])


# ---------------------------------------------------------------- output

def tsv_rows(result: AuditResult) -> list[dict]:
    """One TSV row per upload (lists joined with ',' and '; ')."""
    return [{"path": u.path, "verdict": u.verdict, "reasons": ",".join(u.reasons),
             "ignored_cells": ",".join(u.ignored_cells), "why": "; ".join(u.why)}
            for u in result.uploads]


def print_table(result: AuditResult) -> None:
    """A rich table on the terminal, then the summary line."""
    from rich.console import Console
    from rich.table import Table as RichTable

    colour = {"VALID": "green", "INVALID": "red", "UNKNOWN": "yellow"}
    table = RichTable(title=f"epcap audit {result.target}")
    for name in ("upload", "verdict", "reasons", "ignored"):
        table.add_column(name, no_wrap=True)
    table.add_column("why", overflow="fold")
    for u in result.uploads:
        table.add_row(u.path, f"[{colour[u.verdict]}]{u.verdict}[/]", "\n".join(u.reasons),
                      str(len(u.ignored_cells)) if u.ignored_cells else "",
                      "\n".join(u.why))
    console = Console()
    if not console.is_terminal:          # piped: do not squeeze into 80 columns
        console = Console(width=200)
    console.print(table)
    console.print(" ".join(f"{k}={v}" for k, v in result.summary.items()))


def cli_audit(target: str, errata: str | None = None, git_repos: tuple[str, ...] = (),
              out: str | None = None, as_json: bool = False, strict: bool = False) -> int:
    """`epcap audit`: 0, or 1 under --strict when anything is INVALID or UNKNOWN."""
    result = audit_target(target, Path(errata) if errata else None, parse_git_repos(git_repos))
    if out:
        write_table_atomic(Path(out), AUDIT_COLUMNS, tsv_rows(result))
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        print_table(result)
    bad = result.summary["INVALID"] + result.summary["UNKNOWN"]
    return 1 if strict and bad else 0

