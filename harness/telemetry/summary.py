"""Dispatch telemetry (docs/spec.md: telemetry): stream logs of any size into rows and a summary.

Logs are read in large binary blocks of whole lines. A block whose dispatch rows all have
the canonical field order is parsed by one regex pass and numpy (a block without a tag costs
a few C-level searches); any other block (odd key order, malformed rows) goes through the
line-by-line parser, which is the reference for what a row means. Memory is bounded by a
few blocks plus 8 bytes (24 for huge values) per distinct (iter, layer, rank).

When the optional compiled scanner `harness.telemetry._scan` is built (setup.py), it replaces both
paths: it reads the same blocks, folds well-formed rows in C and hands every row it cannot
judge alone (malformed, non-ASCII) back to the reference functions here, so results are the
same (property-tested). EPCAP_PURE_PYTHON_PARSE=1 forces the pure path. numpy is imported
on first use: the compiled `summarize` never needs it. The rules for one block of lines live
in harness.telemetry.lines; this module streams files through them and folds the summary.
`summarize(..., observe=)` hands each block to the taxonomy as it is read (`epcap classify`
reads its logs once), and `sifter()` is the compiled scanner's line sifter it uses.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.errors import BadInput
from harness.io.boundary.logs import open_log
from harness.telemetry.lines import (  # noqa: F401 - the parse rules, re-exported for callers
    DISPATCH_TAG,
    FIELDS,
    SETUP_TAG,
    Block,
    DispatchRow,
    LazyNumpy,
    PathLike,
    Tags,
    dispatch_values,
    distinct_values,
    fast_block,
    make_tags,
    row_fields,
    setup_rank,
    slow_block,
    sorted_unique,
    unterminated,
)

try:
    from harness.telemetry import (
        _scan as _compiled,  # optional: built by setup.py when a compiler is there
    )
except ImportError:            # no C compiler at install time: the pure path below
    _compiled = None
if os.environ.get("EPCAP_PURE_PYTHON_PARSE"):
    _compiled = None


np = LazyNumpy(__name__)     # numpy on first use (the compiled summarize never needs it)

BLOCK_BYTES = 4 << 20        # bytes read per block
MAX_LINE = 16 << 20          # a longer line is skipped (malformed when tagged)
MAX_LISTED = 10_000          # malformed line numbers kept in a summary
MAX_DETAILS = 100            # "path:line: reason" strings kept in a summary
COMPACT_KEYS = 4_000_000     # pending (iter, layer, rank) keys before deduplicating
_KEY = "V24"                  # numpy dtype of one (iter, layer, rank) triple
SUM_CLIP = 1 << 40           # a value summed per (iteration, layer) is clipped here (no overflow)
MAX_ISSUES = 10              # invariant_issues strings kept in a summary


@dataclass
class LogSummary:
    """Summary of one run's logs; the first fields are docs/spec.md: command line's `parse --json` keys."""

    rows: int = 0
    setup_rows: int = 0
    malformed_rows: int = 0
    malformed_lines: list[int] = field(default_factory=list)
    saturated_rows: int = 0
    expected_recv: int | None = None
    budget: int | None = None
    peak_actual_valid_recv: int | None = None
    required_capacity: float | None = None
    lower_bound: bool | None = None
    ranks: int = 0
    layers: int = 0
    iterations: int = 0
    complete: bool = False
    used_rows: int = 0
    saturated_used_rows: int = 0
    duplicate_rows: int = 0
    missing_rows: int = 0
    expected_ranks: int = 0
    expected_layers: int = 0
    expected_iterations: int = 0
    budget_values: list[int] = field(default_factory=list)
    expected_recv_values: list[int] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    # invariants of the raw rows (docs/spec.md#telemetry; the audit's conservation rule):
    # per (iteration, layer) group, sum actual_valid_recv <= sum expected_recv, equal when no
    # row of the group is saturated; every group holds one row per rank; no row over budget
    dispatch_groups: int = 0
    unconserved_groups: int = 0
    partial_groups: int = 0
    over_budget_rows: int = 0
    invariant_issues: list[str] = field(default_factory=list)
    # slots the buffer dropped: per (iteration, layer) group, sum expected_recv - sum
    # actual_valid_recv where positive (0 when nothing clipped), summed over the groups
    dropped_slots: int = 0

    def to_dict(self) -> dict:
        """JSON-ready dict (the `parse --json` keys of docs/spec.md plus the extra ones)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LogSummary:
        """The summary `to_dict` wrote (events.jsonl); keys it does not know are ignored."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _open(path: PathLike):
    """Open a log for binary reading through the one bounded log reader
    (harness/io/boundary/logs.py): a missing file, a FIFO or a device is bad input."""
    return open_log(path, field=None)


def _size(fh) -> int:
    """The open file's size now (BLOCK_BYTES where the OS does not say)."""
    try:
        return os.fstat(fh.fileno()).st_size
    except (OSError, AttributeError, ValueError):
        return BLOCK_BYTES


