"""Secret names by words: Megatron's own flags and MoE "tokens" counts stay readable, every name
with a secret word (token, key, secret, password, auth, credential, camelCase or compound)
is redacted with its value, in an argv, in free text and as an environment variable."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from harness.io.known_flags import NONSECRET_FLAGS
from harness.io.redact import (
    HARNESS_ENV,
    REDACTED,
    flag_key,
    is_secret_env,
    is_secret_name,
    redact_argv,
    redact_text,
    secret_values,
)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import nonsecret_flags  # noqa: E402

DATA = ROOT / "backends" / "megatron" / "args" / "data"
MEGATRON_FLAGS = sorted({flag for path in DATA.glob("*.json")
                         for flag in json.loads(path.read_text(encoding="utf-8"))["flags"]})
ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
# a value that is no token shape and no option: what a setting looks like
VALUE = st.text(ALNUM + "._/", min_size=1, max_size=12).filter(lambda v: v[0] != ".")
PLAIN_WORD = st.text("abcdefghijlmnoqruvxyz", min_size=2, max_size=8)   # no s/k/t/p: no secret word
SECRET_WORD = st.sampled_from(["token", "key", "secret", "password", "passwd", "apikey", "auth",
                               "credential", "credentials", "keys", "secrets", "oauth",
                               "hftoken", "accesskey", "secretname", "passwordfile"])


def test_megatron_flag_set_is_current():
    """harness/io/known_flags.py is what scripts/nonsecret_flags.py derives from the data."""
    assert (ROOT / "harness" / "io" / "known_flags.py").read_text(encoding="utf-8") == \
        nonsecret_flags.render(nonsecret_flags.sources())
    assert "--moe-token-dispatcher-type" in NONSECRET_FLAGS


def test_no_pinned_megatron_flag_names_a_credential():
    """Were Megatron to gain `--hf-token`, the generator would not exempt it: none today."""
    assert [f for f in MEGATRON_FLAGS if nonsecret_flags.is_credential_flag(f)] == []
    assert nonsecret_flags.is_credential_flag("--wandb-api-key")
    assert nonsecret_flags.is_credential_flag("--hf-token")


@settings(max_examples=300, deadline=None)
@given(flag=st.sampled_from(MEGATRON_FLAGS), value=VALUE)
@example(flag="--moe-token-dispatcher-type", value="alltoall")
@example(flag="--linear-num-key-heads", value="16")
def test_every_megatron_flag_keeps_its_value(flag, value):
    argv = ["pretrain_gpt.py", flag, value, "--seq-length", "4096"]
    assert redact_argv(argv, []) == argv
    assert redact_argv([f"{flag}={value}"], []) == [f"{flag}={value}"]
    line = f"error: argument {flag} {value}: invalid choice"
    assert redact_text(line, []) == line
    assert not is_secret_name(flag) and not is_secret_name(flag_key(flag)[2:].upper())


def _name(words: list[str], style: str) -> str:
    if style == "camel":
        return words[0] + "".join(w.capitalize() for w in words[1:])
    return {"kebab": "-".join, "snake": "_".join, "env": lambda ws: "_".join(ws).upper()}[style](
        words)


SECRET_NAME = st.builds(
    lambda pre, word, post, style: _name(pre + [word] + post, style),
    st.lists(PLAIN_WORD, max_size=3), SECRET_WORD, st.lists(PLAIN_WORD, max_size=2),
    st.sampled_from(["kebab", "snake", "env", "camel"]))
SECRET_VALUE = st.text(ALNUM, min_size=8, max_size=24)


@settings(max_examples=400, deadline=None)
@given(name=SECRET_NAME, value=SECRET_VALUE)
@example(name="HF_TOKEN", value="abcdefgh12345")
@example(name="hfToken", value="abcdefgh12345")
@example(name="WANDB_API_KEY", value="abcdefgh12345")
@example(name="MY_AUTH", value="abcdefgh12345")
@example(name="db-credentials", value="abcdefgh12345")
def test_every_secret_named_option_and_variable_is_redacted(name, value):
    assume(flag_key(name) not in NONSECRET_FLAGS and value.lower() not in name.lower())
    assert is_secret_name(name)
    option = "--" + name
    assert redact_argv([option, value, "--x", "1"], []) == [option, REDACTED, "--x", "1"]
    assert redact_argv([f"{option}={value}"], []) == [f"{option}={REDACTED}"]
    texts = [f"rejected {option} {value} here", f"rejected {option}={value} here"]
    if "-" not in name:                                     # a variable name: NAME=value
        texts.append(f"env {name}={value} set")
    for text in texts:
        out = redact_text(text, [])
        assert value not in out and REDACTED in out, text
    assert secret_values({name: value}) == [value]
    assert value not in redact_text(f"the value {value} leaked", secret_values({name: value}))


def test_a_secret_named_switch_does_not_hide_the_next_flag():
    """`--use-auth` takes no value: the flag after it keeps its name (its value is shown)."""
    assert redact_argv(["--use-auth", "--seq", "8"], []) == ["--use-auth", "--seq", "8"]
    assert redact_argv(["--hf-token", "abcdefgh1", "--seq", "8"], []) == [
        "--hf-token", REDACTED, "--seq", "8"]


@settings(max_examples=200, deadline=None)
@given(words=st.lists(PLAIN_WORD, max_size=3), value=st.integers(10**7, 10**12).map(str))
@example(words=["moe", "budget"], value="65536000")
@example(words=["num"], value="12345678")
def test_token_counts_are_not_secret_names_but_the_contract_holds_for_the_environment(words,
                                                                                      value):
    """MoE "tokens" are counts: NUM_TOKENS=..., --max-tokens ... keep their values in free text
    and argv. An environment variable whose name contains TOKEN keeps the contract's rule
    (docs/spec.md#provenance: its value never appears), so a value set in the environment
    under such a name is scrubbed wherever it shows up."""
    name = "_".join([*words, "tokens"]).upper()
    assume(name not in HARNESS_ENV)     # the harness's own names: tests/unit/test_harness_env_names.py
    assert not is_secret_name(name) and is_secret_env(name)
    line = f"{name}={value} --{flag_key(name)[2:]} {value}"
    assert redact_text(line, []) == line
    assert secret_values({name: value}) == [value]
    assert value not in redact_text(line, secret_values({name: value}))


@settings(max_examples=200, deadline=None)
@given(before=st.from_regex(r"[A-Z_]{0,8}", fullmatch=True),
       word=st.sampled_from(["TOKEN", "KEY", "SECRET", "PASSWORD"]),
       after=st.from_regex(r"[A-Z_]{0,8}", fullmatch=True),
       value=st.from_regex(r"[A-Za-z0-9]{8,24}", fullmatch=True))
@example(before="GITHUB", word="TOKEN", after="VALUE", value="abcdefgh12")
@example(before="", word="TOKEN", after="IZER_PATH", value="/models/tok")
def test_every_environment_name_the_contract_covers_is_scrubbed(before, word, after, value):
    """docs/spec.md#provenance: any env var whose name *contains* TOKEN, KEY, SECRET or
    PASSWORD never appears (a word rule alone let GITHUBTOKENVALUE's value through)."""
    name = before + word + after
    assert is_secret_env(name)
    assert value in secret_values({name: value})
    assert value not in redact_text(f"argv --x {value} and {value}!", secret_values({name: value}))


# secret_values() of os.environ is cached while os.environ is unchanged: after any run of
# sets, changes and deletions of secret- and plain-named variables it is what a fresh scan of
# os.environ gives (seen red with a cache that ignored a changed value).
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["EPCAPT_TOKEN", "EPCAPT_API_KEY", "EPCAPT_PLAIN",
                                           "EPCAPT_PASSWORD_FILE"]),
                          st.one_of(st.none(), st.text("abcdefXYZ0123456789", min_size=0,
                                                       max_size=24))), max_size=12))
def test_env_secrets_follow_every_change_of_the_environment(changes):
    import os

    from harness.io.redact import _secret_values, secret_values
    saved = {k: os.environ.get(k) for k, _ in changes}
    try:
        for name, value in changes:
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
            assert secret_values() == _secret_values(dict(os.environ))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
