"""harness.telemetry.summary's rare paths, against their contract: the (iteration, layer)
group invariants when the expected rank count is beyond int64 (the compiled fold hands its
groups to the Python judge: every group is partial), and skipping an over-long line that
spans many reads. Expected figures are recomputed from the generated rows. Fast: small
logs in tmp_path (in the mutation's test selection)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.telemetry import summary as tm
from harness.telemetry.summary import summarize

# the parse-path fixture only patches a module attribute: the same for every example
FAST = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
N = 1024
HUGE = 1 << 64                       # an expected rank count beyond int64


@pytest.fixture(params=["pure", "compiled"])
def parse_path(request, monkeypatch):
    """Each test on the pure-Python path and on the compiled scanner (when built)."""
    if request.param == "pure":
        monkeypatch.setattr(tm, "_compiled", None)
    elif tm._compiled is None:
        pytest.skip("harness.telemetry._scan is not built")
    return request.param


def row(it: int, layer: int, rank: int, act: int, budget: int, expected: int = N) -> str:
    return (f"[MOE_DROP_DEBUG][dispatch] iter={it} layer={layer} rank={rank} "
            f"expected_recv={expected} actual_valid_recv={act} budget={budget}\n")


CELLS = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(0, 2),
                           st.integers(0, 2 * N), st.integers(0, 2 * N)),
                 min_size=1, max_size=40)


@FAST
@given(cells=CELLS)
def test_rank_count_beyond_int64_makes_every_group_partial(tmp_path_factory, parse_path,
                                                           cells):
    """expected_ranks = 2**64: no (iteration, layer) group can have that many rows, so every
    group is partial and none is judged for conservation; dispatch_groups, dropped_slots
    (sum over groups of max(expected - actual, 0)) and over_budget_rows (actual > budget)
    are those of the rows, and the first 10 groups are worded by key. On the compiled path
    the groups come from `_CompiledAccumulator._group_rows` (the Python judge). Seen red:
    `return groups` -> `return None` and `self.over_budget, groups = ...` -> over_budget
    left 0 in `_CompiledAccumulator._group_rows`."""
    path = tmp_path_factory.mktemp("g") / "x.log"
    path.write_text("".join(row(*c) for c in cells))
    s = summarize(path, expected_ranks=HUGE)
    groups: dict[tuple[int, int], list[int]] = {}
    for it, layer, _rank, act, _budget in cells:
        g = groups.setdefault((it, layer), [0, 0, 0])
        g[0] += 1
        g[1] += act
        g[2] += N
    assert s.dispatch_groups == len(groups) == s.partial_groups
    assert s.unconserved_groups == 0
    assert s.dropped_slots == sum(max(e - a, 0) for _, a, e in groups.values())
    assert s.over_budget_rows == sum(act > bud for *_, act, bud in cells)
    assert s.invariant_issues == [f"iter={it} layer={layer}: {groups[(it, layer)][0]} rows "
                                  f"for {HUGE} ranks" for it, layer in sorted(groups)[:10]]


@pytest.mark.parametrize("block", [16, 64, 1 << 20])
def test_an_over_long_line_spanning_many_reads_is_skipped_whole(tmp_path, monkeypatch,
                                                                parse_path, block):
    """A line longer than MAX_LINE is skipped to its newline however many reads that takes
    (_skip_line reads on until it sees one) and every line after it is read, numbered from
    the line after it. Seen red: `while data and b"\\n" not in data` -> `while data and
    b"\\n" in data` (reading resumes inside the long line: its tail is a malformed row),
    and `fh.seek(-len(rest), ...)` -> `fh.seek(len(rest), ...)` (rows after it lost)."""
    monkeypatch.setattr(tm, "BLOCK_BYTES", block)
    monkeypatch.setattr(tm, "MAX_LINE", 100)
    rows = [row(0, 1, r, N + r, 2 * N) for r in range(4)]
    long = "[MOE_DROP_DEBUG][dispatch] iter=0 layer=1 " + "x" * 600 + "\n"
    path = tmp_path / "x.log"
    path.write_text(rows[0] + long + "".join(rows[1:]) + row(1, 1, 0, N, 2 * N))
    s = summarize(path)
    assert s.rows == 5 and s.malformed_rows == 1 and s.malformed_lines == [2]
    assert s.peak_actual_valid_recv == N + 3


def test_skip_line_stops_just_after_the_newline(tmp_path, monkeypatch):
    """_skip_line itself: from inside a line, read past its newline (over several reads)
    and seek back so the next read starts on the next line; at the end of a file without
    newline it stops there. Seen red: `partition(b"\\n")[2]` -> `[0]` and the seek from
    SEEK_CUR -> SEEK_SET."""
    monkeypatch.setattr(tm, "BLOCK_BYTES", 8)
    path = tmp_path / "x.bin"
    path.write_bytes(b"a" * 50 + b"\nnext line\nlast")
    with open(path, "rb") as fh:
        fh.read(5)
        tm._skip_line(fh)
        assert fh.read() == b"next line\nlast"
    with open(path, "rb") as fh:
        fh.read(55)
        tm._skip_line(fh)
        assert fh.read() == b"last"
        tm._skip_line(fh)             # no newline left: stops at the end
        assert fh.read() == b""


@pytest.mark.parametrize("ranks", [1 << 63, -(1 << 63) - 1])
def test_the_int64_bounds_of_the_compiled_judge(tmp_path, parse_path, ranks):
    """An expected rank count just outside int64 (2**63, -2**63 - 1) is judged by Python,
    never handed to the C fold (which would overflow): every group partial, same figures
    on both paths. Seen red: `ranks < 1 << 63` -> `ranks <= 1 << 63` (OverflowError)."""
    path = tmp_path / "x.log"
    path.write_text("".join(row(i, ly, r, N + r, N + 1) for i in range(2) for ly in (1, 2)
                            for r in range(3)))
    s = summarize(path, expected_ranks=ranks)
    assert (s.dispatch_groups, s.partial_groups, s.unconserved_groups) == (4, 4, 0)
    assert s.over_budget_rows == 4 and s.dropped_slots == 0
    assert s.invariant_issues[0] == f"iter=0 layer=1: 3 rows for {ranks} ranks"


def test_over_budget_rows_add_up_over_blocks(tmp_path, monkeypatch, parse_path):
    """over_budget_rows counts the rows with actual > budget in every block, not the last
    block's. Seen red: `self.over_budget += ...` -> `=` in `_Accumulator._add_rows`."""
    monkeypatch.setattr(tm, "BLOCK_BYTES", 200)
    rows = [row(i, 1, 0, N + 5 if i % 3 else N, N + 1) for i in range(30)]
    path = tmp_path / "x.log"
    path.write_text("".join(rows))
    assert summarize(path).over_budget_rows == sum(1 for i in range(30) if i % 3)


