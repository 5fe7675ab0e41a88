"""Mechanisms: secrets in a runbook's comments are not frozen into its copy
(redact.redact_comments, used by store.freeze_runbook); a token given as `publish --repo` is
refused without being printed; an empty required section and a YAML tag on a collection are
`file:line: field` errors (exit 2), never a traceback nor silently ignored (yamldoc)."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.campaign.store import freeze_runbook
from harness.errors import BadInput
from harness.io.redact import redact_comments
from harness.results.layout import RUNBOOK_YAML
from harness.runbook.load import load_runbook

from .conftest import FIXTURES, assert_bad_input, run_cli

HEALTH = [HealthCheck.function_scoped_fixture]
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+"
AWS_SECRETS = st.text(B64, min_size=40, max_size=40).filter(
    lambda s: re.search("[a-z]", s) and re.search("[A-Z]", s))
NAMES = st.sampled_from(["aws_secret_access_key", "AWS_SECRET_ACCESS_KEY", "secret", "api_key",
                         "password", "hf_token", "MY_SECRET"])
FORMS = st.sampled_from(["# {n} = {v}", "# {n}: {v}", "#{n}={v}", "  # pasted {v} here",
                         "# {n}:\t{v}", "# export {n}={v}"])


def book(tmp: Path) -> Path:
    """A copy of the tiny runbook and its models file in a fresh folder."""
    folder = Path(tempfile.mkdtemp(dir=tmp))
    shutil.copy(FIXTURES / "tiny.yaml", folder / "tiny.yaml")
    shutil.copy(FIXTURES / "models.yaml", folder / "models.yaml")
    return folder / "tiny.yaml"


@settings(max_examples=60, deadline=None, suppress_health_check=HEALTH)
@given(secret=AWS_SECRETS, name=NAMES, form=FORMS, at_end=st.booleans())
@example(secret="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", name="aws_secret_access_key",
         form="# {n} = {v}", at_end=False)
def test_a_secret_in_a_runbook_comment_is_not_frozen(tmp_path, secret, name, form, at_end):
    """A generated AWS secret access key in a generated comment form, at the top or after a
    value: the frozen runbook.yaml holds REDACTED, loads to the same runbook, and the
    runbook's values are untouched. Catches freeze_runbook's old redact_text pass (it hid
    `NAME=value` only: `name = value`, `name: value` and a bare key were copied). Mutant
    tried by hand: freeze_runbook back to redact_text -> the secret is in the copy."""
    path = book(tmp_path)
    comment = form.format(n=name, v=secret)
    text = path.read_text()
    text = text.replace("campaign: tiny\n", f"campaign: tiny  {comment.strip()}\n") if at_end \
        else comment.strip() + "\n" + text
    path.write_text(text)
    rb = load_runbook(path)
    out = path.parent / "out"
    out.mkdir()
    freeze_runbook(out, rb)
    frozen = (out / RUNBOOK_YAML).read_text()
    assert secret not in frozen and "REDACTED" in frozen
    (out / "models.yaml").write_text((path.parent / "models.yaml").read_text())
    again = load_runbook(out / RUNBOOK_YAML)
    assert (again.campaign, again.shape, again.timing) == (rb.campaign, rb.shape, rb.timing)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_redact_comments_keeps_git_ids_and_plain_text(text):
    """No false hiding of evidence: a 40-digit git id in a comment stays, and text with no
    comment is what redact_text makes of it."""
    from harness.io.redact import redact_text
    sha = "7c78e679fa0d258eea5371e73f5d2283b038f545"
    assert sha in redact_comments(f"# commit {sha}\n")
    if "#" not in text:
        assert redact_comments(text) == redact_text(text)


TOKENS = st.one_of(
    st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=20,
            max_size=40).map(lambda s: "hf_" + s),
    st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=20, max_size=30).map(
        lambda s: "ghp_" + s),
    st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=16, max_size=16).map(
        lambda s: "AKIA" + s))


@settings(max_examples=25, deadline=None, suppress_health_check=HEALTH)
@given(token=TOKENS, where=st.sampled_from(["org", "name"]), dry=st.booleans())
@example(token="hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", where="org", dry=True)
def test_publish_never_prints_a_token_given_as_the_repo(tmp_path, token, where, dry):
    """`publish --repo hf_<token>/ds [--dry-run]`: refused (exit 2) naming --repo, and the
    token is in no output. Catches the dry run that printed hf://datasets/<token>/ds/...
    (the fourth round's probe)."""
    repo = f"{token}/ds" if where == "org" else f"org/{token}"
    res = run_cli("publish", tmp_path, "--repo", repo, *(["--dry-run"] if dry else []))
    assert_bad_input(res, "--repo", "looks like a secret")
    assert token not in res.text


REQUIRED = {"shape": "seq, micro_batch, global_batch, ep"}


@settings(max_examples=12, deadline=None, suppress_health_check=HEALTH)
@given(empty=st.sampled_from(["", " ~", " null", " Null", "  # nothing yet"]),
       section=st.sampled_from(sorted(REQUIRED)))
def test_an_empty_required_section_is_a_clear_error(tmp_path, empty, section):
    """`shape:` with nothing under it (YAML null, in its spellings): exit 2,
    `FILE:LINE: shape: is empty: give seq, ...`, no traceback. Catches the old
    `TypeError: argument of type 'NoneType' is not iterable`."""
    path = book(tmp_path)
    text = re.sub(rf"^{section}:.*$", f"{section}:{empty}", path.read_text(), flags=re.M)
    path.write_text(text)
    line = text.splitlines().index(f"{section}:{empty}") + 1
    res = run_cli("run", path, "--dry-run", "--results", tmp_path / "r")
    assert_bad_input(res, f"{path}:{line}: {section}: is empty: give {REQUIRED[section]}")


COLLECTIONS = {  # section -> (its flow text in tiny.yaml's shape, a line to put it on)
    "shape": "{seq: 128, micro_batch: 1, global_batch: 2, ep: 2}",
    "timing": "{warmup: 1, iters: 2, trials: 2}",
    "limits": "{run_timeout_s: 60, infra_retries: 1}"}


@settings(max_examples=20, deadline=None, suppress_health_check=HEALTH)
@given(section=st.sampled_from(sorted(COLLECTIONS)),
       tag=st.sampled_from(["!!set", "!!omap", "!!pairs", "!custom", "!!python/dict",
                            "!<tag:example.com,2026:x>", "!!map"]))
def test_a_yaml_tag_on_a_collection_is_refused(tmp_path, section, tag):
    """A generated tag on a generated mapping of the runbook: refused at its line (exit 2),
    never built as if the tag were absent; `!!map`, the plain mapping's own tag, is
    accepted. Catches yamldoc building a `!!set` mapping as a dict (the fourth round's
    probe: silently ignored). Mutant tried by hand: the PLAIN_TAGS check removed -> exit 0."""
    path = book(tmp_path)
    text = path.read_text().replace(f"{section}: {COLLECTIONS[section]}",
                                    f"{section}: {tag} {COLLECTIONS[section]}")
    path.write_text(text)
    if tag == "!!map":
        assert load_runbook(path).campaign == "tiny"
        return
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith(f"{section}:"))
    with pytest.raises(BadInput) as err:
        load_runbook(path)
    assert f"{path}:{line}: {section}: a YAML tag on a mapping is not accepted" in str(err.value)
    res = run_cli("run", path, "--dry-run", "--results", tmp_path / "r")
    assert_bad_input(res, f"{path}:{line}: {section}: a YAML tag on a mapping")
