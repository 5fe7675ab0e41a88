"""`epcap report RESULTS_DIR [--out DIR]`."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from harness.report.build import render_report

TERM_EXIT = 143                 # what a shell reports for a process ended by SIGTERM (15)


@contextmanager
def term_unwinds() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) while the block runs, so every write in progress
    unwinds and removes its temp file (the default action would kill the process mid-write,
    leaving `.name.XXXXXXXX.tmp` behind)."""
    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(TERM_EXIT)
    try:
        old = signal.signal(signal.SIGTERM, stop)
    except ValueError:          # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def cli_report(results_dir: str, out: str | None = None) -> int:
    """`epcap report RESULTS_DIR [--out DIR]`: build the report; say where, and what is missing."""
    with term_unwinds():
        ctx = render_report(results_dir, out or None)
    print(f"report: {ctx.out / 'report.md'} ({len(ctx.figures)} figures)")
    for part in ctx.unavailable:
        print(f"  not available: {part}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_report(sys.argv[1]))