class Recorder:
    """An observer of summarize: keeps every call's (path, lines, first line, sifted)."""

    def __init__(self, sift_with: tuple | None = None) -> None:
        if sift_with is not None:
            self.sift_with = sift_with
        self.calls: list[tuple] = []

    def __call__(self, path, lines, line_no, sifted=None) -> None:
        self.calls.append((path, bytes(lines), line_no, sifted))


def observed_log(tmp_path: Path, block: int) -> tuple[Path, bytes]:
    """A log with rows, a line that is not a row, a line over MAX_LINE (100) bytes and a
    truncated last line; and what an observer must see: every line as read, the long line
    cut to MAX_LINE bytes when the reads (of `block` bytes) find it without a newline (a
    block that holds it whole keeps it whole), and the last line, each with a newline."""
    rows = "".join(row(i, 1, r, N + r, 2 * N) for i in range(3) for r in range(2))
    long = "[MOE_DROP_DEBUG][dispatch] " + "y" * 300 + "\n"
    text = rows + "an error: boom\n" + long + rows + "tail without newline"
    path = tmp_path / "x.log"
    path.write_text(text)
    cut = long[:100] + "\n" if block < 100 else long
    seen = (rows + "an error: boom\n" + cut + rows
            + "tail without newline\n").encode()
    return path, seen


