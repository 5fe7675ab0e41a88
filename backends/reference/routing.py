"""Seeded, deterministic MoE routing (named workloads, backends/reference/workloads.py) and traces.

Pure functions of (workload, seed, model, layer, iteration, rank): every rank, every test and
every re-run computes the same routing, so a test can recount demand independently of the
worker (workloads.rank_counts gives the same counts without building the ids).

Trace files (replay with --trace, record with --record-trace) are JSON Lines, UTF-8:

    {"format": "epcap-routing-trace", "version": 1, "experts": E, "topk": K, "tokens": S}
    {"iter": 0, "layer": 3, "rank": 0, "topk_ids": [[e0, ..., eK-1], ...S rows...]}
    ...

One record per (iter, layer, rank); `topk_weights` (same shape, floats) is optional. On
replay an iteration missing from the trace reuses iteration `iter % recorded_iters`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from .workloads import popularity, route_ids

TRACE_FORMAT = "epcap-routing-trace"
ROUTER_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class TraceError(ValueError):
    """A trace file is malformed; the message names file, line and field."""

    def __init__(self, path: str, line: int, field: str, message: str) -> None:
        super().__init__(f"{path}:{line}: {field}: {message}")


@dataclass(frozen=True)
class Routing:
    """Top-k expert ids [S, K] (int64) and router weights [S, K] (router dtype)."""

    ids: torch.Tensor
    weights: torch.Tensor


def expert_popularity(seed: int, model: str, layer: int, experts: int, sigma: float,
                      workload=None, step: int = 0) -> torch.Tensor:
    """Expert popularity of the workload at (model, layer, step), sums to 1 (fp64); the
    default workload is lognormal(0, sigma) per (model, layer)."""
    return torch.from_numpy(popularity(workload, seed, model, layer, step, experts, sigma))


def route(seed: int, model: str, layer: int, iteration: int, rank: int, tokens: int,
          experts: int, topk: int, sigma: float, router_dtype: str = "fp32",
          workload=None) -> Routing:
    """Top-k ids from the workload's per-rank slot counts; weights = softmax of the chosen
    experts' log popularity in the router dtype (the ids do not depend on it)."""
    ids = torch.from_numpy(route_ids(workload, seed, model, layer, iteration, rank, tokens,
                                     experts, topk, sigma))
    pop = expert_popularity(seed, model, layer, experts, sigma, workload, iteration)
    return Routing(ids=ids, weights=weights_for_ids(ids, pop, router_dtype))


def weights_for_ids(ids: torch.Tensor, popularity: torch.Tensor, router_dtype: str) -> torch.Tensor:
    """Router weights for replayed ids: softmax of the chosen experts' log popularity."""
    logits = torch.log(popularity.float())[ids]
    return torch.softmax(logits.to(ROUTER_DTYPES[router_dtype]), dim=-1)


