"""The compiled scanner (harness.telemetry._scan) gives exactly the pure-Python path's results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.telemetry import summary as tm

# CI builds the scanner and sets EPCAP_REQUIRE_COMPILED=1 (.ci/run): there a missing build
# fails test_the_compiled_scanner_is_built instead of skipping everything silently.
REQUIRED = os.environ.get("EPCAP_REQUIRE_COMPILED") == "1"
needs_scan = pytest.mark.skipif(tm._compiled is None and not REQUIRED,
                                reason="harness.telemetry._scan is not built (EPCAP_REQUIRE_COMPILED unset)")
pytestmark = needs_scan
ROOT = Path(__file__).resolve().parents[2]
PROPS = settings(max_examples=150, deadline=None, derandomize=True)
DISPATCH, SETUP = b"[MOE_DROP_DEBUG][dispatch]", b"[MOE_DROP_DEBUG][setup_metadata]"
KEYS = ("iter", "layer", "rank", "expected_recv", "actual_valid_recv", "budget")
VALUES = ("0", "7", "1024", "2048", "000123", "999999999999999999", "1000000000000000000",
          "-3", "+5", "1.5", "", "x", "12a", "2O48", "5=6", "٣")
SEPARATORS = (" ", " ", " ", "  ", "\t", "\x0b", "\x1c", "\u00a0", "\u2003", "\x85", "\u3000")
PREFIXES = ("", "[rank3]:", "3: ", "2026-01-01 12:00:00 ", "\t", "é ")
ENDS = (b"\n", b"\n", b"\r\n", b"", b"\xff\n", b" observed_loss=-5\n")


@st.composite
def rows(draw) -> bytes:
    """One tagged line: mostly canonical, sometimes reordered, perturbed or exotic."""
    tag = draw(st.sampled_from([DISPATCH] * 4 + [SETUP]))
    values = {k: str(draw(st.integers(0, 3000))) for k in KEYS}
    values["expected_recv"] = str(draw(st.integers(1, 3000)))
    keys = list(KEYS)
    if draw(st.integers(0, 3)) == 0:
        keys = draw(st.permutations(KEYS))
    if draw(st.integers(0, 4)) == 0:
        values[draw(st.sampled_from(KEYS))] = draw(st.sampled_from(VALUES))
    if draw(st.integers(0, 8)) == 0:
        keys.remove(draw(st.sampled_from(keys)))
    if draw(st.integers(0, 6)) == 0:
        keys.insert(draw(st.integers(0, len(keys))), draw(st.sampled_from(KEYS)))
    seps = [draw(st.sampled_from(SEPARATORS)) if draw(st.integers(0, 5)) == 0 else " "
            for _ in keys]
    body = "".join(f"{sep}{k}={values[k]}" for sep, k in zip(seps, keys, strict=True))
    prefix = draw(st.sampled_from(PREFIXES))
    return prefix.encode() + tag + body.encode() + draw(st.sampled_from(ENDS))


NOISE = st.sampled_from([b"noise line\n", b"\n", b"iteration 3 | loss 2.1\r\n",
                         b"[MOE_DROP_DEBUG][dispatchX] iter=0\n", b"[MOE_DROP_DEBUG][\n",
                         b"x budget=7 rank=9\n", b"[MOE_DROP_DEBUG][setup_metadata]\n"])


@st.composite
def logs(draw) -> bytes:
    """A messy log: rows, noise, glued rows, maybe a truncated last line."""
    parts = draw(st.lists(st.one_of(rows(), rows(), rows(), NOISE), max_size=40))
    text = b"".join(parts)
    if draw(st.booleans()):
        text += b"[rank1]:" + DISPATCH + b" iter=9 lay"
    return text


def both(fn, monkeypatch):
    """fn() on the compiled path, then on the pure path."""
    compiled = fn()
    with monkeypatch.context() as m:
        m.setattr(tm, "_compiled", None)
        pure = fn()
    return compiled, pure


def results(paths, warmup=0, tags=None):
    """Everything the module reports about the logs."""
    table = tm.rows_table(paths, tags=tags)
    return (tm.summarize(paths, warmup=warmup, tags=tags).to_dict(),
            list(tm.iter_rows(paths, tags=tags)), table.values.tolist(),
            list(map(str, table.dtypes)))


@PROPS
@given(text=logs(), second=logs(), block=st.sampled_from([23, 97, 4096, 4 << 20]),
       warmup=st.integers(0, 2000))
def test_compiled_and_pure_paths_agree_on_messy_logs(tmp_path_factory, text, second, block,
                                                      warmup):
    folder = tmp_path_factory.mktemp("s")
    a, b = folder / "a.log", folder / "b.log"
    a.write_bytes(text)
    b.write_bytes(second)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(tm, "BLOCK_BYTES", block)
        for paths in ([a], [a, b]):
            compiled, pure = both(lambda p=paths: results(p, warmup), mp)
            assert compiled == pure
    finally:
        mp.undo()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(text=logs(), block=st.sampled_from([16, 64]), max_line=st.sampled_from([40, 150]))
def test_over_long_lines_agree(tmp_path_factory, text, block, max_line):
    path = tmp_path_factory.mktemp("l") / "x.log"
    path.write_bytes(text)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(tm, "BLOCK_BYTES", block)
        mp.setattr(tm, "MAX_LINE", max_line)
        compiled, pure = both(lambda: results([path]), mp)
        assert compiled == pure
    finally:
        mp.undo()


def test_every_odd_value_and_separator_in_every_position_agrees(tmp_path, monkeypatch):
    canonical = dict(zip(KEYS, ("1", "2", "3", "4", "5", "6"), strict=True))
    lines = []
    for key in KEYS:
        for value in VALUES:
            fields = {**canonical, key: value}
            lines.append(" ".join(f"{k}={v}" for k, v in fields.items()))
        for sep in SEPARATORS + ("\x00", "\x1f", "\x1b"):
            lines.append(" ".join(f"{k}={v}" + (sep if k == key else "")
                                  for k, v in canonical.items()))
    text = "".join(f"[r]:[MOE_DROP_DEBUG][dispatch] {line}\n" for line in lines)
    path = tmp_path / "x.log"
    path.write_text(text + "[MOE_DROP_DEBUG][dispatch] " + lines[0] + "\n")
    compiled, pure = both(lambda: results([path]), monkeypatch)
    assert compiled == pure
    assert (compiled[0]["rows"], compiled[0]["malformed_rows"]) == (108, 73)


def test_a_field_repeated_after_a_canonical_row_makes_it_malformed(tmp_path, monkeypatch):
    """Each of the six keys repeated in a canonical row's tail (the compiled scanner's
    has_field/field_of) makes the row malformed, as row_fields does; look-alike keys of
    every length the six have (iterx, ranks, expected_recvs, observed_loss...) and a key
    after a token's first '=' (x=iter=9) do not."""
    row = "iter=1 layer=2 rank=3 expected_recv=4 actual_valid_recv=5 budget=6"
    tails = [f"{k}=9" for k in KEYS] + ["iterx=9", "ranks=9", "Iter=9", "layer_=9",
                                         "budgets=9", "observed_loss=9", "expected_recx=9",
                                         "actual_valid_recx=9", "xank=9", "bayer=9",
                                         "x=iter=9", "=rank=9", "a\u00e9=layer=9"]
    text = "".join(f"[r]:[MOE_DROP_DEBUG][dispatch] {row} {tail}\n" for tail in tails)
    path = tmp_path / "x.log"
    path.write_text(text)
    compiled, pure = both(lambda: results([path]), monkeypatch)
    assert compiled == pure
    assert (compiled[0]["rows"], compiled[0]["malformed_rows"]) == (13, 6)


