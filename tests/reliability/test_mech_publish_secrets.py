"""Mechanism: `epcap publish` refuses every file the redaction pass would change, not only
token shapes: `--api-key=X`, `--hf-token X`, `WANDB_API_KEY=X`, secret environment values,
anywhere in a file (across the scan's block boundary too) or in its name."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import harness.publish as publish
from harness.io.redact import redact_text

VALUE = st.text(alphabet="abcdefghijkLMNOP0123456789_-", min_size=8, max_size=24)
SECRET_FORMS = st.one_of(
    st.builds("--api-key={}".format, VALUE),
    st.builds("--hf-token {}".format, VALUE),
    st.builds("--wandb_api_key={}".format, VALUE),
    st.builds("WANDB_API_KEY={}".format, VALUE),
    st.builds("HF_TOKEN='{}'".format, VALUE),
    st.builds("DB_PASSWORD={}".format, VALUE),
    st.builds("hf_{}".format, st.text(alphabet="abcXYZ0123456789", min_size=20, max_size=30)),
)
NOISE = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(publish, "SCAN_BLOCK", 97)   # a secret often spans two blocks


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=NOISE, secret=SECRET_FORMS, after=NOISE)
@example(before="rank0: unrecognized arguments: ", secret="--api-key=abcdefgh1234", after="\n")
@example(before="env: ", secret="WANDB_API_KEY=0123456789abcdef", after="\n")
def test_publish_refuses_a_file_holding_any_secret_form(tmp_path, before, secret, after):
    log = tmp_path / "cells" / "c" / "rank0.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(before + "\n" + secret + "\n" + after, encoding="utf-8")
    assert publish.files_with_secrets(tmp_path, ["cells/c/rank0.log"]) == ["cells/c/rank0.log"]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(NOISE, st.lists(st.one_of(NOISE, SECRET_FORMS), max_size=4).map(" ".join)))
def test_publish_refuses_exactly_what_redaction_would_change(tmp_path, text):
    path = tmp_path / "notes.txt"
    path.write_text(text, encoding="utf-8")
    flagged = publish.files_with_secrets(tmp_path, ["notes.txt"]) == ["notes.txt"]
    assert flagged == (redact_text(text) != text), text


def test_publish_refuses_a_secret_in_a_file_name(tmp_path):
    name = "WANDB_API_KEY=abcdefgh1234.log"
    (tmp_path / name).write_text("clean\n")
    assert publish.files_with_secrets(tmp_path, [name]) == [name]


# The bytes of the default campaign's fig3_demand_QWEN2_57B.png that publish refused (CI,
# 2026-12-07): `user:PASSWORD@host` matched across control characters of compressed data.
FIGURE_NOISE = (b"\xfc\x9c&\"*\n\x9f]r:y\xf2d\x04\x07\x07K\x8f[\xb7n\x15wHDJ\xa9\xd3\xdc"
                b"\x01U\x9c+@GW\x0bu\x9a;\xa0\x82]9\x00@I=")      # its bytes 56128-56176
BINARY_NOISE = st.binary(min_size=1, max_size=400).map(lambda b: b + b"\x00")
PRINTED_SECRETS = st.sampled_from([
    b"--api-key=Zk39abcdefghij", b"WANDB_API_KEY=0123456789abcdef",
    b"hf_" + b"a1B2" * 9, b"alice:PASSWORD123xyz@host.example.org/repo",
    b"Authorization: Bearer Qq9Zk39abcdefghijkl"])


def test_a_figures_compressed_bytes_are_not_a_secret():
    """Seen red: find_secrets read the figure's bytes as text and refused it
    ('secret-option', the scp-like credential rule), so `epcap publish` of the default
    campaign refused its own figure."""
    from harness.io.redact import find_secrets
    assert find_secrets(FIGURE_NOISE, []) == []


@settings(max_examples=150, deadline=None)
@given(before=BINARY_NOISE, after=BINARY_NOISE, secret=PRINTED_SECRETS)
def test_a_secret_printed_inside_binary_data_is_still_found(before, after, secret):
    """A binary file is scanned in its printable runs: a secret written into it as text
    (a PNG text chunk, a log inside an archive) is found whatever bytes surround it."""
    from harness.io.redact import find_secrets
    assert find_secrets(before + b"\x00" + secret + b"\x00" + after, [])