def destination_counts(ids: torch.Tensor, experts: int, ep: int) -> torch.Tensor:
    """Slots one rank sends to each EP rank under contiguous placement (experts/ep per rank)."""
    per_rank = experts // ep
    return torch.bincount(ids.flatten() // per_rank, minlength=ep)


def demand_per_rank(routings: Iterable[torch.Tensor], experts: int, ep: int) -> torch.Tensor:
    """Slots each rank must receive, summed over the source ranks' top-k ids."""
    total = torch.zeros(ep, dtype=torch.int64)
    for ids in routings:
        total += destination_counts(ids, experts, ep)
    return total


class RoutingTrace:
    """A replayable routing trace: (iter, layer, rank) -> top-k ids [S, K] (+ optional weights)."""

    def __init__(self, path: str, experts: int, topk: int, tokens: int,
                 records: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor | None]]):
        self.path, self.experts, self.topk, self.tokens = path, experts, topk, tokens
        self.records = records
        self.iters = sorted({k[0] for k in records})

    def lookup(self, iteration: int, layer: int, rank: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The record for (iteration, layer, rank); missing iterations cycle over recorded ones."""
        it = iteration if (iteration, layer, rank) in self.records else \
            self.iters[iteration % len(self.iters)]
        try:
            return self.records[(it, layer, rank)]
        except KeyError:
            raise TraceError(self.path, 0, "records",
                             f"no record for layer={layer} rank={rank}") from None


def _int_field(obj: dict, key: str, path: str, line: int) -> int:
    val = obj.get(key)
    if not isinstance(val, int) or isinstance(val, bool) or val < 0:
        raise TraceError(path, line, key, f"expected a non-negative integer, got {val!r}")
    return val


def _check_ids(ids: object, experts: int, topk: int, tokens: int, path: str, line: int) -> torch.Tensor:
    """Validate a topk_ids field: S rows of K distinct ints in [0, experts)."""
    if not isinstance(ids, list) or len(ids) != tokens:
        raise TraceError(path, line, "topk_ids", f"expected {tokens} rows")
    try:
        t = torch.tensor(ids, dtype=torch.int64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TraceError(path, line, "topk_ids", f"not an integer matrix ({exc})") from None
    if t.dim() != 2 or t.shape[1] != topk:
        raise TraceError(path, line, "topk_ids", f"expected rows of {topk} expert ids")
    if tokens and (int(t.min()) < 0 or int(t.max()) >= experts):
        raise TraceError(path, line, "topk_ids", f"expert id outside 0..{experts - 1}")
    srt = torch.sort(t, dim=1).values
    if topk > 1 and bool((srt[:, 1:] == srt[:, :-1]).any()):
        raise TraceError(path, line, "topk_ids", "a token repeats an expert")
    return t


def load_trace(path: str | Path, experts: int, topk: int, tokens: int) -> RoutingTrace:
    """Read and validate a JSONL routing trace for the run's (experts, topk, tokens)."""
    p = str(path)
    records: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor | None]] = {}
    with open(p, encoding="utf-8") as fh:
        for line_no, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TraceError(p, line_no, "json", str(exc)) from None
            if not isinstance(obj, dict):
                raise TraceError(p, line_no, "json", "expected an object")
            if line_no == 1:
                _check_header(obj, experts, topk, tokens, p)
                continue
            key = tuple(_int_field(obj, k, p, line_no) for k in ("iter", "layer", "rank"))
            ids = _check_ids(obj.get("topk_ids"), experts, topk, tokens, p, line_no)
            w = obj.get("topk_weights")
            wt = None if w is None else torch.tensor(w, dtype=torch.float32)
            if wt is not None and wt.shape != ids.shape:
                raise TraceError(p, line_no, "topk_weights", "shape differs from topk_ids")
            records[key] = (ids, wt)
    if not records:
        raise TraceError(p, 1, "records", "trace holds no routing records")
    return RoutingTrace(p, experts, topk, tokens, records)


def _check_header(obj: dict, experts: int, topk: int, tokens: int, path: str) -> None:
    """The first line names the format and the dimensions it was recorded with."""
    if obj.get("format") != TRACE_FORMAT or obj.get("version") != 1:
        raise TraceError(path, 1, "format", f"expected {TRACE_FORMAT!r} version 1")
    for key, want in (("experts", experts), ("topk", topk), ("tokens", tokens)):
        if obj.get(key) != want:
            raise TraceError(path, 1, key, f"trace has {obj.get(key)!r}, this run needs {want}")


def trace_lines(experts: int, topk: int, tokens: int,
                records: Iterable[tuple[int, int, int, list]]) -> Iterator[str]:
    """The JSONL lines of a trace: header, then one record per (iter, layer, rank, ids)."""
    yield json.dumps({"format": TRACE_FORMAT, "version": 1, "experts": experts,
                      "topk": topk, "tokens": tokens})
    for it, layer, rank, ids in records:
        yield json.dumps({"iter": it, "layer": layer, "rank": rank, "topk_ids": ids},
                         separators=(",", ":"))


def write_trace(path: str | Path, experts: int, topk: int, tokens: int,
                records: Iterable[tuple[int, int, int, list]]) -> None:
    """Write a trace atomically (temp file + fsync + os.replace)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        for line in trace_lines(experts, topk, tokens, sorted(records, key=lambda r: r[:3])):
            fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
