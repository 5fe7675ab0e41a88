"""A deterministic epcap routing trace of any number of token rows, written streaming.

Shape: `experts` experts, top-`topk`, `ranks` source ranks of `tokens` tokens, `layers` MoE
layers; one record (one JSONL line) per (iteration, layer, rank), as the reference backend
records them (harness/loadmodel/trace_io.py `epcap_lines`). A row is one token's top-k ids;
rows = iterations x layers x ranks x tokens. Row r's ids are (base_r + j * stride) mod
experts for j < topk, base_r from a seeded generator: distinct, skewed towards low experts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from harness.loadmodel.traces import TRACE_FORMAT


def write_trace(path: Path, rows: int, *, experts: int = 128, topk: int = 8, ranks: int = 8,
                tokens: int = 256, layers: int = 4, seed: int = 36) -> dict:
    """Write a trace of `rows` token rows (a whole number of iterations) to `path`; returns
    its header (ep, seq, iterations, rows, bytes)."""
    per_iter = layers * ranks * tokens
    iters = max(1, rows // per_iter)
    rng = np.random.default_rng(seed)
    stride = experts // topk
    offsets = np.arange(topk, dtype=np.int64) * stride
    header = {"format": TRACE_FORMAT, "version": 1, "experts": experts, "topk": topk,
              "tokens": tokens, "ep": ranks, "seq": tokens, "personality": "raw"}
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(header) + "\n")
        for it in range(iters):
            for layer in range(layers):
                for rank in range(ranks):
                    base = (rng.zipf(1.3, tokens) + rank) % experts
                    ids = (base[:, None] + offsets[None, :]) % experts
                    text = json.dumps(ids.tolist(), separators=(",", ":"))
                    fh.write(f'{{"iter":{it},"layer":{layer},"rank":{rank},'
                             f'"topk_ids":{text}}}\n')
    return {**header, "iterations": iters, "rows": iters * per_iter,
            "bytes": path.stat().st_size}
