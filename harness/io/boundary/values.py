"""Command-line values: integers and comma lists, each within its declared range.

An option's value is checked here before any work is done with it, so `--micro-batch
10**23` or `--pad-multiple 10**23` is BadInput naming the option (exit 2), never an assert
deep in the model nor a loop that does not return. Ranges are harness.io.bounds.RANGES.
"""

from __future__ import annotations

from harness.errors import BadInput
from harness.io.boundary.text import text_problem
from harness.io.bounds import RANGES, parse_int, short, short_text

MAX_LIST = 64                     # values in one comma list (--ep 8,16,32)


def bounded_int(value: int | None, option: str, field: str) -> int | None:
    """`value` when it lies in RANGES[field]; BadInput naming `option` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"must be an integer, got {type(value).__name__}", field=option)
    low, high = RANGES[field]
    if not low <= value <= high:
        raise BadInput(f"must be in [{int(low)}, {int(high)}], got {short(value)}",
                       field=option)
    return value


def int_list(text: str | int | None, option: str, field: str) -> list[int] | None:
    """'8,16,32' -> [8, 16, 32], every value a decimal integer within RANGES[field]."""
    if text is None:
        return None
    raw = str(text)
    why = text_problem(raw)
    if why is not None:
        raise BadInput(why, field=option)
    parts = [x.strip() for x in raw.split(",") if x.strip()]
    if len(parts) > MAX_LIST:
        raise BadInput(f"at most {MAX_LIST} values, got {len(parts)}", field=option)
    values = [parse_int(x) for x in parts]
    if not values or None in values:
        raise BadInput(f"expected integers separated by commas, got {short_text(raw)}",
                       field=option)
    for value in values:
        bounded_int(value, option, field)
    return values
