"""`epcap publish`: audit a campaign, then upload it, VALID only, under a path never used before,
with what a reader needs (report, figures, forecast inputs, routing traces) and a dataset card.

The target path is `<campaign>/<utc-timestamp>-<run-id>/` in a HuggingFace dataset
repository; run-id is a digest of the campaign's tables and provenance. The token comes
from huggingface_hub's own login or environment: this module never reads, prints or writes it.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import sys
from datetime import datetime, timezone
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from harness.audit import AuditResult, audit_target
from harness.audit.rules.routing import TRACE_CAP_BYTES
from harness.audit.rules.signature import ENVELOPE
from harness.errors import BadInput
from harness.io.redact import find_secrets, redact_text
from harness.loadmodel.trace_io import ROUTING_TRACE
from harness.publish import hub
from harness.publish.card import CARD_PATH, card_text
from harness.publish.sign import load_private_key, signed_envelope
from harness.results.layout import (
    ATTEMPTS_TSV,
    CELL_JSON,
    PROVENANCE_TXT,
    RUNBOOK_YAML,
    SELECTION_TSV,
    TIMING_TSV,
)
from harness.results.provenance import secret_values
from harness.results.tables import read_rows

REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
DIGESTED = (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV, PROVENANCE_TXT, RUNBOOK_YAML)
SCAN_BLOCK = 1 << 20
READER_FILES = ("report/report.md", "report/*.png", "report/forecast.tsv", "report/demand.tsv")
TOKEN_OVERLAP = 256             # a token shape split across two blocks is still found


def refusal(result: AuditResult) -> list[str]:
    """Why a results directory may not be published (empty list: it may)."""
    paths = [u.path for u in result.uploads]
    if paths != ["."]:
        return [f"RESULTS_DIR must be one campaign directory; found uploads at {paths}"]
    upload = result.uploads[0]
    if upload.verdict == "VALID":
        return []
    return [f"audit verdict {upload.verdict}: {', '.join(upload.reasons)}", *upload.why]


def is_reader_file(rel: str) -> bool:
    """A file a reader needs beside the evidence: the report, its figures, forecast.tsv and
    demand.tsv (READER_FILES), a measure cell's routing trace (HUB_EXTRA_FILES)."""
    from harness.audit.evidence import HUB_EXTRA_FILES
    return any(fnmatchcase(rel, p) for p in (*READER_FILES, f"*/{ROUTING_TRACE}")) \
        and not any(fnmatchcase(rel, p) for p in list(HUB_EXTRA_FILES)[1:])


def local_files(root: Path) -> tuple[list[str], list[str]]:
    """The files to upload: the evidence list (audit.evidence.evidence_manifest, the files
    the audit reads, so what is published is what was judged) and what a reader needs (the
    report, figures, forecast and demand tables, routing traces); and every other file, link
    or hidden path, left out (relative posix paths)."""
    from harness.audit.evidence import evidence_manifest  # one list: audit, hub fetch, publish
    files = evidence_manifest(root)
    chosen, skipped = set(files), []
    extra = []
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        rel = Path(folder).relative_to(root)
        for d in sorted(dirnames):
            if d.startswith(".") or os.path.islink(os.path.join(folder, d)):
                skipped.append((rel / d).as_posix())      # never entered
                dirnames.remove(d)
        dirnames.sort()
        for path in ((rel / n).as_posix() for n in sorted(filenames)):
            if path in chosen:
                continue
            plain = os.path.isfile(root / path) and not os.path.islink(root / path)
            (extra if plain and not path.startswith(".") and is_reader_file(path)
             else skipped).append(path)
    return files + extra, skipped


def withheld_traces(root: Path, files: list[str], cap: int) -> dict[str, str]:
    """{trace path: sha256} of the routing traces over `cap` bytes (the audit's own read cap,
    routing.TRACE_CAP_BYTES): uploaded as `<trace>.sha256` stand-ins, never in full."""
    out = {}
    for rel in files:
        if PurePosixPath(rel).name == ROUTING_TRACE and (root / rel).stat().st_size > cap:
            digest = hashlib.sha256()
            with open(root / rel, "rb") as handle:
                for block in iter(lambda h=handle: h.read(SCAN_BLOCK), b""):
                    digest.update(block)
            out[rel] = digest.hexdigest()
    return out


