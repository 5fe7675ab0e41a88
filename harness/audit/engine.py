"""`epcap audit` engine: find the uploads under a target (a directory or an hf:// dataset
revision), load each through the bounded readers, apply every rule, fold the verdict.

Nothing to judge (no attempt rows, or stopped before any selection) is UNKNOWN whatever the
other rules say: there is no result to call valid or invalid (docs/spec.md#audit-rules).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.audit import workers
from harness.audit.catalogue import CATALOGUE
from harness.audit.errata import Errata, GitClones, load_errata
from harness.audit.load import load_upload
from harness.audit.model import (
    FAIL,
    NOT_APPLICABLE,
    PASS,
    UNKNOWN,
    AuditContext,
    Check,
    Rule,
    Upload,
    UploadRule,
    first,
)
from harness.audit.readers import find_uploads
from harness.audit.rules import apply_row, expand
from harness.audit.rules.rederive import start_deriving
from harness.audit.rules.routing import SAMPLE_SEED_BITS, audit_seed, sampled_notes
from harness.audit.rules.selection import held_out_notes
from harness.audit.versions import judge_versions
from harness.audit.vocab import NOTHING_TO_JUDGE, UPLOAD_MARKERS, VERDICTS
from harness.errors import BadInput
from harness.io.boundary.hub import hub_link
from harness.io.bounds import clip_line
from harness.results.layout import ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV
from harness.vocab import DEFAULT_PAD_MULTIPLE, Impl

HF_TARGET = re.compile(r"hf://datasets/(?P<org>[A-Za-z0-9][\w.-]*)/(?P<name>[A-Za-z0-9][\w.-]*)"
                       r"(?:@(?P<rev>[^\s@]+))?")


MAX_EXPLANATIONS = 50           # explanations kept per list of an upload's verdict
NOT_PROVEN = ("VALID says the upload's tables are what the harness's own pipeline, replayed "
              "on the upload's cells, makes of them, and that the rules listed found nothing; "
              "it does not prove that the logs came from the runs they describe beyond the "
              "raw-evidence invariants checked, nor that a `reference` row measures a library")


def emulation_note(upload: Upload) -> str | None:
    """The note when attempts or timing rows are reference emulation (backend_impl)."""
    impls = [r.get("backend_impl") for name in (ATTEMPTS_TSV, TIMING_TSV)
             for r in (upload.tables[name].rows if name in upload.tables else [])
             if r.get("backend_impl")]
    ref = sum(i == Impl.REFERENCE for i in impls)
    if not ref:
        return None
    share = "every row" if ref == len(impls) else f"{ref} of {len(impls)} rows"
    return (f"{share} is `reference` emulation: the reference backend emulates the "
            f"libraries' documented contracts on torch.distributed; these are not "
            f"measurements of ECHO, UltraEP or MoonEP")


def replay_notes(upload: Upload) -> list[str]:
    """What the pipeline's replay on the cells used (rules.pipeline): requests answered,
    where a model's pipeline stopped, the cells no request asked for."""
    rep = upload.replay
    if rep is None or rep.problem:
        return []
    notes = [f"pipeline replayed on the cells: {len(rep.answered)} requests answered"]
    notes += [f"pipeline of {model} stopped ({stop.kind}): {stop.why}"
              for model, stop in sorted(rep.stops.items())]
    if rep.unused:
        notes.append(f"cells no request asked for ({len(rep.unused)}): "
                     + first([c.path for _, c in rep.unused]))
    return notes


def measured_pairs(upload: Upload) -> tuple[int, int] | None:
    """(pairs with a selected capacity, pairs) of capacity_selection.tsv, None without a
    readable one: a pair out of memory at measure has a row and no selected capacity. The
    one count the verdict, its note and `epcap publish` use."""
    table = upload.tables.get(SELECTION_TSV)
    if table is None or table.unreadable:
        return None
    pairs = {(r.name("model"), r.name("backend")) for r in table.rows}
    chosen = {(r.name("model"), r.name("backend")) for r in table.rows
              if r.get("selected_capacity")}
    return len(chosen), len(pairs)


