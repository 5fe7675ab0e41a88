"""A stand-in for `python -m backends.reference` in the reliability suite: same flags, same
log format (banner, setup and dispatch rows, timing, done lines), no torch, about 50 ms.

Deterministic: rank r of layer l reads actual_valid_recv = N + 100 + r + l, so a campaign's
tables are the same on every run. `--fake-fail` prints an assertion naming its argv (which
may carry a token) and exits 1; `--fake-silent-exit` prints the rows of its first iteration
and exits 1 saying nothing (the taxonomy's `unclassified`: failed after rows, no signature);
FAKE_RANK_SLEEP_S delays the start (concurrency tests).
"""

from __future__ import annotations

import json
import os
import sys
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backends.reference.options import build_parser  # noqa: E402


def main() -> int:
    args, extra = build_parser().parse_known_args(sys.argv[1:])
    time.sleep(float(os.environ.get("FAKE_RANK_SLEEP_S", "0")))
    n = args.seq * args.micro_batch * args.topk
    budget = int(Decimal(args.capacity) * n)
    ranks = args.ranks or args.ep
    layers = args.layers - args.first_dense_layers
    total = args.warmup + args.iters * (args.trials if args.timed else 1)
    out = []
    for r in range(ranks):
        out.append(f"[EPCAP_REFERENCE] backend=reference personality={args.personality} "
                   f"rank={r} world={ranks} model={args.model} timed={int(args.timed)} "
                   f"capacity={args.capacity} ep={args.ep}")
    if "--fake-fail" in extra:
        out.append("Traceback (most recent call last):")
        out.append("AssertionError: routing table corrupt; argv was " + " ".join(sys.argv[1:]))
        print("\n".join(out), flush=True)
        return 1
    for r in range(ranks):
        for layer in range(layers):
            out.append(f"[MOE_DROP_DEBUG][setup_metadata] iter=0 layer={layer} rank={r} "
                       f"budget={budget} exact_recv_per_rank=[{n},{n}]")
    silent = "--fake-silent-exit" in extra
    for it in range(1 if silent else total):
        for layer in range(layers):
            for r in range(ranks):
                act = min(budget, n + 100 + r + layer)
                out.append(f"[MOE_DROP_DEBUG][dispatch] iter={it} layer={layer} rank={r} "
                           f"expected_recv={n} actual_valid_recv={act} budget={budget}")
    if silent:
        print("\n".join(out), flush=True)
        return 1
    if args.timed:
        timing = {"trials": args.trials, "iters": args.iters, "samples_per_trial": 4,
                  "dispatch_ms_median": 1.0, "dispatch_ms_p10": 0.9, "dispatch_ms_p90": 1.1,
                  "combine_ms_median": 0.5, "combine_ms_p10": 0.4, "combine_ms_p90": 0.6,
                  "step_cv": 0.01, "noise_floor_pct": 1.0, "algbw_gbps": 1.0,
                  "algbw_formula": "fake", "timer": "perf_counter", "backend_impl": "reference",
                  "per_trial": [{"dispatch_ms_median": 1.0, "combine_ms_median": 0.5}] *
                  args.trials, "peak_mem_bytes": 1000, "peak_mem_source": "modelled",
                  "personality": args.personality, "ranks": ranks, "capacity": args.capacity,
                  "budget_tokens": budget, "rank_dispatch_ms_median": [1.0] * ranks,
                  "rank_dispatch_ms_p90": [1.1] * ranks}
        out.append("[EPCAP_TIMING] " + json.dumps(timing))
    for r in range(ranks):
        out.append(f"[EPCAP_REFERENCE] done rank={r} iterations={total} layers={layers}")
    print("\n".join(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