def _skip_line(fh) -> None:
    """Read past the end of the current line and seek back to just after its newline.

    The lines after it are then read again by the caller's loop, so complete rows near the
    end of the file are never mistaken for a truncated last line.
    """
    data = fh.read(BLOCK_BYTES)
    while data and b"\n" not in data:
        data = fh.read(BLOCK_BYTES)
    rest = data.partition(b"\n")[2]
    fh.seek(-len(rest), os.SEEK_CUR)


def _use_compiled(tags: Tags) -> bool:
    """Whether the compiled scanner is there and takes these tags (non-empty, one line)."""
    return _compiled is not None and all(t and b"\n" not in t for t in (tags.dispatch,
                                                                       tags.setup))


_Parser = Callable[[bytearray, int, int], tuple[Block, int]]
# Called with (path, whole lines ending in a newline, number of their first line) for every
# block the summary reads, in order; the bytes are valid only during the call. A last line
# without newline, and the first MAX_LINE bytes of an over-long line, come as one line with a
# newline added. harness.taxonomy.judge reads the logs in the same pass through it; an
# observer with a `sift_with` attribute also gets the compiled sift of each block
# (_CompiledAccumulator.blocks).
Observer = Callable[..., None]    # (path, lines, first line[, sifted]), see above
DEFAULT_TAGS = (DISPATCH_TAG.encode(), SETUP_TAG.encode())


def _tell(observe: Observer | None, path: PathLike, text: bytes, line_no: int) -> None:
    """Hand a last or over-long line to the observer as one line."""
    if observe is not None:
        observe(str(path), text[:MAX_LINE] + b"\n", line_no)


def _scan_compiled(path: PathLike, tags: Tags, parse: _Parser,
                   observe: Observer | None = None) -> Iterator[Block]:
    """_scan's blocks, cut at the same places, read into one reused buffer, parsed in C.
    The buffer is sized to the file (at most BLOCK_BYTES a read): a 4 KiB rank log no longer
    zero-fills 4 MiB (8 MiB touched a log, most of the driver's and the audit's system time)."""
    line_no, buf, have = 1, bytearray(), 0
    with _open(path) as fh:
        step = min(BLOCK_BYTES, _size(fh) + 1)
        while True:
            if len(buf) < have + step:
                buf.extend(bytes(have + step - len(buf)))
            got = fh.readinto(memoryview(buf)[have:have + step])
            if not got:
                break
            if got == step:             # the file grew past its size at open: full blocks
                step = BLOCK_BYTES
            have += got
            cut = buf.rfind(b"\n", 0, have) + 1
            if cut:
                block, newlines = parse(buf, cut, line_no)
                if observe is not None:
                    with memoryview(buf) as view, view[:cut] as lines:
                        observe(str(path), lines, line_no)
                yield block
                line_no += newlines
                buf[:have - cut] = buf[cut:have]
                have -= cut
            elif have > MAX_LINE:
                _tell(observe, path, bytes(buf[:MAX_LINE]), line_no)
                yield unterminated(bytes(buf[:have]), line_no, tags,
                                    f"line longer than {MAX_LINE} bytes")
                _skip_line(fh)
                have = 0
                line_no += 1
    if have:
        _tell(observe, path, bytes(buf[:have]), line_no)
        yield unterminated(bytes(buf[:have]), line_no, tags, "truncated last line (no newline)")


