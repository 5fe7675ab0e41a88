"""Mechanism: campaign.json crosses the same typed boundary as every other input
(harness.results.facts.read_facts: bounded read, bounds.json_strict, check_facts): a
duplicated key, NaN, `1e9999`, a wrong kind, an out-of-range number or 200,000 nested `[`
is refused naming file, line and field; `epcap report` exits 2 and `epcap audit` does not
say VALID (runbook-altered undecided, naming campaign.json)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.io.bounds import GENERIC_MAX, json_strict, parse_number
from harness.results.facts import CampaignFacts, read_facts

from .conftest import assert_bad_input, run_cli

REPO = Path(__file__).resolve().parents[2]
SOUND = st.builds(
    CampaignFacts, campaign=st.text(max_size=10), pad_multiple=st.integers(1, 1 << 16),
    grid=st.sampled_from(["exact", "decimals-2"]), measure_capacity=st.sampled_from(["2.00"]),
    shape=st.dictionaries(st.text(max_size=5), st.integers(0, 10**6), max_size=4),
    models=st.just({"M": {"topk": 8}}), backends=st.just([{"name": "echo"}]),
    baseline=st.none() | st.text(max_size=8), launches=st.integers(0, 100),
    max_cv=st.floats(0, 10, allow_nan=False))


def hostile(doc: str, how: str, n: int) -> tuple[str, str]:
    """One hostile edit of a sound campaign.json text; returns (text, a word the refusal
    must say)."""
    body = doc.rstrip().rstrip("}")
    if how == "duplicate":
        return body + ', "campaign": "other"}', "duplicated key"
    if how == "nested":
        return body + ', "extra": ' + "[" * n + "]" * n + "}", "nested too deeply"
    if how == "nonfinite":
        bad = ["1e9999", "-1e400", "NaN", "Infinity"][n % 4]
        return doc.replace('"max_cv": ', f'"max_cv": {bad}, "_was": ', 1), "not"
    if how == "kind":
        return doc.replace('"launches": ', '"launches": ' + ['"3"', "true", "[1]", "2.5"][n % 4]
                           + ', "_was": ', 1), "launches"
    if how == "range":
        return doc.replace('"pad_multiple": ', '"pad_multiple": ' + str(10**6 + n)
                           + ', "_was": ', 1), "pad_multiple"
    return "[" + doc + "]", "JSON object"


HOW = ["duplicate", "nested", "nonfinite", "kind", "range", "toplevel"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(facts=SOUND, how=st.sampled_from(HOW), n=st.integers(0, 400))
@example(facts=CampaignFacts(campaign="c", max_cv=0.25), how="nested", n=200_000)
def test_campaign_json_is_read_through_its_typed_boundary(tmp_path, facts, how, n):
    """A sound document reads back as written; each generated hostile edit is BadInput naming
    campaign.json (and its line and field where it has one). Catches the old lenient reader
    (a duplicated key, NaN or a list of 200,000 levels read as if absent, 1e9999 as inf).
    Mutant tried by hand: read_facts back to json_loads without check_facts -> fails."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    doc = facts.to_json()
    (folder / "campaign.json").write_text(doc)
    assert read_facts(folder) == CampaignFacts.from_json(json.loads(doc))
    if how == "nested":
        n = 2_000 + n * 500 if n < 200_000 else n      # beyond the recursion limit
    text, word = hostile(doc, how, n)
    (folder / "campaign.json").write_text(text)
    with pytest.raises(BadInput) as err:
        read_facts(folder)
    message = str(err.value)
    assert "campaign.json" in message and word in message, message
    assert "\n" not in message and len(message) < 400


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                 st.sampled_from(["1e9999", "-1e9999", "1e15", "1.0000001e15", "nan", "inf",
                                  "1" * 401]),
                 st.from_regex(r"-?[0-9]{1,30}(\.[0-9]{0,5})?([eE][-+]?[0-9]{1,4})?",
                               fullmatch=True)))
def test_parse_number_refuses_non_finite_and_out_of_range(text):
    """The one number parser: a value comes back only when finite and within GENERIC_MAX;
    everything else is ValueError. Catches a parser that takes `1e9999` (inf) or `nan` as a
    number (the fourth round's `trials: 1e9999`)."""
    try:
        value = parse_number(text)
    except ValueError:
        try:
            raw = float(text)
        except ValueError:
            return
        assert not (abs(raw) <= GENERIC_MAX) or len(text) > 400
        return
    assert abs(value) <= GENERIC_MAX and value == float(text)


