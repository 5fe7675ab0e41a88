"""Routing that the evidence determines (`routing-not-from-seed`): the reference backend routes
from its seed, so every count its dispatch rows state that the routing decides is the
backend's to regenerate from the cell's recorded argv.

Each cell whose backend regenerates its routing (`Backend.expected_dispatch` on cell.json
`argv`: the reference worker, backends/reference/expected.py) has its
`[MOE_DROP_DEBUG][dispatch]` rows' `actual_valid_recv`, `pre_balance_recv` and
`redundant_experts` compared with the rows the regenerated routing implies, per (iteration,
layer, rank). `expected_recv`, `budget` and the setup rows' `exact_recv_per_rank` (the uniform
share N) do not depend on the routing and are not compared here. A recorded epcap trace
(`--record-trace`, found in the cell directory by its name) is held to the rows its own
counts imply and, for a seeded run, to the seed's counts rank by rank.

Cost: regeneration draws every rank's counts per (iteration, layer), so a cell of more than
MAX_GROUPS groups is checked on a sample of them that a forger cannot predict: it is drawn
from the audit's sample seed (chosen at audit time, `secrets.randbits(63)`, unless `epcap
audit --sample-seed N` gives it; printed with the verdict) and the cell's name, and it always
holds the groups of the rows that decide a requirement: each rank's top row (the maximum
`actual_valid_recv` of that rank, ties included; the cell's peak is one of them) and every
saturated row (`actual_valid_recv >= budget`); the rest of the MAX_GROUPS is drawn at random.
A forger who edits k other groups of a cell of G groups, m of them always sampled, escapes
one audit with probability C(G-m-k, s) / C(G-m, s), s = MAX_GROUPS - m (for one group
1 - s/(G-m)); the verdict states the fraction checked per cell. Rows in another field order
than the worker's are found by a slower second read.

Not applicable: no runbook as run (no backend to ask), no cell of such a backend. UNKNOWN:
a reference cell with no argv, or one its worker here refuses (another version's flags), an
unreadable stated value or trace record, a trace `epcap publish` withheld as too large (only
its `<trace>.sha256` stand-in uploaded). Not read, and said so in the verdict: a trace absent
from the upload (it is not on the evidence list: traces grow to gigabytes; an hf:// audit
fetches it, harness.audit.evidence.HUB_EXTRA_FILES), over TRACE_CAP_BYTES, or Megatron's
format. Upstream facts: none beyond this repository's own reference backend.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import secrets
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from harness.api.backend import Backend, ExpectedDispatch
from harness.api.registry import load_backend
from harness.audit import workers
from harness.audit.evidence import TRACE_WITHHELD_SUFFIX
from harness.audit.model import NOT_APPLICABLE, Cell, Check, Rule, Source, Table, Upload, verdict_of
from harness.audit.readers import (
    TAG_BLOCK_BYTES,
    log_files,
    numbered_matches,
    numbered_tagged_lines,
    safe_real,
)
from harness.audit.rules.rederive import as_run
from harness.audit.vocab import ROUTING_NOT_FROM_SEED
from harness.errors import EpcapError
from harness.io.boundary.logs import LINE_MAX_BYTES, open_log
from harness.io.bounds import json_loads
from harness.io.safeio import open_stream
from harness.loadmodel.traces import TraceError, check_ids
from harness.results.layout import ATTEMPTS_TSV, CELL_JSON, parse_cell_name
from harness.telemetry.lines import DISPATCH_TAG, row_fields

MAX_GROUPS = 64                    # (iteration, layer) groups regenerated per cell
TRACE_CAP_BYTES = 256 << 20        # a recorded trace read at most this big
_DIGITS = re.compile(r"[0-9]{1,18}")
_TRACE_KEY = re.compile(rb'\{"iter":(\d{1,9}),"layer":(\d{1,9}),"rank":(\d{1,9}),')

Key = tuple[int, int, int]                              # iteration, layer, rank
Stated = dict[Key, list[tuple[str, dict]]]              # -> [(file:line, fields)]


SAMPLE_SEED_BITS = 63             # an audit's sample seed: 0 <= seed < 2**63
Group = tuple[int, int]                                 # iteration, layer


def audit_seed() -> int:
    """A sample seed chosen now, which no one preparing an upload can know."""
    return secrets.randbits(SAMPLE_SEED_BITS)


def cell_seed(seed: int, name: str) -> int:
    """The cell's own sub-seed: the audit's seed and the cell's name, hashed."""
    digest = hashlib.sha256(f"routing-not-from-seed|{seed}|{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def sample(seed: int, name: str, iterations: tuple[int, ...], layers: tuple[int, ...],
           always: frozenset[Group] | set[Group] = frozenset(),
           limit: int = MAX_GROUPS) -> tuple[Group, ...]:
    """The (iteration, layer) groups checked, sorted: every group when there are at most
    `limit`; else the groups in `always` (the top and saturated rows' groups) and, up to
    `limit`, groups drawn at random from the rest with the cell's sub-seed of the audit's
    sample seed (the same seed gives the same sample)."""
    groups = [(it, layer) for it in iterations for layer in layers]
    if len(groups) <= limit:
        return tuple(groups)
    keep = sorted(set(always).intersection(groups))
    kept = set(keep)
    rest = [g for g in groups if g not in kept]
    fill = random.Random(cell_seed(seed, name)).sample(rest, max(0, limit - len(keep)))
    return tuple(sorted(keep + fill))


