"""`epcap parse` (docs/spec.md#command-line): a thin shell over the telemetry summary."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from harness.errors import BadInput
from harness.io import bounds
from harness.telemetry.summary import summarize


def _check_log(path: str) -> None:
    """A log to parse must exist, be a file and not be empty."""
    if not os.path.exists(path):
        raise BadInput("no such log file", path=path)
    if not os.path.isfile(path):
        raise BadInput("not a regular file", path=path)
    if os.path.getsize(path) == 0:
        raise BadInput("empty log (0 bytes): no telemetry to parse", path=path)


NO_TELEMETRY_HINT = ("holds no [MOE_DROP_DEBUG] telemetry rows: was the run started with "
                     "MOE_DROP_DEBUG=1 (and a backend that prints the rows)?")


def cli_parse(logs: tuple[str, ...], warmup: int = 0, as_json: bool = False) -> int:
    """Summarize each log; with several logs also the combined run (one stream).

    Exit 1 when a log holds no telemetry row at all (a hint on stderr names it: the usual
    cause is a run without MOE_DROP_DEBUG=1), so a script never reads zeros as a result."""
    if warmup < 0:
        raise BadInput(f"must be >= 0, got {warmup}", field="--warmup")
    bounds.check_option("warmup", warmup, bounds.MAX_TELEMETRY_INT)
    if not logs:
        raise BadInput("no log given", field="LOG")
    for path in logs:
        _check_log(path)
    entries = [{"path": path, **summarize([Path(path)], warmup).to_dict()} for path in logs]
    doc: dict = {"logs": entries}
    if len(logs) > 1:
        doc["combined"] = {"paths": list(logs), **summarize(map(Path, logs), warmup).to_dict()}
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        _print_parse(doc)
    silent = [e["path"] for e in entries
              if not e["rows"] and not e["setup_rows"] and not e["malformed_rows"]]
    for path in silent:
        print(f"epcap parse: note: {path} {NO_TELEMETRY_HINT}", file=sys.stderr)
    return 1 if silent else 0


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
