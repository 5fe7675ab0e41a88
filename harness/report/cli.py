"""`epcap report RESULTS_DIR [--out DIR]`."""

from __future__ import annotations

import sys

from harness.report.build import render_report


def cli_report(results_dir: str, out: str | None = None) -> int:
    """`epcap report RESULTS_DIR [--out DIR]`: build the report; say where, and what is missing."""
    ctx = render_report(results_dir, out or None)
    print(f"report: {ctx.out / 'report.md'} ({len(ctx.figures)} figures)")
    for part in ctx.unavailable:
        print(f"  not available: {part}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(cli_report(sys.argv[1]))
