"""Mechanism: the one redaction pass (harness/io/redact.py) hides a credential written as an
HTTP header (`Authorization: Bearer X`, `Basic`, `token`, `Proxy-Authorization`, a bare
`Bearer X`), as a secret-named YAML/JSON field (`password: X`, `"password": "X"`,
`x-api-key: X`, `"client_secret":"X"`), or as `passwd=X` / `secret=X`, and the password of an
scp-like remote (`user:PASSWORD@host:path`, the URL rule without a scheme). `epcap classify`
prints none of them, `publish`'s secret check (`files_with_secrets`) refuses a file holding
one, and `publish --repo` / `audit --git-repo` never echo an scp-like password.

Seen failing on the code before (28ad19d): classify printed `Bearer Qq9Zk39...` and
`password: hunter2hunter2` verbatim, files_with_secrets passed the file (publish would upload
it), and `--repo alice:PASSWORD123xyz@host` was echoed in the error."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import harness.publish as publish
from harness.io.redact import redact_text

from .conftest import run_cli

# a value that fits every form unquoted (RFC 7235 token68 characters); a letter and a digit,
# so it is never a word or a number printed elsewhere in the output
TOKEN68 = st.text(alphabet="abcdefghijkLMNOPQ0123456789_-.~+/", min_size=8, max_size=40).filter(
    lambda v: any(c.isdigit() for c in v) and any(c.isalpha() for c in v))
QUOTED = st.text(alphabet="abcdefghijkLMNOP0123456789 :!@#%^&*_-.", min_size=8, max_size=40).filter(
    lambda v: any(c.isdigit() for c in v) and any(c.isalpha() for c in v) and v.strip() == v)
UNQUOTED_FORMS = ["Authorization: Bearer {}", "Authorization: Basic {}", "authorization: token {}",
                  "Proxy-Authorization: Bearer {}", "curl -H 'Authorization: Bearer {}' URL",
                  "Authorization: {}", "Bearer {}", "password: {}", "PASSWORD: {}",
                  "passwd={}", "secret={}", "token: {}", "x-api-key: {}", "X-Api-Key: {}",
                  "api_key: {}", "HF_TOKEN: {}", "db.password: {}"]
QUOTED_FORMS = ['"password": "{}"', "{{'password': '{}'}}", '{{"client_secret":"{}"}}',
                'password: "{}"', '"x-api-key": "{}"', '"token": "{}"']
SECRET_FORMS = st.one_of(
    st.tuples(st.sampled_from(UNQUOTED_FORMS), TOKEN68),
    st.tuples(st.sampled_from(QUOTED_FORMS), QUOTED))
PROBE = "Authorization: Bearer Qq9Zk39fjdkL20sdxx33 password: hunter2hunter2"

# what the pass must leave readable (a dictionary key, a count, a tokenizer's word, a git
# remote, Slurm's signal option, a mail address)
READABLE = ["KeyError: 'decoder.layers.0.mlp.router.expert_bias'", "num_tokens: 123456789",
            "eos_token: <|endoftext|>", "cell.env_keys: HF_TOKEN OMP_NUM_THREADS",
            "git@github.com:org/repo.git", "ssh://git@github.com/org/repo",
            "#SBATCH --signal=B:USR1@120", "mailto:alice@example.com", "key: moe_layer_freq",
            "Authorization failed", "password: short", "def f(secrets: list[str]) -> None:"]

USERS = st.text(alphabet="abcdefgxyz_0123", min_size=1, max_size=12).filter(
    lambda u: u[0].isalnum() and u not in ("R", "B"))
PASSWORDS = st.text(alphabet="abcdefgXYZ0123456789!%*-_.~", min_size=6, max_size=30).filter(
    lambda p: any(c.isdigit() for c in p) and any(c.isalpha() for c in p))
HOSTS = st.one_of(st.sampled_from(["host", "github.com", "git.example.org", "10.0.0.1"]),
                  st.text(alphabet="abcxyz", min_size=1, max_size=10))
SCP = st.builds(lambda u, p, h, tail: (f"{u}:{p}@{h}{tail}", p),
                USERS, PASSWORDS, HOSTS, st.sampled_from(["", ":x", ":org/repo.git", "/path"]))


def one_cell(tmp_path, line: str):
    """A failed cell whose rank0.log decides on an OOM line ending in `line`."""
    cell = tmp_path / "M__b__measure__cap2p00__a1"
    cell.mkdir(exist_ok=True)
    (cell / "cell.json").write_text(json.dumps(
        {"launcher": {"state": "failed", "exit_code": 1}, "cell": {"backend": "b"}}))
    (cell / "rank0.log").write_text(
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB {line}\n")
    return cell


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(form=SECRET_FORMS, as_json=st.booleans())
@example(form=("password: {}", "hunter2hunter2"), as_json=False)
@example(form=("Authorization: Bearer {}", "Qq9Zk39fjdkL20sdxx33"), as_json=True)
def test_classify_prints_no_header_or_field_credential(tmp_path, form, as_json):
    template, value = form
    cell = one_cell(tmp_path, template.format(value))
    res = run_cli("classify", cell, *(["--json"] if as_json else []))
    assert res.code == 0, res.text
    assert "does_not_fit" in res.text and "rank0.log" in res.text, res.text   # not vacuous
    assert value not in res.text, res.text
    assert "REDACTED" in res.text, res.text


def test_classify_hides_the_probe_line(tmp_path):
    """The probe's line, on the line classify decides on, in every output mode."""
    cell = one_cell(tmp_path, PROBE)
    for argv in ((), ("--json",), ("--explain",)):
        res = run_cli("classify", cell, "--state", "failed", "--exit-code", "1", *argv)
        assert res.code == 0 and "REDACTED" in res.text, res.text
        assert "Qq9Zk39" not in res.text and "hunter2hunter2" not in res.text, res.text


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(publish, "SCAN_BLOCK", 97)   # a secret often spans two blocks


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(form=st.one_of(SECRET_FORMS, SCP.map(lambda s: ("remote {}", s[0]))),
       before=st.text(max_size=150), after=st.text(max_size=150))
