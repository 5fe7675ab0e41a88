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
MAX_GROUPS groups is checked on a seeded sample (a fixed product of iterations and layers
from its name): a forger who edits a few groups of a big cell escapes with the odds of the
sample. Rows in another field order than the worker's are found by a slower second read.

Not applicable: no runbook as run (no backend to ask), no cell of such a backend. UNKNOWN:
a reference cell with no argv, or one its worker here refuses (another version's flags), an
unreadable stated value or trace record. Not read: a trace absent from the upload (it is
not on the evidence list: traces grow to gigabytes), over TRACE_CAP_BYTES, or Megatron's
format. Upstream facts: none beyond this repository's own reference backend.
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import numpy as np

from harness.api.backend import Backend, ExpectedDispatch
from harness.api.registry import load_backend
from harness.audit.model import NOT_APPLICABLE, Cell, Check, Rule, Source, Table, Upload, verdict_of
from harness.audit.readers import log_files, numbered_matches, numbered_tagged_lines, safe_real
from harness.audit.rules.rederive import as_run
from harness.audit.vocab import ROUTING_NOT_FROM_SEED
from harness.errors import EpcapError
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


def sample(name: str, iterations: tuple[int, ...], layers: tuple[int, ...],
           limit: int = MAX_GROUPS) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Every group when there are at most `limit`, else a product of iterations and layers
    seeded by the cell's name (deterministic; one regex finds its rows)."""
    if len(iterations) * len(layers) <= limit:
        return iterations, layers
    rng = random.Random(f"routing|{name}")
    n_layers = min(len(layers), max(1, math.isqrt(limit)))
    n_iters = min(len(iterations), max(1, limit // n_layers))
    return (tuple(sorted(rng.sample(iterations, n_iters))),
            tuple(sorted(rng.sample(layers, n_layers))))


def _alternatives(values: tuple[int, ...]) -> bytes:
    return b"|".join(str(v).encode() for v in values)


def stated_rows(files: list[Path], at: str, iters: tuple[int, ...],
                layers: tuple[int, ...]) -> Stated:
    """The sampled groups' dispatch rows in the worker's field order (a regex naming them)."""
    pattern = re.compile(re.escape(DISPATCH_TAG.encode()) + rb" iter=(" + _alternatives(iters)
                         + rb") layer=(" + _alternatives(layers) + rb") rank=(\d{1,9})"
                         rb"(?=[ \t\r\n]|$)([^\n]*)")
    out: Stated = {}
    for path in files:
        for line_no, m in numbered_matches(path, pattern):
            fields = row_fields(m.group(4))
            out.setdefault((int(m.group(1)), int(m.group(2)), int(m.group(3))), []).append(
                (f"{at}/{path.name}:{line_no}", fields))
    return out


def stated_rows_any_order(files: list[Path], at: str, iters: tuple[int, ...],
                          layers: tuple[int, ...]) -> Stated:
    """The sampled groups' dispatch rows with their fields in any order (every tagged line
    decoded: the slow read, for logs the fast one leaves groups short in)."""
    want_i, want_l, out = set(iters), set(layers), {}
    for path in files:
        for line_no, text in numbered_tagged_lines(path, (DISPATCH_TAG,), b"[MOE_DROP_DEBUG]"):
            fields = row_fields(text.split(DISPATCH_TAG, 1)[1].encode())
            key = tuple(fields.get(k) or "" for k in ("iter", "layer", "rank"))
            if not all(_DIGITS.fullmatch(v) for v in key):
                continue                           # malformed: incomplete-telemetry says so
            it, layer, rank = (int(v) for v in key)
            if it in want_i and layer in want_l:
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


def read_trace(upload: Upload, cell: Cell, ed: ExpectedDispatch, iters: tuple[int, ...],
               layers: tuple[int, ...]) -> TraceRead:
    """The cell's recorded trace (its file name in the cell directory), header held to the
    argv, sampled records as per-expert counts (traces.check_ids)."""
    out = TraceRead()
    path = cell.where / Path(ed.trace or "").name
    at = f"{cell.path}/{path.name}"
    if not path.exists():
        out.skipped = f"{at} not in the upload"
        return out
    real, problem = safe_real(upload.folder, path, TRACE_CAP_BYTES)
    if real is None:
        out.skipped = f"{at}: {problem}"
        return out
    want_i, want_l, head = set(iters), set(layers), ed.trace_header
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
                    if key[0] not in want_i or key[1] not in want_l:
                        continue
                obj = ids_only(line)
                if not isinstance(obj, dict):
                    continue
                key = tuple(obj.get(k) for k in ("iter", "layer", "rank"))
                if key[0] not in want_i or key[1] not in want_l or not isinstance(key[2], int):
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


def cell_problems(upload: Upload, cell: Cell, ed: ExpectedDispatch, files: list[Path],
                  memo: Memo) -> tuple[list[str], list[str], int, bool]:
    """(contradictions, unknowns, fields compared, trace read) of one regenerable cell;
    `memo` holds the groups already regenerated for the same argv (a time cell's launches)."""
    iters, layers = sample(cell.name, ed.iterations, ed.layers)
    stated = stated_rows(files, cell.path, iters, layers)
    groups = {(k[0], k[1]) for k in stated}
    if any(len({k[2] for k in stated if k[:2] == g}) < ed.ranks for g in groups) or \
            (not stated and files):
        stated = stated_rows_any_order(files, cell.path, iters, layers)
        groups = {(k[0], k[1]) for k in stated}
    bad, unknown, compared, seeded = [], [], 0, {}
    for it, layer in sorted(groups) if ed.seeded else ():
        if (it, layer) not in memo:
            counts = ed.counts(it, layer)
            memo[(it, layer)] = counts, ed.rows(counts)
        seeded[(it, layer)], want = memo[(it, layer)]
        b, u, n = differences(want, stated, it, layer,
                              f"the routing of its seed ({ed.seed_text})")
        bad, unknown, compared = bad + b, unknown + u, compared + n
    read = False
    if ed.trace is not None:
        trace = read_trace(upload, cell, ed, iters, layers)
        read = trace.skipped is None
        b, u = trace_problems(ed, trace, stated, seeded)
        bad, unknown = bad + b, unknown + u
    if len(bad) > 1:
        bad = [f"{bad[0]}; {len(bad) - 1} more in this cell"]
    return bad, unknown, compared, read


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


def check_routing(table: Table, upload: Upload) -> Check:
    """Every regenerable cell's dispatch rows (and recorded trace) against the routing its
    backend regenerates from the cell's argv (module docstring)."""
    if not as_run(upload):
        return Check(ROUTING_NOT_FROM_SEED, NOT_APPLICABLE, [
            "no runbook as run (the earlier layout): no backend to regenerate routing with"])
    bad, unknown, cache, cells, fields, traces = [], [], {}, 0, 0, 0
    regenerated: dict[tuple, tuple[ExpectedDispatch | None, Memo]] = {}
    for _, cell in sorted(upload.cells.items()):
        if cell.problem or cell.cell_json is None or cell.where is None:
            continue
        backend = backend_for(upload, cell, cache)
        argv = cell.cell_json.get("argv")
        argv = [str(a) for a in argv] if isinstance(argv, list) else None
        key = (id(backend), tuple(argv) if argv is not None else None)
        try:
            if key not in regenerated:
                regenerated[key] = (backend.expected_dispatch(argv)
                                    if backend is not None else None), {}
        except ValueError as exc:
            unknown.append(f"{cell.path}/{CELL_JSON}: field argv: the routing cannot be "
                           f"regenerated ({exc})")
            continue
        ed, memo = regenerated[key]
        if ed is None:
            continue
        files, problem = log_files(upload.folder, cell.where)
        if problem:
            unknown.append(f"{cell.path}: {problem}")
            continue
        cells += 1
        b, u, n, read = cell_problems(upload, cell, ed, files, memo)
        bad, unknown, fields, traces = bad + b, unknown + u, fields + n, traces + read
    if not cells and not unknown:
        return Check(ROUTING_NOT_FROM_SEED, NOT_APPLICABLE, [
            "no cell ran a backend whose routing the audit regenerates (the reference "
            "worker's argv)"])
    return verdict_of(bad, [f"{cells} cells' dispatch rows are the routing of their seed "
                            f"({fields} fields compared; a cell over {MAX_GROUPS} (iteration, "
                            f"layer) groups on a seeded sample of them); {traces} recorded "
                            f"traces agree"], ROUTING_NOT_FROM_SEED, unknown)


__all__ = ["check_routing", "sample"]

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