def files_with_secrets(root: Path, files: list[str]) -> list[str]:
    """Files whose name or content holds anything the redaction pass would hide (a secret
    environment value, a token shape, `--api-key=X`, `WANDB_API_KEY=X`); never uploaded."""
    secrets = secret_values()
    overlap = max([len(v) for v in secrets] + [TOKEN_OVERLAP]) - 1
    leaks = []
    for rel in files:
        if find_secrets(rel.encode(), secrets):
            leaks.append(rel)
            continue
        tail = b""
        with open(root / rel, "rb") as handle:
            for block in iter(lambda h=handle: h.read(SCAN_BLOCK), b""):
                window = tail + block
                if find_secrets(window, secrets):
                    leaks.append(rel)
                    break
                tail = window[-overlap:]
    return leaks


def campaign_name(root: Path) -> str:
    """The campaign column of the tables, else the directory name; safe as a path part."""
    names: set[str] = set()
    for table in (ATTEMPTS_TSV, SELECTION_TSV):
        try:
            names |= {r.get("campaign") or "" for r in read_rows(root / table)}
        except (OSError, UnicodeDecodeError):
            continue
    names.discard("")
    name = names.pop() if len(names) == 1 else root.resolve().name
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).strip("._") or "campaign"


def run_id(root: Path) -> str:
    """12 hex digits of sha256 over the campaign's tables, provenance and runbook."""
    digest = hashlib.sha256()
    for name in DIGESTED:
        path = root / name
        if path.is_file() and not path.is_symlink():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def target_prefix(root: Path, now: datetime | None = None) -> str:
    """`<campaign>/<utc-timestamp>-<run-id>/`."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"{campaign_name(root)}/{stamp}-{run_id(root)}/"


def hub_reachable(timeout_s: float = 3.0) -> str:
    """'' when the hub endpoint accepts a TCP connection, else why (skips the hub's retries)."""
    from huggingface_hub import constants  # lazy: only publishing needs the hub
    parts = urlsplit(constants.ENDPOINT)
    try:
        socket.create_connection((parts.hostname or "", parts.port or 443), timeout_s).close()
    except OSError as exc:
        return f"{parts.hostname} unreachable: {exc}"
    return ""


def repo_head(repo: str) -> str | None:
    """The commit the dataset repository's main branch points at now (None when it cannot
    be read, or has no commit): the parent the upload's commit must have."""
    from huggingface_hub import HfApi  # lazy: only publishing needs the hub
    try:
        sha = HfApi().repo_info(repo, repo_type="dataset").sha
    except Exception as exc:  # noqa: BLE001 -- offline, missing repo, auth: then no guard to set
        if hub.unanswered(exc):     # silent or dropping: every later request would be too
            raise hub.HubUnanswered(hub.describe(exc)) from None
        return None
    return sha if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{40}", sha) else None


def moved_on(exc: Exception) -> bool:
    """Whether the hub refused the commit because its parent is no longer the head (HTTP 412
    Precondition Failed: huggingface_hub 2.4.0 _commit_api._payload_as_ndjson sends
    `parentCommit`, the Hub checks it against the branch)."""
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None) == 412


def existing_paths(repo: str) -> tuple[list[str] | None, str]:
    """Files already in the dataset repository, or None and why when it cannot be listed."""
    from huggingface_hub import HfApi  # lazy: only publishing needs the hub
    unreachable = hub_reachable()
    if unreachable:
        return None, unreachable
    try:
        return HfApi().list_repo_files(repo, repo_type="dataset"), ""
    except Exception as exc:  # noqa: BLE001 -- offline, missing repo, auth: all reported
        if hub.unanswered(exc):
            raise hub.HubUnanswered(hub.describe(exc)) from None
        return None, hub.describe(exc)


