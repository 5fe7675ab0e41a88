"""Replay a checked routing trace at any EP size, and record one (epcap file or Megatron files).

Replay (docs/reference-backend.md, "Trace files"): a step's global batch is the source ranks'
tokens concatenated in rank order; a run with `ep` ranks of `tokens` tokens each takes it in
dispatches of ep x tokens consecutive tokens, rank r the r-th contiguous share of each.
Iteration i replays dispatch i mod D of that list (steps in order, D dispatches in all), so
a run at the recorded EP size and tokens replays each rank's own records, step by step.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from .traces import TRACE_FORMAT, Trace, TraceError, read_trace

ROUTING_TRACE = "routing_trace.jsonl"        # a measure cell's recorded routing (campaign)
RecordRow = tuple[int, int, int, list, list | None]   # iter, layer, rank, ids, weights


class Replay:
    """Routing for (iteration, layer, rank) of a run with `ep` ranks of `tokens` tokens."""

    def __init__(self, trace: Trace, ep: int, tokens: int) -> None:
        self.trace, self.ep, self.tokens = trace, ep, tokens
        self.order: list[tuple[int, int]] = []
        for step in trace.steps:
            total = trace.tokens(step)
            if total % (ep * tokens):
                rec = trace.records[(step, trace.layers[0], 0)]
                raise TraceError(rec.path, rec.line, "num_tokens",
                                 f"step {step} holds {total} tokens over {trace.ranks} source "
                                 f"ranks; a run of {ep} ranks x {tokens} tokens needs a "
                                 f"multiple of {ep * tokens}")
            self.order += [(step, d) for d in range(total // (ep * tokens))]
        self._batch: tuple | None = None

    def lookup(self, iteration: int, layer: int, rank: int) -> tuple[np.ndarray, np.ndarray | None]:
        """ids [tokens, K] int64 and weights [tokens, K] float32 (None when not recorded)."""
        step, d = self.order[iteration % len(self.order)]
        if self._batch is None or self._batch[:2] != (step, layer):
            self._batch = (step, layer, *self.trace.global_batch(step, layer))
        ids, w = self._batch[2], self._batch[3]
        lo = (d * self.ep + rank) * self.tokens
        part = slice(lo, lo + self.tokens)
        return ids[part].astype(np.int64), (None if w is None else w[part])


def open_replay(path: str, experts: int, topk: int, tokens: int, ep: int,
                layers: Sequence[int]) -> Replay:
    """Read, check and index a trace for a run; every refusal is a TraceError (exit 2)."""
    trace = read_trace([path], experts)
    first = min(trace.records.values(), key=lambda r: (r.path, r.line))
    if trace.topk != topk:
        where = (trace.paths[0], 1) if trace.fmt == "epcap" else (first.path, first.line)
        raise TraceError(*where, "topk", f"trace has {trace.topk}, this run needs {topk}")
    missing = [la for la in layers if la not in trace.layers]
    if missing:
        have = [la for la in trace.layers if isinstance(la, int)]
        raise TraceError(first.path, first.line, "layer", f"the run needs MoE layers "
                         f"{list(layers)}; the trace has decoder layers {have} (missing "
                         f"{missing})")
    return Replay(trace, ep, tokens)


_PRELOADED: dict[tuple, Replay] = {}


def preload(path: str, experts: int, topk: int, tokens: int, ep: int,
            layers: Sequence[int]) -> Replay:
    """open_replay, remembered: the standalone parent checks the trace before any rank starts
    and its forked ranks reuse the parsed trace."""
    key = (path, experts, topk, tokens, ep, tuple(layers))
    if key not in _PRELOADED:
        _PRELOADED[key] = open_replay(path, experts, topk, tokens, ep, layers)
    return _PRELOADED[key]


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    """Write atomically (temp file + fsync + os.replace)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def epcap_lines(header: dict, records: Iterable[RecordRow]) -> Iterable[str]:
    """Header line, then one record per (iter, layer, rank) with ids and (optional) weights."""
    yield json.dumps({"format": TRACE_FORMAT, "version": 1, **header})
    for it, layer, rank, ids, weights in sorted(records, key=lambda r: r[:3]):
        rec = {"iter": it, "layer": layer, "rank": rank, "topk_ids": ids}
        if weights is not None:
            rec["topk_weights"] = weights
        yield json.dumps(rec, separators=(",", ":"))


def write_epcap(path: str | Path, header: dict, records: Iterable[RecordRow]) -> None:
    """One epcap trace file; header holds experts, topk, tokens (+ ep, seq, ... as recorded)."""
    _write_lines(Path(path), epcap_lines(header, records))


def megatron_lines(records: Iterable[RecordRow]) -> Iterable[str]:
    """Megatron's record fields (traces.MEGATRON_FIELDS), plus epcap's topk_weights."""
    for it, layer, rank, ids, weights in sorted(records, key=lambda r: r[:3]):
        rec = {"step": it, "stage": "pre_dispatch", "block": "decoder", "layer": layer,
               "rank": rank, "num_tokens": len(ids), "topk": len(ids[0]) if ids else 0,
               "top_indices": ids}
        if weights is not None:
            rec["topk_weights"] = weights
        yield json.dumps(rec)


def write_megatron(directory: str | Path, rank: int, records: Iterable[RecordRow]) -> Path:
    """This rank's router_trace_rank{rank}.jsonl in `directory`, as Megatron lays them out."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"router_trace_rank{rank}.jsonl"
    _write_lines(path, megatron_lines(records))
    return path
