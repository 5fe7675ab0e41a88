"""Telemetry lines (docs/spec.md: telemetry): tags, field rules and the parse of one block of
whole lines into rows -- the line-by-line reference parser and the canonical-order fast path.

Pure; harness.telemetry.summary streams files through it. numpy is imported on first use.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path


class LazyNumpy:
    """numpy, imported on first attribute use (saves its import time in `epcap parse`)."""

    def __init__(self, module: str) -> None:
        self.module = module                # whose `np` this stands for until first use

    def __getattr__(self, name: str):
        import numpy  # lazy: slow import, only when used

        sys.modules[self.module].np = numpy
        return getattr(numpy, name)


np = LazyNumpy(__name__)

DISPATCH_TAG = "[MOE_DROP_DEBUG][dispatch]"
SETUP_TAG = "[MOE_DROP_DEBUG][setup_metadata]"
FIELDS = ("iter", "layer", "rank", "expected_recv", "actual_valid_recv", "budget")
_INT = re.compile(r"[0-9]{1,18}")
_NOT_DIGIT = bytes(b for b in range(256) if b not in b"0123456789 ")

PathLike = str | Path


@dataclass(frozen=True)
class DispatchRow:
    """One well-formed dispatch row and where it was read."""

    path: str
    line_no: int
    iter: int
    layer: int
    rank: int
    expected_recv: int
    actual_valid_recv: int
    budget: int


@dataclass(frozen=True)
class Tags:
    """The byte tags of one backend and the fast-path regex built from them."""

    dispatch: bytes
    setup: bytes
    any: re.Pattern
    fast: re.Pattern
    setup_line: re.Pattern
    nested: bool                 # one tag contains the other: no fast path


@dataclass
class Block:
    """What one block of lines yielded."""

    rows: np.ndarray                       # n x 6 int64, FIELDS order
    line_nos: list[int] | None = None      # per row; None on the fast path
    bad: list[tuple[int, str]] = field(default_factory=list)
    setup_rows: int = 0
    setup_ranks: list[int] = field(default_factory=list)


def make_tags(tags: dict[str, str] | None = None) -> Tags:
    """Tags of docs/spec.md: telemetry, or a backend's native ones ({"dispatch": .., "setup": ..})."""
    tags = tags or {}
    dispatch = tags.get("dispatch", DISPATCH_TAG).encode()
    setup = tags.get("setup", SETUP_TAG).encode()
    both = sorted((dispatch, setup), reverse=True)  # a tag's extension before the tag itself
    fast = (re.escape(dispatch) + rb" (iter=\d{1,18} layer=\d{1,18} rank=\d{1,18} "
            rb"expected_recv=[1-9]\d{0,17} actual_valid_recv=\d{1,18} budget=\d{1,18})(?=\s)"
            rb"(?![^\n]*?(?<!\S)(?:iter|layer|rank|expected_recv|actual_valid_recv|budget)=)")
    alternatives = b"|".join(map(re.escape, both))
    setup_line = re.escape(setup) + rb"((?:(?!" + alternatives + rb")[^\n])*)"
    return Tags(dispatch, setup, re.compile(alternatives), re.compile(fast),
                 re.compile(setup_line), dispatch in setup or setup in dispatch)


def row_fields(segment: bytes) -> dict[str, str | None]:
    """key=value tokens of a row (other tokens ignored); a key given twice maps to None, so
    a repeated field makes the row malformed instead of hiding one of its readings."""
    out: dict[str, str | None] = {}
    for token in segment.decode("utf-8", "replace").split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = None if key in out else value
    return out


def dispatch_values(fields: dict[str, str]) -> tuple[int, ...] | str:
    """The six integers of a dispatch row, or the reason it is malformed."""
    values = []
    for name in FIELDS:
        if name not in fields:
            return f"missing field {name}"
        if fields[name] is None:
            return f"repeated field {name}"
        if not _INT.fullmatch(fields[name]):
            return f"non-integer value {name}={fields[name][:40]!r}"
        values.append(int(fields[name]))
    if values[3] == 0:
        return "expected_recv must be positive"
    return tuple(values)


