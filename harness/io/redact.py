"""One redaction pass for everything epcap writes or prints (docs/spec.md: secrets).

Four kinds of secret are hidden: values of secret-named environment variables, the value after
a secret-named option (`--hf-token X`, `--api-key=X`), a credential as a header, a field or a
URL writes it (`Authorization: Bearer X`, `password: X`, `"api_key": "X"`, `user:PW@host`),
and well-known token shapes (`hf_...`, `ghp_...`, AWS access keys, ...), which are caught even
when the variable that held them is not set at the time of writing. An environment variable is secret by the contract's substring rule
(is_secret_env: its value is scrubbed wherever it appears); an option or a NAME=value in free
text is secret-named by its *words* (is_secret_name), so Megatron's
`--moe-token-dispatcher-type alltoall` and a count such as `NUM_TOKENS=65536` stay readable.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping

from harness.io.known_flags import NONSECRET_FLAGS

REDACTED = "REDACTED"        # shell-safe: shlex.join leaves it unquoted
MIN_SCRUB_LEN = 8            # shorter secret values cannot be told from words like "true"

# A word marks a name as secret when it ends with one of these (token, HFTOKEN, apiKey, OAUTH);
# docs/spec.md#provenance names TOKEN, KEY, SECRET, PASSWORD; the others are their common spellings.
SECRET_WORDS = ("token", "key", "secret", "password", "passwd", "auth", "credential")
# Plurals that still name credentials (API_KEYS). Not "tokens": in MoE it is a count
# (NUM_TOKENS, --max-tokens-to-oom, EPCAP_BUDGET_TOKENS).
SECRET_PLURALS = ("keys", "secrets", "passwords", "credentials")
# Prefixes whose compounds still name a credential (SECRETNAME, PASSWORDFILE); "token" and
# "key" are left out as prefixes because of TOKENIZER and KEYBOARD-like words.
SECRET_PREFIXES = ("secret", "password", "passwd", "credential")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
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


def name_words(name: str) -> list[str]:
    """The lower-case words of an option or variable name: split at `-`, `_`, `.` and at
    camelCase boundaries (`--hf-token`, `HF_TOKEN`, `hfToken` -> hf, token)."""
    return [w.lower() for w in _WORD.findall(name)]


def flag_key(name: str) -> str:
    """A name in one spelling for NONSECRET_FLAGS: `--moe-token-dispatcher-type`,
    `MOE_TOKEN_DISPATCHER_TYPE` and `--moe_token_dispatcher_type` all give the first."""
    return "--" + "-".join(w for w in re.split(r"[-_.]+", name.lower()) if w)


def has_secret_word(name: str) -> bool:
    """True when one word of `name` names a credential (SECRET_WORDS, SECRET_PLURALS,
    SECRET_PREFIXES), whatever the name is."""
    return any(w.endswith(SECRET_WORDS) or w.endswith(SECRET_PLURALS)
               or w.startswith(SECRET_PREFIXES) for w in name_words(name))


# docs/spec.md#provenance: "any env var whose name contains TOKEN, KEY,
# SECRET, PASSWORD" -- a substring rule, kept as the contract says for environment variables
SPEC_ENV_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
# The variables the harness itself sets for a run (backends/megatron/base.py env, the launchers'
# marker): names it owns, whose values it wrote, so never secrets whatever words they hold
# (EPCAP_BUDGET_TOKENS is a slot count). Exempt by exact name, never by prefix: a user's
# EPCAP_HF_TOKEN and the hidden-argument variables (EPCAP_HIDDEN_ARG_<i>) stay secret.
HARNESS_ENV: frozenset[str] = frozenset({
    "EPCAP_CELL", "EPCAP_PURPOSE", "EPCAP_CAPACITY", "EPCAP_BUDGET_TOKENS",
    "EPCAP_PAD_MULTIPLE", "EPCAP_TIMING", "EPCAP_TIMING_WARMUP", "EPCAP_TIMING_ITERS",
    "EPCAP_TIMING_TRIALS", "EPCAP_CELL_DIR", "EPCAP_PREFORK", "EPCAP_REFERENCE_CHILD",
    "EPCAP_RANK_FIFOS"})


@functools.lru_cache(maxsize=4096)      # a pure function of the name; called per env item
def is_secret_env(name: str) -> bool:
    """True for an environment variable whose value must never be written: its name contains
    TOKEN, KEY, SECRET or PASSWORD (the contract's rule, substrings included: TOKENIZER_PATH),
    or a word of it names a credential (is_secret_name: AUTH, ...); never for a name the
    harness owns (HARNESS_ENV: EPCAP_BUDGET_TOKENS)."""
    if name in HARNESS_ENV:
        return False
    upper = name.upper()
    return any(word in upper for word in SPEC_ENV_WORDS) or has_secret_word(name)


def is_secret_name(name: str) -> bool:
    """True for an option (`--hf-token`) or a NAME=value in free text (`WANDB_API_KEY=...`)
    whose value may be a secret: a word of it is a secret word and it is not one of Megatron's
    own flags (harness/io/known_flags.py, derived from the pinned arguments.py). Environment
    variables follow the contract's wider rule, is_secret_env."""
    return has_secret_word(name) and flag_key(name) not in NONSECRET_FLAGS


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-named variables long enough to scrub, longest first."""
    if environ is None:
        # os.environ's own values, recomputed only when they changed: a name check writes
        # through this thousands of times an audit, and reading os.environ item by item
        # (decoding each) was a fifth of the audit's time. CPython keeps os.environ's bytes in
        # `_data`; its items compare at C speed. Elsewhere: no cache.
        data = getattr(os.environ, "_data", None)
        key = tuple(data.items()) if isinstance(data, dict) else None
        if key is not None and _ENV_SECRETS and _ENV_SECRETS[0] == key:
            return list(_ENV_SECRETS[1])
        values = _secret_values(os.environ)
        if key is not None:
            _ENV_SECRETS[:] = [key, values]
        return list(values)
    return _secret_values(environ)


_ENV_SECRETS: list = []     # [os.environ's items, their secret values] (secret_values)


def _secret_values(env: Mapping[str, str]) -> list[str]:
    values = {v for k, v in env.items() if is_secret_env(k) and len(v) >= MIN_SCRUB_LEN}
    return sorted(values, key=len, reverse=True)


# credentials in a URL's userinfo: `scheme://user:PASSWORD@host` (the password), and a
# token-long user alone (`https://<token>@github.com`); `git@host` and `ssh://git@...` stay
URL_PASSWORD = re.compile(r"(?i)(?<![A-Za-z0-9+.-])([a-z][a-z0-9+.-]{0,30}:/{1,2}[^\s/:@]*):"
                          r"([^\s/@]+)@")
URL_TOKEN_USER = re.compile(r"(?i)(?<![A-Za-z0-9+.-])([a-z][a-z0-9+.-]{0,30}:/{1,2})"
                            r"([^\s/:@]{20,})@")


# the same credentials without a scheme, as git and scp write a remote: `user:PASSWORD@host`
# (a host name with a letter, or an IPv4 address) followed by `:path`, `/path` or the end of the
# word; `git@github.com:org/repo` has no password, Slurm's `--signal=B:USR1@N` no user
# (`mailto:alice@host` and `sip:alice@host` are a scheme and an address, not credentials)
SCP_PASSWORD = re.compile(r"(?<![A-Za-z0-9._~+/:@-])(?!(?i:mailto|sips?|xmpp):|[RB]:)"
                          r"([A-Za-z0-9_][A-Za-z0-9._~-]*):"
                          r"([^\s/:@]+)@(?=(?:[A-Za-z0-9.-]*[A-Za-z][A-Za-z0-9.-]*"
                          r"|\d{1,3}(?:\.\d{1,3}){3})(?:[:/\s\"',;)\]]|$))")


def scrub(text: str, secrets: list[str]) -> str:
    """Replace every occurrence of a known secret value, URL credentials (with a scheme or
    scp-like), then every token-shaped string."""
    for value in secrets:
        text = text.replace(value, REDACTED)
    if ":/" in text:                # a URL (or one a path join collapsed to `https:/`)
        text = URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)
        text = URL_TOKEN_USER.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    if "@" in text:
        text = SCP_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)
    return TOKEN_PATTERN.sub(REDACTED, text)


def redact_argv(argv: list[str], secrets: list[str] | None = None) -> list[str]:
    """Scrub an argv: secret values, token shapes, and the value of a secret-named option."""
    secrets = secret_values() if secrets is None else secrets
    out: list[str] = []
    hide_next = False
    for arg in map(str, argv):
        if hide_next and not arg.startswith("--"):   # a flag after a flag is no value
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if arg.startswith("-"):
            name, eq, _ = arg.partition("=")
            if is_secret_name(name):
                if eq:
                    out.append(name + "=" + REDACTED)
                else:
                    out.append(arg)
                    hide_next = True
                continue
        out.append(scrub(arg, secrets))
    return out


# a credential written as a header, a YAML or JSON field: `Authorization: Bearer X` (and any
# scheme: Basic, Token, ...), a bare `Bearer X`, `password: X`, `"api_key": "X"`
# (the schemes: IANA's HTTP Authentication Scheme Registry, and the common Token/OAuth/ApiKey)
_AUTH_SCHEMES = (r"basic|bearer|digest|dpop|gnap|hoba|mutual|negotiate|ntlm|oauth|token|apikey"
                 r"|privatetoken|concealed|vapid|aws4-hmac-sha256|scram-sha-1|scram-sha-256")
_AUTH_HEADER = re.compile(r"(?i)(?<![A-Za-z0-9_-])((?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*"
                          r"[\"']?)(?:(" + _AUTH_SCHEMES + r")[ \t]+)?([^\s\"',;]+)")
_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9_-])(bearer[ \t]+)([A-Za-z0-9._~+/-]+=*)")
# (a `name: value` field, YAML's or JSON's; `NAME=value` is _ASSIGN_IN_TEXT's. An unquoted value
# ends at a space, `,`, `;` or a closing bracket: `secrets: list[str]`, a type annotation in a
# traceback's source line, is no value; lengths are bounded, so a hostile line costs linear time)
_NAMED_VALUE = re.compile(r"(?<![A-Za-z0-9_.-])([A-Za-z_][A-Za-z0-9_.-]{0,99})([\"']?[ \t]*:[ \t]*)"
                          r"(\"[^\"]{0,256}\"|'[^']{0,256}'"
                          r"|[^\s,;:{}\[\]()\"']{1,256}(?=[\s,;}\])]|$))")
_FIELD_HINTS = ("token", "key", "secret", "passw", "auth", "credential", "bearer")
# tokenizer fields (`eos_token: <|endoftext|>`) hold words of a vocabulary, never credentials
_VOCAB_TOKENS = ("bos", "eos", "pad", "unk", "sep", "cls", "mask")


def is_secret_field(name: str) -> bool:
    """True for the name of a `name: value` field that holds a credential: its last word names
    one (`password`, `x-api-key`, `client_secret`, `HF_TOKEN`), it is not a bare `key` nor
    ends in `keys` (a dictionary's: provenance's `cell.env_keys: NAMES`), nor a tokenizer's
    special token (`eos_token`), nor one of Megatron's flags; `KeyError: ...` and
    `num_tokens: ...` stay readable."""
    words = name_words(name)
    if not words or words in (["key"], ["keys"]):
        return False
    last = words[-1]
    if last == "token" and len(words) > 1 and words[-2] in _VOCAB_TOKENS:
        return False
    named = last.endswith(SECRET_WORDS) or last.startswith(SECRET_PREFIXES) \
        or last.endswith(SECRET_PLURALS) and last != "keys"    # cell.env_keys: names
    return named and flag_key(name) not in NONSECRET_FLAGS


def _quoted(value: str) -> str:
    """REDACTED in the quotes `value` had (a JSON string stays a JSON string)."""
    quote = value[0] if value[:1] in ("'", '"') and len(value) > 1 else ""
    return quote + REDACTED + quote


def _unquoted_len(value: str) -> int:
    return len(value.strip("'\""))


def redact_fields(text: str) -> str:
    """Hide the credential of an Authorization header, a bare Bearer token and a secret-named
    `name: value` / `"name": "value"` field (values of 8+ characters)."""
    def header(m: re.Match) -> str:
        if m.group(2) is None and _unquoted_len(m.group(3)) < MIN_SCRUB_LEN:
            return m.group(0)
        return m.group(1) + (m.group(2) + " " if m.group(2) else "") + REDACTED

    def bearer(m: re.Match) -> str:
        return m.group(0) if len(m.group(2)) < MIN_SCRUB_LEN else m.group(1) + REDACTED

    def field(m: re.Match) -> str:
        if not is_secret_field(m.group(1)) or _unquoted_len(m.group(3)) < MIN_SCRUB_LEN:
            return m.group(0)
        return m.group(1) + m.group(2) + _quoted(m.group(3))

    lower = text.lower()
    if any(w in lower for w in _FIELD_HINTS):   # most log lines hold none: skip the scan
        if "authorization" in lower or "bearer" in lower:
            text = _BEARER.sub(bearer, _AUTH_HEADER.sub(header, text))
        text = _NAMED_VALUE.sub(field, text)
    return text


def redact_text(text: str, secrets: list[str] | None = None) -> str:
    """Scrub free text (a log line, an error message): values, options, NAME=value, header and
    `name: value` credentials, tokens."""
    secrets = secret_values() if secrets is None else secrets
    text = redact_fields(scrub(text, secrets))

    def option(match: re.Match) -> str:
        if not is_secret_name(match.group(1)):
            return match.group(0)
        return match.group(1) + match.group(2) + REDACTED

    def assign(match: re.Match) -> str:
        if not is_secret_name(match.group(1)) or len(match.group(2)) < MIN_SCRUB_LEN:
            return match.group(0)
        return match.group(1) + "=" + REDACTED

    return _ASSIGN_IN_TEXT.sub(assign, _OPTION_IN_TEXT.sub(option, text))


# in a comment, a credential is often written `name: value` or `name = value` (an AWS
# credentials file's `aws_secret_access_key = ...`), or pasted bare: an AWS secret access key
# is 40 characters of base64 (letters of both cases, digits, / and +); a git id (hex, one
# case) never matches
_COMMENT = re.compile(r"(?:^|(?<=\s))#.*$", re.M)
_SPACED_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)([ \t]*[:=][ \t]*)(\"[^\"]*\"|'[^']*'|\S+)")
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+])(?=[A-Za-z0-9/+]*[a-z])(?=[A-Za-z0-9/+]*[A-Z])"
                         r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")


def redact_comments(text: str, secrets: list[str] | None = None) -> str:
    """`redact_text`, and in every `#` comment (a runbook, a models file) also a
    secret-named `name: value` / `name = value` and a bare AWS secret access key shape."""
    def assign(match: re.Match) -> str:
        if not is_secret_name(match.group(1)) or len(match.group(3)) < MIN_SCRUB_LEN:
            return match.group(0)
        return match.group(1) + match.group(2) + REDACTED

    def comment(match: re.Match) -> str:
        return _AWS_SECRET.sub(REDACTED, _SPACED_ASSIGN.sub(assign, match.group(0)))
    return _COMMENT.sub(comment, redact_text(text, secrets))


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


# A binary file's text: runs of 6+ printable ASCII characters (`strings`' rule, 4 there). A
# figure's compressed bytes once matched `user:PASSWORD@host` across control characters
# (fig3_demand_QWEN2_57B.png of the default campaign, refused by publish).
PRINTABLE_RUN = re.compile(rb"[\x20-\x7e]{6,}")


def find_secrets(data: bytes, secrets: list[str] | None = None) -> list[str]:
    """What kinds of secret `data` still holds ('token-pattern', 'env-value', 'secret-option'
    for `--api-key=X`, `WANDB_API_KEY=X` and the like); [] when `redact_text` would leave it
    unchanged, so whatever the redaction pass would hide is found here."""
    secrets = secret_values() if secrets is None else secrets
    found = []
    if b"\0" in data:      # binary (a PNG): its printable runs, as `strings` shows them; the
        data = b"\n".join(PRINTABLE_RUN.findall(data))    # text rules never read noise
    text = data.decode("utf-8", "replace")
    if TOKEN_PATTERN.search(text):
        found.append("token-pattern")
    if any(value in text for value in secrets):
        found.append("env-value")
    if not found and looks_secret(text, secrets):
        found.append("secret-option")
    return found
