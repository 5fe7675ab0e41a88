"""A signed statement of the evidence (`statement-unverified`): the upload's DSSE envelope
(`attestation.dsse.json`, written by `epcap publish --sign-key`) holds an in-toto Statement
whose subjects are the sha256 of every file on the evidence list; `epcap audit --trusted-key`
checks the signature with the key the auditor trusts and every subject against the upload.

Formats, read (never copied) from:
- DSSE protocol, PAE and envelope: secure-systems-lab/dsse protocol.md and envelope.md at
  0110cc2e89df500345148a36c780d883922443ca (PAE = "DSSEv1" SP LEN(type) SP type SP LEN(body)
  SP body, LEN the ASCII decimal byte count; either base64 alphabet accepted on verify).
- in-toto Statement v1: in-toto/attestation spec/v1/statement.md at
  412b0d4db4c9f8002cc5520b65f7a1ad0144bb08 (`_type`, `subject` [{name, digest}],
  `predicateType`, `predicate`); payloadType `application/vnd.in-toto+json`.
- `PREDICATE_TYPE` is this project's own URI (under the reserved `.invalid` domain: it names
  the predicate, it is not meant to resolve).

Without a key the rule is UNKNOWN for a signed upload (never INVALID for lack of a key); an
upload with no envelope audited without a key is n/a (nothing signed, nothing asked); with a
key and no envelope UNKNOWN. Ed25519 through the `cryptography` package; where it is absent
the rule is UNKNOWN naming it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path

from harness.audit.model import (
    FAIL,
    NOT_APPLICABLE,
    PASS,
    UNKNOWN,
    AuditContext,
    Check,
    Source,
    Upload,
    UploadRule,
    first,
)
from harness.audit.vocab import STATEMENT_UNVERIFIED
from harness.errors import BadInput
from harness.io.bounds import json_loads
from harness.io.safeio import read_bytes as safe_bytes
from harness.io.safeio import read_json as safe_json

ENVELOPE = "attestation.dsse.json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://epcap.invalid/evidence-statement/v1"
MAX_ENVELOPE_BYTES = 64 << 20          # a statement of 10**5 files is far under this
MAX_KEY_BYTES = 64 << 10               # a public or private key file
NO_CRYPTOGRAPHY = ("the `cryptography` package is not installed (pip install 'epcap[dev]' "
                   "or cryptography): the signature cannot be checked")


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's pre-authentication encoding of (type, body): what is signed."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def b64decode_any(text: str) -> bytes:
    """Standard or URL-safe base64, padded or not (DSSE: verifiers accept either)."""
    raw = text.strip().replace("-", "+").replace("_", "/")
    return base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda h=handle: h.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def statement(root: Path, files: list[str], predicate: dict) -> dict:
    """The in-toto Statement v1 over `files` (paths inside `root`): one subject per file."""
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": rel, "digest": {"sha256": file_sha256(root / rel)}}
                        for rel in files],
            "predicateType": PREDICATE_TYPE, "predicate": predicate}


def raw_public(key) -> bytes:
    """The 32 raw bytes of an ed25519 public key."""
    from cryptography.hazmat.primitives import serialization
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public) -> str:
    """sha256 of the raw public key (DSSE keyid: a hint, never trusted)."""
    return hashlib.sha256(raw_public(public)).hexdigest()


def load_public_key(path: Path):
    """An ed25519 public key from an OpenSSH line (`ssh-ed25519 AAAA...`) or PEM file;
    raises ValueError naming the file (never its content) when it is neither."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    try:
        data = safe_bytes(path, max_bytes=MAX_KEY_BYTES, field="--trusted-key")
    except BadInput as exc:
        raise ValueError(str(exc)) from None
    try:
        key = (serialization.load_ssh_public_key(data.strip()) if data.lstrip().startswith(b"ssh-")
               else serialization.load_pem_public_key(data))
    except (ValueError, TypeError, binascii.Error, IndexError):
        raise ValueError(f"{path}: not an OpenSSH or PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{path}: not an ed25519 key ({type(key).__name__})")
    return key


def verify_envelope(envelope: dict, public) -> tuple[dict | None, str]:
    """(the statement, '') when one of the envelope's signatures verifies under `public` over
    PAE(payloadType, payload) and the payload is an in-toto Statement v1; else (None, why)."""
    from cryptography.exceptions import InvalidSignature
    if not isinstance(envelope, dict) or envelope.get("payloadType") != PAYLOAD_TYPE:
        return None, f"payloadType is not {PAYLOAD_TYPE}"
    try:
        body = b64decode_any(str(envelope.get("payload", "")))
        sigs = [b64decode_any(str(s.get("sig", ""))) for s in envelope.get("signatures") or []
                if isinstance(s, dict)]
    except (binascii.Error, ValueError):
        return None, "payload or signature is not base64"
    message = pae(PAYLOAD_TYPE, body)
    for sig in sigs:
        try:
            public.verify(sig, message)
        except InvalidSignature:
            continue
        break
    else:
        return None, (f"no signature of the {len(sigs)} verifies with the trusted key "
                      f"(keyid {key_id(public)[:16]}): signed by another key, or the "
                      "statement was changed after signing")
    try:
        stated = json_loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None, "the signed payload is not JSON"
    if not isinstance(stated, dict) or stated.get("_type") != STATEMENT_TYPE \
            or stated.get("predicateType") != PREDICATE_TYPE \
            or not isinstance(stated.get("subject"), list):
        return None, f"the signed payload is not an in-toto Statement v1 of {PREDICATE_TYPE}"
    return stated, ""