def _judge(buf: bytearray, deferred: list, block: Block) -> list[tuple[int, int, tuple]]:
    """Judge the rows the compiled scanner handed back with the reference functions.

    Setup ranks and malformed rows go into the block; well-formed dispatch rows are
    returned as (row index, line, values) for the caller to place.
    """
    rows = []
    for kind, line_no, start, end, index in deferred:
        segment = bytes(buf[start:end])
        if kind == "s":
            block.setup_ranks.extend(r for r in [setup_rank(segment)] if r is not None)
            continue
        values = dispatch_values(row_fields(segment))
        if isinstance(values, str):
            block.bad.append((line_no, values))
        else:
            rows.append((index, line_no, values))
    return rows


def _compiled_rows(tags: Tags) -> _Parser:
    """A parser of blocks into rows and line numbers with the compiled scanner (no setup)."""
    def parse(buf: bytearray, length: int, line_no: int) -> tuple[Block, int]:
        rows, lines, newlines, deferred, _setup_rows, _ranks = _compiled.scan(
            buf, length, line_no, tags.dispatch, tags.setup)
        block = Block(rows=np.frombuffer(rows, np.int64).reshape(-1, 6),
                       line_nos=np.frombuffer(lines, np.int64).tolist())
        extra = _judge(buf, deferred, block)
        if extra:
            table = block.rows.tolist()
            for index, row_line, values in reversed(extra):
                table.insert(index, list(values))
                block.line_nos.insert(index, row_line)
            block.rows = np.array(table, dtype=np.int64).reshape(-1, 6)
        return block, newlines
    return parse


def _scan(path: PathLike, tags: Tags, fast: bool = True,
          observe: Observer | None = None) -> Iterator[Block]:
    """Yield the parsed blocks of one log, in order, with bounded memory."""
    if _use_compiled(tags):
        yield from _scan_compiled(path, tags, _compiled_rows(tags), observe)
        return
    line_no, pending = 1, b""
    with _open(path) as fh:
        while data := fh.read(BLOCK_BYTES):
            pending += data
            cut = pending.rfind(b"\n") + 1
            if cut:
                block, pending = pending[:cut], pending[cut:]
                parsed = fast_block(block, tags) if fast else None
                if observe is not None:
                    observe(str(path), block, line_no)
                yield parsed or slow_block(block, line_no, tags)
                line_no += block.count(b"\n")
            elif len(pending) > MAX_LINE:
                _tell(observe, path, pending, line_no)
                yield unterminated(pending, line_no, tags, f"line longer than {MAX_LINE} bytes")
                _skip_line(fh)
                pending = b""
                line_no += 1
    if pending:
        _tell(observe, path, pending, line_no)
        yield unterminated(pending, line_no, tags, "truncated last line (no newline)")


def sifter() -> Callable | None:
    """The compiled line sifter (`_scan.sift`, for harness.taxonomy.judge), or None on the
    pure path (no build, or EPCAP_PURE_PYTHON_PARSE=1)."""
    return getattr(_compiled, "sift", None)


def _as_paths(paths: PathLike | Iterable[PathLike]) -> list[PathLike]:
    """Accept one path or an iterable of paths."""
    return [paths] if isinstance(paths, (str, Path)) else list(paths)


def iter_rows(paths: PathLike | Iterable[PathLike],
              tags: dict[str, str] | None = None) -> Iterator[DispatchRow]:
    """Every well-formed dispatch row of the logs, in order, with its path and line."""
    compiled = make_tags(tags)
    for path in _as_paths(paths):
        for block in _scan(path, compiled, fast=False):
            for line_no, values in zip(block.line_nos, block.rows.tolist(), strict=True):
                yield DispatchRow(str(path), line_no, *values)


def rows_table(paths: PathLike | Iterable[PathLike], tags: dict[str, str] | None = None):
    """The well-formed dispatch rows as a pandas DataFrame with the FIELDS columns."""
    import pandas as pd  # lazy: slow import, only when used

    return pd.DataFrame(rows_array(paths, tags), columns=list(FIELDS))


def rows_array(paths: PathLike | Iterable[PathLike], tags: dict[str, str] | None = None
               ) -> np.ndarray:
    """The well-formed dispatch rows as an (n, 6) int64 array, columns in FIELDS order."""
    compiled = make_tags(tags)
    arrays = [b.rows for p in _as_paths(paths) for b in _scan(p, compiled)]
    return np.concatenate(arrays) if arrays else np.empty((0, len(FIELDS)), np.int64)


