"""`epcap capacity` and `epcap parse` (docs/spec.md: command line): thin shells over the capacity core."""

from __future__ import annotations

import json
import math
import os
from decimal import Decimal
from pathlib import Path

from harness import bounds
from harness import capacity as cap
from harness.errors import BadInput
from harness.telemetry import LogSummary, summarize


def _emit(doc: dict) -> None:
    """Print one JSON document on stdout."""
    print(json.dumps(doc, indent=2))


def _positive(**options: int | None) -> None:
    """Every named option must be a positive integer within its documented range."""
    for name, value in options.items():
        if value is not None and value <= 0:
            raise BadInput(f"must be a positive integer, got {value}", field=f"--{name}")
        _in_range(name, value)


_RANGE_OF = {"mbs": "micro_batch", "pad-multiple": "pad_multiple"}


def _in_range(option: str, value: float | None, high: float | None = None) -> None:
    """BadInput naming --option when `value` is above its maximum (harness.bounds; the
    lower bounds have their own messages)."""
    if value is None:
        return
    if high is not None and value > high:
        raise BadInput(f"must be at most {high}, got {bounds._short(value)}",
                       field=f"--{option}")
    why = bounds.problem(_RANGE_OF.get(option, option), value) if high is None else None
    if why is not None:
        raise BadInput(why, field=f"--{option}")


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
                 peak: int | None = None, check: str | None = None, pad_multiple: int = 128,
                 decimals: int | None = None, as_json: bool = False) -> int:
    """Round a requirement onto the executable grid, or check one capacity (exit 1: not)."""
    _positive(seq=seq, mbs=mbs, topk=topk, **{"pad-multiple": pad_multiple})
    if decimals is not None and decimals < 0:
        raise BadInput(f"must be >= 0, got {decimals}", field="--decimals")
    _in_range("decimals", decimals, bounds.MAX_DECIMALS)
    _in_range("peak", peak, bounds.MAX_TELEMETRY_INT)
    if required is not None and math.isfinite(required) and required > bounds.MAX_CAPACITY:
        raise BadInput(f"must be at most {bounds.MAX_CAPACITY}, got {bounds._short(required)}",
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


def _check_log(path: str) -> None:
    """A log to parse must exist, be a file and not be empty."""
    if not os.path.exists(path):
        raise BadInput("no such log file", path=path)
    if not os.path.isfile(path):
        raise BadInput("not a regular file", path=path)
    if os.path.getsize(path) == 0:
        raise BadInput("empty log (0 bytes): no telemetry to parse", path=path)


def cli_parse(logs: tuple[str, ...], warmup: int = 0, as_json: bool = False) -> int:
    """Summarize each log; with several logs also the combined run (one stream)."""
    if warmup < 0:
        raise BadInput(f"must be >= 0, got {warmup}", field="--warmup")
    _in_range("warmup", warmup, bounds.MAX_TELEMETRY_INT)
    if not logs:
        raise BadInput("no log given", field="LOG")
    for path in logs:
        _check_log(path)
    entries = [{"path": path, **summarize([Path(path)], warmup).to_dict()} for path in logs]
    doc: dict = {"logs": entries}
    if len(logs) > 1:
        doc["combined"] = {"paths": list(logs), **summarize(map(Path, logs), warmup).to_dict()}
    if as_json:
        _emit(doc)
    else:
        _print_parse(doc)
    return 0


_SHOWN = ("rows", "setup_rows", "malformed_rows", "saturated_rows", "expected_recv", "budget",
          "peak_actual_valid_recv", "required_capacity", "lower_bound", "ranks", "layers",
          "iterations", "complete", "missing_rows", "duplicate_rows")


def _cell(value) -> str:
    """Human form of one summary value."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6f}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _print_parse(doc: dict) -> None:
    """A field x log table, then the first malformed rows of each log."""
    columns = [(e["path"], e) for e in doc["logs"]]
    if "combined" in doc:
        columns.append(("combined", doc["combined"]))
    from rich.console import Console  # lazy: rich is slow to import
    from rich.table import Table  # lazy: rich is slow to import

    table = Table(title="epcap parse", show_header=True)
    table.add_column("field")
    for name, _ in columns:
        table.add_column(Path(name).name if name != "combined" else name, justify="right")
    for key in _SHOWN:
        table.add_row(key, *(_cell(e[key]) for _, e in columns))
    Console().print(table)
    for _, entry in columns[: len(doc["logs"])]:
        for detail in entry["malformed"][:10]:
            print(f"malformed: {detail}")


__all__ = ["cli_capacity", "cli_parse", "LogSummary"]
