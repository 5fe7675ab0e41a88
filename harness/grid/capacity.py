"""The executable capacity grid (docs/spec.md: grid): pure functions over decimal strings.

A backend allocates `budget = int(float(capacity) * N)` slots and asserts
`budget % pad_multiple == 0`. Everything here uses exactly that float arithmetic, and
capacities travel as decimal strings so that no value is ever formatted lossily.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from harness.errors import BadInput
from harness.io.bounds import MAX_DECIMALS
from harness.vocab import DEFAULT_PAD_MULTIPLE

Capacity = str | float | int | Decimal

MAX_DIGITS = 40            # decimals tried by the exact search before giving up (never reached)
MAX_LEGACY_STEPS = 1_000_000  # D-decimal candidates tried by the legacy search


class UnexecutableCapacity(BadInput):
    """A capacity whose budget is not a multiple of the pad multiple (never launched)."""

    def __init__(self, capacity: Capacity, uniform_tokens: int, budget: int,
                 pad_multiple: int, next_capacity: str) -> None:
        text = format_capacity(capacity)
        super().__init__(
            f"capacity {text} at N={uniform_tokens} gives budget {budget}, not a multiple of "
            f"pad_multiple ({pad_multiple}); next executable: {next_capacity}")
        self.capacity, self.uniform_tokens, self.budget = text, uniform_tokens, budget
        self.pad_multiple, self.next_executable = pad_multiple, next_capacity


def to_decimal(capacity: Capacity) -> Decimal:
    """Exact decimal value of a capacity; floats use their shortest round-trip repr."""
    if isinstance(capacity, bool):
        raise BadInput(f"capacity {capacity!r} is not a number")
    if isinstance(capacity, float):
        capacity = repr(capacity)
    try:
        value = Decimal(str(capacity).strip())
    except InvalidOperation:
        raise BadInput(f"capacity {capacity!r} is not a decimal number") from None
    if not value.is_finite() or value <= 0:
        raise BadInput(f"capacity {capacity!r} must be a positive finite number")
    return value


@dataclass(frozen=True)
class Grid:
    """The capacity grid a campaign rounds onto: exact (decimals None), or the legacy grid of
    D-decimal capacities. Spelt `exact` | `decimals-D` (runbooks, campaign.json); `parse` also
    takes the `decimals:D` that `epcap forecast --grid` has always accepted."""

    decimals: int | None = None

    @classmethod
    def parse(cls, text: object) -> Grid:
        """The grid a spelling names; ValueError for anything else (D at most MAX_DECIMALS)."""
        if text == "exact":
            return cls(None)
        if isinstance(text, str):
            for sep in ("-", ":"):
                head, found, digits = text.partition(sep)
                if head == "decimals" and found and digits.isascii() and digits.isdigit() \
                        and len(digits) <= 2 and int(digits) <= MAX_DECIMALS:
                    return cls(int(digits))
        raise ValueError(f"not a grid (exact or decimals-D, D <= {MAX_DECIMALS}): {text!r}")

    def __str__(self) -> str:
        return "exact" if self.decimals is None else f"decimals-{self.decimals}"


def format_capacity(capacity: Capacity) -> str:
    """Canonical decimal string: no exponent, trailing zeros dropped, at least two decimals."""
    text = f"{to_decimal(capacity).normalize():f}"
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


def capacity_tag(capacity: Capacity) -> str:
    """Directory tag of a capacity: 2 -> cap2p00, 1.25 -> cap1p25, 1.03125 -> cap1p03125."""
    return "cap" + format_capacity(capacity).replace(".", "p")


def uniform_tokens(seq: int, mbs: int, topk: int) -> int:
    """N = seq x mbs x topk, the uniform per-rank receive share; every factor must be > 0."""
    for name, value in (("seq", seq), ("mbs", mbs), ("topk", topk)):
        if value <= 0:
            raise BadInput(f"must be a positive integer, got {value}", field=name)
    return seq * mbs * topk


def _check_shape(uniform_tokens: int, pad_multiple: int) -> None:
    """Reject a non-positive N or pad multiple (no grid exists for them)."""
    if uniform_tokens <= 0:
        raise BadInput(f"must be positive, got {uniform_tokens}", field="uniform_tokens")
    if pad_multiple <= 0:
        raise BadInput(f"must be positive, got {pad_multiple}", field="pad_multiple")


def budget_tokens(capacity: Capacity, uniform_tokens: int) -> int:
    """Slots a backend allocates for this capacity: int(float(c) * N), as the kernels do."""
    return int(float(to_decimal(capacity)) * uniform_tokens)


def is_executable(capacity: Capacity, uniform_tokens: int,
                  pad_multiple: int = DEFAULT_PAD_MULTIPLE) -> bool:
    """True when the capacity's budget is a positive multiple of the pad multiple."""
    _check_shape(uniform_tokens, pad_multiple)
    budget = budget_tokens(capacity, uniform_tokens)
    return budget > 0 and budget % pad_multiple == 0


def check_executable(capacity: Capacity, uniform_tokens: int,
                     pad_multiple: int = DEFAULT_PAD_MULTIPLE, decimals: int | None = None) -> int:
    """Return the budget of an executable capacity; raise UnexecutableCapacity otherwise."""
    if is_executable(capacity, uniform_tokens, pad_multiple):
        return budget_tokens(capacity, uniform_tokens)
    budget = budget_tokens(capacity, uniform_tokens)
    nxt = next_executable(capacity, uniform_tokens, pad_multiple, decimals)
    raise UnexecutableCapacity(capacity, uniform_tokens, budget, pad_multiple, nxt)


