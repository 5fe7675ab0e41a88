"""Benchmark: the default campaign with the capacity frontier (runbooks/local-cpu-curves.yaml),
measured exactly as bench_campaign.py measures the default one, which `make bench` runs just
before it: the two reports side by side give the frontier's cost (target: total <= 120 s on
2 cores, docs/frontier.md). Usage: python tests/benchmarks/bench_campaign_curves.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_campaign import ROOT, main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main([sys.argv[0], str(ROOT / "runbooks" / "local-cpu-curves.yaml")]))