@pytest.mark.parametrize("tags", [
    {"dispatch": "<moe>", "setup": "<moe>setup"}, {"dispatch": "<moe>d", "setup": "<moe>"},
    {"dispatch": "D:", "setup": "S:"}, {"dispatch": "x<m>", "setup": "<m>"},
    {"dispatch": "<same>", "setup": "<same>"}])
def test_custom_and_overlapping_tags_agree(tmp_path, monkeypatch, tags):
    d, s = tags["dispatch"], tags["setup"]
    text = (f"{s} rank=1\n{d} iter=0 layer=1 rank=0 expected_recv=4 actual_valid_recv=4 "
            f"budget=8\npre{d} iter=1 layer=1 rank=0 expected_recv=4 actual_valid_recv=5 "
            f"budget=8{s} rank=3\n{d}{d} iter=2\n{s}{d} rank=2 iter=3 layer=1 expected_recv=4 "
            "actual_valid_recv=6 budget=8\n")
    path = tmp_path / "x.log"
    path.write_text(text)
    compiled, pure = both(lambda: results([path], tags=tags), monkeypatch)
    assert compiled == pure
    assert compiled[0]["rows"] + compiled[0]["setup_rows"] + compiled[0]["malformed_rows"] > 0


def test_unicode_white_space_splits_fields_as_the_reference_does(tmp_path, monkeypatch):
    text = ("[MOE_DROP_DEBUG][dispatch] iter=0\u00a0layer=1 rank=0 expected_recv=4 "
            "actual_valid_recv=3 budget=8\n[MOE_DROP_DEBUG][setup_metadata]\u2003rank=5\n")
    path = tmp_path / "x.log"
    path.write_text(text)
    compiled, pure = both(lambda: results([path]), monkeypatch)
    assert compiled == pure
    assert (compiled[0]["rows"], compiled[0]["expected_ranks"]) == (1, 6)


