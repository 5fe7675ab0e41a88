"""`python -m backends.reference`: one rank under a launcher, or spawn all ranks standalone.

Mode: with EPCAP_REFERENCE_CHILD=1 (set by the standalone parent) or, without --ranks, when
the launcher's rank variables are present (RANK/WORLD_SIZE/LOCAL_RANK, or SLURM_PROCID/
SLURM_NTASKS/SLURM_LOCALID; MASTER_ADDR/MASTER_PORT always), this process is one rank.
Otherwise it starts --ranks (default --ep) local ranks on a free port and waits for them: on
CPU it imports torch once and forks the ranks (torch's import is most of a small run's cost),
with a GPU it starts a fresh interpreter per rank (CUDA and fork do not mix). The rank
plumbing is backends/ranks.py, shared with the megatron-core worker.
"""

from __future__ import annotations

import os
import sys
import traceback

from backends.ranks import exec_ranks, fork_ranks, wants_fork, worker_main
from harness.loadmodel.memory import estimate_memory_bytes, oom_message
from harness.loadmodel.traces import TraceError

from .options import memory_of, model_of, parse_args, shape_of
from .personalities import banner, personality


def _same_stream() -> bool:
    """Whether stdout and stderr are the same file (then a message is written once)."""
    try:
        a, b = os.fstat(1), os.fstat(2)
        return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
    except OSError:
        return False


def fail(message: str) -> None:
    """A failure line on stderr, mirrored on stdout (the rank's log) when they differ."""
    sys.stdout.flush()
    print(message, file=sys.stderr, flush=True)
    if not _same_stream():
        print(message, flush=True)


def memory_failure(args) -> str | None:
    """The OOM message when the memory model does not fit --device-memory-bytes, else None."""
    if args.device_memory_bytes is None:
        return None
    est = estimate_memory_bytes(model_of(args), shape_of(args), args.capacity,
                                args.personality, args.ep, memory_of(args))
    return oom_message(est, args.device_memory_bytes)


def one_rank(args, rank: int, world: int, local_rank: int) -> int:
    """Banner, memory model, then the torch part (imported only now)."""
    p = personality(args.personality)
    sys.stdout.write(f"{banner(p)} rank={rank} world={world} model={args.model} "
                     f"timed={int(args.timed)} capacity={args.capacity} ep={args.ep}\n")
    sys.stdout.flush()
    if world != args.ep:
        fail(f"error: world size {world} differs from --ep {args.ep}")
        return 2
    msg = memory_failure(args)
    if msg:
        fail("Traceback (most recent call last):\n  (reference memory model)\n" + msg)
        return 1
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        fail("error: MASTER_ADDR and MASTER_PORT must be set for a launched rank")
        return 2
    from .worker import run_rank
    try:
        return run_rank(args, rank, world, local_rank)
    except AssertionError as exc:
        traceback.print_exc()
        sys.stderr.flush()
        if not _same_stream():
            print(f"[EPCAP_ASSERT] AssertionError: {exc}", flush=True)
        return 1
    except TraceError as exc:
        fail(f"error: trace {exc}")
        return 2


def check_trace(args) -> None:
    """Read and check the replayed trace for this run (TraceError names file:line: field)."""
    from harness.loadmodel.trace_io import preload

    layers = list(range(args.first_dense_layers, args.layers))
    preload(args.trace, args.experts, args.topk, args.seq * args.micro_batch, args.ep, layers)


def spawn(argv: list[str], args) -> int:
    """Start the local ranks: fork after one torch import on CPU, else fresh interpreters."""
    ranks = args.ranks or args.ep
    if wants_fork(args.device, args.spawn):
        if memory_failure(args) is None:          # a rank that will OOM never needs torch
            from . import worker  # noqa: F401  (torch loads here, before the fork)
        return fork_ranks(ranks, lambda rank, world: one_rank(args, rank, world, rank),
                          args.log_dir)
    return exec_ranks([sys.executable, "-m", "backends.reference", *argv], ranks, args.log_dir)


def _check_trace_first(args) -> int:
    """A replayed trace is checked before any rank starts (forked ranks reuse the parse)."""
    if args.trace and memory_failure(args) is None:
        try:
            check_trace(args)
        except TraceError as exc:
            fail(f"error: trace {exc}")
            return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    return worker_main(argv, parse_args, one_rank, spawn, before=_check_trace_first)


if __name__ == "__main__":
    sys.exit(main())