@example(form=("{}", PROBE), before="", after="")
def test_publish_refuses_a_file_holding_a_header_or_field_credential(tmp_path, form, before,
                                                                    after):
    template, value = form
    log = tmp_path / "cells" / "c" / "rank0.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(before + "\n" + template.format(value) + "\n" + after, encoding="utf-8",
                   errors="surrogatepass")
    assert publish.files_with_secrets(tmp_path, ["cells/c/rank0.log"]) == ["cells/c/rank0.log"]


@pytest.mark.parametrize("text", READABLE)
def test_readable_text_is_left_alone(text):
    assert redact_text(text, []) == text


@settings(max_examples=150, deadline=None)
@given(remote=SCP)
@example(remote=("alice:PASSWORD123xyz@host", "PASSWORD123xyz"))
@example(remote=("x=alice:PASSWORD123xyz@host:x", "PASSWORD123xyz"))
def test_scp_like_password_is_redacted(remote):
    text, password = remote
    for shown in (text, f"--git-repo: x={text}: no such directory", f"got {text!r}"):
        out = redact_text(shown, [])
        assert f":{password}@" not in out and "REDACTED@" in out, out


@settings(max_examples=25, deadline=None)
@given(remote=SCP)
@example(remote=("alice:PASSWORD123xyz@host", "PASSWORD123xyz"))
def test_publish_repo_never_echoes_an_scp_password(tmp_path_factory, remote):
    text, password = remote
    root = tmp_path_factory.mktemp("c")
    res = run_cli("publish", root, "--repo", text, "--dry-run")
    assert res.code == 2, res.text
    assert f":{password}@" not in res.text, res.text


def test_audit_git_repo_never_echoes_an_scp_password(tmp_path):
    """The probe: `audit --git-repo x=alice:PASSWORD123xyz@host:x` named the directory as given."""
    res = run_cli("audit", tmp_path, "--git-repo", "x=alice:PASSWORD123xyz@host:x")
    assert res.code == 2 and "--git-repo" in res.text, res.text
    assert "PASSWORD123xyz" not in res.text, res.text