def test_scan_returns_rows_line_numbers_and_deferred_rows():
    block = (b"noise\n[r0]:" + DISPATCH + b" iter=1 layer=2 rank=3 expected_recv=4 "
             b"actual_valid_recv=5 budget=6\r\n" + SETUP + b" rank=7\n" + DISPATCH
             + b" iter=x\n" + SETUP + b" rank=\xc3\xa9\n")
    rows, lines, newlines, deferred, setup_rows, ranks = tm._compiled.scan(
        block, len(block), 10, DISPATCH, SETUP)
    assert tm.np.frombuffer(rows, tm.np.int64).tolist() == [1, 2, 3, 4, 5, 6]
    assert tm.np.frombuffer(lines, tm.np.int64).tolist() == [11]
    assert (newlines, setup_rows, ranks) == (5, 2, [7])
    start = block.index(b" iter=x")
    assert deferred[0] == ("d", 13, start, start + 7, 1)
    assert deferred[1][:2] == ("s", 14) and len(deferred) == 2
    # only the first `length` bytes are read
    assert tm._compiled.scan(block, 6, 1, DISPATCH, SETUP)[2:] == (1, [], 0, [])


def test_folder_counts_like_the_accumulator():
    folder = tm._compiled.Folder(1)
    for values in [(0, 1, 0, 4, 9, 8), (1, 1, 0, 4, 8, 8), (1, 1, 1, 4, 7, 16), (2**40, 1, 0, 5, 1,
                                                                                  8),
                   (1, 1, 0, 4, 3, 8)]:
        folder.add_row(*values)
    assert folder.counts() == (5, 2, 4, 1)
    assert folder.peaks() == {4: 8, 5: 1} and sorted(folder.budgets()) == [8, 16]
    assert folder.seen() == (4, [[0, 1, 2**40], [1], [0, 1]])


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="length"):
        tm._compiled.scan(b"x\n", 3, 1, DISPATCH, SETUP)
    with pytest.raises(ValueError, match="non-empty"):
        tm._compiled.scan(b"x\n", 2, 1, b"", SETUP)
    with pytest.raises(ValueError, match="newline"):
        tm._compiled.Folder().feed(b"x\n", 2, 1, DISPATCH, b"a\nb")
    with pytest.raises(ValueError, match="negative"):
        tm._compiled.Folder().add_row(0, 0, -1, 1, 1, 1)
    assert not tm._use_compiled(tm.make_tags({"dispatch": "a\nb"}))
    assert tm._use_compiled(tm.make_tags())


def test_key_compaction_keeps_distinct_counts():
    folder = tm._compiled.Folder(0)
    for i in range(3):
        for key in [(5, 2, 1), (0, 1, 0), (2**31, 1, 0), (1, 2**16, 3)]:
            folder.add_row(*key, 1, 1, 1)
        folder.add_row(i, 9, 9, 1, 1, 1)
    assert folder.seen() == (7, [[0, 1, 2, 5, 2**31], [1, 2, 9, 2**16], [0, 1, 3, 9]])


