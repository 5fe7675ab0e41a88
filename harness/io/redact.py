"""One redaction pass for everything epcap writes or prints (docs/spec.md: secrets).

Three kinds of secret are hidden: values of secret-named environment variables (names with
TOKEN, KEY, SECRET or PASSWORD), the value after a secret-named option (`--hf-token X`,
`--api-key=X`) and well-known token shapes (`hf_...`, `ghp_...`, AWS access keys, ...), which
are caught even when the variable that held them is not set at the time of writing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
REDACTED = "REDACTED"        # shell-safe: shlex.join leaves it unquoted
MIN_SCRUB_LEN = 8            # shorter secret values cannot be told from words like "true"

# Option names are split into words; a word that *is* a secret word marks the option, so
# `--moe-min-tokens-per-replica` (word "tokens") is not a secret but `--hf-token` is.
_OPTION_WORDS = {"token", "key", "secret", "password", "passwd", "apikey", "api_key"}
# identity and control fields of events, cell.json and table rows: never redacted (see
# redact_obj); what may reach them is refused at load instead
IDENTITY_FIELDS = frozenset({
    "ev", "t", "campaign", "model", "backend", "purpose", "capacity", "attempt", "cell",
    "cell_dir", "stage", "status", "launcher", "runbook_sha256", "models_sha256",
    "job_id", "results", "results_dir", "path", "log", "until"})
TOKEN_PATTERN = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"hf_[A-Za-z0-9]{20,}"                      # Hugging Face user/org tokens
    r"|gh[pousr]_[A-Za-z0-9]{20,}"              # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{20,}"            # GitHub fine-grained tokens
    r"|glpat-[A-Za-z0-9_-]{20,}"                # GitLab personal tokens
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"            # Slack tokens
    r"|AKIA[0-9A-Z]{16}"                        # AWS access key ids
    r"|sk-[A-Za-z0-9_-]{20,}"                   # OpenAI-style secret keys
    r")")
_OPTION_IN_TEXT = re.compile(r"(--?[A-Za-z][A-Za-z0-9_-]*)(=|[ \t]+)(\"[^\"]*\"|'[^']*'|\S+)")
_ASSIGN_IN_TEXT = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)=(\"[^\"]*\"|'[^']*'|\S+)")


def is_secret_name(name: str) -> bool:
    """True for environment variable names that may hold a secret (docs/spec.md#provenance)."""
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def is_secret_option(option: str) -> bool:
    """True for command-line options named like a secret: `--hf-token`, `--api_key`."""
    words = re.split(r"[-_.]+", option.lstrip("-").lower())
    joined = option.lstrip("-").lower().replace("-", "_")
    return bool(_OPTION_WORDS.intersection(words)) or joined in _OPTION_WORDS


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-named variables long enough to scrub, longest first."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if is_secret_name(k) and len(v) >= MIN_SCRUB_LEN}
    return sorted(values, key=len, reverse=True)


def scrub(text: str, secrets: list[str]) -> str:
    """Replace every occurrence of a known secret value, then every token-shaped string."""
    for value in secrets:
        text = text.replace(value, REDACTED)
    return TOKEN_PATTERN.sub(REDACTED, text)


def redact_argv(argv: list[str], secrets: list[str] | None = None) -> list[str]:
    """Scrub an argv: secret values, token shapes, and the value of a secret-named option."""
    secrets = secret_values() if secrets is None else secrets
    out: list[str] = []
    hide_next = False
    for arg in map(str, argv):
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("-"):
            name, eq, _ = arg.partition("=")
            if is_secret_option(name):
                if eq:
                    out.append(name + "=" + REDACTED)
                else:
                    out.append(arg)
                    hide_next = True
                continue
        out.append(scrub(arg, secrets))
    return out


def redact_text(text: str, secrets: list[str] | None = None) -> str:
    """Scrub free text (a log line, an error message): values, options, NAME=value, tokens."""
    secrets = secret_values() if secrets is None else secrets
    text = scrub(text, secrets)

    def option(match: re.Match) -> str:
        if not is_secret_option(match.group(1)):
            return match.group(0)
        return match.group(1) + match.group(2) + REDACTED

    def assign(match: re.Match) -> str:
        if not is_secret_name(match.group(1)) or len(match.group(2)) < MIN_SCRUB_LEN:
            return match.group(0)
        return match.group(1) + "=" + REDACTED

    return _ASSIGN_IN_TEXT.sub(assign, _OPTION_IN_TEXT.sub(option, text))


def redact_obj(value, secrets: list[str] | None = None):
    """`redact_text` over every free-text string of a JSON-like value (dict keys included).

    The values of identity and control fields (IDENTITY_FIELDS: campaign, model, backend,
    cell, paths, stage, status, ...) are never rewritten: resume and orphan search match
    them byte for byte. They cannot carry a secret because every name is checked at load
    (harness.io.bounds.path_component_problem refuses a token-shaped one) and `epcap run`
    refuses a token-shaped --results path. The runbook's path is free text: it may be
    redacted (resume matches the runbook by its sha256).
    """
    secrets = secret_values() if secrets is None else secrets
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, Mapping):
        return {redact_obj(k, secrets) if isinstance(k, str) else k:
                v if k in IDENTITY_FIELDS and isinstance(v, (str, int, float, type(None)))
                else redact_obj(v, secrets)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_obj(v, secrets) for v in value]
    return value


def looks_secret(text: str, secrets: list[str] | None = None) -> bool:
    """True when the redaction pass would change `text`: any token shape, secret value,
    secret-named option or NAME=value assignment (what `publish` and name checks refuse)."""
    return redact_text(text, secrets) != text


def find_secrets(data: bytes, secrets: list[str] | None = None) -> list[str]:
    """What kinds of secret `data` still holds ('token-pattern', 'env-value', 'secret-option'
    for `--api-key=X`, `WANDB_API_KEY=X` and the like); [] when `redact_text` would leave it
    unchanged, so whatever the redaction pass would hide is found here."""
    secrets = secret_values() if secrets is None else secrets
    found = []
    text = data.decode("utf-8", "replace")
    if TOKEN_PATTERN.search(text):
        found.append("token-pattern")
    if any(value in text for value in secrets):
        found.append("env-value")
    if not found and looks_secret(text, secrets):
        found.append("secret-option")
    return found