def next_executable(capacity: Capacity, uniform_tokens: int,
                    pad_multiple: int = DEFAULT_PAD_MULTIPLE, decimals: int | None = None) -> str:
    """The smallest grid capacity whose budget is at least this capacity's budget."""
    budget = max(budget_tokens(capacity, uniform_tokens), 1)
    return round_up_to_grid(budget, uniform_tokens, pad_multiple, decimals)


def step_up(capacity: Capacity, uniform_tokens: int, pad_multiple: int = DEFAULT_PAD_MULTIPLE,
            decimals: int | None = None) -> str:
    """One rung up: the smallest grid capacity whose budget exceeds this one's (budget + P)."""
    return round_up_to_grid(budget_tokens(capacity, uniform_tokens) + 1, uniform_tokens,
                            pad_multiple, decimals)


def round_up_to_grid(peak_tokens: int, uniform_tokens: int,
                     pad_multiple: int = DEFAULT_PAD_MULTIPLE, decimals: int | None = None) -> str:
    """Smallest executable capacity whose budget covers peak_tokens (decimal string).

    decimals=None is the exact grid: budget = ceil(peak / P) * P, written as the shortest
    decimal that yields that budget. decimals=D is the legacy grid of D-decimal capacities.
    """
    _check_shape(uniform_tokens, pad_multiple)
    if peak_tokens <= 0:
        raise BadInput(f"must be positive, got {peak_tokens}", field="peak_tokens")
    if decimals is None:
        budget = -(-peak_tokens // pad_multiple) * pad_multiple
        return _shortest_for_budget(budget, uniform_tokens)
    if decimals < 0:
        raise BadInput(f"must be >= 0, got {decimals}", field="decimals")
    return _legacy_round_up(peak_tokens, uniform_tokens, pad_multiple, decimals)


def _decimal_text(units: int, decimals: int) -> str:
    """The decimal string of units / 10**decimals (exact, at least two decimals)."""
    return format_capacity(Decimal(units).scaleb(-decimals))


def _budget_of(units: int, decimals: int, uniform_tokens: int) -> int:
    """Budget of the capacity units / 10**decimals, via its decimal string as a user types it."""
    return int(float(Decimal(units).scaleb(-decimals)) * uniform_tokens)


def _shortest_for_budget(budget: int, uniform_tokens: int) -> str:
    """Shortest decimal c (smallest at that length) with int(float(c) * N) == budget."""
    for digits in range(MAX_DIGITS + 1):
        scale = 10 ** digits
        low = Fraction(budget * scale, uniform_tokens).__ceil__() - 1
        high = Fraction((budget + 1) * scale, uniform_tokens).__floor__() + 1
        for units in range(low, high + 1):
            if _budget_of(units, digits, uniform_tokens) == budget:
                return _decimal_text(units, digits)
    raise AssertionError(f"no decimal capacity gives budget {budget} at N={uniform_tokens}")


def _legacy_round_up(peak_tokens: int, uniform_tokens: int, pad_multiple: int,
                     decimals: int) -> str:
    """Smallest D-decimal capacity that is executable and whose budget covers the peak."""
    scale = 10 ** decimals
    start = Fraction(peak_tokens * scale, uniform_tokens).__ceil__()
    for units in range(start, start + MAX_LEGACY_STEPS):
        budget = _budget_of(units, decimals, uniform_tokens)
        if budget >= peak_tokens and budget % pad_multiple == 0:
            return _decimal_text(units, decimals)
    raise BadInput(f"no executable {decimals}-decimal capacity within {MAX_LEGACY_STEPS} steps "
                   f"above peak {peak_tokens} at N={uniform_tokens}", field="decimals")


def over_provision(budget: int, peak_tokens: int) -> float:
    """Selected budget over peak demand (1.0 = no slack); the peak must be positive."""
    if peak_tokens <= 0:
        raise BadInput(f"must be positive, got {peak_tokens}", field="peak_tokens")
    return budget / peak_tokens


def step_down(capacity: Capacity, uniform_tokens: int, pad_multiple: int = DEFAULT_PAD_MULTIPLE,
              decimals: int | None = None) -> str | None:
    """One rung down: the largest grid capacity whose budget is below this one's (None when
    no positive budget is left); the inverse of `step_up` on the grid."""
    budget = budget_tokens(capacity, uniform_tokens)
    for below in range(budget - pad_multiple, 0, -pad_multiple):
        candidate = round_up_to_grid(below, uniform_tokens, pad_multiple, decimals)
        if budget_tokens(candidate, uniform_tokens) < budget:
            return candidate
    return None


def rungs_around(capacity: str, k: int, uniform_tokens: int,
                 pad_multiple: int = DEFAULT_PAD_MULTIPLE,
                 decimals: int | None = None) -> list[tuple[int, str]]:
    """(offset, capacity) of the executable rungs from k below to k above `capacity` (offset
    0, kept as written), ascending; fewer below when no positive budget is left
    (docs/frontier.md)."""
    below: list[tuple[int, str]] = []
    current: str | None = capacity
    for offset in range(1, k + 1):
        current = step_down(current, uniform_tokens, pad_multiple, decimals)
        if current is None:
            break
        below.append((-offset, current))
    above, up = [], capacity
    for offset in range(1, k + 1):
        up = step_up(up, uniform_tokens, pad_multiple, decimals)
        above.append((offset, up))
    return [*reversed(below), (0, capacity), *above]


def rung_text(offset: int) -> str:
    """A frontier rung's offset as frontier.tsv writes it: "-2", "-1", "0", "+1", "+2"."""
    return f"{offset:+d}" if offset else "0"