def test_summarize_does_not_import_numpy(tmp_path):
    path = tmp_path / "x.log"
    path.write_text("[MOE_DROP_DEBUG][dispatch] iter=0 layer=1 rank=0 expected_recv=4 "
                    "actual_valid_recv=3 budget=8\n")
    code = ("import sys; from harness.telemetry.summary import summarize; "
            f"assert summarize({str(path)!r}).rows == 1; print('numpy' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "EPCAP_PURE_PYTHON_PARSE"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                         capture_output=True, check=True).stdout
    assert out.strip() == "False"


def test_the_compiled_scanner_is_built():
    """Fails where the build is required (CI) and the extension is missing or not used."""
    assert tm._compiled is not None, "harness.telemetry._scan is not built: run setup.py build_ext"
    assert tm._use_compiled(tm.make_tags())


GROUP_ROWS = st.lists(st.tuples(st.integers(0, 6), st.integers(1, 3), st.integers(0, 3),
                                st.sampled_from([1, 5, 2**40 - 1, 2**40, 2**59]),
                                st.sampled_from([0, 4, 5, 6, 2**40, 2**62]),
                                st.sampled_from([1, 5, 2**62]), st.booleans()), max_size=60)


def reference_groups(rows):
    """(key, rows, sum act, sum exp, saturated) per (iter, layer) by key, in Python ints
    wrapped to int64 as numpy sums them (the pure path's _reduce_groups)."""
    out: dict[int, list[int]] = {}
    for it, layer, _rank, exp, act, bud, _ in rows:
        g = out.setdefault(it << 16 | layer, [0, 0, 0, 0])
        for i, add in enumerate((1, min(act, tm.SUM_CLIP), min(exp, tm.SUM_CLIP), act >= bud)):
            g[i] += add
    wrap = lambda x: (x + 2**63) % 2**64 - 2**63  # noqa: E731
    return [(k, *map(wrap, v)) for k, v in sorted(out.items())]


@PROPS
@given(rows=GROUP_ROWS, ranks=st.sampled_from([0, 1, 2, 3, 2**70]))
def test_folder_groups_and_invariants_match_the_python_fold(rows, ranks):
    """Groups folded in C (runs merged whenever groups() or invariants() is asked, here at
    generated points in the stream) equal the Python fold's; Folder.invariants equals
    _Accumulator._invariants over those groups, issues worded alike."""
    folder = tm._compiled.Folder(0)
    for *values, ask in rows:
        folder.add_row(*values)
        if ask:                          # merges the runs mid-stream
            folder.groups()
    groups = reference_groups(rows)
    over = sum(act > bud for _, _, _, _, act, bud, _ in rows)
    assert folder.groups() == (over, groups)
    acc = tm._Accumulator(0)
    acc.s.expected_ranks, acc.over_budget = ranks, over
    acc._invariants(groups)
    compiled = tm._CompiledAccumulator(0)
    compiled.folder = folder
    compiled.s.expected_ranks = ranks
    compiled._check_groups()
    assert compiled.s == acc.s
    if ranks < 2**63:
        o, n, dropped, partial, unconserved, flagged = folder.invariants(ranks, 2)
        assert (o, n, dropped, partial, unconserved) == (
            over, len(groups), acc.s.dropped_slots, acc.s.partial_groups,
            acc.s.unconserved_groups)
        assert tm.issue_words(flagged, ranks) == acc.s.invariant_issues[:2]


@PROPS
@given(keys=st.lists(st.tuples(st.integers(0, 2**32), st.sampled_from([0, 1, 31, 32, 33, 63, 64, 65,
                                                                        2**16 - 1, 2**16]),
                               st.integers(0, 2**16)), max_size=40))
def test_folder_seen_is_each_column_distinct_values(keys):
    """Folder.seen: the distinct (iter, layer, rank) keys and each column's sorted distinct
    values, packed keys (a bitmap per layer and rank value) and wide ones alike."""
    folder = tm._compiled.Folder(0)
    for it, layer, rank in keys:
        folder.add_row(it, layer, rank, 1, 1, 1)
    columns = [sorted({k[c] for k in keys}) for c in range(3)]
    assert folder.seen() == (len(set(keys)), columns)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32), runs=st.sampled_from([0, 1, 7, 500]),
       groups=st.integers(1, 200))
def test_group_runs_merged_in_the_fold_loop_keep_the_sums(seed, runs, groups):
    """Out-of-order group runs merged inside the fold loop (Folder(group_runs=...) lowers the
    2^20 threshold so a few thousand rows reach it) sum as the Python fold does."""
    import random

    rnd = random.Random(seed)
    rows = [(rnd.randrange(groups), rnd.randrange(1, 3), rnd.randrange(4), rnd.randrange(1, 9),
             rnd.randrange(12), rnd.randrange(1, 12), False) for _ in range(3000)]
    folder = tm._compiled.Folder(0, runs)
    for *values, _ in rows:
        folder.add_row(*values)
    over = sum(act > bud for _, _, _, _, act, bud, _ in rows)
    assert folder.groups() == (over, reference_groups(rows))
    with pytest.raises(ValueError, match="group_runs"):
        tm._compiled.Folder(0, -1)
