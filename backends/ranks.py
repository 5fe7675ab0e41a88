"""Local ranks of a worker: who this process is, and starting and reaping the others.

Both workers (`python -m backends.reference`, `python -m backends.megatron_core.worker`) run
either as one rank under a launcher (the launcher's rank variables are in the environment) or
standalone with `--ranks`, starting every local rank themselves: forked after one import on
CPU (torch's import is most of a small run's cost), or one fresh interpreter per rank with a
GPU (CUDA and fork do not mix). After the first rank fails, the others get `grace_s` seconds
to finish, then SIGTERM. Torch-free: bad flags fail before torch loads.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from harness.api.backend import RANK_FIFOS_ENV, free_port

CHILD_ENV = "EPCAP_REFERENCE_CHILD"     # set on ranks a standalone parent started
GRACE_S = 10.0


def rank_env(env: dict) -> tuple[int, int, int] | None:
    """(rank, world, local_rank) from torchrun-style or Slurm variables, else None."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", env["RANK"]))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return (int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]),
                int(env.get("SLURM_LOCALID", env["SLURM_PROCID"])))
    return None


def rank_vars(rank: int, ranks: int, port: int) -> dict[str, str]:
    """The environment of a locally started rank (rendezvous on 127.0.0.1:port)."""
    return {"RANK": str(rank), "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), CHILD_ENV: "1"}


def gpu_present() -> bool:
    """Whether an NVIDIA device node exists (checked without importing torch or CUDA)."""
    return os.path.exists("/dev/nvidiactl")


def wants_fork(device: str, spawn: str = "auto") -> bool:
    """Fork the ranks (CPU) rather than exec them: `spawn` fork|exec, or auto = the device
    (cpu, or auto without a GPU)."""
    if spawn != "auto":
        return spawn == "fork"
    return device == "cpu" or (device == "auto" and not gpu_present())


def worker_main(argv: list[str] | None, parse: Callable[[list[str]], argparse.Namespace],
                run_rank: Callable[..., int], spawn_ranks: Callable[..., int],
                before: Callable[[argparse.Namespace], int] | None = None) -> int:
    """The entry both workers share: parse and check the flags (`parse` exits 2 on a bad
    one), run `before` (a check before any rank starts; non-zero = exit code), then run as
    one rank (`run_rank(args, rank, world, local_rank)`: a started child, or a process the
    launcher started without --ranks) or start the ranks (`spawn_ranks(argv, args)`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    code = before(args) if before is not None else 0
    if code:
        return code
    env = rank_env(os.environ)
    if env is not None and (os.environ.get(CHILD_ENV) == "1" or args.ranks is None):
        return run_rank(args, *env)
    return spawn_ranks(argv, args)


def fork_ranks(ranks: int, run: Callable[[int, int], int], log_dir: str | None = None,
               grace_s: float = GRACE_S) -> int:
    """Fork one child per rank, each calling `run(rank, ranks)` with its rank variables set
    (and its stdout/stderr in `log_dir`/rank<R>.log when given); the first failing exit
    status wins. Import what the ranks need before calling: the children share it."""
    port = free_port()
    pids = []
    for rank in range(ranks):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(run, rank, ranks, port, log_dir)
        pids.append(pid)
    return wait_pids(pids, grace_s)


def _child(run: Callable[[int, int], int], rank: int, ranks: int, port: int,
           log_dir: str | None) -> None:
    """A forked rank: own env and log, run, and leave with os._exit (never returns)."""
    code = 1
    try:
        os.environ.update(rank_vars(rank, ranks, port))
        fifos = os.environ.get(RANK_FIFOS_ENV)
        if not log_dir and fifos:           # the launcher's own log for this rank
            fd = os.open(Path(fifos) / f"rank{rank}.fifo", os.O_WRONLY)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        elif log_dir:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            fd = os.open(Path(log_dir) / f"rank{rank}.log",
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        code = run(rank, ranks)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def wait_pids(pids: list[int], grace_s: float = GRACE_S) -> int:
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


def exec_ranks(command: list[str], ranks: int, log_dir: str | None = None,
               grace_s: float = GRACE_S) -> int:
    """Start `ranks` fresh processes of `command`, each with its rank variables (and
    OMP_NUM_THREADS=1 unless set); the first failing exit status wins."""
    port = free_port()
    procs, files = [], []
    try:
        for rank in range(ranks):
            env = dict(os.environ, **rank_vars(rank, ranks, port))
            env.setdefault("OMP_NUM_THREADS", "1")
            out = None
            fifos = os.environ.get(RANK_FIFOS_ENV)
            if log_dir:
                Path(log_dir).mkdir(parents=True, exist_ok=True)
                out = open(Path(log_dir) / f"rank{rank}.log", "w", encoding="utf-8")  # noqa: SIM115
                files.append(out)
            elif fifos:                     # the launcher's own log for this rank
                out = open(Path(fifos) / f"rank{rank}.fifo", "w", encoding="utf-8")  # noqa: SIM115
                files.append(out)
            procs.append(subprocess.Popen(command, env=env, stdout=out,
                                          stderr=subprocess.STDOUT if out else None))
        return wait_procs(procs, grace_s)
    finally:
        for f in files:
            f.close()


def wait_procs(procs: list[subprocess.Popen], grace_s: float = GRACE_S) -> int:
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
