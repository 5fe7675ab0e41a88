"""Node-side capture of a Slurm cell's output: every line redacted (harness/io/redact.py)
before it reaches a file, split into `rank<R>.log` by global rank R.

The batch script pipes `srun --label` into `python -m harness.launch.capture CELL_DIR`. srun
prefixes each line with its task id (`3: `). With one rank per task (the CPU backends) the
task id is the global rank. With torchrun (one task per node, several ranks), the batch script
sets `TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]:'` and `PET_TEE=3`, so torchrun tees
every worker's stdout and stderr to its console with the worker's global rank in front
(pytorch/pytorch v2.13.0 torch/distributed/run.py `--tee` (env PET_TEE) and
TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; torch/distributed/elastic/agent/server/
local_elastic_agent.py: the `${rank}` macro is the global rank); such a line goes to
rank<R>.log; the node's lines without a rank (torchrun's own) go to node<T>.log, so no line
is in two files (the audit counts telemetry rows over every *.log of a cell). Lines
without a task label (srun's own messages) go to stdout, the job's batch log.

The local launcher starts one capture per rank (`--rank R`) whose output arrives on stdin (a
pipe) or on a FIFO (`--fifo PATH`, for ranks forked by the fork server), and every line goes,
redacted, to rank<R>.log. A task that starts its own ranks gives one capture all its ranks'
FIFOs (`--fifo PATH --log rank<R>.log`, repeated): one thread per FIFO (a single FIFO too),
each line still to its own rank's log, one interpreter's start instead of one per rank. The capture is its own
process, so a rank outlives a driver that dies (resume finds it) without losing its log.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from io import BufferedReader, BufferedWriter

from harness.io.redact import redact_text, secret_values

# A new interpreter per local task (two per forked local run: its ranks', its own lines'):
# the imports are kept to what the copy needs
# (no pathlib, no typing; tests/unit/test_capture_imports.py), paths are plain strings.

LABEL_RE = re.compile(rb"^\s*(\d+): ?")
TORCHRUN_RANK_RE = re.compile(rb"^\[rank(\d+)\]:")
MAX_RANK = 1 << 20                  # a label beyond this is not a rank (refused, sent to stdout)
FIFO_TIMEOUT_S = 120.0              # a FIFO no rank opened by then: the capture gives up
RELEASE_WAIT_S = 5.0                # a released FIFO's thread returns from open() by then


class Capture:
    """Open rank/node files on first use; write each redacted line and flush it (the driver
    reads log growth as progress)."""

    def __init__(self, cell_dir: str | os.PathLike, ranks_per_task: int, secrets: list[str],
                 rank: int | None = None, log: str | None = None):
        self.cell_dir, self.ranks_per_task, self.secrets = cell_dir, ranks_per_task, secrets
        self.rank = rank                # set: every line is this rank's (local launcher)
        self.log = log if log is not None else (None if rank is None else f"rank{rank}.log")
        self.files: dict[str, BufferedWriter] = {}
        if self.log is not None:        # a fresh log per attempt, present even when silent
            self.files[self.log] = open(os.path.join(cell_dir, self.log), "wb")  # noqa: SIM115

    def _write(self, name: str, data: bytes) -> None:
        handle = self.files.get(name)
        if handle is None:
            handle = self.files[name] = open(os.path.join(self.cell_dir, name), "ab")  # noqa: SIM115
        handle.write(data)
        handle.flush()

    def redact(self, line: bytes) -> bytes:
        text = line.decode("utf-8", "surrogateescape")
        return redact_text(text, self.secrets).encode("utf-8", "surrogateescape")

    def line(self, raw: bytes, out: BufferedWriter) -> None:
        """Route one line (with its newline, if it had one)."""
        line = self.redact(raw)
        if self.log is not None:
            self._write(self.log, line)
            return
        label = LABEL_RE.match(line)
        if label is None or int(label.group(1)) > MAX_RANK:
            out.write(line)
            out.flush()
            return
        task, body = int(label.group(1)), line[label.end():]
        if self.ranks_per_task == 1:
            self._write(f"rank{task}.log", body)
            return
        rank = TORCHRUN_RANK_RE.match(body)
        if rank is not None and int(rank.group(1)) <= MAX_RANK:
            self._write(f"rank{int(rank.group(1))}.log", body)
        else:                           # torchrun's own lines: no line is in two files
            self._write(f"node{task}.log", body)

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()


def run(cell_dir: str | os.PathLike, ranks_per_task: int, source: BufferedReader,
        out: BufferedWriter,
        rank: int | None = None, log: str | None = None) -> int:
    """Copy `source` into the cell's logs line by line until EOF."""
    cap = Capture(cell_dir, ranks_per_task, secret_values(), rank, log)
    try:
        for raw in source:
            cap.line(raw, out)
    finally:
        cap.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.launch.capture CELL_DIR [--ranks-per-task K]` (stdin: srun --label)."""
    parser = argparse.ArgumentParser(prog="python -m harness.launch.capture")
    parser.add_argument("cell_dir")
    parser.add_argument("--ranks-per-task", type=int, default=1)
    parser.add_argument("--rank", type=int, default=None, help="every line is this rank's")
    parser.add_argument("--log", action="append", default=[],
                        help="every line goes to this file of the cell (node0.log); with "
                             "several --fifo, the n-th --log is the n-th FIFO's file")
    parser.add_argument("--fifo", action="append", default=[],
                        help="read this FIFO (removed once open) instead of stdin; repeated: "
                             "one thread per FIFO, each with its --log")
    parser.add_argument("--fifo-timeout", type=float, default=FIFO_TIMEOUT_S,
                        help="give up (exit 1) on a FIFO no writer opens within this")
    args = parser.parse_args(argv)
    if len(args.log) > max(1, len(args.fifo)) or (len(args.fifo) > 1
                                                  and len(args.log) != len(args.fifo)):
        parser.error("give one --log per --fifo")
    if not args.fifo:
        return run(args.cell_dir, max(1, args.ranks_per_task), sys.stdin.buffer,
                   sys.stdout.buffer, args.rank, args.log[0] if args.log else None)
    logs = args.log or ([f"rank{args.rank}.log"] if args.rank is not None else [])
    if len(logs) != len(args.fifo):
        parser.error("a FIFO's lines need a file: give --rank or --log")
    return copy_fifos(args.cell_dir, list(zip(args.fifo, logs, strict=True)),
                      args.fifo_timeout)


def copy_fifos(cell_dir: str, pairs: list[tuple[str, str]], timeout_s: float) -> int:
    """Copy each (FIFO, log) pair on its own thread until its writer's EOF: 0, or 1 when a
    FIFO had no writer within `timeout_s` (it is then released by opening and closing its
    write end, and removed: a capture never outlives a rank that never started)."""
    secrets = secret_values()
    opened = [threading.Event() for _ in pairs]
    caps = [Capture(cell_dir, 1, secrets, None, log) for _, log in pairs]

    def copy(i: int, path: str) -> None:
        try:
            with open(path, "rb") as source:        # blocks until the writer opens it
                opened[i].set()
                _remove_fifo(path)
                for raw in source:
                    caps[i].line(raw, sys.stdout.buffer)
        except OSError:
            pass                                    # removed under us: nothing to copy
        finally:
            opened[i].set()
            caps[i].close()

    threads = [threading.Thread(target=copy, args=(i, path), daemon=True)
               for i, (path, _) in enumerate(pairs)]
    for thread in threads:
        thread.start()
    deadline, gave_up = time.monotonic() + max(0.01, timeout_s), False
    for i, (path, _) in enumerate(pairs):
        if not opened[i].wait(max(0.0, deadline - time.monotonic())):
            gave_up = True
            release_fifo(path)                      # the blocked open() returns, reads EOF
            opened[i].wait(RELEASE_WAIT_S)
    for i, thread in enumerate(threads):
        if opened[i].is_set():                      # else stuck on a FIFO gone: left
            thread.join()
    return 1 if gave_up else 0


def release_fifo(path: str | os.PathLike) -> None:
    """Open and close a FIFO's write end: a reader blocked opening it returns and reads EOF
    (nothing happens when no reader is there or the FIFO is gone)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def _remove_fifo(path: str) -> None:
    """The FIFO and its folder (the launcher's temporary one), whatever is already gone."""
    for remove, target in ((os.unlink, path), (os.rmdir, os.path.dirname(path))):
        try:
            remove(target)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