def upload(root: Path, repo: str, prefix: str, files: list[str], withheld: dict[str, str],
           card: str, parent_commit: str | None = None,
           generated: dict[str, bytes] | None = None) -> str:
    """One commit: exactly `files` under prefix (a withheld trace as its `.sha256` stand-in,
    `sha256sum` format), `generated` files (the signed statement) under prefix, and the card
    at the repository's root; with `parent_commit` the hub refuses it unless that commit is
    still the head (two publishers never interleave). Returns the commit URL."""
    from huggingface_hub import CommitOperationAdd, HfApi  # lazy: only publishing needs it

    from harness.audit.evidence import TRACE_WITHHELD_SUFFIX
    ops = [CommitOperationAdd(path_in_repo=prefix + rel, path_or_fileobj=str(root / rel))
           for rel in files if rel not in withheld]
    ops += [CommitOperationAdd(path_in_repo=prefix + rel + TRACE_WITHHELD_SUFFIX,
                               path_or_fileobj=f"{digest}  {PurePosixPath(rel).name}\n".encode())
            for rel, digest in sorted(withheld.items())]
    ops += [CommitOperationAdd(path_in_repo=prefix + rel, path_or_fileobj=data)
            for rel, data in sorted((generated or {}).items())]
    ops.append(CommitOperationAdd(path_in_repo=CARD_PATH, path_or_fileobj=card.encode()))
    info = HfApi().create_commit(repo_id=repo, repo_type="dataset", operations=ops,
                                 commit_message=f"epcap publish {prefix.rstrip('/')}",
                                 parent_commit=parent_commit)
    return str(getattr(info, "commit_url", "") or info)


def pair_counts(result: AuditResult) -> tuple[int, int]:
    """(pairs measured, pairs) as the audit counted them (audit.engine.measured_pairs)."""
    upload = result.uploads[0]
    return upload.measured_pairs or 0, upload.selection_pairs or 0


def empty_refusal(result: AuditResult) -> list[str]:
    """Why a campaign in which nothing was measured is not published without --allow-empty."""
    measured, pairs = pair_counts(result)
    if measured:
        return []
    return [f"nothing measured: {SELECTION_TSV} has {pairs} (model, backend) pair(s) and none "
            f"with a selected capacity (every pair does_not_fit, or no selection); pass "
            f"--allow-empty to publish it anyway"]


def summary_lines(root: Path, result: AuditResult, files: list[str],
                  skipped: list[str]) -> list[str]:
    """The dry run's opening: the audit verdict, then cells, pairs measured, files, bytes."""
    upload = result.uploads[0]
    measured, pairs = pair_counts(result)
    cells = len({Path(f).parent for f in files if Path(f).name == CELL_JSON})
    size = sum((root / f).stat().st_size for f in files)
    return [f"audit: {upload.verdict}" + (f" ({', '.join(upload.reasons)})"
                                          if upload.reasons else ""),
            f"summary: {cells} cells, {measured} of {pairs} pairs measured (a selected "
            f"capacity), {len(files)} files (the evidence list the audit reads; "
            f"{len(skipped)} other paths not uploaded), {size} bytes"]


def statement_predicate(root: Path, result: AuditResult, prefix: str) -> dict:
    """The signed statement's predicate: campaign, runbook sha256, the epcap commit
    provenance records, where it was published and the audit's verdict with its rules."""
    from harness.audit.rules.signature import file_sha256
    from harness.results.provenance import read_provenance
    upload_ = result.uploads[0]
    runbook = root / RUNBOOK_YAML
    try:
        commit = read_provenance(root / PROVENANCE_TXT).get("harness.commit", "")
    except (OSError, ValueError):
        commit = ""
    return {"campaign": campaign_name(root), "path_in_repo": prefix,
            "runbook_sha256": file_sha256(runbook) if runbook.is_file() else None,
            "epcap_commit": commit,
            "audit": {"verdict": upload_.verdict, "rules_ran": upload_.rules_ran,
                      "not_applicable": upload_.rules_not_applicable}}


