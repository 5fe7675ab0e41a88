"""`python -m backends.reference`: one rank under a launcher, or spawn all ranks standalone.

Mode: with EPCAP_REFERENCE_CHILD=1 (set by the standalone parent) or, without --ranks, when
the launcher's rank variables are present (RANK/WORLD_SIZE/LOCAL_RANK, or SLURM_PROCID/
SLURM_NTASKS/SLURM_LOCALID; MASTER_ADDR/MASTER_PORT always), this process is one rank.
Otherwise it spawns --ranks (default --ep) local ranks on a free port and waits for them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

from .memory import estimate_memory_bytes, oom_message
from .options import build_parser, check_args, model_of, shape_of
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


def one_rank(args, rank: int, world: int, local_rank: int) -> int:
    """Banner, memory model, then the torch part (imported only now)."""
    p = personality(args.personality)
    sys.stdout.write(f"{banner(p)} rank={rank} world={world} model={args.model} "
                     f"purpose={args.purpose} capacity={args.capacity} ep={args.ep}\n")
    sys.stdout.flush()
    if world != args.ep:
        fail(f"error: world size {world} differs from --ep {args.ep}")
        return 2
    if args.device_memory_bytes is not None:
        est = estimate_memory_bytes(model_of(args), shape_of(args), args.capacity,
                                    args.personality, args.ep)
        msg = oom_message(est, args.device_memory_bytes)
        if msg:
            fail("Traceback (most recent call last):\n  (reference memory model)\n" + msg)
            return 1
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        fail("error: MASTER_ADDR and MASTER_PORT must be set for a launched rank")
        return 2
    from .routing import TraceError
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


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for the standalone rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(argv: list[str], ranks: int, log_dir: str | None, grace_s: float = 10.0) -> int:
    """Start `ranks` child ranks of this module; the first failing exit status wins."""
    port = free_port()
    procs, files = [], []
    for r in range(ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(ranks), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **{CHILD_ENV: "1"})
        env.setdefault("OMP_NUM_THREADS", "1")
        out = None
        if log_dir:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            out = open(Path(log_dir) / f"rank{r}.log", "w", encoding="utf-8")  # noqa: SIM115
            files.append(out)
        procs.append(subprocess.Popen([sys.executable, "-m", "backends.reference", *argv],
                                      env=env, stdout=out, stderr=subprocess.STDOUT if out else None))
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser()
    args = ap.parse_args(argv)
    check_args(ap, args)
    env = rank_env(os.environ)
    if env is not None and (os.environ.get(CHILD_ENV) == "1" or args.ranks is None):
        return one_rank(args, *env)
    return spawn(argv, args.ranks or args.ep, args.log_dir)


if __name__ == "__main__":
    sys.exit(main())
