"""Mechanism: every integer parsed from untrusted text is bounded in digits before int()
(harness.io.bounds.parse_int / json_loads, MAX_INT_DIGITS). A number of any length, in any
place a reader converts one (an overflow report, a progress line, a dispatch row, a trace,
a placement file, cell.json, a cell directory's name), gives a clean answer or a clean
refusal, never Python's int-string ValueError."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.errors import BadInput

DIGITS = st.one_of(st.integers(1, 40), st.integers(4200, 6000)).flatmap(
    lambda n: st.builds(lambda d: d + "9" * (n - 1), st.sampled_from("123456789")))
LOG_TEMPLATES = [
    "Paged stash: token drop during MoE token dispatch (over budget) on 1 rank(s). "
    "Peak receive capacity needed was {n} tokens per rank.",
    "actual recv tokens {n} > max_recv_tokens_per_rank 4",
    " iteration {n}/ 10 | consumed samples: 8 |",
    "[MOE_DROP_DEBUG][dispatch] rank=0 layer=1 iter={n} budget=4 actual_valid_recv={n} "
    "expected_recv={n} pre_balance_recv={n}",
    "[rank{n}]: RuntimeError: CUDA error: an illegal memory access was encountered",
    "{n}: [default0]: Traceback (most recent call last):",
]
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(digits=DIGITS, template=st.sampled_from(LOG_TEMPLATES), exit_code=st.sampled_from([0, 1]))
@example(digits="9" * 5000, template=LOG_TEMPLATES[0], exit_code=1)
@example(digits="9" * 5000, template=LOG_TEMPLATES[2], exit_code=1)
def test_taxonomy_and_report_read_any_number_length(tmp_path, digits, template, exit_code):
    from harness.report.sections.balance import _cell_rows
    from harness.taxonomy.judge import judge_run
    log = tmp_path / "rank0.log"
    log.write_text(template.format(n=digits) + "\n")
    verdict = judge_run(exit_code, "completed" if exit_code == 0 else "failed", [log], None)
    assert verdict.status
    demand = verdict.outcome.demand if hasattr(verdict.outcome, "demand") else None
    if isinstance(demand, int):
        assert len(str(demand)) <= 30
    for row in _cell_rows(tmp_path):
        assert all(len(str(v)) <= 31 for v in row.values())


@SETTINGS
@given(digits=DIGITS, key=st.sampled_from(["experts", "topk", "tokens", "ep", "format"]))
@example(digits="9" * 5000, key="experts")
def test_trace_reader_refuses_long_integers_cleanly(tmp_path, digits, key):
    from harness.loadmodel.traces import TraceError, read_trace
    trace = tmp_path / "trace.jsonl"
    head = {"format": 1, "experts": 8, "topk": 2, "ep": 2}
    head[key] = 0
    trace.write_text(json.dumps(head).replace(f'"{key}": 0', f'"{key}": {digits}') + "\n"
                     + json.dumps({"layer": 0, "step": 0, "ids": [[int(digits[:3]) % 8, 1]]})
                     + "\n")
    try:
        read_trace([trace])
    except TraceError as exc:
        assert len(str(exc)) < 600
    except BadInput:
        pass


@SETTINGS
@given(digits=DIGITS, where=st.sampled_from(["ep", "rank"]))
@example(digits="9" * 5000, where="ep")
def test_placement_file_refuses_long_integers_cleanly(tmp_path, digits, where):
    from harness.forecast.cli import placement_file
    path = tmp_path / "placement.txt"
    ep, ranks = ("2", ["0", "0", "1", "1"])
    if where == "ep":
        ep = digits
    else:
        ranks[0] = digits
    path.write_text(f"{ep}: {' '.join(ranks)}\n")
    try:
        homes = placement_file(str(path), 4)
    except BadInput as exc:
        assert "placement" in str(exc)
    else:
        assert all(len(str(k)) <= 30 for k in homes)


@SETTINGS
@given(digits=DIGITS)
@example(digits="9" * 5000)
def test_cell_json_and_cell_names_with_long_integers(tmp_path, digits):
    from harness.results.layout import parse_cell_name
    from harness.taxonomy.cli import read_cell_json
    (tmp_path / "cell.json").write_text('{"exit_code": ' + digits + "}")
    try:
        doc = read_cell_json(tmp_path)
    except BadInput as exc:
        assert "cell.json" in str(exc)
    else:
        assert len(str(doc["exit_code"])) <= 30
    cell = parse_cell_name(f"M__b__measure__cap2p00__a{digits}")
    assert cell is None or len(str(cell.attempt)) <= 40


def test_parse_int_bounds_before_converting():
    from harness.io.bounds import MAX_INT_DIGITS, parse_int
    assert parse_int("9" * MAX_INT_DIGITS) == int("9" * MAX_INT_DIGITS)
    assert parse_int("-12") == -12
    for bad in ["9" * (MAX_INT_DIGITS + 1), "9" * 5000, "", "1_000", "0x10", " 1"]:
        assert parse_int(bad) is None, bad


@pytest.mark.parametrize("text", ["9" * 5000, "-" + "9" * 5000])
def test_json_loads_bounds_integers(text):
    from harness.io.bounds import json_loads
    with pytest.raises(json.JSONDecodeError, match="digits"):
        json_loads('{"a": ' + text + "}")
