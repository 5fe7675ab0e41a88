"""Mechanism: identity and control fields (campaign, model, backend, cell, paths, stage,
status) are never redacted, so resume and orphan search match them; a token-shaped name or
path is refused at load instead; redaction applies to free text only."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.io.redact import REDACTED, TOKEN_PATTERN, redact_obj
from harness.runbook.load import load_runbook

from .conftest import TOKEN, run_cli
from .test_mech_path_components import _book

ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
TOKEN_SHAPED = st.one_of(
    st.builds("hf_{}".format, st.text(ALNUM, min_size=20, max_size=30)),
    st.builds("ghp_{}".format, st.text(ALNUM, min_size=20, max_size=30)),
    st.builds("AKIA{}".format, st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=16,
                                       max_size=16)),
    st.builds("sk-{}".format, st.text(ALNUM, min_size=20, max_size=30)),
)
# the fields resume, orphan search and the tables match byte for byte (a subset of
# harness.io.redact.IDENTITY_FIELDS, written here so the test also runs on older code)
IDENTITY = ("campaign", "model", "backend", "cell", "cell_dir", "stage", "status",
            "results_dir", "path")
ANY_TEXT = st.one_of(TOKEN_SHAPED, st.text(max_size=40))
FREE_SECRET = st.one_of(TOKEN_SHAPED.map("error: flag --x={} rejected".format),
                        st.builds("--api-key={}".format, st.text(ALNUM, min_size=8,
                                                                max_size=20)))


@settings(max_examples=150, deadline=None)
@given(identity=st.dictionaries(st.sampled_from(IDENTITY), ANY_TEXT,
                                min_size=1),
       free=FREE_SECRET)
@example(identity={"model": TOKEN, "cell_dir": f"/r/{TOKEN}/cells/x"}, free=f"saw {TOKEN}")
def test_identity_fields_kept_free_text_redacted(identity, free):
    record = {**identity, "message": free, "row": {**identity, "reason": free}}
    out = redact_obj(record, [])
    for key, value in identity.items():
        assert out[key] == value and out["row"][key] == value, key
    for text in (out["message"], out["row"]["reason"]):
        assert REDACTED in text and not TOKEN_PATTERN.search(text)


SETTINGS = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(name=TOKEN_SHAPED, role=st.sampled_from(["model", "backend"]))
@example(name=TOKEN, role="model")
def test_token_shaped_names_refused_at_load(tmp_path, name, role):
    book = _book(tmp_path, **{role: name})
    try:
        load_runbook(book)
    except BadInput as exc:
        assert "looks like a secret" in str(exc) and "tiny.yaml:" in str(exc), str(exc)
        assert name not in str(exc)
    else:
        raise AssertionError(f"token-shaped {role} name accepted")


@SETTINGS
@given(name=TOKEN_SHAPED)
def test_token_shaped_campaign_refused_at_load(tmp_path, name):
    book = _book(tmp_path)
    book.write_text(book.read_text().replace("campaign: tiny", f"campaign: {json.dumps(name)}"))
    try:
        load_runbook(book)
    except BadInput as exc:
        assert "looks like a secret" in str(exc), str(exc)
    else:
        raise AssertionError("token-shaped campaign name accepted")


@SETTINGS
@given(secret=TOKEN_SHAPED)
def test_run_refuses_a_token_shaped_results_path(tmp_path, secret):
    book = _book(tmp_path)
    results = tmp_path / secret / "results"
    res = run_cli("run", book, "--results", results, "--dry-run", timeout_s=20)
    assert res.code == 2, res.text
    assert res.err.startswith("epcap: error: --results: looks like a secret"), res.err
    assert secret not in res.text
    assert not (tmp_path / secret).exists()
