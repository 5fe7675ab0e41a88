"""Forecast exactness: the forecast peak equals, integer for integer, the peak the reference
backend measures replaying the same trace, at the trace's own EP size and at others (the
replay splits each step's global batch as the forecast does), on two zoo shapes and every
personality (raw, and the rebalancing planners of echo, ultraep and moonep)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from backends.reference.routing import route
from harness.forecast.cli import forecast_rows
from harness.loadmodel.trace_io import write_epcap
from harness.runbook.zoo import zoo_model
from harness.telemetry.summary import summarize

pytestmark = pytest.mark.slow

RAW = "raw"
OWN_EP, SEQ, STEPS = 4, 32, 2
SHAPES = {"QWEN3_30B": dict(layers=2, first_dense_layers=0),
          "DEEPSEEK_V2_LITE": dict(layers=3, first_dense_layers=1)}


def make_trace(tmp_path: Path, model: str) -> Path:
    """A trace recorded at EP 4 from the reference's seeded routing (skewed, sigma 1.5)."""
    spec, shape = zoo_model(model), SHAPES[model]
    recs = [(it, layer, rank, route(3, model, layer, it, rank, SEQ, spec["experts"],
                                    spec["topk"], 1.5).ids.tolist(), None)
            for it in range(STEPS) for layer in range(shape["first_dense_layers"],
                                                       shape["layers"])
            for rank in range(OWN_EP)]
    path = tmp_path / f"{model}.jsonl"
    write_epcap(path, {"experts": spec["experts"], "topk": spec["topk"], "tokens": SEQ,
                       "ep": OWN_EP, "seq": SEQ, "micro_batch": 1}, recs)
    return path


def replay_peak(tmp_path: Path, trace: Path, model: str, ep: int, personality: str,
                seq: int, micro_batch: int, iters: int) -> int:
    spec, shape = zoo_model(model), SHAPES[model]
    logs = tmp_path / f"logs_{ep}_{personality}_{micro_batch}"
    args = ["--model", model, "--layers", shape["layers"], "--first-dense-layers",
            shape["first_dense_layers"], "--hidden", 16, "--experts", spec["experts"],
            "--topk", spec["topk"], "--expert-ffn", 8, "--seq", seq, "--micro-batch",
            micro_batch, "--ep", ep, "--capacity", f"{ep}.00",      # budget = every slot
            "--personality", personality, "--warmup", 0, "--iters", iters, "--trace", trace,
            "--device", "cpu", "--log-dir", logs]
    proc = subprocess.run([sys.executable, "-m", "backends.reference", *map(str, args)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = summarize(sorted(logs.glob("rank*.log")))
    assert s.saturated_rows == 0 and s.malformed_rows == 0
    assert s.rows == iters * (shape["layers"] - shape["first_dense_layers"]) * ep
    return s.peak_actual_valid_recv


CASES = [  # model, EP, personality, micro-batch (None: the whole step in one dispatch)
    ("QWEN3_30B", OWN_EP, RAW, None),
    ("QWEN3_30B", 8, RAW, None),
    ("QWEN3_30B", 2, RAW, 1),            # 2 ranks x 32 tokens: 2 dispatches per step
    ("QWEN3_30B", OWN_EP, "echo", None),
    ("QWEN3_30B", 8, "ultraep", None),
    ("DEEPSEEK_V2_LITE", OWN_EP, "moonep", None),
    ("DEEPSEEK_V2_LITE", 8, RAW, None),
    ("DEEPSEEK_V2_LITE", 2, "echo", None),
]


@pytest.mark.parametrize("model,ep,personality,mb", CASES)
def test_forecast_peak_equals_the_replayed_peak(tmp_path, model, ep, personality, mb):
    trace = make_trace(tmp_path, model)
    [row] = forecast_rows((str(trace),), model=model, ep=str(ep), personality=personality,
                          micro_batch=None if mb is None else str(mb))
    total = OWN_EP * SEQ
    seq = SEQ if mb else total // ep          # the replay's tokens per rank and dispatch
    dispatches = total // (ep * seq * (mb or 1))
    measured = replay_peak(tmp_path, trace, model, ep, personality, seq, mb or 1,
                           STEPS * dispatches)
    assert row["peak_demand"] == measured
    assert row["uniform_tokens"] == seq * (mb or 1) * zoo_model(model)["topk"]
    if personality == RAW:
        assert measured > row["uniform_tokens"]        # skewed: the case that can disagree
    if personality == "moonep":
        assert measured == row["uniform_tokens"]