def _blocks(path: Path):
    """A log's bytes, block by block, each cut after a newline (bounded memory, as
    readers.numbered_matches reads)."""
    with open_log(path) as handle:
        carry = b""
        while True:
            data = handle.read(TAG_BLOCK_BYTES)
            block = carry + data
            cut = len(block) if not data else block.rfind(b"\n") + 1
            carry, block = block[cut:][:LINE_MAX_BYTES], block[:cut]
            yield block
            if not data:
                break


_TAG = DISPATCH_TAG.encode()
_HEAD = re.escape(_TAG) + rb" iter=[0-9]{1,9} layer=[0-9]{1,9} rank="
_TAIL = rb" expected_recv=[0-9]{1,18} actual_valid_recv=([0-9]{1,18})(?=[ \t\r\n]|$)"
_RANK_VALUE = re.compile(_HEAD + rb"([0-9]{1,9})" + _TAIL)     # (rank, actual_valid_recv)
_FIRST_RANK = re.compile(_HEAD + rb"([0-9]{1,9}) ")


def _one_rank(rank: bytes) -> re.Pattern:
    """actual_valid_recv of the rows of one rank, in the worker's field order."""
    return re.compile(_HEAD + re.escape(rank) + _TAIL)


def _block_tops(block: bytes, patterns: dict[bytes, re.Pattern]) -> list[tuple]:
    """(rank, top actual_valid_recv) of a block's dispatch rows: a rank log's block (every
    row one rank's, the worker's order) by one regex naming that rank; several ranks by one
    naming none; another field order row by row."""
    tagged = block.count(_TAG)
    if not tagged:
        return []
    first = _FIRST_RANK.search(block)
    if first is not None:
        rank = first.group(1)
        if rank not in patterns:
            patterns[rank] = _one_rank(rank)
        values = patterns[rank].findall(block)
        if len(values) == tagged:
            if len(min(values, key=len)) == len(max(values, key=len)):
                return [(int(rank), int(max(values)))]   # equal lengths: the text's order
            return [(int(rank), max(map(int, values)))]
        found = _RANK_VALUE.findall(block)
        if len(found) == tagged:
            table = np.array(found).astype(np.int64)      # (rank, value) per row, in C
            ranks, values = table[:, 0], table[:, 1]
            return [(int(r), int(values[ranks == r].max())) for r in np.unique(ranks)]
    return [(_whole(f, "rank"), _whole(f, "actual_valid_recv")) for f in _tagged_fields(block)]


def _tagged_fields(block: bytes):
    """The fields of every dispatch row of a block, in any field order (the slow read)."""
    at = block.find(_TAG)
    while at >= 0:
        end = block.find(b"\n", at)
        end = len(block) if end < 0 else end
        yield row_fields(block[at + len(_TAG):end])
        at = block.find(_TAG, end)


def _whole(fields: dict, key: str) -> int | None:
    text = fields.get(key)
    return int(text) if text is not None and _DIGITS.fullmatch(text) else None


