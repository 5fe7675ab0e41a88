"""Routing traces: epcap's JSONL and Megatron-LM's router-trace JSONL, read and checked up front.

Torch-free (json + numpy), so a bad trace is refused (exit 2, `FILE:LINE: FIELD: message`)
before any rank starts, and `epcap forecast` reads the same files with the same checks.
Formats: docs/reference-backend.md ("Trace files"); Megatron's record fields are those its
writer emits (MEGATRON_SOURCE). Replay and recording live in harness/loadmodel/trace_io.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.errors import BadInput
from harness.io.bounds import json_loads, problem
from harness.io.safeio import open_stream

TRACE_FORMAT = "epcap-routing-trace"
# Megatron-LM's router trace writer, whose record fields this module reads and writes:
# RouterTracer._make_index_record (fields step, stage, block, layer, rank, num_tokens, topk;
# mtp_idx for MTP routers) and _flush_records_to_disk (top_indices, json.dumps per line);
# file name router_trace_rank{rank}.jsonl; flags --moe-routing-trace-path and
# --moe-routing-trace-max-training-iters (megatron/training/config/training_config.py).
MEGATRON_SOURCE = {
    "repository": "NVIDIA/Megatron-LM",
    "file": "megatron/core/transformer/moe/router_trace.py",
    "commit": "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
    "flags": "megatron/training/config/training_config.py (same commit)",
}
MEGATRON_NAME = re.compile(r"router_trace_rank(\d+)\.jsonl$")
MEGATRON_FIELDS = ("step", "stage", "block", "layer", "rank", "num_tokens", "topk",
                   "top_indices")
_BOOL = re.compile(r"\b(?:true|false)\b")

LayerKey = int | tuple          # a decoder layer number, or ("mtp", mtp_idx, layer)


class TraceError(ValueError):
    """A trace file is malformed; the message names file, line and field."""

    def __init__(self, path: str, line: int, field: str, message: str) -> None:
        super().__init__(f"{path}:{line}: {field}: {message}" if line else
                         f"{path}: {field}: {message}")
        self.path, self.line, self.field, self.message = path, line, field, message


@dataclass
class Record:
    """One router call of one source rank: ids [T, K] (int16, or int32 for E > 32768) and
    optional weights [T, K] float32."""

    ids: np.ndarray
    weights: np.ndarray | None
    path: str
    line: int


@dataclass
class Trace:
    """A validated trace: records[(step, layer, rank)] for every step, layer and rank."""

    fmt: str                              # "epcap" | "megatron"
    paths: tuple[str, ...]
    topk: int
    experts: int | None                   # from the epcap header or the caller
    header: dict
    records: dict[tuple[int, LayerKey, int], Record] = field(default_factory=dict)
    steps: list[int] = field(default_factory=list)
    layers: list[LayerKey] = field(default_factory=list)
    ranks: int = 0

    def global_batch(self, step: int, layer: LayerKey) -> tuple[np.ndarray, np.ndarray | None]:
        """The step's tokens at one router, source ranks concatenated in rank order."""
        recs = [self.records[(step, layer, r)] for r in range(self.ranks)]
        ids = np.concatenate([r.ids for r in recs])
        if recs[0].weights is None:
            return ids, None
        return ids, np.concatenate([r.weights for r in recs])

    def tokens(self, step: int) -> int:
        """Tokens of one step's global batch (the same at every router of the step)."""
        return sum(self.records[(step, self.layers[0], r)].ids.shape[0]
                   for r in range(self.ranks))

    def source(self) -> str:
        """One name for the trace: its file, or the directory of Megatron's rank files."""
        if len(self.paths) == 1:
            return self.paths[0]
        return str(Path(self.paths[0]).parent)


def expand(paths: Iterable[str | Path]) -> list[str]:
    """Files to read: a directory stands for its router_trace_rank*.jsonl files, in rank order."""
    out: list[str] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted((f for f in p.iterdir() if MEGATRON_NAME.search(f.name)),
                           key=lambda f: int(MEGATRON_NAME.search(f.name).group(1)))
            if not found:
                raise TraceError(str(p), 0, "path", "no router_trace_rank*.jsonl files here")
            out += [str(f) for f in found]
        else:
            out.append(str(p))
    return out