@dataclass
class UploadVerdict:
    """One upload's verdict; `reasons` are the failed codes (INVALID) or undecided ones
    (UNKNOWN); `why` says, per code, what was found; `notes` are stated, not judged."""

    path: str
    verdict: str
    reasons: list[str] = field(default_factory=list)
    ignored_cells: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    emulation: str | None = None           # the note when rows are reference emulation
    measured_pairs: int | None = None      # pairs with a selected capacity
    selection_pairs: int | None = None     # pairs with a selection row
    sample_seed: int | None = None         # the audit's sample seed, where a rule sampled

    @property
    def rules_ran(self) -> list[str]:
        """Codes of the rules that ran and found nothing against the upload."""
        return [c.code for c in self.checks if c.state == PASS]

    @property
    def rules_not_applicable(self) -> list[str]:
        """`code: why` of the rules that did not apply to this upload."""
        return [clip_line(f"{c.code}: {first(c.why, 1)}") for c in self.checks
                if c.state == NOT_APPLICABLE]

    @property
    def not_checked(self) -> list[str]:
        """`code: why` of the rules that could not decide (the upload is then UNKNOWN)."""
        return [clip_line(f"{c.code}: {first(c.why, 1)}") for c in self.checks
                if c.state == UNKNOWN]

    def __post_init__(self) -> None:
        """Every explanation is copied from an upload: each is cut to the stated bound and
        their number capped, so a hostile value cannot flood the report or the terminal."""
        for name in ("why", "unknown", "notes"):
            items = [clip_line(str(s)) for s in getattr(self, name)]
            if len(items) > MAX_EXPLANATIONS:
                items = items[:MAX_EXPLANATIONS] + [
                    f"... and {len(items) - MAX_EXPLANATIONS} more"]
            setattr(self, name, items)

    def to_dict(self) -> dict:
        """The docs/spec.md#command-line keys, plus `why`, `unknown`, `notes` and what the
        verdict rests on: the rules that ran, did not apply or could not decide, the
        emulation note, the measured pairs and what VALID does not prove."""
        return {"path": self.path, "verdict": self.verdict, "reasons": self.reasons,
                "ignored_cells": self.ignored_cells, "why": self.why, "unknown": self.unknown,
                "notes": self.notes, "rules_ran": self.rules_ran,
                "rules_not_applicable": self.rules_not_applicable,
                "not_checked": self.not_checked, "emulation": self.emulation,
                "measured_pairs": self.measured_pairs, "selection_pairs": self.selection_pairs,
                "sample_seed": self.sample_seed, "valid_does_not_prove": NOT_PROVEN}


@dataclass
class AuditResult:
    """All uploads found under a target, and the count per verdict."""

    target: str
    uploads: list[UploadVerdict]
    elapsed_s: float = 0.0                    # finding, loading and judging (no hf fetch)
    sample_seed: int | None = None            # the audit's sample seed (--sample-seed)

    @property
    def summary(self) -> dict[str, int]:
        return {v: sum(u.verdict == v for u in self.uploads) for v in VERDICTS}

    def to_dict(self) -> dict:
        return {"target": self.target, "uploads": [u.to_dict() for u in self.uploads],
                "summary": self.summary, "elapsed_s": round(self.elapsed_s, 3),
                "sample_seed": self.sample_seed}


def merge_codes(checks: list[Check]) -> list[Check]:
    """One check per reason code, in first-seen order (a code two checks decide, such as
    `missing-cell` from the tables and from events.jsonl): fail, else unknown, else pass."""
    by_code: dict[str, list[Check]] = {}
    for check in checks:
        by_code.setdefault(check.code, []).append(check)
    merged = []
    for code, group in by_code.items():
        if len(group) == 1:
            merged.append(group[0])
            continue
        for state in (FAIL, UNKNOWN, PASS, NOT_APPLICABLE):
            same = [c for c in group if c.state == state]
            if same:
                merged.append(Check(code, state, [w for c in same for w in c.why]))
                break
    return merged


RULES = CATALOGUE          # the rows applied (tests switch one off by filtering its code)


def version_bound(rows: tuple[Rule | UploadRule, ...]) -> set[str]:
    """Codes whose verdict rests on the code's own definitions: judged per epcap version."""
    return {r.code for r in rows if r.version_bound}


