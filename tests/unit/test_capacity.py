"""The executable grid: kernel float arithmetic, exact and legacy rounding, tags, errors."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.grid import capacity as cap
from harness.grid.capacity import (
    Grid,
    UnexecutableCapacity,
    budget_tokens,
    capacity_tag,
    check_executable,
    format_capacity,
    is_executable,
    next_executable,
    over_provision,
    round_up_to_grid,
    step_up,
)

N = 65536  # seq 8192, mbs 1, top-8
FAST = settings(max_examples=60, deadline=None, derandomize=True)


def decimals_of(text: str) -> int:
    """Digits after the point, ignoring the padding to two decimals."""
    frac = text.partition(".")[2].rstrip("0")
    return len(frac)


def brute_hits(budget: int, n: int, digits: int) -> list[str]:
    """Every `digits`-decimal capacity near budget/N whose kernel budget is exactly `budget`."""
    scale = 10 ** digits
    lo = Fraction(budget * scale, n).__floor__() - 3
    hi = Fraction((budget + 1) * scale, n).__ceil__() + 3
    return [str(Decimal(k).scaleb(-digits)) for k in range(max(lo, 1), hi + 1)
            if int(float(Decimal(k).scaleb(-digits)) * n) == budget]


# --- the grid's spelling ----------------------------------------------------------------------

@pytest.mark.parametrize("text, decimals, canonical", [
    ("exact", None, "exact"), ("decimals-2", 2, "decimals-2"), ("decimals:2", 2, "decimals-2"),
    ("decimals-0", 0, "decimals-0"), ("decimals-12", 12, "decimals-12"),
    ("decimals-02", 2, "decimals-2")])
def test_grid_parses_both_spellings_and_prints_the_runbooks(text, decimals, canonical):
    grid = Grid.parse(text)
    assert grid.decimals == decimals and str(grid) == canonical
    assert Grid.parse(str(grid)) == grid


@pytest.mark.parametrize("text", ["", "fine", "decimals", "decimals-", "decimals-13",
                                  "decimals-100", "decimals-012", "decimals--1", "decimals 2", "Exact", 2,
                                  None, "decimals-\u0662"])
def test_grid_refuses_anything_else(text):
    with pytest.raises(ValueError, match="not a grid"):
        Grid.parse(text)


# --- the worked examples of docs/spec.md: grid -------------------------------------------------

def test_spec_example_1p02_is_not_executable_at_65536():
    assert budget_tokens("1.02", N) == 66846
    assert not is_executable("1.02", N)


def test_legacy_two_decimals_over_provisions_1p0293_to_1p25():
    peak = int((Decimal("1.0293") * N).to_integral_value(rounding="ROUND_CEILING"))
    assert peak == 67457
    assert round_up_to_grid(peak, N, 128, decimals=2) == "1.25"
    assert budget_tokens("1.25", N) == 81920


def test_exact_grid_gives_1p03125_for_peak_67457():
    assert round_up_to_grid(67457, N) == "1.03125"
    assert budget_tokens("1.03125", N) == 67584 == 528 * 128


def test_only_quarter_steps_are_executable_two_decimal_capacities_at_65536():
    hits = [k for k in range(100, 301) if is_executable(f"{k / 100:.2f}", N)]
    assert hits == [100, 125, 150, 175, 200, 225, 250, 275, 300]


# --- kernel float arithmetic ------------------------------------------------------------------

def test_budget_uses_the_kernels_float_product_not_exact_decimal():
    # 0.29 * 100 = 28.999999999999996 in binary floating point; the kernel allocates 28.
    assert budget_tokens("0.29", 100) == 28
    assert int(Decimal("0.29") * 100) == 29  # what an exact-decimal implementation says
    # so the capacity that really yields 29 slots is longer than "0.29"
    assert round_up_to_grid(29, 100, pad_multiple=1) == "0.291"


def test_budget_accepts_floats_ints_and_decimals():
    assert budget_tokens(1.25, N) == budget_tokens("1.25", N) == 81920
    assert budget_tokens(2, N) == budget_tokens(Decimal("2.00"), N) == 2 * N


# --- exact grid properties --------------------------------------------------------------------

@FAST
@given(n=st.integers(1, 1 << 21), pad=st.sampled_from([1, 2, 8, 64, 100, 128, 256]),
       ratio=st.floats(0.05, 8.0))
def test_exact_selection_is_executable_covers_and_is_minimal(n, pad, ratio):
    peak = max(1, int(ratio * n))
    c = round_up_to_grid(peak, n, pad)
    budget = budget_tokens(c, n)
    assert is_executable(c, n, pad)
    assert budget >= peak                      # covers the peak
    assert budget - pad < peak                 # the next lower grid point does not
    assert budget == -(-peak // pad) * pad


@FAST
@given(n=st.integers(1, 1 << 20), ratio=st.floats(0.05, 6.0))
def test_exact_capacity_is_the_shortest_decimal_and_smallest_at_its_length(n, ratio):
    budget = max(1, int(ratio * n))
    c = cap._shortest_for_budget(budget, n)
    digits = decimals_of(c)
    assert int(float(c) * n) == budget
    for shorter in range(digits):
        assert brute_hits(budget, n, shorter) == []
    same_length = brute_hits(budget, n, digits)
    assert Decimal(c) == min(map(Decimal, same_length))


def test_shortest_search_gives_up_loudly_when_digits_are_capped(monkeypatch):
    monkeypatch.setattr(cap, "MAX_DIGITS", 5)
    assert cap._shortest_for_budget(67584, N) == "1.03125"      # needs exactly 5 decimals
    monkeypatch.setattr(cap, "MAX_DIGITS", 4)
    with pytest.raises(AssertionError, match="no decimal capacity gives budget 67584 at N=65536"):
        cap._shortest_for_budget(67584, N)


def test_exact_round_up_examples():
    assert round_up_to_grid(1, N) == "0.00196"         # one pad multiple: 128 / 65536
    assert budget_tokens("0.002", N) == 131            # the 3-decimal neighbour misses
    assert round_up_to_grid(N, N) == "1.00"
    assert round_up_to_grid(N + 1, N) == "1.00196"     # 65664 / 65536 = 1.001953125
    assert budget_tokens("1.00196", N) == N + 128
    assert budget_tokens("1.0019", N) == N + 124
    assert round_up_to_grid(2 * N, N) == "2.00"
    assert round_up_to_grid(100, 3, pad_multiple=3) == "34.00"


# --- legacy decimals --------------------------------------------------------------------------

def lower_executable_covers(c: str, peak: int, n: int, pad: int, d: int) -> bool:
    """Is there a D-decimal capacity below c that is executable and covers the peak?"""
    units = int(Decimal(c).scaleb(d)) - 1
    while units > 0:
        text = str(Decimal(units).scaleb(-d))
        b = budget_tokens(text, n)
        if b < peak:
            return False
        if b % pad == 0:
            return True
        units -= 1
    return False


@FAST
@given(n=st.integers(64, 1 << 18), pad=st.sampled_from([1, 8, 128]), d=st.integers(0, 3),
       ratio=st.floats(0.5, 3.0))
def test_legacy_selection_is_executable_covers_and_is_minimal(n, pad, d, ratio):
    peak = max(1, int(ratio * n))
    try:
        c = round_up_to_grid(peak, n, pad, decimals=d)
    except BadInput:
        return  # no executable D-decimal capacity within the search limit (checked below)
    assert decimals_of(c) <= d
    assert is_executable(c, n, pad)
    assert budget_tokens(c, n) >= peak
    assert not lower_executable_covers(c, peak, n, pad, d)


def test_legacy_round_up_examples():
    assert round_up_to_grid(N, N, decimals=2) == "1.00"
    assert round_up_to_grid(N + 1, N, decimals=2) == "1.25"
    assert round_up_to_grid(81920, N, decimals=2) == "1.25"
    assert round_up_to_grid(81921, N, decimals=2) == "1.50"
    assert round_up_to_grid(N + 1, N, decimals=0) == "2.00"
    assert round_up_to_grid(N + 1, N, decimals=3) == "1.125"   # 8 x 128 slots = 1/64 steps
    # float arithmetic matters in the legacy search too: 0.29 x 100 gives 28, not 29
    assert round_up_to_grid(29, 100, pad_multiple=1, decimals=2) == "0.30"


def test_legacy_search_limit_is_bad_input(monkeypatch):
    monkeypatch.setattr(cap, "MAX_LEGACY_STEPS", 10)
    with pytest.raises(BadInput) as info:
        round_up_to_grid(N + 1, N, decimals=2)
    assert str(info.value) == ("decimals: no executable 2-decimal capacity within 10 steps "
                               "above peak 65537 at N=65536")
    monkeypatch.setattr(cap, "MAX_LEGACY_STEPS", 25)
    assert round_up_to_grid(N + 1, N, decimals=2) == "1.25"   # 1.01 .. 1.25 is 25 steps


# --- step up, next executable, check ----------------------------------------------------------

@FAST
@given(n=st.integers(1, 1 << 20), pad=st.sampled_from([1, 8, 128]), ratio=st.floats(0.1, 4.0))
def test_step_up_adds_exactly_one_pad_multiple_on_the_exact_grid(n, pad, ratio):
    c = round_up_to_grid(max(1, int(ratio * n)), n, pad)
    assert budget_tokens(step_up(c, n, pad), n) == budget_tokens(c, n) + pad


def test_step_up_examples():
    assert step_up("1.03125", N) == "1.03321"              # 67712 = 67584 + 128
    assert budget_tokens("1.03321", N) == 67712
    assert budget_tokens("1.0332", N) == 67711
    assert step_up("1.25", N, decimals=2) == "1.50"
    assert step_up("2.00", N, decimals=2) == "2.25"
    # from a non-executable capacity: the first grid point above its budget
    assert budget_tokens(step_up("1.02", N), N) == 66944


def test_next_executable():
    assert next_executable("1.02", N) == "1.02149"
    assert budget_tokens("1.02149", N) == 66944
    assert next_executable("1.02", N, decimals=2) == "1.25"
    assert next_executable("1.25", N) == "1.25"              # executable: itself
    assert next_executable("0.00001", 128) == "1.00"        # budget 0 -> first grid point
    assert next_executable("0.001", 100, pad_multiple=1) == "0.01"


def test_check_executable_returns_budget_or_raises_with_the_numbers():
    assert check_executable("1.25", N) == 81920
    assert check_executable("0.5", 128, pad_multiple=64) == 64
    with pytest.raises(UnexecutableCapacity) as info:
        check_executable("1.02", N)
    assert str(info.value) == ("capacity 1.02 at N=65536 gives budget 66846, not a multiple of "
                               "pad_multiple (128); next executable: 1.02149")
    err = info.value
    assert (err.capacity, err.uniform_tokens, err.budget, err.pad_multiple,
            err.next_executable) == ("1.02", N, 66846, 128, "1.02149")
    assert isinstance(err, BadInput) and err.exit_code == 2
    with pytest.raises(UnexecutableCapacity, match="next executable: 1.25$"):
        check_executable("1.02", N, decimals=2)


def test_is_executable_boundaries():
    assert is_executable("1.00", 128)
    assert not is_executable("0.5", 128, pad_multiple=128)   # 64 slots
    assert is_executable("0.5", 128, pad_multiple=64)
    assert not is_executable("0.001", 128, pad_multiple=1)   # budget 0 is never executable
    assert is_executable("0.01", 100, pad_multiple=1)         # budget 1


# --- tags and formatting ------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "tag"), [
    ("2", "cap2p00"), ("2.00", "cap2p00"), ("2.000", "cap2p00"), (2, "cap2p00"),
    ("1.25", "cap1p25"), (1.25, "cap1p25"), ("1.250", "cap1p25"), ("1.03125", "cap1p03125"),
    ("1.5", "cap1p50"), ("10", "cap10p00"), ("1e0", "cap1p00"), ("0.002", "cap0p002"),
    (1.1, "cap1p10"), (" 1.75 ", "cap1p75"), (Decimal("12.5"), "cap12p50"),
])
def test_capacity_tag(value, tag):
    assert capacity_tag(value) == tag


def test_format_capacity_keeps_every_digit():
    assert format_capacity("1.0000000000000000001") == "1.0000000000000000001"
    assert format_capacity(0.1) == "0.10"     # repr, not the binary expansion
    assert format_capacity("100") == "100.00"


@pytest.mark.parametrize("bad", ["abc", "", "-1", "0", "0.0", "nan", "inf", "-inf", True, None])
def test_bad_capacities_are_bad_input(bad):
    with pytest.raises(BadInput):
        capacity_tag(bad)


def test_bad_shapes_are_bad_input():
    with pytest.raises(BadInput, match="uniform_tokens: must be positive, got 0"):
        round_up_to_grid(10, 0)
    with pytest.raises(BadInput, match="pad_multiple: must be positive, got -1"):
        is_executable("1.0", 128, pad_multiple=-1)
    with pytest.raises(BadInput, match="pad_multiple: must be positive, got 0"):
        round_up_to_grid(10, 128, pad_multiple=0)
    with pytest.raises(BadInput, match="peak_tokens: must be positive, got 0"):
        round_up_to_grid(0, 128)
    with pytest.raises(BadInput, match="decimals: must be >= 0, got -1"):
        round_up_to_grid(10, 128, decimals=-1)
    assert round_up_to_grid(1, 1, pad_multiple=1) == "1.00"
    assert round_up_to_grid(1, 128, decimals=0) == "1.00"


@pytest.mark.parametrize(("seq", "mbs", "topk", "field"), [
    (0, 1, 8, "seq"), (8192, -1, 8, "mbs"), (8192, 1, 0, "topk")])
def test_uniform_tokens_rejects_non_positive_factors(seq, mbs, topk, field):
    with pytest.raises(BadInput, match=f"^{field}: must be a positive integer"):
        cap.uniform_tokens(seq, mbs, topk)


def test_uniform_tokens():
    assert cap.uniform_tokens(8192, 1, 8) == N
    assert cap.uniform_tokens(4096, 2, 8) == N
    assert cap.uniform_tokens(1, 1, 1) == 1


def test_over_provision():
    assert over_provision(81920, 67457) == pytest.approx(1.21440325)
    assert over_provision(128, 128) == 1.0
    with pytest.raises(BadInput, match="peak_tokens: must be positive, got 0"):
        over_provision(128, 0)
    assert over_provision(128, 1) == 128.0