def cli_publish(results_dir: str, repo: str, dry_run: bool = False,
                allow_empty: bool = False, parent_commit: str | None = None,
                trace_cap: int = TRACE_CAP_BYTES, sign_key: str | None = None) -> int:
    """`epcap publish`: 0 uploaded (or dry run listed), 1 refused or failed. The commit's
    parent is `parent_commit`, else the head read before the existing paths were listed:
    the hub refuses it when another commit came in between (two publishes never interleave).
    With `sign_key` (an ed25519 private key file) the commit carries the signed in-toto
    statement of the evidence list (`<prefix>attestation.dsse.json`)."""
    root = Path(results_dir)
    if redact_text(repo or "") != (repo or ""):   # a token pasted as the id: never echoed
        raise BadInput("looks like a secret (a token shape or a secret value), not ORG/NAME: "
                       "refused and not printed; give the dataset repository's id",
                       field="--repo")
    if not REPO_ID.fullmatch(repo or ""):
        raise BadInput(f"expected ORG/NAME, got {repo!r}", field="--repo")
    if not root.is_dir():
        raise BadInput("not a directory", path=str(results_dir))
    if parent_commit is not None and not re.fullmatch(r"[0-9a-f]{40}", parent_commit):
        raise BadInput(f"expected a commit of 40 hex digits, got {parent_commit!r}",
                       field="--parent-commit")
    key = load_private_key(Path(sign_key)) if sign_key else None   # refused before any work
    result = audit_target(root)
    why = refusal(result) or ([] if allow_empty else empty_refusal(result))
    files, skipped = local_files(root)
    leaks = files_with_secrets(root, files)        # said beside the audit's reasons: all at once
    why += [f"{redact_text(f)} contains the value of a secret-named environment variable, a "
            "token shape (hf_...) or a secret option or assignment (--api-key=..., "
            "WANDB_API_KEY=...); redact it before publishing" for f in leaks]
    if why:
        return say_refused(why)
    prefix = target_prefix(root)
    withheld = withheld_traces(root, files, trace_cap)
    hub.use_deadlines()             # every request below: hub.HUB_TIMEOUT_S, never forever
    unreachable = "" if dry_run else hub_reachable()
    if unreachable:
        # the hub refused or did not answer: stop now, not after the client's retries
        return say_refused([f"the hub cannot be reached ({redact_text(unreachable)}); nothing "
                            "was uploaded: rerun when it answers"])
    try:
        parent = None if dry_run else parent_commit or repo_head(repo)   # read before the list
        existing, problem = existing_paths(repo)
    except hub.HubUnanswered as exc:
        print(f"epcap publish: {exc}; nothing was uploaded: rerun when it answers",
              file=sys.stderr)
        return 1
    if existing is not None and any(p.startswith(prefix) for p in existing):
        return say_refused([f"hf://datasets/{repo}/{prefix} is already used"])
    if dry_run:
        for line in summary_lines(root, result, files, skipped):
            print(line)
        print_plan(root, repo, prefix, files, skipped, problem, withheld)
        return 0
    card = card_text(root, result, repo, prefix, files, withheld)
    generated = {}
    if key is not None:
        from harness.audit.evidence import evidence_manifest
        generated[ENVELOPE] = signed_envelope(root, evidence_manifest(root),
                                              statement_predicate(root, result, prefix), key)
    try:
        url = upload(root, repo, prefix, files, withheld, card, parent, generated)
    except Exception as exc:  # noqa: BLE001 -- report the hub's error in one line
        if parent and moved_on(exc):
            return say_refused([f"parent commit mismatch: hf://datasets/{repo} is no longer at "
                                f"{parent} (another publish committed since it was read); "
                                "nothing was uploaded: rerun to publish on the new head"])
        print(f"epcap publish: upload failed: {hub.describe(exc)}", file=sys.stderr)
        return 1
    signed = f", the signed statement {ENVELOPE}" if generated else ""
    print(f"uploaded {len(files)} files to hf://datasets/{repo}/{prefix}{signed} and the "
          f"dataset card {CARD_PATH} {url}")
    return 0


def say_refused(why: list[str]) -> int:
    """Print why publishing was refused; exit code 1."""
    print("epcap publish: refused:", file=sys.stderr)
    for line in why:
        print(f"  {line}", file=sys.stderr)
    return 1


def print_plan(root: Path, repo: str, prefix: str, files: list[str], skipped: list[str],
               problem: str, withheld: dict[str, str] | None = None) -> None:
    """The dry run: every local file and the path it would get."""
    from harness.audit.evidence import TRACE_WITHHELD_SUFFIX
    withheld = withheld or {}
    print(f"dry run: would upload {len(files)} files to hf://datasets/{repo}/{prefix} and "
          f"the dataset card {CARD_PATH}")
    for rel in files:
        if rel in withheld:
            print(f"  {root / rel} -> {prefix}{rel}{TRACE_WITHHELD_SUFFIX} (too large: its "
                  f"sha256 only; routing-not-from-seed cannot compare it from the hub)")
        else:
            print(f"  {root / rel} -> {prefix}{rel}")
    for rel in skipped:
        print(f"  {root / rel} (not on the evidence list, a link or hidden: not uploaded)")
    if problem:
        print(f"note: existing paths not checked ({problem}); the timestamped path is new "
              f"unless another upload used this second and these exact results")
