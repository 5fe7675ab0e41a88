"""`make gpu-check`: what the first GPU machine must measure, in one prepared run (< 10 min).

On one node with CUDA GPUs it prints, each with its ratio:
1. the reference backend's NCCL path: a timed run of `python -m backends.reference` on
   `--device cuda` with one rank per visible GPU (up to 8), per personality raw-equivalent
   `alltoall` and deduplicating `deepep`: medians, bytes per rank, GB/s, fraction of the
   declared link limit (harness/timing/links.py);
2. the CUDA-event timer (backends/reference/timing.py Stopwatch) against perf_counter around
   the same device copies with a synchronize: ratio of medians (expect ~1 for long copies);
3. `epcap doctor --json` (the NVML probe): exit status and the GPU it names;
4. the memory model's dispatch buffers (harness/loadmodel/memory.py, `buffers`) against
   torch.cuda.max_memory_allocated around the worker's own Buffers.allocate: ratio.
Without a GPU it says so in one line and exits 2 (no traceback). Exit 1 when a step failed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
STEP_TIMEOUT_S = 150                  # each subprocess; four steps stay under 10 minutes
NO_GPU_EXIT = 2


def say(text: str) -> None:
    """One flushed line."""
    print(text, flush=True)


def gpu_count() -> tuple[int, str]:
    """(visible CUDA devices, why none): torch's own view, without raising."""
    try:
        import torch
    except ImportError as exc:
        return 0, f"torch is not importable ({exc})"
    if not torch.cuda.is_available():
        return 0, "torch.cuda.is_available() is False (no CUDA GPU or driver visible)"
    return torch.cuda.device_count(), ""


def reference_nccl(ranks: int, personality: str) -> bool:
    """A timed run of the reference backend on NCCL; prints its figures. True when clean."""
    from harness.timing.links import physical
    argv = [sys.executable, "-m", "backends.reference", "--ep", str(ranks), "--ranks",
            str(ranks), "--layers", "3", "--first-dense-layers", "1", "--hidden", "4096",
            "--experts", str(8 * ranks), "--topk", "8", "--expert-ffn", "1024", "--seq",
            "4096", "--capacity", "2.00", "--personality", personality, "--timed",
            "--warmup", "2", "--iters", "5", "--trials", "3", "--device", "cuda",
            "--spawn", "exec"]
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                          timeout=STEP_TIMEOUT_S, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    line = next((x for x in done.stdout.splitlines() if "[EPCAP_TIMING] " in x), None)
    if done.returncode != 0 or line is None:
        say(f"  {personality}: FAILED exit {done.returncode} ({wall:.1f} s): "
            f"{(done.stderr or done.stdout).strip()[-800:]}")
        return False
    obj = json.loads(line.split("[EPCAP_TIMING] ", 1)[1])
    phys = physical(obj, obj.get("device_name"))
    say(f"  {personality} on {ranks} GPU(s), timer {obj['timer']}, {wall:.1f} s: dispatch "
        f"{obj['dispatch_ms_median']:.3f} ms, combine {obj['combine_ms_median']:.3f} ms, "
        f"{obj['dispatch_bytes_per_rank']:.0f} B/rank remote "
        f"({obj['dispatch_local_bytes_per_rank']:.0f} local), dispatch "
        f"{phys['dispatch_gbps']:.1f} GB/s, fraction of link "
        f"{phys['dispatch_link_fraction']} ({phys['link_note']}); peak memory "
        f"{obj['peak_mem_bytes']} ({obj['peak_mem_source']})")
    return True