def rank_tops(files: list[Path]) -> dict[int, int]:
    """Each rank's maximum `actual_valid_recv` over the cell's dispatch rows."""
    return _scan_tops(files, None)[0]


_KEY = b"actual_valid_recv="
_DELIMS = b" \t\r\n"


def _value_spans(block: bytes, values: set[int]):
    """(start, end) of every `actual_valid_recv=V` with V in `values` followed by white space
    or the end: found by a bytes search per value, or by a regex where the block writes a
    value with leading zeros (0017 is 17)."""
    if block.count(_KEY + b"0"):
        pattern = re.compile(re.escape(_KEY) + rb"0*(?:" + _alternatives(tuple(sorted(values)))
                             + rb")(?=[ \t\r\n]|$)")
        for m in pattern.finditer(block):
            yield m.start(), m.end()
        return
    for value in sorted(values):
        needle = _KEY + str(value).encode()
        at = block.find(needle)
        while at >= 0:
            end = at + len(needle)
            if end == len(block) or block[end] in _DELIMS:
                yield at, end
            at = block.find(needle, end)


def _rows_with(block: bytes, values: set[int]) -> list[tuple[int, int, int, int, int | None]]:
    """(iteration, layer, rank, actual_valid_recv, budget) of a block's dispatch rows whose
    `actual_valid_recv` is one of `values`, whatever their field order (_value_spans)."""
    out = []
    for start, stop in _value_spans(block, values):
        start = block.rfind(b"\n", 0, start) + 1
        end = block.find(b"\n", stop)
        line = block[start:len(block) if end < 0 else end]
        if _TAG not in line:
            continue
        fields = row_fields(line.split(_TAG, 1)[1])
        row = tuple(_whole(fields, k) for k in ("iter", "layer", "rank", "actual_valid_recv",
                                                  "budget"))
        if None not in row[:4]:                    # malformed: incomplete-telemetry says so
            out.append(row)
    return out


def _scan_tops(files: list[Path], budgets: list[int] | None
               ) -> tuple[dict[int, int], list[tuple]]:
    """One read of the cell's logs: each rank's top value, and (unless `budgets` is None)
    the rows that may be a top or saturated: in each block, the rows holding a value at or
    above its rank's top so far (_block_tops), or one of the budgets."""
    top: dict[int, int] = {}
    rows: list[tuple] = []
    patterns: dict[bytes, re.Pattern] = {}
    saturating = {b for b in budgets or () if b >= 0}
    for path in files:
        for block in _blocks(path):
            values = set(saturating)
            for rank, value in _block_tops(block, patterns):
                if rank is not None and value is not None and value >= top.get(rank, -1):
                    top[rank] = value
                    values.add(value)
            if values and budgets is not None:
                rows += _rows_with(block, values)
    return top, rows


def always_sampled(files: list[Path], budgets: list[int]) -> set[Group]:
    """The groups that decide a requirement: those holding a rank's top row (ties
    included) or a saturated row (`actual_valid_recv >= budget`; rows over the budget are
    `conservation-broken`'s, and the highest of a rank is its top row). Each rank's top is
    read with the rows that may hold it (the cell's budgets, the block's tops), in one read
    of the logs; those rows are found whatever their field order."""
    top, rows = _scan_tops(files, budgets)
    return {(it, layer) for it, layer, rank, value, budget in rows
            if value == top.get(rank) or (budget is not None and value >= budget)}


def _alternatives(values: tuple[int, ...]) -> bytes:
    return b"|".join(str(v).encode() for v in values)


def _trie(words: list[bytes]) -> bytes:
    """A regex alternation of `words` as a trie (each branch on its next byte): a row's
    iteration is told apart in a few steps, not one try per sampled group."""
    if words == [b""]:
        return b""
    heads: dict[int, list[bytes]] = {}
    for word in words:
        heads.setdefault(word[0] if word else -1, []).append(word[1:])
    parts = [b"" if head < 0 else re.escape(bytes([head])) + _trie(sorted(set(tails)))
             for head, tails in sorted(heads.items())]
    return parts[0] if len(parts) == 1 else b"(?:" + b"|".join(parts) + b")"


