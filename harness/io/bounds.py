"""Documented ranges of every number epcap accepts (docs/reliability.md: limits).

A runbook, a models file or a CLI option may carry nonsense (`seed: 10**23`, `ep: 1000000`,
`run_timeout_s: .nan`, `device_memory_gb: 1e-300`): each number is checked to be finite and
within its documented range at load, so nothing downstream hangs, overflows or disables a
timeout. Fields not listed keep the generic bound (finite, |x| <= GENERIC_MAX).
"""

from __future__ import annotations

import json
import math
import re

from harness.errors import BadInput
from harness.io.redact import looks_secret

GENERIC_MAX = 10**15              # any other number: finite and at most this in magnitude
MAX_CAPACITY = 1024               # a capacity is a multiple of the uniform share; 1024 x is absurd
MAX_CAPACITY_CHARS = 32           # "2.00", "1.234375": a capacity string is short
MAX_DECIMALS = 12                 # legacy grid decimals-<D>
MAX_TELEMETRY_INT = 10**18 - 1    # telemetry values are 1-18 digits (docs/spec.md#telemetry)
PATH_COMPONENT_MAX = 100          # a campaign, model, backend or cell-part name: one directory
PATH_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]*")   # ~: a control arm
CELL_PART_SEPARATOR = "__"        # harness.results.layout.Cell.name joins its parts with it

LOG_LINE_MAX = 500                # characters of a log line copied into a record or printed
MAX_INT_DIGITS = 30               # an integer read from a log, trace or name: at most 30 digits
_INT_TEXT = re.compile(r"[+-]?[0-9]+")

# field name -> (low, high), inclusive; the name is the last part of the YAML path
RANGES: dict[str, tuple[float, float]] = {
    "seed": (0, 2**32 - 1),
    "seq": (1, 1 << 20), "micro_batch": (1, 1 << 16), "global_batch": (1, 1 << 24),
    "ep": (1, 4096),
    "layers": (1, 4096), "hidden": (1, 1 << 20), "experts": (1, 1 << 16), "topk": (1, 1024),
    "expert_ffn": (1, 1 << 22), "shared_experts": (0, 1 << 16), "shared_ffn": (0, 1 << 22),
    "first_dense_layers": (0, 4096), "dense_ffn": (0, 1 << 22), "heads": (0, 1 << 16),
    "kv_heads": (0, 1 << 16), "vocab": (0, 1 << 24), "routing_sigma": (0, 100),
    "warmup": (0, 100_000), "iters": (1, 1_000_000), "trials": (1, 1000),
    "launches": (0, 100),       # timing.launches: process starts per arm (0: the loader says >= 1)
    "pad_multiple": (1, 1 << 16), "max_remeasure": (0, 100), "max_validate_steps": (0, 1000),
    "run_timeout_s": (0.001, 7 * 24 * 3600), "infra_retries": (0, 100),
    "retries": (0, 10),         # limits.unclassified.retries
    "device_memory_gb": (1 / 1024, 1 << 20), "gpu_hours_per_cell": (0, 1e6),
    "cell_wall_hours": (0, 1e6),
    "max_parallel_cells": (1, 1024), "nodes": (1, 100_000), "gpus_per_node": (0, 1024),
    # backend options (backends/reference/adapter.py ReferenceOptions)
    "pg_timeout_s": (1, 7 * 24 * 3600), "threads": (1, 1024), "extra_dispatch_passes": (0, 1000),
    # cluster adapters' options (backends/megatron): an echo pool beyond one slot per expert
    # on each of the most ranks (2^16 x 4096), redundant experts beyond the most experts
    "echo_experts": (1, 1 << 28), "redundant_experts_per_rank": (1, 1 << 16),
    # a reference backend's nested options, `options.<section>.<key>` (ReferenceOptions
    # NESTED_SECTIONS), each from what its planner or model can use (harness/loadmodel/):
    # echo planner (planner_echo.py). Spare slots in all: one per expert on every rank is the
    # most a plan fills (experts 2^16 x ep 4096). A home rank reclaims while its load is at
    # most avg x (1 + t); its load is at most the total, ep x avg, so t = ep - 1 <= 4095
    # reclaims all. approx_bin_packing keeps one deque per size class (10^15 exhausted
    # memory); classes are avg // (num_buckets - 1) slots wide, so more than 2^16 of them only
    # split the mean load finer than 1/65535 (upstream's default is 8).
    "planner.moe_num_echo_experts": (0, 1 << 28), "planner.threshold_multiplier": (0, 4095),
    "planner.num_buckets": (1, 1 << 16),
    # ultraep planner (planner_ultraep.py). eps: relative slack of the fast threshold, ceil(lo
    # x (1 + eps)); 1 already allows twice the balanced load (upstream: 0.01). The replica
    # floor and its reference load are token counts of one rank, at most seq x micro_batch x
    # topk at the table's maxima (2^20 x 2^16 x 2^10 = 2^46); a floor above that forbids
    # every replica. Redundant slots beyond the most experts (2^16) hold nothing more; a
    # balance threshold of ep x the mean (4096) is never exceeded.
    "planner.eps": (0, 1), "planner.min_tokens_per_replica": (1, 1 << 46),
    "planner.min_tokens_reference": (0, 1 << 46), "planner.redundant_per_rank": (0, 1 << 16),
    "planner.balance_threshold": (0, 4096),
    # memory model (memory.py): optimizer shards up to the most GPUs a runbook names (slurm
    # nodes x gpus_per_node maxima); the moonep pool a fraction of the expert weights (1: a
    # full second copy); replica slots per rank as the planners' own bounds.
    "memory.optimizer_shards": (1, 100_000 * 1024), "memory.moonep_pool_fraction": (0, 1),
    "memory.echo_slots_per_rank": (0, 1 << 16), "memory.ultraep_redundant_per_rank": (0, 1 << 16),
    # routing workloads (workloads.py): sigma as a model's routing_sigma (exp(sigma x N(0, 1))
    # overflows to inf past a few hundred); hot experts at most the most experts; the hot
    # share a fraction; a rotation period past any run's steps (warmup + iters x trials)
    # never rotates.
    "routing.sigma": (0, 100), "routing.hot_experts": (1, 1 << 16), "routing.hot_share": (0, 1),
    "routing.period": (1, 1 << 31),
    # counts in the results' tables (harness/report/inputs.py COUNT_COLUMNS): never negative
    # (`budget_tokens: -1` in timing.tsv was printed as written)
    "budget_tokens": (0, GENERIC_MAX), "uniform_tokens": (0, GENERIC_MAX),
    "attempt": (0, GENERIC_MAX),
}


