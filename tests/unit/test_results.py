"""TSV rows and writes; campaign.json; the events log (torn tails) and campaign statistics."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.results.events import (
    EventLog,
    campaign_stats,
    eta_error_at,
    read_events,
    repair_tail,
    standing_failures,
)
from harness.results.facts import CampaignFacts, read_facts, write_facts
from harness.results.layout import CAMPAIGN_JSON
from harness.results.rows import (
    ATTEMPT_COLUMNS,
    COMPARISON_COLUMNS,
    SELECTION_COLUMNS,
    TIMING_COLUMNS,
    AttemptRow,
    SelectionRow,
    TimingRow,
)
from harness.results.tables import (
    append_row,
    cell_text,
    format_row,
    read_rows,
    write_table_atomic,
)

SPEC_ATTEMPTS = ("campaign model backend purpose attempt capacity capacity_tag uniform_tokens "
                 "budget_tokens status rows malformed_rows saturated_rows peak_actual_valid_recv "
                 "required_capacity cell_dir started_utc finished_utc wall_s").split()
SPEC_SELECTION = ("campaign model backend required_capacity peak_actual_valid_recv "
                  "uniform_tokens measured_at_capacity selected_capacity selected_budget_tokens "
                  "over_provision validated validate_attempts timing_capacity "
                  "validate_seed validate_steps validate_peak headroom drop_risk_95 "
                  "predicted_drop_risk predicted_drop_risk_hi held_out").split()
SPEC_TIMING = ("campaign model backend timing_capacity budget_tokens status trials iters "
               "dispatch_ms_median dispatch_ms_p90 combine_ms_median combine_ms_p90 step_cv "
               "noise_floor_pct algbw_gbps peak_mem_bytes cell_dir launches").split()
SPEC_COMPARISON = ("campaign model backend baseline phase launches ratio_median ci_low ci_high "
                   "cv_backend cv_baseline verdict").split()


@pytest.mark.parametrize("columns, spec", [(ATTEMPT_COLUMNS, SPEC_ATTEMPTS),
                                           (SELECTION_COLUMNS, SPEC_SELECTION),
                                           (TIMING_COLUMNS, SPEC_TIMING),
                                           (COMPARISON_COLUMNS, SPEC_COMPARISON)])
def test_columns_follow_spec_order_extras_at_end(columns, spec):
    """The spec's columns first, in its order; appended ones after (the default campaign's
    golden, tests/e2e/test_default_campaign.py, pins every header as written)."""
    assert list(columns[:len(spec)]) == spec
    assert len(set(columns)) == len(columns)


def test_a_misspelt_column_fails_at_once():
    row = SelectionRow(campaign="c", model="M", backend="echo")
    with pytest.raises(TypeError, match="selected_capacty"):
        SelectionRow(campaign="c", model="M", backend="echo", selected_capacty="1.25")
    with pytest.raises(TypeError, match="selected_capacty"):
        replace(row, selected_capacty="1.25")
    with pytest.raises(TypeError):
        SelectionRow("c", "M", "echo")                              # keyword-only
    with pytest.raises(FrozenInstanceError):
        row.selected_capacity = "1.25"                              # a change is replace()
    assert replace(row, selected_capacity="1.25").selected_capacity == "1.25"


def test_a_row_prints_as_its_columns(tmp_path):
    row = TimingRow(campaign="c", model="M", backend="echo", trials=3, step_cv=0.0123456789,
                    timer="perf_counter", launches=0)
    assert format_row(TIMING_COLUMNS, row) == format_row(TIMING_COLUMNS, row.as_dict())
    write_table_atomic(tmp_path / "t.tsv", TIMING_COLUMNS, [row])
    (back,) = read_rows(tmp_path / "t.tsv")
    assert tuple(back) == TIMING_COLUMNS
    assert (back["trials"], back["step_cv"], back["launches"], back["status"]) == (
        "3", "0.012346", "0", "")
    # a recorded row (events.jsonl) reads back whatever version wrote it
    old = AttemptRow.from_record({"campaign": "c", "model": "M", "backend": "b", "wall_s": 1.5,
                                  "from_a_newer_version": 1})
    assert old.wall_s == 1.5 and old.failure_line is None
    assert list(old.as_dict()) == list(ATTEMPT_COLUMNS)


def test_campaign_facts_round_trip(tmp_path):
    facts = CampaignFacts(campaign="c", pad_multiple=64, grid="decimals-2",
                          measure_capacity="2.00", shape={"seq": 8}, models={"M": {"topk": 8}},
                          backends=[{"name": "echo"}], baseline="echo", launches=3, max_cv=0.1)
    write_facts(tmp_path, facts)
    data = json.loads((tmp_path / CAMPAIGN_JSON).read_text())
    assert list(data) == ["campaign", "pad_multiple", "grid", "measure_capacity", "shape",
                          "models", "backends", "baseline", "launches", "max_cv"]
    assert (tmp_path / CAMPAIGN_JSON).read_text() == json.dumps(data, indent=1) + "\n"
    assert read_facts(tmp_path) == facts
    (tmp_path / CAMPAIGN_JSON).write_text('{"pad_multiple": 256, "from_a_newer_version": 1}')
    assert read_facts(tmp_path) == CampaignFacts(pad_multiple=256)
    assert read_facts(tmp_path / "absent") == CampaignFacts()
    (tmp_path / CAMPAIGN_JSON).write_text("[1]")      # damaged: refused, not read as absent
    with pytest.raises(BadInput, match="campaign.json:1: must be a JSON object"):
        read_facts(tmp_path)


def test_cell_text():
    assert cell_text(None) == "" and cell_text(True) == "true" and cell_text(False) == "false"
    assert cell_text(1.0) == "1.0" and cell_text(1.1795654296875) == "1.179565"
    assert cell_text("a\tb\nc") == "a b c" and cell_text(0) == "0"


def test_append_row_writes_header_once(tmp_path):
    path = tmp_path / "a.tsv"
    append_row(path, ("x", "y"), {"x": 1, "y": None})
    append_row(path, ("x", "y"), {"x": 2, "y": True})
    assert path.read_text() == "x\ty\n1\t\n2\ttrue\n"
    assert read_rows(path) == [{"x": "1", "y": ""}, {"x": "2", "y": "true"}]
    assert read_rows(tmp_path / "none.tsv") == []


def test_write_table_atomic_replaces(tmp_path):
    path = tmp_path / "t.tsv"
    write_table_atomic(path, ("a",), [{"a": 1}, {"a": 2}])
    write_table_atomic(path, ("a",), [{"a": 3}])
    assert path.read_text() == "a\n3\n"
    assert [p.name for p in tmp_path.iterdir()] == ["t.tsv"]          # no temp files left


def test_an_unchanged_table_is_not_rewritten_and_secrets_are_read_once(tmp_path, monkeypatch):
    """The driver rewrites its derived tables after every cell: an identical one keeps its
    inode (no fsync), a changed one is replaced, and the environment's secret values are read
    once per table, not once per cell (it was 21 000 reads in a 65-run campaign)."""
    import harness.results.tables as tables
    calls = []
    real = tables.secret_values
    monkeypatch.setattr(tables, "secret_values", lambda: calls.append(1) or real())
    path = tmp_path / "t.tsv"
    rows = [{"a": i, "b": f"x{i}"} for i in range(50)]
    write_table_atomic(path, ("a", "b"), rows)
    assert len(calls) == 1
    inode = path.stat().st_ino
    write_table_atomic(path, ("a", "b"), rows)
    assert path.stat().st_ino == inode
    write_table_atomic(path, ("a", "b"), rows[:-1])
    assert path.stat().st_ino != inode
    assert path.read_text().count("\n") == 50


def test_torn_event_tail_is_cut(tmp_path):
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.append("a", x=1)
    with open(path, "a") as fh:
        fh.write('{"ev": "b", "x"')                                   # killed mid-write
    assert [e["ev"] for e in read_events(path)] == ["a"]
    repair_tail(path)
    log2 = EventLog(path)
    log2.append("c")
    assert [e["ev"] for e in read_events(path)] == ["a", "c"]
    assert all(json.loads(line) for line in path.read_text().splitlines())


def finish(t, status="ok", eta=None, wall=1.0):
    return {"ev": "cell_finish", "t": t, "status": status, "eta_s": eta, "wall_s": wall,
            "runs_left": 0, "stage": "measure"}


def run_of(t: float, status: str, capacity: str = "1.00", purpose: str = "measure") -> dict:
    """A cell_finish of one (model, backend, purpose) at `capacity`, attempt t (each attempt
    has its own cell name)."""
    return {**finish(t, status), "cell": f"M_B_{purpose}_{capacity}_a{int(t)}", "model": "M",
            "backend": "B", "purpose": purpose, "attempt": int(t), "campaign": "x",
            "capacity": capacity}


def test_a_retried_failure_no_longer_counts(tmp_path):
    """The closing line and `epcap status` count failures that still stand (issue 41): an
    unclassified run retried into an ok run is gone, as is an infra one; a crash stands until
    its cell runs again. Catches every failure ever recorded counted ('unclassified 1' after
    the retry passed)."""
    events = [{"ev": "run_start", "t": 0.0, "infra_retries": 2, "unclassified_retries": 1},
              run_of(1, "unclassified"), run_of(2, "ok"), run_of(3, "infra", "2.00"),
              run_of(4, "ok", "2.00"), run_of(5, "crash", "3.00", "validate")]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert campaign_stats(tmp_path)["failures_by_class"] == {"crash": 1}
    assert standing_failures(events) == {"crash": 1}
    assert standing_failures(events + [run_of(6, "badflag", "4.00")]) == {"crash": 1,
                                                                           "badflag": 1}
    assert standing_failures(events + [run_of(6, "badflag", "4.00"),
                                       run_of(7, "ok", "4.00")]) == {"crash": 1}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(("ok", "infra", "unclassified", "crash", "does_not_fit")),
                min_size=1, max_size=8))
def test_only_the_last_run_of_a_cell_stands_under_unlimited_retries(statuses):
    """One cell run again and again (no retry limit recorded: every retryable failure
    followed by a run was retried; a crash or does_not_fit is a result and stands): the
    retried classes count only as the last run. Without cells (each run its own), every
    failure stands."""
    events = [run_of(n, s) for n, s in enumerate(statuses)]
    want: dict[str, int] = {}
    for n, s in enumerate(statuses):
        if s in ("crash", "does_not_fit") or (s in ("infra", "unclassified")
                                              and n == len(statuses) - 1):
            want[s] = want.get(s, 0) + 1
    assert standing_failures(events) == want
    alone = [finish(n, s) for n, s in enumerate(statuses)]
    counts: dict[str, int] = {}
    for s in statuses:
        if s != "ok":
            counts[s] = counts.get(s, 0) + 1
    assert standing_failures(alone) == counts


def test_campaign_stats(tmp_path):
    events = [{"ev": "campaign_start", "t": 100.0}, {"ev": "run_start", "t": 100.0},
              finish(110, eta=30), finish(120, status="does_not_fit", eta=20),
              finish(130, status="infra", eta=10), finish(140, eta=0),
              {"ev": "campaign_done", "t": 140.0, "stage": "done"}]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    stats = campaign_stats(tmp_path)
    assert stats["wall_span_s"] == 40.0 and stats["busy_s"] == 4.0
    assert stats["runs_done"] == 4 and stats["runs_left"] == 0 and stats["stage"] == "done"
    assert stats["failures_by_class"] == {"does_not_fit": 1, "infra": 1}
    assert stats["eta_error"] == 1.0                   # at t=110 it said 30 s; 30 s were left
    assert eta_error_at(events) == {"25%": 1.0, "50%": 1.0, "75%": 1.0}


def test_eta_error_detects_a_wrong_estimate(tmp_path):
    events = [{"ev": "run_start", "t": 0.0}, finish(10, eta=60), finish(20, eta=10),
              finish(30, eta=5), finish(40, eta=0), {"ev": "campaign_done", "t": 40.0}]
    assert eta_error_at(events)["25%"] == 2.0           # said 60 s, 30 s were left
    assert eta_error_at(events)["50%"] == 0.5


def test_tsv_rebuilt_from_events_after_a_torn_append(tmp_path):
    """Killed after the cell_finish event but before (or during) the TSV append: the resume
    rebuilds the attempts TSV from the events, one row per finished run."""
    from harness.campaign.driver import Campaign
    from harness.campaign.progress import ProgressView
    from harness.launch.local import LocalLauncher
    from harness.pipeline.decisions import Context
    from harness.runbook.load import load_runbook
    rb = load_runbook(Path(__file__).resolve().parents[2] / "tests/fixtures/runbooks/reduced.yaml")
    rows = [{"campaign": "reduced", "model": "M", "backend": "echo", "purpose": "measure",
             "attempt": a, "status": "ok"} for a in (1, 2)]
    log = EventLog(tmp_path / "events.jsonl")
    for row in rows:
        log.append("cell_finish", cell=f"c{row['attempt']}", campaign="reduced", model="M",
                   backend="echo", purpose="measure", capacity="2.00",
                   attempt=row["attempt"], status="ok", row=row)
    append_row(tmp_path / "capacity_attempts.tsv", ATTEMPT_COLUMNS, rows[0])
    append_row(tmp_path / "capacity_attempts.tsv", ATTEMPT_COLUMNS, rows[0])  # duplicated
    camp = Campaign(rb, tmp_path, LocalLauncher(), Context(rb, (), None),
                    ProgressView(enabled=False), ["epcap"])
    camp.write_tables(derived=False)
    got = read_rows(tmp_path / "capacity_attempts.tsv")
    assert [r["attempt"] for r in got] == ["1", "2"]


CELL_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3),
                        st.floats(-3, 3, allow_nan=False), st.sampled_from(["1", "true", "x"]),
                        st.lists(st.integers(0, 2), max_size=2))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(CELL_VALUES, min_size=3, max_size=3), min_size=1, max_size=12),
       secret=st.sampled_from(["", "s3cretvalue42x"]))
def test_a_rows_line_is_the_same_formatted_again_or_first(rows, secret):
    """format_row keeps the lines of rows it formatted before (the driver rewrites its
    tables after every run): each line must be what formatting it fresh gives, whatever
    came before (True and 1, 1 and 1.0, a secret set in between). Seen red: with the cells
    as the key without their types, True after 1 printed '1'; without the secrets in the
    key, a line formatted before its value became a secret kept it."""
    from harness.results.tables import cell_text, format_row
    cols = ("a", "b", "c")
    holder = [secret or "x", *rows[0][1:]]
    with pytest.MonkeyPatch.context() as mp:
        format_row(cols, dict(zip(cols, holder, strict=True)))     # before it is a secret
        if secret:
            mp.setenv("EPCAP_TEST_TOKEN", secret)
        for values in rows + [holder]:
            row = dict(zip(cols, values, strict=True))
            fresh = "\t".join(cell_text(v) for v in values) + "\n"
            assert format_row(cols, row) == fresh
            assert secret == "" or secret not in format_row(cols, row)