def audit_upload(upload: Upload, errata: Errata, order: GitClones,
                 trusted_key: Path | None = None) -> UploadVerdict:
    """Apply every row of the catalogue (harness/audit/catalogue.py), merge the checks of one
    code, judge the version-bound ones for the version that made the upload
    (harness/audit/versions.py), fold: nothing to judge is UNKNOWN; else INVALID beats
    UNKNOWN beats VALID."""
    ctx = AuditContext(errata, order, trusted_key)
    start_deriving(upload)                   # on forked workers, beside the rules before it
    try:
        checks = merge_codes([apply_row(row, upload, ctx) for row in expand(RULES, errata)])
    finally:
        workers.stop(upload)
    checks, version_notes = judge_versions(upload, checks, version_bound(RULES), order)
    checks = merge_codes(checks)
    empty = next((c for c in checks if c.code == NOTHING_TO_JUDGE),
                 Check(NOTHING_TO_JUDGE, PASS, []))
    checks = [c for c in checks if c.code != NOTHING_TO_JUDGE]
    notes = upload.notes + held_out_notes(upload) + version_notes
    measured, pairs = measured_pairs(upload) or (None, None)
    if measured == 0:
        notes.append("nothing was measured: no pair has a selected capacity (every pair "
                     "does_not_fit or failed); `epcap publish` refuses it without --allow-empty")
    extra = {"emulation": emulation_note(upload), "measured_pairs": measured,
             "selection_pairs": pairs}
    notes += replay_notes(upload)
    notes += sampled_notes(upload)
    extra["sample_seed"] = upload.sample_seed if upload.sampled else None
    failed = [c for c in checks if c.state == FAIL]
    undecided = [c for c in checks if c.state == UNKNOWN]
    why = [f"{c.code}: {w}" for c in failed for w in c.why]
    why += [f"{c.code} (undecided): {w}" for c in undecided for w in c.why]
    if empty.state == UNKNOWN:
        why = [f"{NOTHING_TO_JUDGE}: {w}" for w in empty.why] + why
        return UploadVerdict(upload.path, "UNKNOWN", [NOTHING_TO_JUDGE], upload.ignored_cells,
                             why, [NOTHING_TO_JUDGE] + [c.code for c in undecided],
                             [empty, *checks], notes, **extra)
    verdict = "INVALID" if failed else "UNKNOWN" if undecided else "VALID"
    reasons = [c.code for c in (failed or undecided)]
    return UploadVerdict(upload.path, verdict, reasons, upload.ignored_cells, why,
                         [c.code for c in undecided], [empty, *checks], notes, **extra)


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


HF_HUB_DIR = "hf-hub"              # huggingface_hub's own cache (blobs, snapshots, refs)
HF_DATASETS_DIR = "hf-datasets"    # one materialised directory per fetched commit
HF_COMPLETE = ".epcap-complete"


def fetch_hf(repo_id: str, revision: str | None, cache: Path | None = None) -> Path:
    """Fetch one revision's evidence files (harness.audit.evidence.hub_patterns: tables,
    provenance, runbook and zoo, events, campaign.json, cell.json, logs, routing traces or
    the sha256 of a trace too large to publish) through
    huggingface_hub's cache under the epcap cache, then materialise exactly those files as
    plain files in `hf-datasets/ORG--NAME/<commit>/`, the directory audited. A commit is
    immutable: once materialised it is reused without asking the hub. With HF_HUB_OFFLINE=1
    the hub answers from its cache (refs/<revision>, snapshots/<commit>)."""
    import huggingface_hub  # lazy: only hf:// targets need the hub

    from harness.audit.evidence import hub_patterns

    root = cache or cache_root()
    datasets = root / HF_DATASETS_DIR / repo_id.replace("/", "--")
    if revision and re.fullmatch(r"[0-9a-f]{40}", revision) \
            and (datasets / revision / HF_COMPLETE).exists():
        return datasets / revision
    patterns = hub_patterns()
    try:
        snapshot = Path(huggingface_hub.snapshot_download(
            repo_id=repo_id, repo_type="dataset", revision=revision,
            cache_dir=root / HF_HUB_DIR, allow_patterns=patterns))
    except Exception as exc:  # noqa: BLE001 -- hub raises many classes; report, never trace
        raise BadInput(f"cannot fetch dataset {repo_id}@{revision or 'main'}: {exc}",
                       field="TARGET") from None
    local = datasets / snapshot.name
    if not (local / HF_COMPLETE).exists():
        materialise(snapshot, local, patterns)
    return local


