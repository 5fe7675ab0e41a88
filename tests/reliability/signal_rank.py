"""A rank for the signalled-rank fault test: started by the real local launcher (RANK in the
environment), it prints dispatch rows; rank VICTIM then kills itself with SIGNAL and prints
nothing more, while every other rank, a second later, prints the NCCL watchdog and
closed-socket lines a peer of a dead rank prints, and exits 1.

    python signal_rank.py VICTIM SIGNAL      (SIGNAL: SIGKILL, SIGSEGV, ...)
"""

from __future__ import annotations

import os
import signal
import sys
import time

FALLOUT_DELAY_S = 1.0       # the peers notice the dead rank this long after it died


def main() -> int:
    """Print rows; the victim is signalled, the others print NCCL fallout and exit 1."""
    rank, victim, sig = int(os.environ["RANK"]), int(sys.argv[1]), getattr(signal, sys.argv[2])
    for it in range(3):
        print(f"[MOE_DROP_DEBUG][dispatch] iter={it} layer=0 rank={rank} expected_recv=64 "
              f"actual_valid_recv=60 budget=128", flush=True)
    if rank == victim:
        time.sleep(0.2)
        os.kill(os.getpid(), sig)
        time.sleep(60)          # never reached
    time.sleep(FALLOUT_DELAY_S)
    print(f"[rank{rank}]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank {rank}] Process group "
          f"watchdog thread terminated with exception: NCCL error: remote process exited or "
          f"there was a network error, NCCL version 2.21.5", flush=True)
    print(f"node0:4242:4300 [{rank}] misc/socket.cc:49 NCCL WARN socketProgress: Connection "
          f"closed by remote peer node0<52341>", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
