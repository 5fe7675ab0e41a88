"""`python -m backends.reference`: one rank under a launcher, or spawn all ranks standalone.

Mode: with EPCAP_REFERENCE_CHILD=1 (set by the standalone parent) or, without --ranks, when
the launcher's rank variables are present (RANK/WORLD_SIZE/LOCAL_RANK, or SLURM_PROCID/
SLURM_NTASKS/SLURM_LOCALID; MASTER_ADDR/MASTER_PORT always), this process is one rank.
Otherwise it starts --ranks (default --ep) local ranks on a free port and waits for them: on
CPU it imports torch once and forks the ranks (torch's import is most of a small run's cost),
with a GPU it starts a fresh interpreter per rank (CUDA and fork do not mix).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from harness.api.backend import free_port
from harness.loadmodel.traces import TraceError

from .memory import estimate_memory_bytes, oom_message
from .options import build_parser, check_args, memory_of, model_of, shape_of
from .personalities import banner, personality

CHILD_ENV = "EPCAP_REFERENCE_CHILD"


def rank_env(env: dict) -> tuple[int, int, int] | None:
    """(rank, world, local_rank) from torchrun-style or Slurm variables, else None."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", env["RANK"]))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return (int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]),
                int(env.get("SLURM_LOCALID", env["SLURM_PROCID"])))
    return None


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
                     f"purpose={args.purpose} capacity={args.capacity} ep={args.ep}\n")
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


def gpu_present() -> bool:
    """Whether an NVIDIA device node exists (checked without importing torch or CUDA)."""
    return os.path.exists("/dev/nvidiactl")


def spawn(argv: list[str], args, grace_s: float = 10.0) -> int:
    """Start the local ranks: fork after one torch import on CPU, else fresh interpreters."""
    ranks = args.ranks or args.ep
    cpu = args.device == "cpu" or (args.device == "auto" and not gpu_present())
    if args.spawn == "fork" or (args.spawn == "auto" and cpu):
        return fork_ranks(args, ranks, grace_s)
    return exec_ranks(argv, ranks, args.log_dir, grace_s)


def _rank_vars(rank: int, ranks: int, port: int) -> dict:
    return {"RANK": str(rank), "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), CHILD_ENV: "1"}


def fork_ranks(args, ranks: int, grace_s: float) -> int:
    """CPU: import torch once, then fork one child per rank (saves ~1.5 s CPU per rank)."""
    if memory_failure(args) is None:          # a rank that will OOM never needs torch
        from . import worker  # noqa: F401  (torch loads here, before the fork)

    port = free_port()
    pids = []
    for r in range(ranks):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(args, r, ranks, port)
        pids.append(pid)
    return _wait_pids(pids, grace_s)


def _child(args, rank: int, ranks: int, port: int) -> None:
    """A forked rank: own env and log, run, and leave with os._exit (never returns)."""
    code = 1
    try:
        os.environ.update(_rank_vars(rank, ranks, port))
        if args.log_dir:
            Path(args.log_dir).mkdir(parents=True, exist_ok=True)
            fd = os.open(Path(args.log_dir) / f"rank{rank}.log",
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        code = one_rank(args, rank, ranks, rank)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _wait_pids(pids: list[int], grace_s: float) -> int:
    """Reap forked ranks; after the first failure give the rest `grace_s`, then SIGTERM."""
    status, deadline, left = 0, None, set(pids)
    while left:
        pid, raw = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            if deadline is not None and time.monotonic() > deadline:
                for p in left:
                    os.kill(p, signal.SIGTERM)
                deadline = float("inf")
            time.sleep(0.01)
            continue
        if pid in left:
            left.discard(pid)
            code = os.waitstatus_to_exitcode(raw)
            if code != 0 and status == 0:
                status, deadline = (code if code > 0 else 1), time.monotonic() + grace_s
    return status


def exec_ranks(argv: list[str], ranks: int, log_dir: str | None, grace_s: float) -> int:
    """Start `ranks` fresh interpreters of this module; the first failing exit status wins."""
    port = free_port()
    procs, files = [], []
    for r in range(ranks):
        env = dict(os.environ, **_rank_vars(r, ranks, port))
        env.setdefault("OMP_NUM_THREADS", "1")
        out = None
        if log_dir:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            out = open(Path(log_dir) / f"rank{r}.log", "w", encoding="utf-8")  # noqa: SIM115
            files.append(out)
        procs.append(subprocess.Popen([sys.executable, "-m", "backends.reference", *argv],
                                      env=env, stdout=out,
                                      stderr=subprocess.STDOUT if out else None))
    try:
        return _wait(procs, grace_s)
    finally:
        for f in files:
            f.close()


def _wait(procs: list, grace_s: float) -> int:
    """Wait for all; after the first failure give the rest `grace_s`, then terminate them."""
    status, deadline = 0, None
    while any(p.poll() is None for p in procs):
        for p in procs:
            if p.returncode not in (None, 0) and status == 0:
                status, deadline = p.returncode, time.monotonic() + grace_s
        if deadline is not None and time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        time.sleep(0.02)
    for p in procs:
        if p.returncode != 0 and status == 0:
            status = p.returncode
    return status if status >= 0 else 1


def worker_main(argv: list[str] | None, run_rank, spawn_ranks, before=None) -> int:
    """The entry both workers share (this one and backends.megatron_core.worker): parse and
    check the options, run `before` (a check before any rank starts; non-zero = exit code),
    then run as one rank (a child, or a single process) or spawn the ranks."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    args = ap.parse_args(argv)
    check_args(ap, args)
    code = before(args) if before is not None else 0
    if code:
        return code
    env = rank_env(os.environ)
    if env is not None and (os.environ.get(CHILD_ENV) == "1" or args.ranks is None):
        return run_rank(args, *env)
    return spawn_ranks(argv, args)


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
    return worker_main(argv, one_rank, spawn, before=_check_trace_first)


if __name__ == "__main__":
    sys.exit(main())