def read_trace(paths: Sequence[str | Path], experts: int | None = None) -> Trace:
    """Read and check a trace (one epcap file, or Megatron's per-rank files of one run)."""
    files = expand(paths)
    first = _first_object(files[0])
    if first is not None and "format" in first:
        if len(files) > 1:
            raise TraceError(files[1], 1, "path", "an epcap trace is one file; got several")
        trace = _read_epcap(files[0], experts)
    else:
        trace = Trace("megatron", tuple(files), 0, experts, {}, ranks=len(files))
        for source, path in enumerate(_rank_files(files)):
            _read_megatron(trace, path, source)
    check_complete(trace)
    return trace


def _rank_files(files: list[str]) -> list[str]:
    """Megatron's per-rank files of one EP group: consecutive rank numbers, in rank order."""
    numbers = [MEGATRON_NAME.search(Path(f).name) for f in files]
    if len(files) > 1:
        for f, m, prev in zip(files[1:], numbers[1:], numbers, strict=False):
            if m is None or prev is None or int(m.group(1)) != int(prev.group(1)) + 1:
                raise TraceError(f, 1, "path", "several files must be router_trace_rank{N}.jsonl "
                                 "of consecutive ranks, in rank order (one EP group)")
    return files


def _first_object(path: str) -> dict | None:
    try:
        with open_stream(path, encoding="utf-8") as fh:    # regular file only: no FIFO hang
            for text in fh:
                if text.strip():
                    obj = json_loads(text)                # integers bounded in digits
                    return obj if isinstance(obj, dict) else None
    except BadInput as exc:
        raise TraceError(path, 0, "path", str(exc).removeprefix(f"{path}: ")) from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return None


def _lines(path: str) -> Iterable[tuple[int, str, dict]]:
    """(line number, text, object) for every non-blank line; JSON errors name the line."""
    try:
        fh = open_stream(path, encoding="utf-8")
    except BadInput as exc:
        raise TraceError(path, 0, "path", str(exc).removeprefix(f"{path}: ")) from None
    with fh:
        line_no = 0
        try:
            for line_no, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                try:
                    obj = json_loads(text)                # integers bounded in digits
                except json.JSONDecodeError as exc:
                    raise TraceError(path, line_no, "json", str(exc)) from None
                if not isinstance(obj, dict):
                    raise TraceError(path, line_no, "json", "expected an object")
                yield line_no, text, obj
        except UnicodeDecodeError as exc:
            raise TraceError(path, line_no + 1, "encoding", f"not UTF-8 ({exc.reason})") from None


def _int(obj: dict, key: str, path: str, line: int) -> int:
    val = obj.get(key)
    if type(val) is not int or val < 0:
        raise TraceError(path, line, key, f"expected a non-negative integer, got {val!r}")
    return val


def _where_bool(value) -> str:
    """'row R col C' of the first boolean in a nested list, or '' when there is none."""
    if isinstance(value, list):
        for r, row in enumerate(value):
            items = row if isinstance(row, list) else [row]
            for c, v in enumerate(items):
                if isinstance(v, bool):
                    return f"row {r} col {c}: {json.dumps(v)}"
    return ""


def _bool_check(obj: dict, text: str, path: str, line: int) -> None:
    """JSON true/false parse as ints in numpy; refuse them in any list field."""
    if ("true" not in text and "false" not in text) or not _BOOL.search(text):
        return                      # substring tests first: the regex is slow on long lines
    for key, value in obj.items():
        where = _where_bool(value)
        if where:
            raise TraceError(path, line, key, f"{where} is a boolean, not a number")


def check_ids(value, key: str, rows: int | None, topk: int | None, experts: int | None,
              path: str, line: int) -> np.ndarray:
    """rows x topk distinct integer expert ids in 0..experts-1 (JSON ints only)."""
    if not isinstance(value, list):
        raise TraceError(path, line, key, f"expected a list of rows, got {type(value).__name__}")
    try:
        arr = np.array(value)
    except (ValueError, OverflowError) as exc:
        raise TraceError(path, line, key, f"ragged or not a matrix ({exc})") from None
    if arr.size and arr.dtype.kind not in "iu":
        raise TraceError(path, line, key, _not_int(value, arr))
    arr = arr.astype(np.int64).reshape(arr.shape if arr.size else (len(value), topk or 0))
    if arr.ndim != 2:
        raise TraceError(path, line, key, "expected a matrix: one row of expert ids per token")
    if rows is not None and arr.shape[0] != rows:
        raise TraceError(path, line, key, f"{arr.shape[0]} rows, expected {rows}")
    if topk is not None and arr.shape[1] != topk:
        raise TraceError(path, line, key, f"rows of {arr.shape[1]} ids, expected {topk}")
    if arr.size and (int(arr.min()) < 0 or (experts is not None and int(arr.max()) >= experts)):
        top = "" if experts is None else f"..{experts - 1}"
        bad = arr[(arr < 0) | (arr >= (experts if experts is not None else 2**62))][0]
        raise TraceError(path, line, key, f"expert id {int(bad)} outside 0{top}")
    if arr.shape[1] > 1:
        srt = np.sort(arr, axis=1)
        dup = np.nonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))[0]
        if dup.size:
            raise TraceError(path, line, key, f"row {int(dup[0])} repeats an expert")
    small = not arr.size or int(arr.max()) < 2**15      # int16 ids: a quarter of the memory
    return arr.astype(np.int16 if small else np.int32)