@given(st.sampled_from(['{"a": 1e9999}', '{"a": NaN}', '{"a": -Infinity}', '{"a": 1, "a": 2}',
                        '{"b": {"a": 1, "a": 1}}', '[{"x": 1e400}]']))
def test_json_strict_refuses_what_json_loads_accepts(text):
    """Each of these decodes with json.loads (inf, nan, the last duplicate wins); the strict
    decoder refuses every one."""
    json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        json_strict(text)


@pytest.fixture(scope="module")
def harness_upload(tmp_path_factory) -> Path:
    """The shared reduced campaign run for real (corpus.harness_campaign, built once per
    session and shared with the audit tests): it audits VALID."""
    sys.path.insert(0, str(REPO / "tests" / "fixtures" / "uploads"))
    import corpus
    return corpus.harness_campaign(tmp_path_factory.getbasetemp())


@pytest.mark.slow
@pytest.mark.parametrize("how", ["duplicate", "nested", "nonfinite"])
def test_a_hostile_campaign_json_is_never_valid(harness_upload, tmp_path, how):
    """The three probes of the fourth round on the real campaign: the audit (which never
    read campaign.json) now says UNKNOWN naming it, and `epcap report` exits 2 naming it.
    On the code before: VALID, and the report read it as absent."""
    sys.path.insert(0, str(REPO / "tests" / "fixtures" / "uploads"))
    import corpus
    up = corpus.link_copy(harness_upload, tmp_path / "u")
    doc = (harness_upload / "campaign.json").read_text()
    text, word = hostile(doc, how, 200_000)
    corpus.replace_file(up / "campaign.json", text.encode())
    res = run_cli("audit", up, "--json")
    (upload,) = json.loads(res.out)["uploads"]
    assert upload["verdict"] != "VALID"
    assert any("campaign.json" in w and word in w for w in upload["why"]), upload["why"]
    assert_bad_input(run_cli("report", up, "--out", tmp_path / "r"), "campaign.json", word)


def timing_row(**values: str) -> dict:
    """One plausible timing.tsv row (every column the report needs)."""
    from harness.report.inputs import NEED_TIMING
    row = dict.fromkeys(NEED_TIMING, "1")
    row.update(model="M", backend="echo", status="ok", timing_capacity="1.25",
               cell_dir="cells/x", **values)
    return row


HOSTILE_COUNTS = st.one_of(
    st.sampled_from(["1e9999", "inf", "nan", "-1", "2.5", "0x10", "1_000", "\uff11", "3e2",
                     "9" * 31, "+-1", "1e3"]),
    st.integers(10**16, 10**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr))
HOSTILE_NUMBERS = st.sampled_from(["1e9999", "-1e400", "nan", "inf", "1e16", "NaN", "Infinity"])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=st.sampled_from(["trials", "iters", "budget_tokens"]), value=HOSTILE_COUNTS,
       float_column=st.sampled_from(["dispatch_ms_median", "step_cv", "algbw_gbps"]),
       number=HOSTILE_NUMBERS, which=st.booleans())
# found by the generator (2026-12-06): a negative slot count was printed as written
@example(column="budget_tokens", value="-1", float_column="dispatch_ms_median", number="nan",
         which=True)
def test_report_refuses_counts_and_numbers_out_of_range(tmp_path, column, value, float_column,
                                                        number, which):
    """`trials: 1e9999` in timing.tsv (the fourth round's probe, printed by the report as
    written) and a generated non-finite or out-of-range number: `epcap report` exits 2 naming
    timing.tsv, line 2 and the field. Mutant tried by hand: read_tsv without check_counts ->
    exit 0 with 1e9999 in the timing table."""
    from harness.report.inputs import NEED_TIMING
    from harness.results.rows import ATTEMPT_COLUMNS
    if column in ("trials", "iters") and value.isdigit() and int(value) <= 1000:
        return                                            # a real count, in range
    res = Path(tempfile.mkdtemp(dir=tmp_path))
    (res / "capacity_attempts.tsv").write_text("\t".join(ATTEMPT_COLUMNS) + "\n")
    row = timing_row(**({column: value} if which else {float_column: number}))
    (res / "timing.tsv").write_text("\t".join(NEED_TIMING) + "\n"
                                    + "\t".join(row[c] for c in NEED_TIMING) + "\n")
    out = run_cli("report", res)
    assert_bad_input(out, "timing.tsv:2: ", f"{column if which else float_column}: ")
