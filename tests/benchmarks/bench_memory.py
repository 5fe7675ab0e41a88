"""The reference memory model at the Tier B shape: fit and margin per (model, backend).

Tier B runbook shape: seq 8192, micro batch 1, EP 8, device_memory_gb 180 (x 2**30 bytes,
as harness.runbook.load converts it). ECHO and UltraEP at their largest capacity (the measurement
capacity 2.00), MoonEP at N slots (its buffers do not depend on the capacity). Two profiles:
`dispatch` (the default options: bf16 weights, no optimizer state, no recompute, MoonEP pool
per layer) and `training` (adam state unsharded -- expert data-parallel size 1 at EP 8 on 8
GPUs --, fp32 main grads, full recompute, dense weights). Earlier campaign's finding for
comparison: MoonEP did not fit QWEN3_235B or QWEN3_30B at GBS8; ECHO and UltraEP fit all four.
Usage: python tests/benchmarks/bench_memory.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.loadmodel.memory import estimate_memory_bytes  # noqa: E402

DEVICE = 180 * 2**30
SHAPE = SimpleNamespace(seq=8192, micro_batch=1)
PROFILES = {"dispatch": {},
            "training": {"optimizer": "adam", "recompute": "full", "dense": True}}
EARLIER = {("QWEN3_235B", "moonep"): "does_not_fit", ("QWEN3_30B", "moonep"): "does_not_fit"}


def table(zoo: dict) -> list[tuple]:
    """(profile, model, backend, total bytes, margin bytes, fits, earlier finding) rows."""
    rows = []
    for prof, opts in PROFILES.items():
        for name, m in zoo.items():
            model = SimpleNamespace(name=name, **{k: v for k, v in m.items() if k != "flags"})
            for backend, cap in (("echo", "2.00"), ("ultraep", "2.00"), ("moonep", "1.00")):
                est = estimate_memory_bytes(model, SHAPE, cap, backend, 8, opts)
                rows.append((prof, name, backend, est["total"], DEVICE - est["total"],
                             est["total"] <= DEVICE, EARLIER.get((name, backend), "fits")))
    return rows


def main() -> int:
    zoo = yaml.safe_load((ROOT / "runbooks" / "models.yaml").read_text())["models"]
    print(f"{'profile':<9}{'model':<18}{'backend':<9}{'total GiB':>10}{'margin GiB':>11}"
          f"  {'model says':<13}earlier campaign")
    for prof, name, backend, total, margin, fits, earlier in table(zoo):
        print(f"{prof:<9}{name:<18}{backend:<9}{total / 2**30:>10.1f}{margin / 2**30:>11.1f}"
              f"  {'fits' if fits else 'does_not_fit':<13}{earlier}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
