"""`epcap publish --sign-key`: the in-toto Statement of the evidence list, in a DSSE envelope
signed with the publisher's ed25519 key (harness/audit/rules/signature.py holds the formats
and their upstream references; the audit verifies it with `--trusted-key`).

The key file is read here and nowhere else; no message carries its bytes, only its path.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from harness.audit.rules.signature import (
    MAX_KEY_BYTES,
    PAYLOAD_TYPE,
    key_id,
    pae,
    statement,
)
from harness.errors import BadInput
from harness.io.safeio import read_bytes as safe_bytes


def load_private_key(path: Path):
    """The ed25519 private key in an OpenSSH (`-----BEGIN OPENSSH PRIVATE KEY-----`) or PEM
    (PKCS#8) file without a passphrase; BadInput naming the file, never its content."""
    try:
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    except ImportError:
        raise BadInput("signing needs the `cryptography` package (pip install 'epcap[dev]')",
                       field="--sign-key") from None
    data = safe_bytes(path, max_bytes=MAX_KEY_BYTES, field="--sign-key")
    loader = (serialization.load_ssh_private_key if b"OPENSSH PRIVATE KEY" in data
              else serialization.load_pem_private_key)
    try:
        key = loader(data, password=None)
    except (TypeError, UnsupportedAlgorithm):   # an OpenSSH key's bcrypt KDF: encrypted
        raise BadInput("the key file is passphrase-protected: give an unencrypted ed25519 "
                       "key (its content is never printed)", path=str(path)) from None
    except (ValueError, IndexError):
        raise BadInput("not an OpenSSH or PEM private key (its content is never printed)",
                       path=str(path)) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BadInput(f"not an ed25519 key ({type(key).__name__})", path=str(path))
    return key


def signed_envelope(root: Path, files: list[str], predicate: dict, key) -> bytes:
    """The DSSE envelope (JSON bytes) of the in-toto Statement over `files` inside `root`,
    signed over PAE(payloadType, payload) with `key`."""
    body = json.dumps(statement(root, files, predicate), sort_keys=True,
                      separators=(",", ":")).encode()
    sig = key.sign(pae(PAYLOAD_TYPE, body))
    envelope = {"payload": base64.b64encode(body).decode(), "payloadType": PAYLOAD_TYPE,
                "signatures": [{"keyid": key_id(key.public_key()),
                                "sig": base64.b64encode(sig).decode()}]}
    return (json.dumps(envelope, indent=1) + "\n").encode()