def timer_against_perf_counter() -> bool:
    """CUDA events vs perf_counter + synchronize around the same 256 MiB device copies."""
    import torch

    from backends.reference.timing import Stopwatch
    dev = torch.device("cuda", 0)
    src = torch.empty(128 << 20, dtype=torch.bfloat16, device=dev)
    dst = torch.empty_like(src)
    sw = Stopwatch(dev)
    events, wall = [], []
    for _ in range(3):
        dst.copy_(src)                                  # warm up
    for _ in range(30):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        h0 = sw.start()
        dst.copy_(src)
        h1 = sw.stop(h0)
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
        events.append(sw.ms(h1))
    ev, pc = statistics.median(events), statistics.median(wall)
    say(f"  256 MiB device copy: cuda-events {ev:.4f} ms, perf_counter+sync {pc:.4f} ms, "
        f"ratio events/perf_counter {ev / pc:.3f}; copy rate {2 * src.numel() * 2 / ev / 1e6:.0f} "
        "GB/s (read + write)")
    return True


def doctor() -> bool:
    """`epcap doctor --json` (NVML probe): its exit status and what it says of the GPUs."""
    done = subprocess.run([sys.executable, "-m", "harness.cli", "doctor", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        say(f"  doctor: exit {done.returncode}, not JSON: {done.stdout[-400:]} "
            f"{done.stderr[-400:]}")
        return False
    shown = {k: doc.get(k) for k in ("status", "source", "driver", "gpus", "reason",
                                      "failures")}
    say(f"  doctor: exit {done.returncode}; {json.dumps(shown)[:1200]}")
    if doc.get("source") != "nvml":
        say("  doctor: the probe did not use NVML (install nvidia-ml-py: `make cluster`)")
    return done.returncode == 0


def memory_model_buffers() -> bool:
    """The worker's Buffers.allocate on the GPU against the memory model's `buffers` term."""
    import torch

    from backends.reference.dispatch import Buffers
    from harness.loadmodel.memory import estimate_memory_bytes
    dev = torch.device("cuda", 0)
    model = SimpleNamespace(name="CHECK", layers=2, hidden=4096, experts=64, topk=8,
                            expert_ffn=1024, shared_ffn=0, first_dense_layers=1)
    shape = SimpleNamespace(seq=4096, micro_batch=1, ep=8)
    n = shape.seq * model.topk
    ok = True
    for capacity in ("1.25", "2.00"):
        budget = int(float(capacity) * n)
        x = torch.empty(shape.seq, model.hidden, dtype=torch.bfloat16, device=dev)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        before = torch.cuda.max_memory_allocated(dev)
        bufs = Buffers.allocate(x, model.topk, budget)
        torch.cuda.synchronize()
        measured = torch.cuda.max_memory_allocated(dev) - before
        modelled = estimate_memory_bytes(model, shape, capacity, "echo", shape.ep)["buffers"]
        say(f"  capacity {capacity}: Buffers.allocate measured {measured} B, memory model "
            f"buffers {modelled} B, ratio measured/modelled {measured / modelled:.3f}")
        ok = ok and measured > 0
        del bufs, x
    return ok


def main() -> int:
    """Run the four checks; 2 without a GPU, 1 when one failed, else 0."""
    count, why = gpu_count()
    if count == 0:
        say(f"gpu-check: no GPU here: {why}. Nothing was measured; run `make gpu-check` on a "
            "machine with CUDA GPUs.")
        return NO_GPU_EXIT
    ranks = min(count, 8)
    results = []
    started = time.perf_counter()
    for title, step in (
            (f"1. reference backend on NCCL ({ranks} rank(s))",
             lambda: all([reference_nccl(ranks, "alltoall"), reference_nccl(ranks, "deepep")])),
            ("2. CUDA-event timer against perf_counter", timer_against_perf_counter),
            ("3. epcap doctor (NVML)", doctor),
            ("4. memory model against torch.cuda.max_memory_allocated", memory_model_buffers)):
        say(title)
        try:
            results.append(step())
        except Exception as exc:                        # a failed step is reported, not fatal
            say(f"  FAILED: {type(exc).__name__}: {exc}")
            results.append(False)
    say(f"gpu-check: {sum(results)}/{len(results)} steps ok in "
        f"{time.perf_counter() - started:.0f} s")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
