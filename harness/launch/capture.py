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

The local launcher starts one capture per rank (`--rank R`): the rank's output arrives on
stdin (a pipe) or on a FIFO (`--fifo PATH`, for ranks forked by the fork server), and every
line goes, redacted, to rank<R>.log. The capture is its own process, so a rank outlives a
driver that dies (resume finds it) without losing its log.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from io import BufferedReader, BufferedWriter

from harness.io.redact import redact_text, secret_values

# A new interpreter per rank (4 per local run): the imports are kept to what the copy needs
# (no pathlib, no typing; tests/unit/test_capture_imports.py), paths are plain strings.

LABEL_RE = re.compile(rb"^\s*(\d+): ?")
TORCHRUN_RANK_RE = re.compile(rb"^\[rank(\d+)\]:")
MAX_RANK = 1 << 20                  # a label beyond this is not a rank (refused, sent to stdout)
FIFO_TIMEOUT_S = 120.0              # a FIFO no rank opened by then: the capture gives up


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
    parser.add_argument("--log", default=None,
                        help="every line goes to this file of the cell (node0.log)")
    parser.add_argument("--fifo", default=None,
                        help="read this FIFO (removed once open) instead of stdin")
    parser.add_argument("--fifo-timeout", type=float, default=FIFO_TIMEOUT_S,
                        help="give up (exit 1) when no writer opens the FIFO within this")
    args = parser.parse_args(argv)
    if args.fifo is None:
        return run(args.cell_dir, max(1, args.ranks_per_task), sys.stdin.buffer,
                   sys.stdout.buffer, args.rank, args.log)
    source = open_fifo(args.fifo, args.fifo_timeout)
    if source is None:
        return 1
    with source:
        _remove_fifo(args.fifo)
        return run(args.cell_dir, 1, source, sys.stdout.buffer, args.rank, args.log)


def open_fifo(path: str, timeout_s: float) -> BufferedReader | None:
    """The FIFO opened for reading once its writer opens it, or None (and the FIFO removed)
    when none does within `timeout_s`: a capture never outlives a rank that never started."""
    def give_up(_signum, _frame):
        raise TimeoutError
    old = signal.signal(signal.SIGALRM, give_up)
    signal.setitimer(signal.ITIMER_REAL, max(0.01, timeout_s))
    try:
        return open(path, "rb")  # noqa: SIM115 -- blocks until the writer opens it
    except (TimeoutError, OSError):
        _remove_fifo(path)
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _remove_fifo(path: str) -> None:
    """The FIFO and its folder (the launcher's temporary one), whatever is already gone."""
    for remove, target in ((os.unlink, path), (os.rmdir, os.path.dirname(path))):
        try:
            remove(target)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
