"""One boundary per kind of input (harness/io/boundary/): hostile values for every field of
every input kind -- NUL, lone surrogates, control characters, confusables, NaN, inf, huge,
negative, wrong types, duplicates -- each end in BadInput naming file, line and field (exit
2 through the CLI), never a traceback, never a hang. Each case here failed before its
boundary existed (runbook strings gave `ValueError: embedded null byte`, events gave
tracebacks in `status`, `forecast --micro-batch 10**23` asserted, `audit --pad-multiple
10**23` never returned)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.io.boundary import events as ev_boundary
from harness.io.boundary.text import text_problem
from harness.io.boundary.values import int_list
from harness.results.events import read_events
from harness.runbook.load import load_runbook

from .conftest import FIXTURES, assert_bad_input, run_cli

HUGE = 10**15
BACKEND = "options: {launch: single}"

# -- runbook values ----------------------------------------------------------------------------
# (what to replace, what to put instead, the field the error must name); every string field a
# path or an argv reaches, and the numbers of a backend's options that had no range
STRING_FIELDS = [
    ("models_file: models.yaml", 'models_file: "models{}.yaml"', "models_file"),
    ("seed: 1234", 'seed: 1234\nrepositories: {{epcap: "/tmp{}x"}}', "repositories.epcap"),
    ("seed: 1234", 'seed: 1234\npaths: {{megatron: "/m{}x"}}', "paths.megatron"),
    (BACKEND, 'flags: ["--x{}"], options: {{launch: single}}', "backends[0].flags[0]"),
    (BACKEND, 'options: {{launch: single, trace: "a{}b"}}', "backends[0].options.trace"),
    (BACKEND, 'options: {{launch: single, record_trace: "a{}b"}}',
     "backends[0].options.record_trace"),
    ("campaign: tiny", 'campaign: "ti{}ny"', "campaign"),
]
HOSTILE_CHARS = ["\\0", "\\ud800", "\\x1b", "\\x07", "\\x7f"]


def book_with(tmp_path: Path, old: str, new: str) -> Path:
    """The tiny runbook and its models file with one edit, in a fresh folder."""
    folder = tmp_path / "book"
    folder.mkdir(exist_ok=True)
    (folder / "models.yaml").write_bytes((FIXTURES / "models.yaml").read_bytes())
    text = (FIXTURES / "tiny.yaml").read_text()
    assert old in text, old
    (folder / "tiny.yaml").write_text(text.replace(old, new, 1))
    return folder / "tiny.yaml"


def refused_at(book: Path, field: str) -> BadInput:
    """load_runbook refuses with a BadInput naming the runbook, a line and `field`."""
    with pytest.raises(BadInput) as info:
        load_runbook(book)
    exc = info.value
    assert exc.path == str(book) and exc.line is not None, str(exc)
    assert exc.field == field, (exc.field, str(exc))
    return exc


@pytest.mark.parametrize("old,new,field", STRING_FIELDS, ids=[f for *_, f in STRING_FIELDS])
def test_nul_in_a_runbook_string_is_exit_2_at_its_line(tmp_path, old, new, field):
    book = book_with(tmp_path, old, new.format("\\0"))
    res = run_cli("run", book, "--results", tmp_path / "results", "--dry-run", timeout_s=20)
    assert_bad_input(res, f"{book}:", f"{field}: holds a NUL byte")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("char", HOSTILE_CHARS)
@pytest.mark.parametrize("old,new,field", STRING_FIELDS, ids=[f for *_, f in STRING_FIELDS])
def test_every_string_field_refuses_every_hostile_character(tmp_path, old, new, field, char):
    refused_at(book_with(tmp_path, old, new.format(char)), field)


@pytest.mark.parametrize("option", ["pg_timeout_s", "threads", "extra_dispatch_passes"])
@pytest.mark.parametrize("value", [HUGE, -1, ".nan", ".inf", "-.inf", 10**30])
def test_backend_option_numbers_are_bounded_at_load(tmp_path, option, value):
    book = book_with(tmp_path, BACKEND, f"options: {{launch: single, {option}: {value}}}")
    refused_at(book, f"backends[0].options.{option}")


def test_pg_timeout_of_10_to_15_is_exit_2_not_a_canary_crash(tmp_path):
    book = book_with(tmp_path, BACKEND, f"options: {{launch: single, pg_timeout_s: {HUGE}}}")
    res = run_cli("run", book, "--results", tmp_path / "r", timeout_s=20)
    assert_bad_input(res, "backends[0].options.pg_timeout_s: must be in [1, 604800]")


CONFUSABLES = ["ｔｉｎｙ", "tіny", "tiny\u200b", "ti\u202eny"]      # fullwidth, Cyrillic і, ZWSP, RLO


@pytest.mark.parametrize("name", CONFUSABLES)
def test_confusable_names_are_refused_as_path_components(tmp_path, name):
    refused_at(book_with(tmp_path, "campaign: tiny", f'campaign: "{name}"'), "campaign")


def test_duplicate_keys_are_refused_at_their_line(tmp_path):
    book = book_with(tmp_path, "seed: 1234", "seed: 1234\nseed: 99")
    exc = refused_at(book, "seed")
    assert "duplicate key" in str(exc)


@settings(max_examples=150, deadline=3000,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(STRING_FIELDS),
       text=st.text(alphabet=st.characters(codec=None, categories=("Cc", "Cs")), min_size=1,
                    max_size=4))
def test_fuzz_runbook_strings(tmp_path, case, text):
    """Any control character or surrogate in any path-bearing string: BadInput at its line."""
    old, new, field = case
    escaped = "".join(ch if ch in "\t\n\r" else f"\\u{ord(ch):04x}" for ch in text)
    if text_problem(text) is None:          # tab / newline alone: acceptable text
        return
    refused_at(book_with(tmp_path, old, new.format(escaped)), field)


# -- events.jsonl --------------------------------------------------------------------------------
START = {"ev": "campaign_start", "t": 1.0, "campaign": "tiny"}
FINISH = {"ev": "cell_finish", "t": 3.0, "cell": "M__echo__measure__cap2p00__a1",
          "campaign": "tiny", "model": "M", "backend": "echo", "purpose": "measure",
          "capacity": "2.00", "attempt": 1, "status": "ok", "eta_s": 5.0, "runs_left": 2,
          "wall_s": 1.0, "span_s": 1.0}
HOSTILE_NUMBERS = [float("nan"), float("inf"), -1.0, 10.0**30, "soon", [], {}, True, None]


def write_log(root: Path, *records: dict | bytes) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, bytes) else json.dumps(r).encode() for r in records]
    (root / "events.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return root


@pytest.mark.parametrize("field,value", [("t", float("nan")), ("eta_s", "soon"),
                                         ("runs_left", -5), ("wall_s", float("inf")),
                                         ("attempt", "one"), ("span_s", 10.0**30)])
def test_status_on_a_hostile_event_field_is_exit_2_naming_it(tmp_path, field, value):
    root = write_log(tmp_path / "c", START, {**FINISH, field: value})
    for argv in (("status", root), ("status", root, "--json")):
        res = run_cli(*argv, timeout_s=10)
        assert_bad_input(res, f"{root / 'events.jsonl'}:2: {field}:")


def test_run_on_a_hostile_event_is_exit_2_naming_it(tiny, tmp_path, fake_launcher):
    results = tmp_path / "r"
    assert run_cli("run", tiny, "--results", results, "--until", "measure",
                   timeout_s=90).code == 0
    log = results / "tiny" / "events.jsonl"
    lines = log.read_bytes().splitlines()
    record = json.loads(lines[-1])
    record["t"] = float("nan")
    log.write_bytes(b"\n".join([*lines[:-1], json.dumps(record).encode()]) + b"\n")
    res = run_cli("run", tiny, "--results", results, timeout_s=30)
    assert_bad_input(res, f"{log}:{len(lines)}: t:")


@settings(max_examples=300, deadline=2000,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(ev_boundary.FIELDS)),
       value=st.one_of(st.sampled_from(HOSTILE_NUMBERS), st.integers(), st.text(max_size=4),
                       st.floats(), st.lists(st.integers(), max_size=2)))
def test_fuzz_every_event_field(tmp_path, field, value):
    """A value that breaks a field's declaration is BadInput at that line and field; one that
    keeps it is read back unchanged."""
    root = tmp_path / "fuzz"
    write_log(root, START, {**FINISH, field: value})
    why = ev_boundary.field_problem(field, value)
    if why is None:                     # an unknown event name is kept, as a newer log's
        events = read_events(root / "events.jsonl")
        assert len(events) == 2
        return
    with pytest.raises(BadInput) as info:
        read_events(root / "events.jsonl")
    assert info.value.line == 2 and info.value.field == field, str(info.value)


def test_duplicate_keys_in_an_event_are_refused(tmp_path):
    root = write_log(tmp_path / "c", START, b'{"ev": "checkpoint", "t": 2.0, "t": "x"}')
    with pytest.raises(BadInput) as info:
        read_events(root / "events.jsonl")
    assert (info.value.line, info.value.field) == (2, "t") and "duplicate" in str(info.value)


# -- command-line values -------------------------------------------------------------------------
@pytest.mark.parametrize("argv,field", [
    (("forecast", "TRACE", "--micro-batch", str(10**23)), "--micro-batch"),
    (("forecast", "TRACE", "--ep", str(10**23)), "--ep"),
    (("forecast", "TRACE", "--ep", "8,-1"), "--ep"),
    (("forecast", "TRACE", "--experts", str(10**23)), "--experts"),
    (("forecast", "TRACE", "--seq", str(10**23)), "--seq"),
    (("forecast", "TRACE", "--pad-multiple", str(10**23)), "--pad-multiple"),
    (("audit", "TARGET", "--pad-multiple", str(10**23)), "--pad-multiple"),
])
def test_huge_cli_values_are_exit_2_quickly(tmp_path, argv, field):
    trace = tmp_path / "t.jsonl"
    trace.write_text("{}\n")
    argv = tuple(str(trace) if a == "TRACE" else str(tmp_path) if a == "TARGET" else a
                 for a in argv)
    res = run_cli(*argv, timeout_s=10)
    assert_bad_input(res, f"{field}:")


@settings(max_examples=200, deadline=1000)
@given(text=st.one_of(st.text(max_size=30), st.lists(st.integers(), max_size=5).map(
    lambda xs: ",".join(map(str, xs)))))
def test_fuzz_int_lists(text):
    """--ep / --micro-batch text: a list within range, or BadInput naming the option."""
    try:
        values = int_list(text, "--ep", "ep")
    except BadInput as exc:
        assert exc.field == "--ep"
        return
    assert values and all(1 <= v <= 4096 for v in values)


def test_a_nan_number_is_never_within_range():
    assert ev_boundary.field_problem("eta_s", math.nan) is not None
    assert ev_boundary.field_problem("eta_s", None) is None
    assert ev_boundary.field_problem("t", None) is not None


# -- runbook paths ---------------------------------------------------------------------------------
def test_relative_option_paths_resolve_against_the_runbook_folder(tmp_path, monkeypatch):
    book = book_with(tmp_path, BACKEND,
                     "options: {launch: single, record_trace: out/rt.jsonl, trace: ../t.jsonl}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)              # where epcap is started must not matter
    opts = load_runbook(Path(os.path.relpath(book, elsewhere))).backends[0].options
    assert opts.record_trace == str(book.parent / "out" / "rt.jsonl")   # before: "out/rt.jsonl"
    assert opts.trace == str(tmp_path / "t.jsonl")


def test_a_path_outside_the_results_directory_is_refused(tmp_path):
    from harness.io.boundary.paths import check_under, lies_under

    root = tmp_path / "results"
    (root / "tiny").mkdir(parents=True)
    (root / "tiny" / "cells").symlink_to(tmp_path)
    assert lies_under(root / "tiny" / "x", root)
    assert not lies_under(root / "tiny" / "cells" / "c", root)
    assert not lies_under(root / ".." / "x", root)
    with pytest.raises(BadInput, match="outside the results directory"):
        check_under(root / "tiny" / "cells" / "c", root, "cell")
