"""Benchmark (not a test): `epcap classify` vs `epcap parse` on one generated multi-rank log.

Generates a cell directory holding one merged log of 8 ranks x 94 layers (torchrun
`[rankN]:` prefixes, Megatron-style noise lines) that ends the way a failed run ends: rank 3
dies of out-of-memory, the other ranks print NCCL fallout. Both commands run on the same
file in one process of this script, side by side (best of TRIALS, page cache warm); prints
MB/s, the ratio classify/parse and classify's peak RSS, then deletes the file. Targets
(issue 24): ratio <= 2, peak RSS < 300 MB; a missed target is printed as MISSED and the exit
status is 1. Size: 2 GB, or EPCAP_BENCH_BYTES for a shorter run (say so when quoting it).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_parse import generate, timed  # noqa: E402 - the shared log generator and timer

TARGET_BYTES = int(os.environ.get("EPCAP_BENCH_BYTES", 2 * 1024 ** 3))
TRIALS = int(os.environ.get("EPCAP_BENCH_TRIALS", 2))
TAIL = ["[rank3]: Traceback (most recent call last):",
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB. GPU 3 "
        "has a total capacity of 178.35 GiB of which 2.12 GiB is free.",
        *(f"[rank{r}]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/"
          f"csrc/distributed/c10d/NCCLUtils.cpp:77, remote process exited or there was a "
          f"network error, NCCL version 2.27.3" for r in (0, 1, 2, 4, 5, 6, 7))]


def main() -> int:
    """Generate, time, print, clean up."""
    epcap = shutil.which("epcap") or str(Path(sys.executable).with_name("epcap"))
    tmp = Path(tempfile.mkdtemp(prefix="epcap-bench-classify-"))
    try:
        cell = tmp / "cell"
        cell.mkdir()
        log = cell / "rank0.log"
        t0 = time.perf_counter()
        rows = generate(log, TARGET_BYTES)
        with open(log, "a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in TAIL))
        (cell / "cell.json").write_text(json.dumps(
            {"cell": {"backend": "none", "purpose": "validate"}, "ntasks": 1, "nodes": 1,
             "gpus_per_node": 8, "launcher": {"state": "failed", "exit_code": 1}}))
        mb = log.stat().st_size / 1e6
        print(f"generated {mb:.1f} MB, {rows} dispatch rows in {time.perf_counter() - t0:.1f} s")
        env = dict(os.environ)
        parse, classify = [], []
        for _ in range(TRIALS):                      # side by side, alternating
            parse.append(timed([epcap, "parse", str(log), "--json"], env))
            classify.append(timed([epcap, "classify", str(cell), "--json"], env))
        doc = json.loads(classify[0][2])["cells"][0]
        assert doc["status"] == "does_not_fit" and doc["rows"] == rows, doc
        assert doc["first_failed_rank"] == "3", doc
        p_s, c_s = min(t for t, _, _ in parse), min(t for t, _, _ in classify)
        rss = max(r for _, r, _ in classify)
        ratio = c_s / p_s
        print(f"epcap parse   : {p_s:.3f} s  {mb / p_s:8.1f} MB/s")
        print(f"epcap classify: {c_s:.3f} s  {mb / c_s:8.1f} MB/s  -> {doc['status']}, rank "
              f"{doc['first_failed_rank']}")
        ok_ratio, ok_rss = ratio <= 2.0, rss < 300e6
        print(f"ratio classify/parse: {ratio:.2f}x (target <= 2: "
              f"{'met' if ok_ratio else 'MISSED'})")
        print(f"classify peak RSS: {rss / 1e6:.1f} MB (target < 300 MB: "
              f"{'met' if ok_rss else 'MISSED'})")
        return 0 if ok_ratio and ok_rss else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