def problem(name: str, value: float) -> str | None:
    """Why `value` is out of range for field `name` (None when it is fine)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    low, high = RANGES.get(name, (-GENERIC_MAX, GENERIC_MAX))
    if not low <= value <= high:
        return f"must be in [{_num(low)}, {_num(high)}], got {short(value)}"
    return None


def campaign_name_problem(name: str) -> str | None:
    """Why `name` is not a safe campaign directory name (None when it is)."""
    return path_component_problem(name, "campaign")


def path_component_problem(name: object, kind: str = "name") -> str | None:
    """Why `name` may not become a path component (campaign, model, backend, cell), else None.

    The one validator for every name epcap turns into a directory: a string of at most
    PATH_COMPONENT_MAX printable ASCII letters, digits and `. _ + - ~`, starting with a letter
    or digit (so no separator, no `..`, no hidden file), and never token-shaped: an identity
    field is never redacted, so a name the redaction pass would rewrite is refused instead.
    Model and backend names also refuse `__` and a trailing `_` (`__` separates the parts of
    a cell directory's name).
    """
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__}"
    if not name.strip():
        return "must not be blank"
    if len(name) > PATH_COMPONENT_MAX:
        return f"must be at most {PATH_COMPONENT_MAX} characters, got {len(name)}"
    if not PATH_COMPONENT.fullmatch(name):
        return ("must be a plain directory name: letters, digits and . _ + - ~ , not starting "
                f"with . or -, got {ascii(name)[:PATH_COMPONENT_MAX + 2]}")
    if kind in ("model", "backend") and (CELL_PART_SEPARATOR in name or name.endswith("_")):
        return (f"must not contain {CELL_PART_SEPARATOR!r} nor end with '_' (it separates a "
                "cell directory name's parts)")
    if looks_secret(name):
        return ("looks like a secret (a token shape or NAME=value the redaction pass would "
                "hide); an identity field is never redacted, so choose another name")
    return None


def clip_line(text: str, limit: int = LOG_LINE_MAX) -> str:
    """A log line cut to `limit` characters for copying into a record (events, cell.json,
    STOPPED.txt, a TSV row, the terminal), saying how long it was; shorter lines unchanged."""
    if len(text) <= limit:
        return text
    note = f" ... [line of {len(text)} characters cut to {limit}]"
    return text[:max(limit - len(note), 0)] + note


def parse_int(text: str, max_digits: int = MAX_INT_DIGITS) -> int | None:
    """int(text) for an optionally signed decimal of at most `max_digits` digits, else None.

    Every integer parsed from untrusted text (a log line, a trace, a file name) goes through
    this, so a 5000-digit number is refused by length before Python's int-string limit
    (ValueError past 4300 digits) or a quadratic conversion is reached.
    """
    if len(text) > max_digits + 1 or not _INT_TEXT.fullmatch(text) \
            or len(text.lstrip("+-")) > max_digits:
        return None
    return int(text)


class TooManyDigits(json.JSONDecodeError):
    """A JSON integer longer than MAX_INT_DIGITS digits (a JSONDecodeError, so every caller
    that handles malformed JSON handles this too)."""


def _json_int(text: str) -> int:
    value = parse_int(text)
    if value is None:
        raise TooManyDigits(f"integer of {len(text.lstrip('+-'))} digits, over the "
                            f"{MAX_INT_DIGITS}-digit bound", text[:40], 0)
    return value


_DIGIT_MAP = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
_LONG_RUN = b"1" * (MAX_INT_DIGITS + 1)


def has_long_digit_run(text: str | bytes) -> bool:
    """True when `text` holds more than MAX_INT_DIGITS ASCII digits in a row (C-speed:
    one translate and one substring search, no regex backtracking per position)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    return len(data) > MAX_INT_DIGITS and _LONG_RUN in data.translate(_DIGIT_MAP)


def json_loads(text: str | bytes):
    """json.loads with every integer bounded in digits before conversion (TooManyDigits).

    Streaming readers call this per line of a trace (millions of integers): a text with no
    run of more than MAX_INT_DIGITS digits cannot hold a long integer, so it is parsed at C
    speed; only the others pay for the per-integer check."""
    if not has_long_digit_run(text):
        return json.loads(text)
    return json.loads(text, parse_int=_json_int)


class RefusedJSON(json.JSONDecodeError):
    """A JSON document that decodes but is refused: a duplicated key, NaN or Infinity, a
    number out of range (a JSONDecodeError, so every caller of malformed JSON handles it)."""


def parse_number(text: str) -> float:
    """The one parser of a decimal number from outside: finite and at most GENERIC_MAX in
    magnitude, else ValueError naming it (`1e9999` is inf, not a number of trials)."""
    if len(text) > 400:
        raise ValueError(f"number of {len(text)} characters")
    value = float(text)
    if not math.isfinite(value) or abs(value) > GENERIC_MAX:
        what = "not finite" if not math.isfinite(value) else "out of range"
        raise ValueError(f"{short_text(text)} is {what} (at most {GENERIC_MAX:g} in magnitude)")
    return value


def json_strict(text: str):
    """A whole JSON document from outside, typed at the boundary: integers bounded in digits,
    every other number through parse_number, NaN/Infinity and duplicated keys refused
    (RefusedJSON; its line is where the offending text first stands, the key's second);
    nesting deeper than Python's recursion limit is RecursionError (the caller names it)."""
    def refuse(why: str, needle: str, nth: int = 1) -> RefusedJSON:
        at = -1
        for _ in range(nth):
            at = text.find(needle, at + 1)
        return RefusedJSON(why, text, at if at >= 0 else len(text))

    def number(raw: str) -> float:
        try:
            return parse_number(raw)
        except ValueError as exc:
            raise refuse(str(exc), raw) from None

    def constant(raw: str):
        raise refuse(f"{raw} is not a number", raw)

    def pairs(items: list) -> dict:
        out: dict = {}
        for key, value in items:
            if key in out:
                raise refuse(f"duplicated key {short_text(key)}", json.dumps(key), 2)
            out[key] = value
        return out
    return json.loads(text, parse_int=_json_int, parse_float=number, parse_constant=constant,
                      object_pairs_hook=pairs)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def short_text(text: str, limit: int = 40) -> str:
    """A user's string for an error message: ascii-quoted, at most `limit` characters."""
    quoted = ascii(str(text))
    return quoted if len(quoted) <= limit else quoted[:limit - 4] + "...'"


def short(value: float) -> str:
    """A number as text, at most 40 characters (a 100,000-digit integer stays readable)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    text = _num(value) if abs(value) < 10**30 else f"{float(value):.3e}" \
        if abs(value) < 10**300 else "a number over 10**300"
    return text[:40]


OPTION_FIELD = {"mbs": "micro_batch", "pad-multiple": "pad_multiple"}


def check_option(option: str, value: float | None, high: float | None = None) -> None:
    """BadInput naming --option when `value` is above its maximum (`high`, else this module's
    bound for the option; the lower bounds have their own messages)."""
    if value is None:
        return
    if high is not None and value > high:
        raise BadInput(f"must be at most {high}, got {short(value)}", field=f"--{option}")
    why = problem(OPTION_FIELD.get(option, option), value) if high is None else None
    if why is not None:
        raise BadInput(why, field=f"--{option}")
