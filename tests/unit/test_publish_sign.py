"""The signed statement of the evidence (harness/audit/rules/signature.py, harness/publish/
sign.py): DSSE's PAE on its own test vector, sign and verify on generated evidence with one
byte changed anywhere, and, through the real huggingface_hub and a Hub on 127.0.0.1, a signed
upload VALID with the trusted key, INVALID with one byte changed (the file named) or another
key, UNKNOWN without a key."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.audit.model import AuditContext, Upload
from harness.audit.rules import signature
from harness.audit.vocab import STATEMENT_UNVERIFIED
from harness.errors import BadInput
from harness.publish.sign import load_private_key, signed_envelope

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def write_keys(folder: Path, fmt: str = "openssh") -> tuple[Path, Path]:
    """A fresh ed25519 key pair as files: (private, public), OpenSSH or PEM."""
    key = Ed25519PrivateKey.generate()
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "openssh":
        private = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption())
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH)
    else:
        private = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    (folder / "id").write_bytes(private)
    (folder / "id.pub").write_bytes(public)
    return folder / "id", folder / "id.pub"


def test_pae_is_the_dsse_test_vector():
    """secure-systems-lab/dsse protocol.md (0110cc2e) test vector (fails on any other
    framing: lengths as bytes, no spaces, the type's characters counted)."""
    assert signature.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert signature.pae("t\u00e9", b"") == b"DSSEv1 3 t\xc3\xa9 0 "


def sign_folder(folder: Path, files: dict[str, bytes], key) -> None:
    """Write `files` and the envelope over them (the runbook's sha256 in the predicate)."""
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    runbook = signature.file_sha256(folder / "runbook.yaml")
    (folder / signature.ENVELOPE).write_bytes(signed_envelope(
        folder, sorted(files), {"runbook_sha256": runbook}, key))


def check(folder: Path, public: Path | None):
    return signature.check_statement(Upload(path=".", folder=folder),
                                     AuditContext(trusted_key=public))


FILE_NAMES = st.sampled_from(["capacity_attempts.tsv", "provenance.txt", "events.jsonl",
                              "cells/a/cell.json", "cells/a/rank0.log", "cells/b/rank1.log"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(files=st.dictionaries(FILE_NAMES, st.binary(min_size=1, max_size=200), min_size=1),
       pick=st.integers(min_value=0), offset=st.integers(min_value=0), flip=st.integers(1, 255))
def test_one_byte_changed_anywhere_is_invalid_naming_the_file(tmp_path_factory, files, pick,
                                                              offset, flip):
    """Generated evidence signed, then one byte of one file changed: the rule fails naming
    that file; unchanged it passes (fails with the subject comparison removed from
    subject_problems, or when a digest other than the file's is signed)."""
    folder = tmp_path_factory.mktemp("signed")
    private, public = write_keys(folder / ".keys")
    files = {**files, "runbook.yaml": b"name: x\n"}
    sign_folder(folder, files, load_private_key(private))
    assert check(folder, public).state == "pass"
    rel = sorted(files)[pick % len(files)]
    data = bytearray(files[rel])
    data[offset % len(data)] ^= flip
    (folder / rel).write_bytes(bytes(data))
    result = check(folder, public)
    assert result.state == "fail" and rel in result.why[0], result.why


def test_another_key_a_changed_statement_and_no_key(tmp_path):
    """Signed by a key the auditor does not trust: fail; the statement's payload edited (a
    digest re-stated to match an edited file): fail; no --trusted-key: unknown, never fail;
    no envelope and no key: n/a; a key and no envelope: unknown (fails when the signature
    is not checked, or a missing key is judged INVALID)."""
    private, public = write_keys(tmp_path / "k1")
    _, other = write_keys(tmp_path / "k2", fmt="pem")
    folder = tmp_path / "up"
    sign_folder(folder, {"provenance.txt": b"a\n", "runbook.yaml": b"b\n"},
                load_private_key(private))
    assert check(folder, public).state == "pass"
    assert check(folder, other).state == "fail"
    assert "no signature of the 1 verifies" in check(folder, other).why[0]
    assert check(folder, None).state == "unknown"
    assert "no --trusted-key" in check(folder, None).why[0]
    envelope = json.loads((folder / signature.ENVELOPE).read_bytes())
    body = json.loads(signature.b64decode_any(envelope["payload"]))
    (folder / "provenance.txt").write_bytes(b"edited\n")
    body["subject"][0]["digest"]["sha256"] = signature.file_sha256(folder / "provenance.txt")
    import base64
    envelope["payload"] = base64.b64encode(json.dumps(body).encode()).decode()
    (folder / signature.ENVELOPE).write_text(json.dumps(envelope))
    assert check(folder, public).state == "fail"
    (folder / signature.ENVELOPE).unlink()
    assert check(folder, None).state == "n/a"
    assert check(folder, public).state == "unknown"


def test_without_cryptography_the_rule_is_unknown_naming_it(tmp_path, monkeypatch):
    """An audit where `cryptography` is not installed: UNKNOWN naming the package, no crash
    (fails when the import is made at module level or the error is not caught)."""
    private, public = write_keys(tmp_path / "k")
    folder = tmp_path / "up"
    sign_folder(folder, {"runbook.yaml": b"b\n"}, load_private_key(private))
    for name in [m for m in sys.modules if m.split(".")[0] == "cryptography"]:
        monkeypatch.setitem(sys.modules, name, None)     # as if never installed
    result = check(folder, public)
    assert result.state == "unknown" and "`cryptography` package" in result.why[0]
    with pytest.raises(BadInput, match="cryptography"):
        load_private_key(private)


def test_a_bad_key_file_is_refused_without_its_content(tmp_path):
    """A file shaped as a key that is not one, an encrypted key: BadInput naming the path and
    never the bytes (fails when an exception message carrying the content is passed on)."""
    secret = b"-----BEGIN OPENSSH PRIVATE KEY-----\nc2VjcmV0LW1hdGVyaWFs\n" \
             b"-----END OPENSSH PRIVATE KEY-----\n"
    (tmp_path / "bad").write_bytes(secret)
    with pytest.raises(BadInput) as caught:
        load_private_key(tmp_path / "bad")
    assert "c2VjcmV0" not in str(caught.value) and "bad" in str(caught.value)
    key = Ed25519PrivateKey.generate()
    (tmp_path / "enc").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw")))
    with pytest.raises(BadInput, match="passphrase"):
        load_private_key(tmp_path / "enc")


# ---------------------------------------------------------------- through a Hub on 127.0.0.1

def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


corpus = _load(FIXTURES / "uploads" / "corpus.py", "upload_corpus")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


def statement_check(result):
    (upload,) = result.uploads
    (found,) = [c for c in upload.checks if c.code == STATEMENT_UNVERIFIED]
    return upload, found


@pytest.mark.slow
def test_a_signed_upload_valid_invalid_unknown(campaign, local_hub, tmp_path):
    """`epcap publish --sign-key` through the local Hub, then `epcap audit hf://...@<commit>`:
    VALID with the trusted key (the statement verified, every evidence file matching);
    UNKNOWN without a key (statement-unverified the one undecided rule); after a commit that
    changes one byte of one evidence file, INVALID naming it (fails when the envelope is not
    uploaded, not fetched, or the digests are not compared)."""
    from huggingface_hub import CommitOperationAdd, HfApi

    from harness import publish
    from harness.audit import audit_target
    private, public = write_keys(tmp_path / "keys")
    assert publish.cli_publish(str(campaign), "org/runs", sign_key=str(private)) == 0
    head = local_hub.repos["org/runs"].head()
    (envelope,) = [p for p in head["files"] if p.endswith("/" + signature.ENVELOPE)]
    prefix = envelope[:-len(signature.ENVELOPE)]
    target = f"hf://datasets/org/runs@{head['oid']}"
    upload, found = statement_check(audit_target(target, trusted_key=public))
    assert (upload.verdict, upload.why) == ("VALID", []) and found.state == "pass"
    upload, found = statement_check(audit_target(target))
    assert (upload.verdict, upload.reasons) == ("UNKNOWN", [STATEMENT_UNVERIFIED])
    log = sorted(p for p in head["files"] if p.startswith(prefix) and p.endswith("rank0.log"))[0]
    data = bytearray(head["files"][log])
    data[len(data) // 2] ^= 0x01
    HfApi().create_commit(repo_id="org/runs", repo_type="dataset", commit_message="one byte",
                          operations=[CommitOperationAdd(log, bytes(data))])
    changed = local_hub.repos["org/runs"].head()["oid"]
    upload, found = statement_check(audit_target(f"hf://datasets/org/runs@{changed}",
                                                 trusted_key=public))
    assert upload.verdict == "INVALID" and STATEMENT_UNVERIFIED in upload.reasons
    assert found.state == "fail" and log[len(prefix):] in found.why[0], found.why