def subject_problems(folder: Path, stated: dict, evidence: list[str]) -> list[str]:
    """Each evidence file whose sha256 is not its subject's, each subject not in the upload,
    each evidence file the statement does not name."""
    subjects: dict[str, str] = {}
    for item in stated["subject"]:
        digest = item.get("digest") if isinstance(item, dict) else None
        if isinstance(digest, dict) and isinstance(item.get("name"), str):
            subjects[item["name"]] = str(digest.get("sha256", ""))
    problems = []
    for rel in evidence:
        if rel not in subjects:
            problems.append(f"{rel}: on the evidence list, not in the signed statement")
        elif file_sha256(folder / rel) != subjects[rel]:
            problems.append(f"{rel}: sha256 {file_sha256(folder / rel)[:16]}... is not the "
                            f"signed {subjects[rel][:16]}... (changed after signing)")
    have = set(evidence)
    problems += [f"{name}: signed, not in the upload" for name in subjects if name not in have]
    return problems


def check_statement(upload: Upload, ctx: AuditContext) -> Check:
    """`statement-unverified`: the envelope's signature under the trusted key, its statement's
    subjects against the upload's evidence list and its runbook sha256 against runbook.yaml."""
    from harness.audit.evidence import evidence_manifest
    folder = upload.folder
    path = folder / ENVELOPE if folder else None
    present = bool(path and path.is_file() and not path.is_symlink())
    key_path = getattr(ctx, "trusted_key", None)
    if not present:
        if key_path is None:
            return Check(STATEMENT_UNVERIFIED, NOT_APPLICABLE,
                         [f"no signed statement ({ENVELOPE}) and no --trusted-key"])
        return Check(STATEMENT_UNVERIFIED, UNKNOWN,
                     [f"--trusted-key given, but the upload holds no signed statement "
                      f"({ENVELOPE}): nothing binds its files to a signer"])
    if key_path is None:
        return Check(STATEMENT_UNVERIFIED, UNKNOWN,
                     [f"{ENVELOPE} is signed, but no --trusted-key was given: the signature "
                      "and its subjects are not checked"])
    try:
        import cryptography  # noqa: F401 -- only to say so when it is absent
    except ImportError:
        return Check(STATEMENT_UNVERIFIED, UNKNOWN, [NO_CRYPTOGRAPHY])
    try:
        public = load_public_key(Path(key_path))
    except (OSError, ValueError) as exc:
        return Check(STATEMENT_UNVERIFIED, UNKNOWN, [f"--trusted-key unusable: {exc}"])
    if path.stat().st_size > MAX_ENVELOPE_BYTES:
        return Check(STATEMENT_UNVERIFIED, UNKNOWN,
                     [f"{ENVELOPE} is over {MAX_ENVELOPE_BYTES} bytes: not read"])
    try:
        envelope = safe_json(path, max_bytes=MAX_ENVELOPE_BYTES)
    except BadInput as exc:
        return Check(STATEMENT_UNVERIFIED, FAIL, [f"{ENVELOPE} unreadable: {exc}"])
    stated, why = verify_envelope(envelope, public)
    if stated is None:
        return Check(STATEMENT_UNVERIFIED, FAIL, [f"{ENVELOPE}: {why}"])
    evidence = evidence_manifest(folder)
    problems = subject_problems(folder, stated, evidence)
    predicate = stated.get("predicate") if isinstance(stated.get("predicate"), dict) else {}
    runbook = folder / "runbook.yaml"
    if runbook.is_file() and predicate.get("runbook_sha256") != file_sha256(runbook):
        problems.append(f"runbook.yaml: the statement's runbook_sha256 "
                        f"{str(predicate.get('runbook_sha256'))[:16]}... is not its sha256")
    if problems:
        return Check(STATEMENT_UNVERIFIED, FAIL, [f"{ENVELOPE}: " + first(problems)])
    return Check(STATEMENT_UNVERIFIED, PASS,
                 [f"{ENVELOPE}: signature verifies with the trusted key (keyid "
                  f"{key_id(public)[:16]}); {len(evidence)} evidence files match their "
                  f"signed sha256"])


RULES = (
    UploadRule(STATEMENT_UNVERIFIED, "(with --trusted-key) the signed in-toto statement "
               "does not verify with the trusted key, or an evidence file's sha256 is not "
               "its signed subject's; UNKNOWN, never INVALID, without a key",
               (Source(ENVELOPE, ("subject", "predicate.runbook_sha256")),
                Source("<evidence files>", ())),
               check_statement, "evidence files edited after publishing, or a statement "
               "signed by a key the auditor does not trust"),
)
