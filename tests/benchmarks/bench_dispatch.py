"""Benchmark (not a test): reference dispatch vs a bare all_to_all_single of the same bytes.

Spawns RANKS gloo ranks on CPU (CUDA/NCCL when available), one intra-op thread each. For each
size, every rank alternates, after a barrier each, (a) the reference echo dispatch as the
worker runs it (`dispatch_clipped`: count exchange, drop plan, row gather into the send
buffer, data all_to_all_single; the count exchange is in flight while the rows are packed)
and (b) one bare all_to_all_single of a ready tensor with the same split sizes, REPS times
after two warm-up reps; a rep's time is the slowest rank's; medians are printed with
ratio = bare / reference (1.0 = no bookkeeping cost). Target: ratio >= 0.8 at the main size
(64 MiB per rank, the regime of real dispatches: 8192 x 8 x 7168 x 2 B is ~0.9 GiB); exit 1
when missed. The mid and small (latency-bound) sizes are reported for information: there
the reference's one extra tiny collective (the count exchange) weighs more. The reference's
time includes gathering the S*K rows (one copy of the payload, as the libraries' dispatch
does); the gather and the count exchange are also timed alone, for the breakdown.

    python tests/benchmarks/bench_dispatch.py [--ranks 4] [--reps 15]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

SIZES = {"main": dict(tokens=4096, topk=8, hidden=1024, experts=64),
         "mid": dict(tokens=2048, topk=8, hidden=512, experts=64),
         "small": dict(tokens=128, topk=4, hidden=64, experts=16)}
TARGET = 0.8


def bench_rank(size: dict, reps: int, rank: int, ep: int, device) -> tuple[float, ...]:
    """Median slowest-rank ms of: reference dispatch, bare all_to_all_single, and (parts of
    the reference, timed alone) its row gather and its count exchange."""
    import statistics

    import torch
    import torch.distributed as dist

    from backends.reference.dispatch import Buffers, dispatch_clipped, exchange_counts
    from backends.reference.routing import route

    s, k, h, e = size["tokens"], size["topk"], size["hidden"], size["experts"]
    r = route(1, "BENCH", 0, 0, rank, s, e, k, 1.0)
    ids = r.ids.to(device)
    x = torch.randn(s, h, generator=torch.Generator().manual_seed(rank)).bfloat16().to(device)
    budget = 2 * s * k * ep                       # no drops: same bytes as the bare exchange
    bufs = Buffers.allocate(x, k, s * k * ep)     # allocated once, as the libraries do
    ref_ms, bare_ms, gather_ms, count_ms = [], [], [], []
    send = recv = None                            # the bare exchange's tensors, reused too
    for _ in range(reps + 2):                     # the first two reps are warm-up
        dist.barrier()
        t0 = time.perf_counter()
        _, d = dispatch_clipped(x, ids, k, e, ep, rank, budget, bufs=bufs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        ref_ms.append((time.perf_counter() - t0) * 1e3)
        send = x.new_empty(sum(d.send_split), h) if send is None else send
        recv = x.new_empty(sum(d.recv_split), h) if recv is None else recv
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_to_all_single(recv, send, d.recv_split, d.send_split)
        if device.type == "cuda":
            torch.cuda.synchronize()
        bare_ms.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()                  # the gather alone (part of the reference)
        torch.index_select(x, 0, d.send_slots // k, out=bufs.send[:send.shape[0]])
        if device.type == "cuda":
            torch.cuda.synchronize()
        gather_ms.append((time.perf_counter() - t0) * 1e3)
        dist.barrier()
        t0 = time.perf_counter()                  # the count exchange alone (a tiny collective)
        exchange_counts(torch.bincount(ids.reshape(-1), minlength=e), ep)
        if device.type == "cuda":
            torch.cuda.synchronize()
        count_ms.append((time.perf_counter() - t0) * 1e3)
    t = torch.tensor([ref_ms[2:], bare_ms[2:], gather_ms[2:], count_ms[2:]],
                     dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return tuple(statistics.median(row) for row in t.tolist())


def worker(reps: int) -> int:
    """One rank: run every size, rank 0 prints the table."""
    import torch
    import torch.distributed as dist

    rank, ep = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)                      # both sides: one intra-op thread per rank
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", rank % max(torch.cuda.device_count(), 1)) if cuda \
        else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=ep)
    ok = True
    for name, size in SIZES.items():
        ref, bare, gather, count = bench_rank(size, reps, rank, ep, device)
        ratio = bare / ref
        mb = size["tokens"] * size["topk"] * size["hidden"] * 2 / 1e6
        if rank == 0:
            print(f"{name:5s} ranks={ep} S={size['tokens']} K={size['topk']} "
                  f"hidden={size['hidden']} E={size['experts']} bytes/rank={mb:.1f}MB "
                  f"reference={ref:.2f}ms bare_all_to_all={bare:.2f}ms ratio={ratio:.3f} "
                  f"(alone: row gather {gather:.2f}ms, count exchange {count:.2f}ms) "
                  f"({'gloo/cpu' if not cuda else 'nccl/cuda'})", flush=True)
        if name == "main":
            ok = ratio >= TARGET
    dist.destroy_process_group()
    if rank == 0:
        print(f"target ratio >= {TARGET} at the main size: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    if "RANK" in os.environ:
        return worker(args.reps)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, "--reps", str(args.reps)],
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.ranks),
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                                       OMP_NUM_THREADS="1"))
             for r in range(args.ranks)]
    codes = [p.wait() for p in procs]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