def _pairs(groups: tuple[Group, ...]) -> bytes:
    """A regex naming exactly these (iteration, layer) groups: `I layer=L`, as a trie."""
    return _trie(sorted({f"{it} layer={layer}".encode() for it, layer in groups}))


def stated_rows(files: list[Path], at: str, groups: tuple[Group, ...],
                every: bool = False) -> Stated:
    """The sampled groups' dispatch rows in the worker's field order (a regex naming them;
    `every`: the groups are all the cell's, any iteration and layer is read)."""
    head = re.escape(DISPATCH_TAG.encode()) + rb" iter="
    if not every:
        head += rb"(?=(?:" + _pairs(groups) + rb") rank=)"
    pattern = re.compile(head + rb"([0-9]{1,9}) layer=([0-9]{1,9}) rank=([0-9]{1,9})"
                         rb"(?=[ \t\r\n]|$)([^\n]*)")
    want, out = set(groups), {}
    for path in files:
        for line_no, m in numbered_matches(path, pattern):
            key = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            if key[:2] not in want:
                continue
            out.setdefault(key, []).append((f"{at}/{path.name}:{line_no}", row_fields(m.group(4))))
    return out


def stated_rows_any_order(files: list[Path], at: str, groups: tuple[Group, ...]) -> Stated:
    """The sampled groups' dispatch rows with their fields in any order (every tagged line
    decoded: the slow read, for logs the fast one leaves groups short in)."""
    want, out = set(groups), {}
    for path in files:
        for line_no, text in numbered_tagged_lines(path, (DISPATCH_TAG,), b"[MOE_DROP_DEBUG]"):
            fields = row_fields(text.split(DISPATCH_TAG, 1)[1].encode())
            key = tuple(fields.get(k) or "" for k in ("iter", "layer", "rank"))
            if not all(_DIGITS.fullmatch(v) for v in key):
                continue                           # malformed: incomplete-telemetry says so
            it, layer, rank = (int(v) for v in key)
            if (it, layer) in want:
                out.setdefault((it, layer, rank), []).append(
                    (f"{at}/{path.name}:{line_no}", fields))
    return out


def differences(want: dict[int, dict[str, int]], stated: Stated, it: int, layer: int,
                source: str) -> tuple[list[str], list[str], int]:
    """(contradictions, unreadable values, fields compared) of one group's stated rows."""
    bad, unknown, compared = [], [], 0
    for rank, fields in want.items():
        for where, got in stated.get((it, layer, rank), []):
            for name, value in fields.items():
                if name not in got:
                    continue                       # not stated (an older worker's row)
                text = got[name]
                if text is None or not _DIGITS.fullmatch(text):
                    unknown.append(f"{where}: field {name} {text!r} unreadable (not a whole "
                                   f"number)")
                    continue
                compared += 1
                if int(text) != value:
                    bad.append(f"{where}: field {name} {text}, {source} gives {value} "
                               f"(iter {it} layer {layer} rank {rank})")
    return bad, unknown, compared


def ids_only(line: bytes) -> object:
    """A trace record without its router weights (epcap_lines writes them last; they are most
    of the line and no count needs them); the whole line when that cut does not parse."""
    cut = line.find(b',"topk_weights":')
    if cut > 0:
        try:
            return json_loads(line[:cut] + b"}")
        except (ValueError, EpcapError):
            pass
    return json_loads(line)


class TraceRead:
    """A recorded trace's sampled records: counts per (iteration, layer) and rank."""

    def __init__(self) -> None:
        self.counts: dict[tuple[int, int], dict[int, tuple[str, np.ndarray]]] = {}
        self.bad: list[str] = []
        self.unknown: list[str] = []
        self.skipped: str | None = None