def _not_int(value: list, arr: np.ndarray) -> str:
    """Why a non-integer id matrix was refused, naming the first offending element."""
    for r, row in enumerate(value):
        for c, v in enumerate(row if isinstance(row, list) else [row]):
            if type(v) is not int:
                return f"row {r} col {c}: {json.dumps(v)} is not an integer expert id"
    return f"not an integer matrix (dtype {arr.dtype})"


def check_weights(value, key: str, shape: tuple[int, int], path: str, line: int) -> np.ndarray:
    """Router weights: finite numbers, exactly the shape of the ids."""
    try:
        arr = np.array(value, dtype=np.float64)
    except (ValueError, TypeError) as exc:
        raise TraceError(path, line, key, f"ragged or not numbers ({exc})") from None
    if arr.shape != shape and not (arr.size == 0 and shape[0] == 0):
        raise TraceError(path, line, key, f"shape {list(arr.shape)} differs from the ids' "
                         f"{list(shape)}")
    bad = np.argwhere(~np.isfinite(arr))
    if bad.size:
        r, c = (int(x) for x in bad[0])
        raise TraceError(path, line, key, f"row {r} col {c}: {arr[r, c]} is not finite")
    return arr.reshape(shape).astype(np.float32)


def _add(trace: Trace, key: tuple, rec: Record) -> None:
    old = trace.records.get(key)
    if old is not None:
        raise TraceError(rec.path, rec.line, "records", f"duplicate record for step={key[0]} "
                         f"layer={_layer_text(key[1])} rank={key[2]} (first at {old.path}:"
                         f"{old.line})")
    trace.records[key] = rec


def _layer_text(layer: LayerKey) -> str:
    return str(layer) if isinstance(layer, int) else f"{layer[2]} (mtp {layer[1]})"


def _read_epcap(path: str, experts: int | None) -> Trace:
    trace: Trace | None = None
    for line_no, text, obj in _lines(path):
        if trace is None:
            trace = _epcap_header(path, line_no, obj, experts)
            continue
        key, rec = _epcap_record(trace, path, line_no, text, obj)
        _add(trace, key, rec)
    if trace is None:
        raise TraceError(path, 1, "format", "empty file: no header")
    return trace


class NotStreamable(Exception):
    """An epcap trace whose records are not grouped by step, or whose steps differ in shape
    (a missing, duplicate or extra record, weights on some records only): read it whole with
    `read_trace`, which names the fault with its file, line and field."""


Call = tuple[int, LayerKey, np.ndarray]       # step, router layer, global batch ids [T, K]


def stream_epcap(path: str, experts: int | None = None) -> tuple[Trace, Iterator[Call]] | None:
    """An epcap trace read one step at a time: (the trace's header, ranks, layers and first
    step, then an iterator of its router calls in step and layer order). Memory is one step's
    records, whatever the file's length. None when `path` is no epcap trace. Every record is
    checked as `read_trace` checks it (TraceError names file, line, field); a step shaped
    unlike the first, or a step whose records are not contiguous, raises NotStreamable from
    the iterator (the caller then reads the whole trace for the exact refusal)."""
    first = _first_object(path)
    if first is None or "format" not in first:
        return None
    lines = _lines(path)
    trace = None
    for line_no, _text, obj in lines:
        trace = _epcap_header(path, line_no, obj, experts)
        break
    if trace is None:
        raise TraceError(path, 1, "format", "empty file: no header")
    steps = _epcap_steps(trace, path, lines)
    head = next(steps, None)
    if head is None:
        raise TraceError(path, 1, "records", "trace holds no routing records")
    step, recs = head
    trace.layers = sorted({k[0] for k in recs}, key=_sort_key)
    trace.ranks = max(k[1] for k in recs) + 1
    trace.steps = [step]
    shape = {(la, r) for la in trace.layers for r in range(trace.ranks)}
    weighted = next(iter(recs.values())).weights is not None

    def calls() -> Iterator[Call]:
        for step, recs in _chain(head, steps):
            if recs.keys() != shape or any((r.weights is not None) != weighted
                                           for r in recs.values()):
                raise NotStreamable(f"step {step} differs from the first step's records")
            for layer in trace.layers:
                yield step, layer, np.concatenate([recs[(layer, r)].ids
                                                   for r in range(trace.ranks)])
    return trace, calls()