def slow_block(block: bytes, first_line: int, tags: Tags) -> Block:
    """Parse every tagged row of a block line by line (the reference parser)."""
    out = Block(rows=np.empty((0, 6), np.int64), line_nos=[])
    rows: list[tuple[int, ...]] = []
    hits = list(tags.any.finditer(block))
    line_no, counted = first_line, 0
    for i, hit in enumerate(hits):
        line_no += block.count(b"\n", counted, hit.start())
        counted = hit.start()
        end = block.find(b"\n", hit.end())
        if i + 1 < len(hits):
            end = min(end, hits[i + 1].start())
        segment = block[hit.end():end]
        if hit.group() == tags.setup:
            out.setup_rows += 1
            out.setup_ranks.extend(r for r in [setup_rank(segment)] if r is not None)
            continue
        values = dispatch_values(row_fields(segment))
        if isinstance(values, str):
            out.bad.append((line_no, values))
        else:
            rows.append(values)
            out.line_nos.append(line_no)
    if rows:
        out.rows = np.array(rows, dtype=np.int64)
    return out


def setup_rank(segment: bytes) -> int | None:
    """The rank of a setup row (its text up to the next tag or newline), if it names one."""
    rank = row_fields(segment).get("rank") or ""
    return int(rank) if _INT.fullmatch(rank) else None


def fast_block(block: bytes, tags: Tags) -> Block | None:
    """Parse a block whose dispatch rows are all canonical; else None (use the slow path)."""
    found = tags.fast.findall(block)
    if tags.nested or len(found) != block.count(tags.dispatch):
        return None
    digits = b" ".join(found).translate(None, _NOT_DIGIT)
    rows = np.fromstring(digits, dtype=np.int64, sep=" ") if found else np.empty(0, np.int64)
    out = Block(rows=rows.reshape(-1, 6))
    if tags.setup in block:
        ranks = [setup_rank(m.group(1)) for m in tags.setup_line.finditer(block)]
        out.setup_rows = len(ranks)
        out.setup_ranks = [r for r in ranks if r is not None]
    return out


CR_ONLY = ("lines end in a carriage return only (CR line endings, no newline): not read as "
           "rows; convert the log with `tr '\\r' '\\n'`")


def unterminated(text: bytes, line_no: int, tags: Tags, reason: str) -> Block:
    """A last line without newline, or an over-long line: each tag in it is malformed. A
    carriage return inside it (not only at its end) means the log's lines end in CR alone:
    said so, not called a truncated line (the per-line loop never sees this)."""
    hits = len(tags.any.findall(text))
    if hits and b"\r" in text.rstrip(b"\r"):
        reason = CR_ONLY
    return Block(rows=np.empty((0, 6), np.int64), line_nos=[], bad=[(line_no, reason)] * hits)


@dataclass(frozen=True)
class LineRow:
    """One tagged segment of a physical line: its span, whether it is a setup row, and the
    six dispatch values or why they are malformed (None for a setup row)."""

    start: int
    end: int
    setup: bool
    values: tuple[int, ...] | None
    reason: str | None


@functools.lru_cache(maxsize=8)
def _tag_regex(dispatch: str, setup: str) -> re.Pattern:
    both = sorted((dispatch, setup), reverse=True)   # an extension before the tag itself
    return re.compile("|".join(map(re.escape, both)))


def line_rows(line: str, dispatch: str = DISPATCH_TAG, setup: str = SETUP_TAG
              ) -> list[LineRow]:
    """The telemetry rows of one physical line by `slow_block`'s rule (a tag's segment runs
    to the next tag or the end of the line; `row_fields` + `dispatch_values` judge it), so
    the taxonomy and `epcap parse` agree on which rows are well-formed even when another
    process's message was spliced into the line."""
    if dispatch not in line and setup not in line:
        return []
    hits = list(_tag_regex(dispatch, setup).finditer(line))
    out = []
    for i, hit in enumerate(hits):
        end = hits[i + 1].start() if i + 1 < len(hits) else len(line)
        if hit.group() == setup:
            out.append(LineRow(hit.start(), end, True, None, None))
            continue
        values = dispatch_values(row_fields(line[hit.end():end].encode("utf-8", "replace")))
        if isinstance(values, str):
            out.append(LineRow(hit.start(), end, False, None, values))
        else:
            out.append(LineRow(hit.start(), end, False, values, None))
    return out


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (sort + neighbour compare: faster than numpy's hash unique)."""
    values = np.sort(values)
    return values[np.concatenate([values[:1] == values[:1], values[1:] != values[:-1]])]


def distinct_values(values: np.ndarray) -> list[int]:
    """Distinct values of a column (cheap when they are all equal, the usual case)."""
    if len(values) == 0:
        return []
    if values.min() == values.max():
        return [int(values[0])]
    return sorted_unique(values).tolist()