def read_trace(upload: Upload, cell: Cell, ed: ExpectedDispatch,
               groups: tuple[Group, ...]) -> TraceRead:
    """The cell's recorded trace (its file name in the cell directory), header held to the
    argv, sampled records as per-expert counts (traces.check_ids)."""
    out = TraceRead()
    path = cell.where / Path(ed.trace or "").name
    at = f"{cell.path}/{path.name}"
    if not path.exists():
        stand_in = path.with_name(path.name + TRACE_WITHHELD_SUFFIX)
        out.skipped = f"{at} not in the upload"
        if stand_in.exists():           # left out by `epcap publish` as too large
            out.unknown.append(f"{at} withheld: only its sha256 ({at}{TRACE_WITHHELD_SUFFIX}) "
                               f"was published; the trace comparison could not run")
        return out
    real, problem = safe_real(upload.folder, path, TRACE_CAP_BYTES)
    if real is None:
        out.skipped = f"{at}: {problem}"
        return out
    want, head = set(groups), ed.trace_header
    try:
        with open_stream(real, max_bytes=TRACE_CAP_BYTES) as handle:
            for line_no, line in enumerate(handle, start=1):
                if line_no == 1:
                    header = json_loads(line)
                    header = header if isinstance(header, dict) else {}
                    out.bad += [f"{at}:1: field {k} {header.get(k)!r}, the run's argv gives "
                                f"{v}" for k, v in head.items() if header.get(k) != v]
                    if out.bad:
                        return out
                    continue
                m = _TRACE_KEY.match(line)
                if m is not None:
                    key = tuple(int(g) for g in m.groups())
                    if key[:2] not in want:
                        continue
                obj = ids_only(line)
                if not isinstance(obj, dict):
                    continue
                key = tuple(obj.get(k) for k in ("iter", "layer", "rank"))
                if key[:2] not in want or not isinstance(key[2], int):
                    continue
                ids = check_ids(obj.get("topk_ids"), "topk_ids", head["tokens"], head["topk"],
                                head["experts"], at, line_no)
                counts = np.bincount(ids.ravel().astype(np.int64), minlength=head["experts"])
                out.counts.setdefault(key[:2], {})[key[2]] = (f"{at}:{line_no}", counts)
    except TraceError as exc:
        out.unknown.append(str(exc))
    except (EpcapError, OSError, ValueError, json.JSONDecodeError) as exc:
        out.unknown.append(f"{at}: unreadable ({exc})")
    return out


def trace_problems(ed: ExpectedDispatch, trace: TraceRead, stated: Stated,
                   seeded: dict[tuple[int, int], np.ndarray]) -> tuple[list[str], list[str]]:
    """A trace against the rows its counts imply and, rank by rank, the seed's counts."""
    bad, unknown = list(trace.bad), list(trace.unknown)
    for (it, layer), records in sorted(trace.counts.items()):
        if sorted(records) != list(range(ed.ranks)):
            continue                               # a partial group implies no rows
        counts = np.stack([records[r][1] for r in range(ed.ranks)])
        lines = f"{records[0][0]}..{records[ed.ranks - 1][0].rsplit(':', 1)[-1]}"
        b, u, _ = differences(ed.rows(counts), stated, it, layer,
                              f"the trace's routing ({lines})")
        bad, unknown = bad + b, unknown + u
        seed = seeded.get((it, layer))
        for rank in range(ed.ranks) if seed is not None else ():
            diff = np.nonzero(counts[rank] != seed[rank])[0]
            if diff.size:
                e = int(diff[0])
                bad.append(f"{records[rank][0]}: topk_ids of iter {it} layer {layer} rank "
                           f"{rank} route {int(counts[rank][e])} slots to expert {e}, the "
                           f"seed ({ed.seed_text}) routes {int(seed[rank][e])}")
    return bad, unknown


Memo = dict[tuple[int, int], tuple[np.ndarray, dict[int, dict[str, int]]]]


class Sampled:
    """What one cell's check covered: groups checked of the cell's, those always checked."""

    def __init__(self, checked: int, total: int, always: int) -> None:
        self.checked, self.total, self.always = checked, total, always

    def sentence(self, path: str, seed: int) -> str:
        share = 100 * self.checked / self.total if self.total else 100.0
        share = f"{share:.0f}" if share >= 10 else f"{share:.2g}"     # 16%, 1.0%, 0.52%
        return (f"{ROUTING_NOT_FROM_SEED} checked {self.checked} of {self.total} (iteration, "
                f"layer) groups ({share}%) of cell {path}, sample seed {seed} ({self.always} "
                f"always: those of each rank's top row and of every saturated row)")


