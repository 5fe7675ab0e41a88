"""harness.grid.capacity's frontier rungs (docs/frontier.md: "The rungs"): step_down,
rungs_around and rung_text against their contract, the expected rungs recomputed by brute
force over the grid (int(float(c) * N), as the kernels allocate), never by the function
under test. Fast: no process, no campaign (in the mutation's test selection)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.grid import capacity as cap

FAST = settings(max_examples=60, deadline=None, derandomize=True)
PADS = st.sampled_from([1, 8, 64, 128])


def budget(text: str, n: int) -> int:
    """What a kernel allocates: int(float(c) * N), straight from the text."""
    return int(float(text) * n)


def grid_below(b: int, n: int, pad: int, decimals: int | None) -> tuple[int, str] | None:
    """Brute force: the largest executable budget below `b` on the grid, and the grid's
    capacity for it (exact: the shortest decimal giving it, the smallest at that length;
    legacy: the smallest D-decimal capacity giving it); None when none is positive."""
    if decimals is None:
        want = (b - 1) // pad * pad
        if want <= 0:
            return None
        for digits in range(0, 12):
            scale = 10 ** digits
            for units in range(want * scale // n - 2, (want + 1) * scale // n + 3):
                if units > 0 and budget(str(Decimal(units).scaleb(-digits)), n) == want:
                    return want, cap.format_capacity(Decimal(units).scaleb(-digits))
        raise AssertionError("no decimal found")
    scale = 10 ** decimals
    best: tuple[int, int] | None = None
    for units in range(1, b * scale // n + 2):
        got = budget(str(Decimal(units).scaleb(-decimals)), n)
        if 0 < got < b and got % pad == 0 and (best is None or got > best[0]):
            best = (got, units)
    if best is None:
        return None
    return best[0], cap.format_capacity(Decimal(best[1]).scaleb(-decimals))


@FAST
@given(n=st.integers(1, 64).map(lambda x: 16 * x), pad=PADS,
       b=st.one_of(st.integers(1, 40), st.integers(1, 3000)))
def test_step_down_on_the_exact_grid_is_the_largest_multiple_of_p_below(n, pad, b):
    """Exact grid: one rung down from any capacity (executable or not) is the shortest
    decimal whose budget is the largest multiple of P strictly below its budget; None when
    that is not positive. Seen red: `round_up_to_grid(below, ...)` ->
    `round_up_to_grid(below - pad_multiple, ...)` (a rung skipped). (Starting the search at
    `budget` or `budget + P` is equivalent: a candidate there never has a smaller budget.)"""
    units = b * 10**6 // n + 1                      # a capacity with a budget near b
    text = cap.format_capacity(Decimal(units).scaleb(-6))
    got = cap.step_down(text, n, pad)
    want = grid_below(budget(text, n), n, pad, None)
    if want is None:
        assert got is None
    else:
        assert got is not None and (budget(got, n), got) == want


@settings(max_examples=40, deadline=None, derandomize=True)
@given(n=st.sampled_from([16, 48, 100, 256, 1000]), pad=PADS, decimals=st.integers(0, 3),
       units=st.integers(1, 400))
def test_step_down_on_the_legacy_grid_is_the_largest_executable_budget_below(n, pad, decimals,
                                                                            units):
    """Legacy grid (decimals D): one rung down is the smallest D-decimal capacity whose
    budget is the largest executable budget below this one's (a D-decimal grid can miss
    budget - P: the rung below is then further down); None when none is positive. Seen
    red: `round_up_to_grid(below, ..., decimals)` -> decimals None (an exact-grid rung),
    `< budget` -> `<= budget` (a capacity of the same budget returned)."""
    text = cap.format_capacity(Decimal(units).scaleb(-decimals))
    b = budget(text, n)
    try:
        got = cap.step_down(text, n, pad, decimals)
    except BadInput:                                 # no executable D-decimal rung at all
        return
    want = grid_below(b, n, pad, decimals)
    if want is None:
        assert got is None
    else:
        assert got is not None and (budget(got, n), got) == want


@FAST
@given(n=st.integers(1, 64).map(lambda x: 16 * x), pad=PADS, m=st.integers(2, 60),
       decimals=st.sampled_from([None, 2, 3]))
def test_step_down_is_the_inverse_neighbour_of_step_up(n, pad, m, decimals):
    """On an executable rung, step_up(step_down(c)) has c's budget, and step_down(step_up(c))
    has c's budget: the two never skip a rung. Seen red: `-pad_multiple` -> `-2 *
    pad_multiple` step in the search (every other rung skipped)."""
    try:
        c = cap.round_up_to_grid(m * pad, n, pad, decimals)
        down = cap.step_down(c, n, pad, decimals)
        up = cap.step_up(c, n, pad, decimals)
    except BadInput:
        return
    assert budget(cap.step_down(up, n, pad, decimals), n) == budget(c, n)
    if down is not None:
        assert budget(cap.step_up(down, n, pad, decimals), n) == budget(c, n)
        assert budget(down, n) < budget(c, n) and budget(down, n) % pad == 0


@pytest.mark.parametrize(("capacity", "n", "pad", "want"), [
    ("1.00", 1024, 128, "0.875"),       # budget 1024 -> 896
    ("0.125", 1024, 128, None),         # budget 128: nothing positive below
    ("0.13", 1024, 128, "0.125"),       # budget 133 (not executable) -> 128
    ("0.0001", 1024, 128, None),        # budget 0
    ("3", 16, 1, "2.94"),               # budget 48 -> 47 (2.94 * 16 = 47.04)
    ("0.5625", 16, 8, "0.50"),          # budget 9 -> 8
    ("0.125", 16, 1, "0.10"),           # budget 2 -> 1 (0.1 * 16 = 1.6)
    ("0.0625", 16, 1, None),            # budget 1: nothing positive below
])
def test_step_down_hand_cases(capacity, n, pad, want):
    """Worked by hand: 896 / 1024 = 0.875; 128 / 1024 = 0.125; 2.9 * 16 = 46.4, so 2.94 is
    the shortest decimal of budget 47; budgets 9 and 2 step down to 8 and 1. Seen red:
    `return None` -> `return ""` at the bottom of the grid, `range(..., 0, ...)` ->
    `range(..., 1, ...)`."""
    assert cap.step_down(capacity, n, pad) == want


def rungs_by_hand(selected: str, k: int, n: int, pad: int) -> list[tuple[int, str]]:
    """The exact grid's rungs around an executable selection, from the budgets alone:
    B + i * P for -k <= i <= k while positive, each the shortest decimal giving it."""
    b = budget(selected, n)
    out = []
    for i in range(-k, k + 1):
        if i == 0:
            out.append((0, selected))
        elif b + i * pad > 0:
            out.append((i, shortest(b + i * pad, n)))
    return out


def shortest(b: int, n: int) -> str:
    """Brute force: the shortest decimal (smallest at that length) with budget b."""
    for digits in range(0, 12):
        scale = 10 ** digits
        for units in range(max(b * scale // n - 2, 1), (b + 1) * scale // n + 3):
            if budget(str(Decimal(units).scaleb(-digits)), n) == b:
                return cap.format_capacity(Decimal(units).scaleb(-digits))
    raise AssertionError("no decimal found")


@FAST
@given(n=st.integers(1, 64).map(lambda x: 16 * x), pad=PADS, m=st.integers(1, 12),
       k=st.integers(0, 8), spelt=st.booleans())
def test_rungs_around_are_k_below_and_above_on_the_exact_grid(n, pad, m, k, spelt):
    """rungs_around: (offset, capacity) ascending from -k to +k, rung 0 the selection as
    written (not re-spelt), rung i at budget B + i * P, fewer below when no positive budget
    is left. Seen red: `range(1, k + 1)` -> `range(2, k + 1)` (a rung missing), `-offset` ->
    `offset`, the `reversed` dropped (descending below), `break` -> `continue`."""
    selected = shortest(m * pad, n)
    if spelt:                                         # written with a trailing zero
        selected = selected + "0"
    got = cap.rungs_around(selected, k, n, pad)
    assert got == rungs_by_hand(selected, k, n, pad)
    assert [o for o, _ in got] == sorted(o for o, _ in got)
    budgets = [budget(c, n) for _, c in got]
    assert budgets == sorted(set(budgets)) and all(b % pad == 0 and b > 0 for b in budgets)
    assert len([o for o, _ in got if o > 0]) == k
    assert len([o for o, _ in got if o < 0]) == min(k, m - 1)


def test_rungs_around_hand_case_and_the_bottom_of_the_grid():
    """Worked by hand at N = 1024, P = 128: 1.125 is budget 1152; 256 / 1024 = 0.25 has one
    rung below (0.125) and none under it. Seen red: `below.append((-offset, ...))` ->
    `(offset, ...)`."""
    assert cap.rungs_around("1.125", 2, 1024, 128) == [
        (-2, "0.875"), (-1, "1.00"), (0, "1.125"), (1, "1.25"), (2, "1.375")]
    assert cap.rungs_around("0.25", 3, 1024, 128) == [
        (-1, "0.125"), (0, "0.25"), (1, "0.375"), (2, "0.50"), (3, "0.625")]
    assert cap.rungs_around("0.125", 1, 1024, 128) == [(0, "0.125"), (1, "0.25")]
    assert cap.rungs_around("0.5", 0, 1024, 128) == [(0, "0.5")]


def test_rungs_around_on_a_legacy_grid_use_that_grid():
    """decimals=2 at N = 100, P = 8: every budget is c * 100, so the rungs are the
    capacities at budgets 8 apart (0.72 0.80 [0.88] 0.96 1.04). At N = 30, P = 8 and one
    decimal, every budget is a multiple of 3: the rung below 1.60 (48) is 0.80 (24: 40 and
    32 are not on that grid) and the one above 2.40 (72), where the exact grid has 1.34 (40)
    and 1.87 (56). Seen red: `decimals` dropped from the step_down / step_up calls."""
    assert cap.rungs_around("0.88", 2, 100, 8, 2) == [
        (-2, "0.72"), (-1, "0.80"), (0, "0.88"), (1, "0.96"), (2, "1.04")]
    assert cap.rungs_around("1.60", 1, 30, 8, 1) == [(-1, "0.80"), (0, "1.60"), (1, "2.40")]
    assert cap.rungs_around("1.60", 1, 30, 8) == [(-1, "1.34"), (0, "1.60"), (1, "1.87")]


@given(offset=st.integers(-8, 8))
@settings(max_examples=17, deadline=None, derandomize=True)
def test_rung_text_is_signed_and_zero_is_bare(offset):
    """frontier.tsv's rung: "0" for the selection, "+i" above, "-i" below. Seen red:
    `if offset` -> `if not offset` and "0" -> "XX0XX"."""
    want = "0" if offset == 0 else ("+" if offset > 0 else "-") + str(abs(offset))
    assert cap.rung_text(offset) == want


def test_rung_text_every_value_of_the_runbook_range():
    """k is 1..8 (docs/frontier.md): the 17 texts are distinct and read back as ints."""
    texts = [cap.rung_text(o) for o in range(-8, 9)]
    assert len(set(texts)) == 17 and [int(t) for t in texts] == list(range(-8, 9))
