"""Hostile CLI numbers, logs, event logs and TSVs (issue 17): exit 2 naming the option or
file:line: field (or the documented verdict), within a time bound, never a traceback, never
the content of a file that is not a runbook."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harness.telemetry.summary as tm
from harness.errors import BadInput
from harness.results.events import read_events
from harness.results.tables import parse_table

from .conftest import assert_bad_input, run_cli

SHAPE = ["--seq", "4096", "--mbs", "1", "--topk", "8"]
SECRET = "root:$6$SecretShadowHash0123:19000:0:99999:7:::"

# -- epcap capacity: every number range-checked, answered at once ------------------------------
CAPACITY = [
    (["--peak", "99999999999999999999999"], "--peak: must be at most"),
    (["--peak", "1" + "0" * 18], "--peak: must be at most"),
    (["--required", "1e309"], "--required"),
    (["--required", "nan"], "--required"),
    (["--required", "inf"], "--required"),
    (["--required", "1e30"], "--required: must be at most 1024"),
    (["--check", "1e309"], "--check: must be a capacity of at most 1024"),
    (["--check", "9" * 40], "--check: must be a capacity"),
    (["--check", "nan"], "capacity 'nan' must be a positive finite number"),
    (["--check", "inf"], "capacity 'inf' must be a positive finite number"),
    (["--check", "abc"], "is not a decimal number"),
    (["--peak", "40000", "--pad-multiple", "99999999999999999999"], "--pad-multiple"),
    (["--peak", "40000", "--decimals", "99999999999"], "--decimals: must be at most 12"),
]


@pytest.mark.parametrize("args,needle", CAPACITY, ids=[" ".join(a)[:30] for a, _ in CAPACITY])
def test_capacity_numbers_are_range_checked(args, needle):
    assert_bad_input(run_cli("capacity", *SHAPE, *args, timeout_s=5), needle)


@pytest.mark.parametrize("option", ["--seq", "--mbs", "--topk"])
def test_capacity_shape_numbers_are_range_checked(option):
    args = dict(zip(SHAPE[::2], SHAPE[1::2], strict=True))
    args[option] = "99999999999999999999"
    flat = [x for kv in args.items() for x in kv]
    assert_bad_input(run_cli("capacity", *flat, "--peak", "40000", timeout_s=5), option)


def test_capacity_at_the_largest_peak_still_answers():
    res = run_cli("capacity", *SHAPE, "--peak", str(10**18 - 1), "--json", timeout_s=5)
    assert res.code == 0 and json.loads(res.out)["budget_tokens"] >= 10**18 - 1


# -- epcap parse ------------------------------------------------------------------------------
def log(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rank0.log"
    path.write_text(text)
    return path


ROW = "[MOE_DROP_DEBUG][dispatch] iter=0 layer=0 rank=0 expected_recv=1024 " \
      "actual_valid_recv=1100 budget=2048\n"


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
@pytest.mark.parametrize("warmup", [str(10**23), str(10**18), "-1"])
def test_parse_warmup_out_of_range(tmp_path, monkeypatch, compiled, warmup):
    if not compiled:
        monkeypatch.setattr(tm, "_compiled", None)
    elif tm._compiled is None:
        pytest.skip("harness.telemetry._scan is not built")
    assert_bad_input(run_cli("parse", log(tmp_path, ROW), "--warmup", warmup, timeout_s=5),
                     "--warmup")


def test_parse_largest_warmup_skips_every_row(tmp_path):
    res = run_cli("parse", log(tmp_path, ROW), "--warmup", str(10**18 - 1), "--json")
    assert res.code == 0 and json.loads(res.out)["logs"][0]["rows"] == 1


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "empty", "missing"])
def test_parse_refuses_special_files(tmp_path, kind):
    path = {"fifo": tmp_path / "fifo", "dev-zero": Path("/dev/zero"),
            "empty": tmp_path / "empty", "missing": tmp_path / "missing"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    if kind == "empty":
        path.write_text("")
    assert_bad_input(run_cli("parse", path, timeout_s=5), str(path))


REPEATS = [
    ROW.replace("budget=2048", "budget=2048 actual_valid_recv=4096"),      # hides saturation
    ROW.replace("iter=0", "iter=0 iter=9"),
    ROW.replace("rank=0", "rank=0 rank=1"),
    ROW.rstrip("\n") + " budget=1\n",
    ROW.replace("layer=0 rank=0", "rank=0 layer=0 layer=3"),
]


@pytest.mark.parametrize("row", REPEATS, ids=range(len(REPEATS)))
def test_repeated_field_is_malformed_on_both_paths(tmp_path, monkeypatch, row):
    path = log(tmp_path, ROW + row + ROW.replace("rank=0", "rank=1"))
    compiled = tm.summarize([path])
    monkeypatch.setattr(tm, "_compiled", None)
    pure = tm.summarize([path])
    for s in (compiled, pure):
        assert (s.rows, s.malformed_rows, s.malformed_lines) == (2, 1, [2])
        assert "repeated field" in s.malformed[0]
    assert compiled.to_dict() == pure.to_dict()


# -- events.jsonl: a damaged line is exit 2 with path:line and how to recover -----------------
GOOD = {"ev": "campaign_start", "t": 1.0, "campaign": "x"}
DAMAGED = [
    (b"\xff\xfe not utf-8\n", ":2: not UTF-8"),
    (b'{"t": 2.0}\n', ":2: ev: missing event name"),
    (b'{"ev": "run_start"}\n', ":2: t: missing or non-numeric time"),
    (b'{"ev": "run_start", "t": "soon"}\n', ":2: t: missing"),
    (b"not json at all\n", ":2: not a JSON object"),
    (b"[1, 2, 3]\n", ":2: not a JSON object"),
    (b'"just a string"\n', ":2: not a JSON object"),
    (b"[" * 100_000 + b"]" * 100_000 + b"\n", ":2: not a JSON object"),
    (b'{"ev": 5, "t": 1}\n', ":2: ev: missing event name"),
    (b'{"ev": "cell_finish", "t": 3.0, "status": "ok"}\n', ":2: cell: cell_finish event lacks"),
]


def campaign_dir(tmp_path: Path, extra: bytes) -> Path:
    root = tmp_path / "camp"
    root.mkdir()
    (root / "events.jsonl").write_bytes(json.dumps(GOOD).encode() + b"\n" + extra)
    return root


@pytest.mark.parametrize("line,needle", DAMAGED, ids=range(len(DAMAGED)))
def test_status_on_a_damaged_event_log(tmp_path, line, needle):
    root = campaign_dir(tmp_path, line + json.dumps(GOOD).encode() + b"\n")
    if b"cell_finish" in line:              # status reads leniently; the driver strictly
        with pytest.raises(BadInput, match="cell_finish event lacks a field"):
            read_events(root / "events.jsonl", strict=True)
        return
    res = run_cli("status", root, timeout_s=10)
    assert_bad_input(res, str(root / "events.jsonl") + needle, "--fresh")
    assert "not utf-8" not in res.err and "just a string" not in res.err


def test_a_partial_last_line_is_skipped(tmp_path):
    root = campaign_dir(tmp_path, b'{"ev": "run_st')
    assert run_cli("status", root).code == 0


def test_status_after_a_canary_crash_prints_no_none(tmp_path):
    stopped = {"ev": "campaign_stopped", "t": 2.0, "cell": "M__echo__canary__cap2p00__a1",
               "status": "crash", "stage": "preflight", "log": None, "line": None}
    res = run_cli("status", campaign_dir(tmp_path, json.dumps(stopped).encode() + b"\n"))
    assert res.code == 0 and "None" not in res.out
    assert "stopped: crash in M__echo__canary__cap2p00__a1" in res.out


@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(st.binary(max_size=40), st.builds(
    lambda d: json.dumps(d).encode(), st.dictionaries(st.sampled_from(["ev", "t", "cell",
                                                                       "attempt"]),
                                                      st.one_of(st.none(), st.integers(),
                                                                st.text(max_size=5))))),
    max_size=6))
def test_fuzz_event_reader(tmp_path, lines):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n")
    for strict in (False, True):
        try:
            events = read_events(path, strict=strict)
        except BadInput as exc:
            assert str(exc).startswith(f"{path}:")
            continue
        assert all(isinstance(e["ev"], str) and isinstance(e["t"], (int, float))
                   for e in events)


# -- TSV readers -----------------------------------------------------------------------------
@settings(max_examples=200, deadline=2000)
@given(data=st.binary(max_size=200) | st.text(alphabet="ab\t\n\r\ufeff1.e9-", max_size=80)
       .map(str.encode))
def test_fuzz_tsv_readers(data):
    lenient = parse_table("x.tsv", data)            # never raises
    assert lenient.unreadable is None or not lenient.rows
    try:
        strict = parse_table("x.tsv", data, strict=True)
    except BadInput as exc:
        assert str(exc).startswith("x.tsv")
        return
    assert strict.columns


def test_report_through_a_linked_tsv_does_not_echo_it(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text(SECRET + "\nnext\tline\n")
    root = tmp_path / "camp"
    root.mkdir()
    (root / "events.jsonl").write_text(json.dumps(GOOD) + "\n")
    for name in ("capacity_attempts.tsv", "capacity_selection.tsv"):
        (root / name).symlink_to(secret)
    res = run_cli("report", root, timeout_s=60)
    assert res.code == 2 and "Traceback" not in res.text
    assert "SecretShadowHash" not in res.text and "root:" not in res.text


# -- audit -----------------------------------------------------------------------------------
def upload(tmp_path: Path, selection: dict[str, str]) -> Path:
    root = tmp_path / "up"
    root.mkdir()
    cols = list(selection)
    (root / "capacity_selection.tsv").write_text("\t".join(cols) + "\n"
                                                 + "\t".join(selection.values()) + "\n")
    return root


SELECTION = {"campaign": "c", "model": "M", "backend": "echo", "required_capacity": "1.1",
             "peak_actual_valid_recv": "1126", "uniform_tokens": "1024",
             "measured_at_capacity": "2.00", "selected_capacity": "1.125",
             "selected_budget_tokens": "1152", "over_provision": "1.02", "validated": "true",
             "validate_attempts": "1", "timing_capacity": "1.125"}


@pytest.mark.parametrize("column,value", [
    ("selected_capacity", "1e309"), ("peak_actual_valid_recv", "9" * 100_000),
    ("uniform_tokens", "9" * 100_000), ("required_capacity", "nan"),
    ("selected_budget_tokens", "-" + "9" * 5000), ("selected_capacity", SECRET),
])
def test_audit_of_hostile_numbers_gives_a_verdict(tmp_path, column, value):
    root = upload(tmp_path, {**SELECTION, column: value})
    res = run_cli("audit", root, "--json", timeout_s=30)
    assert res.code in (0, 1, 2) and "Traceback" not in res.text
    if res.code != 2:
        verdicts = [u["verdict"] for u in json.loads(res.out)["uploads"]]
        assert verdicts and all(v in ("VALID", "INVALID", "UNKNOWN") for v in verdicts)
    assert len(res.text) < 20_000


def test_audit_of_a_tree_1100_levels_deep(tmp_path):
    deep = tmp_path / "deep"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    try:
        for _ in range(1100):               # by descriptor: the full path exceeds PATH_MAX
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
    try:
        res = run_cli("audit", deep, timeout_s=30)
        assert_bad_input(res, "no upload found")
        assert len(res.err) < 1000
    finally:
        remove_chain(deep, 1100)        # shutil.rmtree would recurse 1100 levels


def remove_chain(top: Path, depth: int) -> None:
    """Remove top/d/d/.../d (depth levels) bottom-up by descriptor."""
    fds = [os.open(top, os.O_RDONLY)]
    for _ in range(depth - 1):
        fds.append(os.open("d", os.O_RDONLY, dir_fd=fds[-1]))
    for fd in reversed(fds):
        os.rmdir("d", dir_fd=fd)
        os.close(fd)


def test_audit_out_with_a_non_utf8_path(tmp_path):
    root = upload(tmp_path, SELECTION)
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/\xff.tsv")
    res = run_cli("audit", root, "--out", out, timeout_s=30)
    assert res.code in (0, 1, 2) and "Traceback" not in res.text
    if res.code != 2:
        assert os.path.exists(out)


def test_audit_out_in_a_missing_directory(tmp_path):
    root = upload(tmp_path, SELECTION)
    res = run_cli("audit", root, "--out", tmp_path / "no" / "such" / "dir" / "a.tsv")
    assert_bad_input(res, "no such file or directory")