def cell_problems(upload: Upload, cell: Cell, ed: ExpectedDispatch, files: list[Path],
                  memo: Memo, seed: int) -> tuple[list[str], list[str], int, str, Sampled]:
    """(contradictions, unknowns, fields compared, the trace its argv names: "read", "absent"
    or "" when none, what was sampled) of one
    regenerable cell; `memo` holds the groups already regenerated for the same argv (a time
    cell's launches); `seed` is the audit's sample seed."""
    total = len(ed.iterations) * len(ed.layers)
    always: set[Group] = set()
    if total > MAX_GROUPS:
        logs = cell.logs                  # no saturated row (the summary): no budget looked up
        budgets = list(logs.budgets) if logs is not None and logs.saturated_rows else []
        always = always_sampled(files, budgets)
    groups = sample(seed, cell.name, ed.iterations, ed.layers, always)
    every = len(groups) == total
    always = always.intersection(groups)
    stated = stated_rows(files, cell.path, groups, every)
    found = {(k[0], k[1]) for k in stated}
    if any(len({k[2] for k in stated if k[:2] == g}) < ed.ranks for g in found) or \
            (not stated and files):
        stated = stated_rows_any_order(files, cell.path, groups)
        found = {(k[0], k[1]) for k in stated}
    bad, unknown, compared, seeded = [], [], 0, {}
    for it, layer in sorted(found) if ed.seeded else ():
        if (it, layer) not in memo:
            counts = ed.counts(it, layer)
            memo[(it, layer)] = counts, ed.rows(counts)
        seeded[(it, layer)], want = memo[(it, layer)]
        b, u, n = differences(want, stated, it, layer,
                              f"the routing of its seed ({ed.seed_text})")
        bad, unknown, compared = bad + b, unknown + u, compared + n
    read = ""
    if ed.trace is not None:
        trace = read_trace(upload, cell, ed, groups)
        read = "read" if trace.skipped is None else "absent"
        b, u = trace_problems(ed, trace, stated, seeded)
        bad, unknown = bad + b, unknown + u
    if len(bad) > 1:
        bad = [f"{bad[0]}; {len(bad) - 1} more in this cell"]
    return bad, unknown, compared, read, Sampled(len(groups), total, len(always))


MAX_SAMPLED_NOTES = 8           # cells named one by one in a verdict's sampling notes


def sampled_notes(upload: Upload) -> list[str]:
    """The verdict's notes on what was sampled: cell by cell (the first few by path), each
    with the fraction checked and the sample seed."""
    cells = [text for _, text in sorted(upload.sampled.items())]
    if len(cells) > MAX_SAMPLED_NOTES:
        cells = cells[:MAX_SAMPLED_NOTES] + [
            f"... and {len(cells) - MAX_SAMPLED_NOTES} more cells checked on a sample by "
            f"{ROUTING_NOT_FROM_SEED}, sample seed {upload.sample_seed}"]
    return cells


def backend_for(upload: Upload, cell: Cell, cache: dict[str, Backend | None]) -> Backend | None:
    """The cell's backend, through the registry (None when the runbook as run names none)."""
    named = parse_cell_name(cell.name, upload.runbook.campaign)
    if named is None:
        return None
    if named.backend not in cache:
        try:
            cache[named.backend] = load_backend(upload.runbook.backend(named.backend))
        except (EpcapError, KeyError, ValueError, LookupError, OSError, ImportError):
            cache[named.backend] = None            # cell-identity / launch-not-runbook say so
    return cache[named.backend]


def regenerated_for(upload: Upload, cell: Cell, cache: dict, regenerated: dict
                    ) -> tuple[ExpectedDispatch | None, Memo | None, str | None]:
    """(the cell's regenerated routing, the memo of the cells with its argv, why it cannot
    be regenerated): None routing where its backend regenerates none."""
    backend = backend_for(upload, cell, cache)
    argv = cell.cell_json.get("argv")
    argv = [str(a) for a in argv] if isinstance(argv, list) else None
    key = (id(backend), tuple(argv) if argv is not None else None)
    try:
        if key not in regenerated:
            regenerated[key] = (backend.expected_dispatch(argv)
                                if backend is not None else None), {}
    except ValueError as exc:
        return None, None, (f"{cell.path}/{CELL_JSON}: field argv: the routing cannot be "
                            f"regenerated ({exc})")
    return *regenerated[key], None


