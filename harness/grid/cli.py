"""`epcap capacity` (docs/spec.md#command-line): a thin shell over the capacity core."""

from __future__ import annotations

import json
import math
from decimal import Decimal

from harness.errors import BadInput
from harness.grid import capacity as cap
from harness.io import bounds
from harness.vocab import DEFAULT_PAD_MULTIPLE


def _emit(doc: dict) -> None:
    """Print one JSON document on stdout."""
    print(json.dumps(doc, indent=2))


def _positive(**options: int | None) -> None:
    """Every named option must be a positive integer within its documented range."""
    for name, value in options.items():
        if value is not None and value <= 0:
            raise BadInput(f"must be a positive integer, got {value}", field=f"--{name}")
        bounds.check_option(name, value)


def _mode(required: float | None, peak: int | None, check: str | None) -> str:
    """The one of --required / --peak / --check that was given."""
    given = [name for name, value in (("required", required), ("peak", peak), ("check", check))
             if value is not None]
    if len(given) != 1:
        names = ", ".join(f"--{g}" for g in given) or "none"
        raise BadInput(f"give exactly one of --required, --peak, --check (got {names})")
    return given[0]


def _peak_from_required(required: float, uniform: int) -> int:
    """ceil(R x N) slots, exactly; R must be finite and at least 1.0."""
    if not math.isfinite(required) or required < 1.0:
        raise BadInput(f"{required} is below 1.0 (or not finite): the peak over ranks cannot "
                       "fall below the uniform share", field="--required")
    return math.ceil(Decimal(repr(required)) * uniform)


def cli_capacity(seq: int, mbs: int, topk: int, required: float | None = None,
                 peak: int | None = None, check: str | None = None,
                 pad_multiple: int = DEFAULT_PAD_MULTIPLE, decimals: int | None = None,
                 as_json: bool = False) -> int:
    """Round a requirement onto the executable grid, or check one capacity (exit 1: not)."""
    _positive(seq=seq, mbs=mbs, topk=topk, **{"pad-multiple": pad_multiple})
    if decimals is not None and decimals < 0:
        raise BadInput(f"must be >= 0, got {decimals}", field="--decimals")
    bounds.check_option("decimals", decimals, bounds.MAX_DECIMALS)
    bounds.check_option("peak", peak, bounds.MAX_TELEMETRY_INT)
    if required is not None and math.isfinite(required) and required > bounds.MAX_CAPACITY:
        raise BadInput(f"must be at most {bounds.MAX_CAPACITY}, got {bounds.short(required)}",
                       field="--required")
    if check is not None and (len(check) > bounds.MAX_CAPACITY_CHARS
                              or cap.to_decimal(check) > bounds.MAX_CAPACITY):
        raise BadInput(f"must be a capacity of at most {bounds.MAX_CAPACITY} and "
                       f"{bounds.MAX_CAPACITY_CHARS} characters", field="--check")
    mode = _mode(required, peak, check)
    uniform = cap.uniform_tokens(seq, mbs, topk)
    if mode == "check":
        return _check(check, uniform, pad_multiple, decimals, as_json)
    if mode == "required":
        peak = _peak_from_required(required, uniform)
    elif peak < uniform:
        raise BadInput(f"{peak} is below the uniform share N={uniform}: the peak over ranks "
                       "cannot fall below it", field="--peak")
    selected = cap.round_up_to_grid(peak, uniform, pad_multiple, decimals)
    budget = cap.budget_tokens(selected, uniform)
    doc = {"uniform_tokens": uniform, "pad_multiple": pad_multiple, "peak_tokens": peak,
           "required_capacity": required if mode == "required" else peak / uniform,
           "selected_capacity": selected, "budget_tokens": budget,
           "over_provision": cap.over_provision(budget, peak), "decimals": decimals,
           "capacity_tag": cap.capacity_tag(selected)}
    if as_json:
        _emit(doc)
    else:
        _print_selection(doc)
    return 0


def _check(capacity: str, uniform: int, pad_multiple: int, decimals: int | None,
           as_json: bool) -> int:
    """--check: is the capacity executable at this shape? Exit 1 when it is not."""
    budget = cap.budget_tokens(capacity, uniform)
    ok = cap.is_executable(capacity, uniform, pad_multiple)
    nxt = capacity if ok else cap.next_executable(capacity, uniform, pad_multiple, decimals)
    doc = {"capacity": capacity, "budget_tokens": budget, "executable": ok,
           "next_executable": nxt, "uniform_tokens": uniform, "pad_multiple": pad_multiple}
    if as_json:
        _emit(doc)
    elif ok:
        print(f"capacity {capacity} at N={uniform}: budget {budget} = "
              f"{budget // pad_multiple} x {pad_multiple}: executable")
    else:
        print(f"capacity {capacity} at N={uniform} gives budget {budget}, not a multiple of "
              f"pad_multiple ({pad_multiple}): NOT executable; next executable: {nxt} "
              f"(budget {cap.budget_tokens(nxt, uniform)})")
    return 0 if ok else 1


def _print_selection(doc: dict) -> None:
    """A small human table for `epcap capacity`."""
    from rich.console import Console  # lazy: keeps `epcap parse --json` start-up short
    from rich.table import Table  # lazy: rich is slow to import

    table = Table(title="epcap capacity", show_header=True)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    grid = "exact" if doc["decimals"] is None else f"{doc['decimals']} decimals (legacy)"
    for name, value in (("uniform share N (slots)", doc["uniform_tokens"]),
                        ("peak demand (slots)", doc["peak_tokens"]),
                        ("required capacity", f"{doc['required_capacity']:.6f}"),
                        ("grid", f"{grid}, pad multiple {doc['pad_multiple']}"),
                        ("selected capacity", doc["selected_capacity"]),
                        ("budget (slots)", doc["budget_tokens"]),
                        ("over-provision", f"{doc['over_provision']:.4f}"),
                        ("directory tag", doc["capacity_tag"])):
        table.add_row(name, str(value))
    Console().print(table)