def materialise(snapshot: Path, local: Path, patterns: list[str]) -> None:
    """Copy the snapshot's files that match the patterns into `local` as plain files (hard
    links where the file system allows): a fixed copy of exactly the evidence files of one
    commit, reused without the hub (the hub's cache may hold more files than the patterns
    name, from an earlier fetch, and may be pruned). Each link is followed by the one rule
    the audit's readers follow a Hub snapshot's links by (harness.io.boundary.hub.hub_link:
    a regular file of that repository's own blobs, or inside the snapshot); any other
    refuses the fetch."""
    from huggingface_hub.utils import filter_repo_objects

    snapshot = snapshot.resolve()
    found: dict[str, Path] = {}
    for folder, dirnames, filenames in os.walk(snapshot, followlinks=False):
        dirnames.sort()
        for name in filenames:
            path = Path(folder) / name
            found[path.relative_to(snapshot).as_posix()] = path
    wanted = list(filter_repo_objects(sorted(found), allow_patterns=patterns))
    tmp = local.with_name(local.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    for rel in wanted:
        path = found[rel]
        real = hub_link(path) if path.is_symlink() else path if path.is_file() else None
        if real is None:
            raise BadInput(f"the hub cache's {rel} is not a file of the repository's blobs "
                           f"(links to {os.path.realpath(path)}); not fetched", path=str(path))
        dest = tmp / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(real, dest)
        except OSError:
            shutil.copyfile(real, dest)
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / HF_COMPLETE).touch()
    shutil.rmtree(local, ignore_errors=True)
    tmp.rename(local)


def hub_offline() -> bool:
    """Whether huggingface_hub is told to stay offline (HF_HUB_OFFLINE=1): then the audit
    reads the one commit from the cache and asks the hub for no history."""
    from huggingface_hub import constants  # lazy: only hf:// targets need the hub
    return bool(constants.HF_HUB_OFFLINE)


def resolve_target(target: str | Path) -> Path:
    """The local directory to audit: TARGET itself, or an hf:// revision fetched to a cache."""
    hf = parse_hf_target(str(target))
    root = fetch_hf(*hf) if hf else Path(target)
    if not root.is_dir():
        raise BadInput("not a directory", path=str(target))
    return root.resolve()


def audit_target(target: str | Path, errata: Path | None = None,
                 git_repos: dict[str, Path] | None = None,
                 pad_multiple: int = DEFAULT_PAD_MULTIPLE,
                 sample_seed: int | None = None,
                 trusted_key: Path | None = None) -> AuditResult:
    """Audit every upload under a local directory or hf://datasets/ORG/NAME[@REVISION].
    `sample_seed` seeds the samples of the rules that sample (routing-not-from-seed): None
    draws one now (secrets), which an upload's author cannot know; the seed used is stated
    in the result and with every verdict that sampled, so that passing it reproduces them.
    `trusted_key` (an ed25519 public key file) checks each upload's signed statement."""
    if isinstance(pad_multiple, bool) or not isinstance(pad_multiple, int) or pad_multiple <= 0:
        raise BadInput(f"must be a positive integer, got {pad_multiple!r}", field="--pad-multiple")
    if sample_seed is None:
        sample_seed = audit_seed()
    elif isinstance(sample_seed, bool) or not isinstance(sample_seed, int) \
            or not 0 <= sample_seed < 2 ** SAMPLE_SEED_BITS:
        raise BadInput(f"must be an integer from 0 to 2**{SAMPLE_SEED_BITS} - 1, got "
                       f"{sample_seed!r}", field="--sample-seed")
    if trusted_key is not None and not Path(trusted_key).is_file():
        raise BadInput("not a file", path=str(trusted_key))
    registry = load_errata(errata)
    order = GitClones(git_repos)
    root = resolve_target(target)
    hf = parse_hf_target(str(target))
    repo_history = None
    if hf and not hub_offline():    # the repository's history: the commit fetched, and before
        from harness.audit.history import RepoHistory
        repo_history = RepoHistory(hf[0], root.name, cache_root() / HF_HUB_DIR)
    started = time.perf_counter()
    folders = find_uploads(root, UPLOAD_MARKERS)
    if not folders:
        raise BadInput(f"no upload found (no {ATTEMPTS_TSV} or {SELECTION_TSV} at any depth)",
                       path=str(target))
    uploads = []
    for folder in folders:
        upload = load_upload(root, folder, pad_multiple)
        upload.sample_seed = sample_seed
        if repo_history is not None:
            upload.history = repo_history.under("" if upload.path == "." else upload.path + "/")
        uploads.append(audit_upload(upload, registry, order, trusted_key))
    return AuditResult(str(target), uploads, time.perf_counter() - started, sample_seed)