_WORKER_CACHE: tuple[dict, dict] = ({}, {})     # a worker's backends and regenerations


def _cell_job(key: str, seed: int) -> tuple:
    """cell_problems of one cell on a forked worker (audit.workers)."""
    upload = workers.forked()
    cell = upload.cells[key]
    ed, memo, _ = regenerated_for(upload, cell, *_WORKER_CACHE)
    files, _ = log_files(upload.folder, cell.where)
    return cell_problems(upload, cell, ed, files, memo, seed)


def check_routing(table: Table, upload: Upload) -> Check:
    """Every regenerable cell's dispatch rows (and recorded trace) against the routing its
    backend regenerates from the cell's argv (module docstring). Each cell's regeneration
    runs on the audit's workers where it forked them (audit.workers), folded in cell order."""
    if not as_run(upload):
        return Check(ROUTING_NOT_FROM_SEED, NOT_APPLICABLE, [
            "no runbook as run (the earlier layout): no backend to regenerate routing with"])
    if upload.sample_seed is None:                 # no seed given: one no one could know
        upload.sample_seed = audit_seed()
    seed = upload.sample_seed
    cache: dict = {}
    regenerated: dict[tuple, tuple[ExpectedDispatch | None, Memo]] = {}
    plan: list[tuple[Cell, object]] = []           # (cell, why it is unknown | its work)
    for key, cell in sorted(upload.cells.items()):
        if cell.problem or cell.cell_json is None or cell.where is None:
            continue
        ed, memo, why = regenerated_for(upload, cell, cache, regenerated)
        if why is not None or ed is None:
            if why is not None:
                plan.append((cell, why))
            continue
        files, problem = log_files(upload.folder, cell.where)
        if problem:
            plan.append((cell, f"{cell.path}: {problem}"))
        elif upload.pool is not None:
            plan.append((cell, workers.submit(upload, _cell_job, key, seed)))
        else:
            plan.append((cell, (ed, files, memo)))
    bad, unknown, cells, fields, traces, absent = [], [], 0, 0, 0, 0
    checked = total = 0
    for cell, work in plan:
        if isinstance(work, str):
            unknown.append(work)
            continue
        cells += 1
        b, u, n, read, got = (work.result() if isinstance(work, Future) else
                              cell_problems(upload, cell, work[0], work[1], work[2], seed))
        bad, unknown, fields = bad + b, unknown + u, fields + n
        traces, absent = traces + (read == "read"), absent + (read == "absent")
        checked, total = checked + got.checked, total + got.total
        if got.checked < got.total:
            upload.sampled[cell.path] = got.sentence(cell.path, seed)
    if not cells and not unknown:
        return Check(ROUTING_NOT_FROM_SEED, NOT_APPLICABLE, [
            "no cell ran a backend whose routing the audit regenerates (the reference "
            "worker's argv)"])
    sampled = (f"; {len(upload.sampled)} cells over {MAX_GROUPS} (iteration, layer) groups "
               f"checked on a sample, {checked} of {total} groups in all, sample seed {seed}"
               if upload.sampled else "")
    return verdict_of(bad, [f"{cells} cells' dispatch rows are the routing of their seed "
                            f"({fields} fields compared{sampled}); {traces} recorded "
                            f"traces agree" + (f"; {absent} traces their argv recorded are "
                                               f"not in the upload: not compared"
                                               if absent else "")],
                      ROUTING_NOT_FROM_SEED, unknown)


__all__ = ["always_sampled", "audit_seed", "cell_seed", "check_routing", "sample",
           "sampled_notes"]

RULES: tuple[Rule, ...] = (
    Rule(ROUTING_NOT_FROM_SEED, "a reference cell's dispatch rows (actual_valid_recv, "
         "pre_balance_recv, redundant_experts) are not what the routing regenerated from its "
         "recorded argv (seed, model seed, workload, shape, personality) implies, or its "
         "recorded routing trace disagrees with those rows or with the seed's counts",
         (Source(ATTEMPTS_TSV, ()),), False, check_routing,
         "rank logs re-stated with other routing (tokens moved between ranks so conservation "
         "holds, or another seed), every table derived from them made to match",
         version_bound=True),
)