@pytest.mark.parametrize("block", [64, 1 << 20])
def test_the_observer_sees_every_line_once_in_order_with_its_number(tmp_path, monkeypatch,
                                                                    parse_path, block):
    """summarize(observe=): each block of whole lines, then an over-long line's first
    MAX_LINE bytes and a truncated last line (each with a newline), in file order, each
    call naming the file and the number of its first line (1-based, counting the skipped
    line once). Seen red: `observe` not passed on by summarize / blocks / _scan, the path,
    lines or line number replaced by None in `_scan`, `_scan_compiled` and `_tell`, and
    `b"\\n"` -> `b"XX\\nXX"` in `_tell`."""
    monkeypatch.setattr(tm, "BLOCK_BYTES", block)
    monkeypatch.setattr(tm, "MAX_LINE", 100)
    path, seen = observed_log(tmp_path, block)
    rec = Recorder()
    s = summarize(path, observe=rec)
    assert s.rows == 12
    assert {c[0] for c in rec.calls} == {str(path)}
    assert b"".join(c[1] for c in rec.calls) == seen
    before = 0
    for _, lines, line_no, sifted in rec.calls:
        assert line_no == before + 1 and sifted is None
        before += lines.count(b"\n")


@pytest.mark.parametrize("block", [64, 1 << 20])
def test_an_observer_asking_for_the_sift_gets_each_blocks_sift(tmp_path, monkeypatch, block):
    """With the compiled scanner, an observer with `sift_with` gets, for each block of
    whole lines, the sift of that block from the same pass as a 4th argument: equal to
    `sifter()` run on the block alone; the over-long and last lines come without one.
    Seen red: `sift_with` not read, `one_pass` inverted (`!= DEFAULT_TAGS`), the sift's
    buffer or line number replaced by None, `sifted.append(None)`, the sift not passed,
    the path passed as None."""
    if tm._compiled is None:
        pytest.skip("harness.telemetry._scan is not built")
    monkeypatch.setattr(tm, "BLOCK_BYTES", block)
    monkeypatch.setattr(tm, "MAX_LINE", 100)
    path, seen = observed_log(tmp_path, block)
    rec = Recorder(sift_with=(None, ()))
    summarize(path, observe=rec)
    assert {c[0] for c in rec.calls} == {str(path)}
    assert b"".join(c[1] for c in rec.calls) == seen
    sift = tm.sifter()
    with_sift = [c for c in rec.calls if c[3] is not None]
    assert rec.calls[-1][1] == b"tail without newline\n" and rec.calls[-1][3] is None
    # the over-long line (when read in short blocks) and the last line come without a sift
    assert len(with_sift) == len(rec.calls) - (2 if block < 100 else 1)
    for _, lines, _, sifted in with_sift:
        want = sift(lines, len(lines), *tm.DEFAULT_TAGS, None, ())
        norm = [x if isinstance(x, int) else bytes(x) for x in sifted]
        assert norm == [x if isinstance(x, int) else bytes(x) for x in want]
    before = 0
    for _, lines, line_no, _ in rec.calls:
        assert line_no == before + 1
        before += lines.count(b"\n")


def test_sifter_is_the_compiled_sift_or_none(parse_path):
    """sifter(): the compiled scanner's `sift` when it is built, None on the pure path.
    Seen red: `getattr(_compiled, "sift", None)` -> `getattr(None, ...)` and -> "SIFT"."""
    want = None if parse_path == "pure" else tm._compiled.sift
    assert tm.sifter() is want