def _chain(head: tuple, rest: Iterator[tuple]) -> Iterator[tuple]:
    yield head
    yield from rest


def _epcap_steps(trace: Trace, path: str, lines: Iterator[tuple[int, str, dict]]
                 ) -> Iterator[tuple[int, dict[tuple[LayerKey, int], Record]]]:
    """(step, {(layer, rank): record}) for each run of records of one step, checked per line."""
    done: set[int] = set()
    step, recs = None, {}
    for line_no, text, obj in lines:
        key, rec = _epcap_record(trace, path, line_no, text, obj)
        if key[0] != step:
            if step is not None:
                yield step, recs
            if key[0] in done:
                raise NotStreamable(f"the records of step {key[0]} are not contiguous")
            step, recs = key[0], {}
            done.add(step)
        if key[1:] in recs:
            raise NotStreamable(f"duplicate record at {path}:{line_no}")
        recs[key[1:]] = rec
    if step is not None:
        yield step, recs


HEADER_RANGED = ("experts", "topk", "ep", "seq", "micro_batch")   # bounds.RANGES names


def _header_ranges(obj: dict, path: str) -> None:
    """The header's shape within the ranges the command line's values pass (bounds.RANGES,
    as `forecast --ep/--seq/--micro-batch/--experts`), `ep` dividing the experts and top-k at
    most the experts, as a run's own values must: a header `"ep": 4096` over 128 experts
    left no EP size to forecast and printed an empty table. `ep`, `seq` and `micro_batch`
    may be absent (null)."""
    for key in HEADER_RANGED:
        val = obj.get(key)
        if val is None and key in ("ep", "seq", "micro_batch"):
            continue
        if type(val) is not int:
            raise TraceError(path, 1, key, f"expected an integer, got {type(val).__name__}")
        why = problem(key, val)
        if why is not None:
            raise TraceError(path, 1, key, why)
    if obj["topk"] > obj["experts"]:
        raise TraceError(path, 1, "topk", f"top-{obj['topk']} of {obj['experts']} experts")
    if obj.get("ep") is not None and obj["experts"] % obj["ep"]:
        raise TraceError(path, 1, "ep", f"{obj['experts']} experts do not divide over EP "
                         f"{obj['ep']}")


def _epcap_header(path: str, line_no: int, obj: dict, experts: int | None) -> Trace:
    """The Trace of an epcap header line (line 1), checked."""
    if line_no != 1 or obj.get("format") != TRACE_FORMAT or obj.get("version") != 1:
        raise TraceError(path, line_no, "format", f"expected {TRACE_FORMAT!r} version 1 "
                         "on line 1")
    for key in ("experts", "topk", "tokens"):
        _int(obj, key, path, 1)
    _header_ranges(obj, path)
    if experts is not None and obj["experts"] != experts:
        raise TraceError(path, 1, "experts", f"trace has {obj['experts']}, this run "
                         f"needs {experts}")
    return Trace("epcap", (path,), obj["topk"], obj["experts"], obj)


def _epcap_record(trace: Trace, path: str, line_no: int, text: str, obj: dict
                  ) -> tuple[tuple[int, int, int], Record]:
    """One epcap record line, checked: its (iter, layer, rank) and Record."""
    _bool_check(obj, text, path, line_no)
    key = tuple(_int(obj, k, path, line_no) for k in ("iter", "layer", "rank"))
    ids = check_ids(obj.get("topk_ids"), "topk_ids", trace.header["tokens"], trace.topk,
                    trace.experts, path, line_no)
    w = obj.get("topk_weights")
    wt = None if w is None else check_weights(w, "topk_weights", ids.shape, path, line_no)
    return key, Record(ids, wt, path, line_no)