class _Accumulator:
    """Folds blocks into the numbers of a LogSummary."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.s = LogSummary()
        self.peaks: dict[int, int] = {}
        self.budgets: set[int] = set()
        self.setup_ranks: set[int] = set()
        self.keys: list[np.ndarray] = []
        self.wide: list[np.ndarray] = []
        self.pending_keys = 0
        self.groups: list[np.ndarray] = []    # per block: [key, rows, act, exp, saturated]
        self.over_budget = 0

    def add(self, path: PathLike, block: Block) -> None:
        """Fold one block in."""
        s = self.s
        s.setup_rows += block.setup_rows
        self.setup_ranks.update(block.setup_ranks)
        for line_no, reason in block.bad:
            s.malformed_rows += 1
            if len(s.malformed_lines) < MAX_LISTED:
                s.malformed_lines.append(line_no)
            if len(s.malformed) < MAX_DETAILS:
                s.malformed.append(f"{path}:{line_no}: {reason}")
        if len(block.rows):
            self._add_rows(block.rows)

    def _add_rows(self, rows: np.ndarray) -> None:
        """Fold well-formed rows in: counts, saturation, peaks, distinct keys."""
        it, exp, act, bud = rows[:, 0], rows[:, 3], rows[:, 4], rows[:, 5]
        saturated, used = act >= bud, it >= self.warmup
        s = self.s
        s.rows += len(rows)
        s.saturated_rows += int(saturated.sum())
        s.used_rows += int(used.sum())
        s.saturated_used_rows += int((saturated & used).sum())
        self.budgets.update(distinct_values(bud))
        for value in distinct_values(exp[used]):
            peak = int(act[used & (exp == value)].max())
            self.peaks[value] = max(self.peaks.get(value, peak), peak)
        narrow = (it < 1 << 31) & (rows[:, 1] < 1 << 16) & (rows[:, 2] < 1 << 16)
        self.keys.append(it[narrow] << 32 | rows[narrow, 1] << 16 | rows[narrow, 2])
        self.wide.append(np.ascontiguousarray(rows[~narrow, :3]).view(_KEY).ravel())
        self.pending_keys += len(rows)
        self.over_budget += int((act > bud).sum())
        self._add_groups(rows[narrow], saturated[narrow])
        if self.pending_keys > COMPACT_KEYS:
            self.keys, self.wide = [sorted_unique(np.concatenate(self.keys))], [self._wide()]
            self.groups = [_reduce_groups(np.concatenate(self.groups, axis=1))]
            self.pending_keys = len(self.keys[0]) + len(self.wide[0])

    def _add_groups(self, rows: np.ndarray, saturated: np.ndarray) -> None:
        """Per (iteration, layer): rows, sum actual_valid_recv, sum expected_recv, saturated
        rows (values clipped at SUM_CLIP); (iter, layer) pairs too large to pack are left out,
        as the compiled fold does."""
        if not len(rows):
            return
        table = np.stack([rows[:, 0] << 16 | rows[:, 1], np.ones(len(rows), np.int64),
                          np.minimum(rows[:, 4], SUM_CLIP), np.minimum(rows[:, 3], SUM_CLIP),
                          saturated.astype(np.int64)])
        self.groups.append(_reduce_groups(table))

    def _group_rows(self) -> list[tuple[int, ...]]:
        """(key, rows, act, exp, saturated) per distinct (iteration, layer), by key."""
        if not self.groups:
            return []
        table = _reduce_groups(np.concatenate(self.groups, axis=1))
        return list(zip(*(table[i].tolist() for i in range(5)), strict=True))

    def _wide(self) -> np.ndarray:
        """Distinct keys too large for the packed int64 form."""
        return np.unique(np.concatenate(self.wide)) if self.wide else np.empty(0, _KEY)

    def _seen(self) -> tuple[int, list[list[int]]]:
        """Number of distinct (iter, layer, rank) keys and the distinct values of each."""
        packed = sorted_unique(np.concatenate(self.keys)) if self.keys else np.empty(0, np.int64)
        wide = self._wide().view(np.int64).reshape(-1, 3)
        columns = (packed >> 32, packed >> 16 & 0xFFFF, packed & 0xFFFF)
        values = [sorted_unique(np.concatenate([col, wide[:, i]])).tolist()
                  for i, col in enumerate(columns)]
        return len(packed) + len(wide), values

    def blocks(self, path: PathLike, tags: Tags,
               observe: Observer | None = None) -> Iterator[Block]:
        """The parsed blocks of one log."""
        return _scan(path, tags, observe=observe)

    def finish(self, ranks: int | None, layers: int | None, iters: int | None) -> LogSummary:
        """The summary, with requirement and completeness filled in."""
        s = self.s
        s.budget_values = sorted(self.budgets)
        s.expected_recv_values = sorted(self.peaks)
        s.budget = s.budget_values[-1] if s.budget_values else None
        if self.peaks:
            expected = highest_ratio(self.peaks)
            s.expected_recv, s.peak_actual_valid_recv = expected, self.peaks[expected]
            s.required_capacity = self.peaks[expected] / expected   # int / int: correctly rounded
            s.lower_bound = s.saturated_used_rows > 0
        self._completeness(ranks, layers, iters)
        self._check_groups()
        return s

    def _check_groups(self) -> None:
        """The invariants of the (iteration, layer) groups (see _invariants)."""
        self._invariants(self._group_rows())

    def _invariants(self, groups: list[tuple[int, ...]]) -> None:
        """Judge each (iteration, layer) group: conservation and whole counts. The loop over
        the groups (~10^5 in a 200 MB log) only compares; the first MAX_ISSUES flagged
        groups, in key order, are worded after it."""
        s = self.s
        s.over_budget_rows = self.over_budget
        s.dispatch_groups = len(groups)
        ranks, partial, unconserved = s.expected_ranks, [], []
        for group in groups:
            _, n, a, e, nsat = group
            s.dropped_slots += max(e - a, 0)
            if n != ranks:              # a rank missing or repeated: no sum law to hold
                partial.append(group)
            elif a > e or (a != e and not nsat):
                unconserved.append(group)
        s.partial_groups, s.unconserved_groups = len(partial), len(unconserved)
        s.invariant_issues.extend(issue_words(sorted(partial + unconserved)[:MAX_ISSUES], ranks))

    def _completeness(self, ranks: int | None, layers: int | None, iters: int | None) -> None:
        """Seen vs expected ranks x layers x iterations; missing and duplicate rows."""
        s = self.s
        distinct, seen = self._seen()
        s.iterations, s.layers, s.ranks = (len(v) for v in seen)
        all_ranks = self.setup_ranks.union(seen[2])
        span = max(all_ranks) - min(all_ranks) + 1 if all_ranks else 0
        s.expected_ranks = span if ranks is None else ranks
        s.expected_layers = s.layers if layers is None else layers
        s.expected_iterations = s.iterations if iters is None else iters
        grid = s.expected_ranks * s.expected_layers * s.expected_iterations
        s.duplicate_rows = s.rows - distinct
        s.missing_rows = max(grid - distinct, 0)
        s.complete = (s.rows > 0 and distinct == grid and s.ranks == s.expected_ranks
                      and s.layers == s.expected_layers and s.iterations == s.expected_iterations)


def highest_ratio(peaks: dict[int, int]) -> int:
    """The expected_recv whose peak / expected_recv is highest, compared exactly (cross
    products of ints, no float); on a tie the larger expected_recv. Exact without importing
    fractions (~3 ms of `epcap parse` start-up)."""
    best = 0
    for exp, peak in peaks.items():
        if not best or (peak * best, exp) > (peaks[best] * exp, best):
            best = exp
    return best


def issue_words(flagged: list[tuple[int, ...]], ranks: int) -> list[str]:
    """invariant_issues' words for flagged (key, rows, act, exp, saturated) groups, in order:
    one wording for both paths, so their summaries stay byte-identical."""
    words = []
    for k, n, a, e, nsat in flagged:
        where = f"iter={k >> 16} layer={k & 0xFFFF}"
        if n != ranks:
            words.append(f"{where}: {n} rows for {ranks} ranks")
        else:
            words.append(f"{where}: sum actual_valid_recv {a} {'>' if a > e else '!='} sum "
                         f"expected_recv {e} over {n} rows, {nsat} saturated")
    return words


def _reduce_groups(table: np.ndarray) -> np.ndarray:
    """Sum the columns of a [key, rows, act, exp, saturated] table per distinct key."""
    if table.shape[1] == 0:
        return table
    table = table[:, np.argsort(table[0], kind="stable")]
    starts = np.flatnonzero(np.concatenate([[True], table[0, 1:] != table[0, :-1]]))
    sums = np.add.reduceat(table[1:], starts, axis=1)
    return np.vstack([table[0, starts], sums])


class _CompiledAccumulator(_Accumulator):
    """The same fold, with rows parsed and folded by the compiled scanner."""

    def __init__(self, warmup: int) -> None:
        super().__init__(warmup)
        self.folder = _compiled.Folder(warmup)

    def blocks(self, path: PathLike, tags: Tags,
               observe: Observer | None = None) -> Iterator[Block]:
        """The blocks of one log: setup rows and malformed rows only (the rows are folded).
        An observer that asks for the block's sift (`sift_with`: its anchors) gets it from
        the same pass (`Folder.sift_feed`, the default tags only) as a 4th argument."""
        sift_with = getattr(observe, "sift_with", None)
        one_pass = sift_with is not None and (tags.dispatch, tags.setup) == DEFAULT_TAGS
        sifted: list[tuple] = []     # the block's sift, taken by the observer call after it

        def parse(buf: bytearray, length: int, line_no: int) -> tuple[Block, int]:
            if one_pass:
                newlines, deferred, setup_rows, ranks, cand, others = self.folder.sift_feed(
                    buf, length, line_no, tags.dispatch, tags.setup, *sift_with)
                sifted.append((cand, others, newlines))
            else:
                newlines, deferred, setup_rows, ranks = self.folder.feed(
                    buf, length, line_no, tags.dispatch, tags.setup)
            block = Block(rows=(), setup_rows=setup_rows, setup_ranks=ranks)
            for _index, _line, values in _judge(buf, deferred, block):
                self.folder.add_row(*values)
            return block, newlines

        def seen(name: str, lines, line_no: int) -> None:
            observe(name, lines, line_no, sifted.pop() if sifted else None)
        return _scan_compiled(path, tags, parse, seen if one_pass else observe)

    def finish(self, ranks: int | None, layers: int | None, iters: int | None) -> LogSummary:
        """Take the folded counts, peaks and budgets, then finish as the pure path does."""
        s = self.s
        s.rows, s.saturated_rows, s.used_rows, s.saturated_used_rows = self.folder.counts()
        self.peaks, self.budgets = self.folder.peaks(), set(self.folder.budgets())
        return super().finish(ranks, layers, iters)

    def _group_rows(self) -> list[tuple[int, ...]]:
        """The compiled fold's per-(iteration, layer) sums, as the pure path keeps them."""
        self.over_budget, groups = self.folder.groups()
        return groups

    def _check_groups(self) -> None:
        """_invariants folded in C (`Folder.invariants`): ~10^5 groups in a 200 MB log, and
        no Python object per group; only the first MAX_ISSUES flagged come back, by key. An
        expected rank count beyond int64 goes the Python way (every group is then partial)."""
        s, ranks = self.s, self.s.expected_ranks
        if not -(1 << 63) <= ranks < 1 << 63:
            super()._check_groups()
            return
        (s.over_budget_rows, s.dispatch_groups, s.dropped_slots, s.partial_groups,
         s.unconserved_groups, flagged) = self.folder.invariants(ranks, MAX_ISSUES)
        s.invariant_issues.extend(issue_words(flagged, ranks))

    def _seen(self) -> tuple[int, list[list[int]]]:
        """Distinct (iter, layer, rank) keys and the sorted distinct values of each."""
        return self.folder.seen()


def summarize(paths: PathLike | Iterable[PathLike], warmup: int = 0,
              expected_ranks: int | None = None, expected_layers: int | None = None,
              expected_iters: int | None = None,
              tags: dict[str, str] | None = None,
              observe: Observer | None = None) -> LogSummary:
    """Summarize the logs of one run, read as one stream (see the module docstring);
    `observe` sees every block of lines as it is read (see Observer)."""
    if warmup < 0:
        raise BadInput(f"must be >= 0, got {warmup}", field="warmup")
    compiled = make_tags(tags)
    acc = _CompiledAccumulator(warmup) if _use_compiled(compiled) else _Accumulator(warmup)
    for path in _as_paths(paths):
        for block in acc.blocks(path, compiled, observe):
            acc.add(path, block)
    return acc.finish(expected_ranks, expected_layers, expected_iters)
