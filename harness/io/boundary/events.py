"""events.jsonl records: every field epcap reads has a declared type, unit and range.

A line is decoded as UTF-8 JSON (integers bounded in digits, duplicate keys refused), then
each known field is checked here, so a hand-edited or damaged record (`"t": NaN`, `"eta_s":
"soon"`, `"attempt": -3`) is BadInput naming `events.jsonl:LINE: field` before any
statistic, ETA or resume reads it. Fields this version does not know are kept, unchecked.
"""

from __future__ import annotations

import json
import math

from harness.io.bounds import parse_int

MAX_EPOCH_S = 10**11              # seconds since 1970: year 5138; a label, never a duration
MAX_SECONDS = 10**9               # a duration (wall_s, span_s, eta_s): some 31 years
MAX_COUNT = 10**9                 # runs, attempts, line numbers, pids, retries

# field -> kind; kinds: epoch (UTC seconds, a label), seconds (a duration), count, text,
# texts (a list of strings), mapping, flag (a boolean)
FIELDS: dict[str, str] = {
    "t": "epoch", "mono": "seconds",
    "eta_s": "seconds", "eta_report_s": "seconds", "wall_s": "seconds", "span_s": "seconds",
    "runs_left": "count", "runs_done": "count", "attempt": "count", "pid": "count",
    "line_no": "count", "infra_retries": "count",
    "unclassified_retries": "count",
    "ev": "text", "cell": "text", "campaign": "text", "model": "text", "backend": "text",
    "purpose": "text", "capacity": "text", "status": "text", "stage": "text", "host": "text",
    "reason": "text", "launcher": "text", "cell_dir": "text", "runbook_sha256": "text",
    "models_sha256": "text", "until": "text", "path": "text", "log": "text", "line": "text",
    "runbook": "text", "job_id": "text", "hint": "text",
    "command_line": "texts", "stages": "texts", "models": "texts", "backends": "texts",
    "retry": "texts", "cells": "texts", "changed": "texts", "failures": "texts",
    "row": "mapping", "summary": "mapping", "timing": "mapping", "failure": "mapping",
    "steps": "mapping", "job_extra": "mapping", "result_fields": "mapping",
    "resume": "flag", "ok": "flag", "runs_complete": "flag",
}
REQUIRED_PRESENT = ("ev", "t")    # every record carries its name and its time label


class DuplicateKey(ValueError):
    """A JSON object that names one key twice (which value would count?)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _pairs(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object's pairs as a dict; DuplicateKey for a key named twice."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


class _TooLong:
    """Stands for an integer of over 30 digits (never converted), so its field is named."""


_TOO_LONG = _TooLong()


def _int(text: str) -> int | _TooLong:
    """A JSON integer, or the marker for one of over 30 digits (never converted)."""
    value = parse_int(text)
    return _TOO_LONG if value is None else value


def _holds_too_long(value: object, depth: int = 0) -> bool:
    """True when `value` is, or holds, an over-long integer's marker."""
    if value is _TOO_LONG:
        return True
    if depth > 64:
        return False
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) \
        else ()
    return any(_holds_too_long(v, depth + 1) for v in items)


def decode_line(raw: bytes) -> tuple[dict | None, str | None, str | None]:
    """(record, None, None) for one line, else (None, field or None, why)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, None, f"not UTF-8 (invalid byte at offset {exc.start})"
    try:
        record = json.loads(text, parse_int=_int, object_pairs_hook=_pairs)
    except DuplicateKey as exc:
        return None, exc.key[:40], "duplicate key"
    except (ValueError, RecursionError):
        return None, None, "not a JSON object"
    if not isinstance(record, dict):
        return None, None, "not a JSON object"
    for key, value in record.items():
        if _holds_too_long(value):
            return None, key[:40], "an integer of over 30 digits"
    return record, None, None


def field_problem(name: str, value: object) -> str | None:
    """Why `value` is not acceptable for the event field `name` (None when it is, or when
    the field is not one this version reads)."""
    kind = FIELDS.get(name)
    if kind is None or (value is None and name not in REQUIRED_PRESENT):
        return None
    if kind in ("epoch", "seconds"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number of seconds, got {type(value).__name__}"
        if not math.isfinite(value):
            return f"must be a finite number of seconds, got {value}"
        high = MAX_EPOCH_S if kind == "epoch" else MAX_SECONDS
        if not 0 <= value <= high:
            return f"must be in [0, {high}] seconds"
        return None
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer, got {type(value).__name__}"
        return None if 0 <= value <= MAX_COUNT else f"must be in [0, {MAX_COUNT}]"
    if kind == "text":
        return None if isinstance(value, str) else f"must be a string, got {type(value).__name__}"
    if kind == "texts":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "must be a list of strings"
        return None
    if kind == "mapping":
        return None if isinstance(value, dict) else f"must be an object, got {type(value).__name__}"
    return None if isinstance(value, bool) else f"must be true or false, got {type(value).__name__}"


def record_problem(record: dict) -> tuple[str, str] | None:
    """(field, why) for the first field of `record` that breaks its declaration, else None."""
    for name in REQUIRED_PRESENT:
        if name not in record:
            return name, "missing"
    for name, value in record.items():
        why = field_problem(name, value)
        if why is not None:
            return name, why
    return None