def _read_megatron(trace: Trace, path: str, source: int) -> None:
    """One rank's file; its records become source rank `source` (the file's position)."""
    m = MEGATRON_NAME.search(Path(path).name)
    file_rank = int(m.group(1)) if m else None
    for line_no, text, obj in _lines(path):
        _bool_check(obj, text, path, line_no)
        step, layer, rank = (_int(obj, k, path, line_no) for k in ("step", "layer", "rank"))
        if file_rank is None:
            file_rank = rank
        if rank != file_rank:
            raise TraceError(path, line_no, "rank", f"record of rank {rank} in the file of "
                             f"rank {file_rank}")
        block = obj.get("block")
        if not isinstance(block, str):
            raise TraceError(path, line_no, "block", f"expected a string, got {block!r}")
        key_layer: LayerKey = layer
        if "mtp_idx" in obj or block != "decoder":
            key_layer = (block, _int(obj, "mtp_idx", path, line_no) if "mtp_idx" in obj else 0,
                         layer)
        topk = _int(obj, "topk", path, line_no)
        if trace.topk and topk != trace.topk:
            raise TraceError(path, line_no, "topk", f"{topk}, earlier records have {trace.topk}")
        trace.topk = topk
        ids = check_ids(obj.get("top_indices"), "top_indices",
                        _int(obj, "num_tokens", path, line_no), topk, trace.experts, path,
                        line_no)
        w = obj.get("topk_weights")
        wt = None if w is None else check_weights(w, "topk_weights", ids.shape, path, line_no)
        _add(trace, (step, key_layer, source), Record(ids, wt, path, line_no))


def _sort_key(layer: LayerKey) -> tuple:
    return (0, "", 0, layer) if isinstance(layer, int) else (1, *layer)


def check_complete(trace: Trace) -> None:
    """Every step has a record for every router layer and source rank, tokens agree, weights
    are on all records or none."""
    if not trace.records:
        where = trace.paths[0]
        raise TraceError(where, 1, "records", "trace holds no routing records")
    keys = trace.records.keys()
    trace.steps = sorted({k[0] for k in keys})
    trace.layers = sorted({k[1] for k in keys}, key=_sort_key)
    trace.ranks = max(trace.ranks, max(k[2] for k in keys) + 1)
    some = next(iter(trace.records.values()))
    for step in trace.steps:
        for layer in trace.layers:
            for rank in range(trace.ranks):
                if (step, layer, rank) not in trace.records:
                    path, line = _missing_at(trace, step, layer, rank)
                    raise TraceError(path, line, "records", f"no record for step={step} "
                                     f"layer={_layer_text(layer)} rank={rank}")
        per_rank = [trace.records[(step, trace.layers[0], r)].ids.shape[0]
                    for r in range(trace.ranks)]
        for layer in trace.layers[1:]:
            for r in range(trace.ranks):
                rec = trace.records[(step, layer, r)]
                if rec.ids.shape[0] != per_rank[r]:
                    raise TraceError(rec.path, rec.line, "num_tokens", f"{rec.ids.shape[0]} "
                                     f"tokens at layer {_layer_text(layer)}, {per_rank[r]} at "
                                     f"layer {_layer_text(trace.layers[0])} of the same step")
    for rec in trace.records.values():
        if (rec.weights is None) != (some.weights is None):
            raise TraceError(rec.path, rec.line, "topk_weights", "present on some records "
                             "only: record weights on all of them or on none")


def _missing_at(trace: Trace, step: int, layer: LayerKey, rank: int) -> tuple[str, int]:
    """Where a missing record belongs: the rank's file (Megatron) after its last earlier
    record, else the first line of the same step and layer (epcap's single file)."""
    if trace.fmt == "megatron" and len(trace.paths) > 1:
        path = trace.paths[rank] if rank < len(trace.paths) else trace.paths[-1]
        before = [rec.line for (s, _l, r), rec in trace.records.items() if r == rank and
                  s <= step]
        return path, (max(before) + 1) if before else 1
    same = [rec.line for (s, l_, _r), rec in trace.records.items() if s == step and l_ == layer]
    same = same or [rec.line for (s, _l, _r), rec in trace.records.items() if s == step]
    return trace.paths[0], min(same)
