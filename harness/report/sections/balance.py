"""Section "Load before and after rebalancing": receive demand before and after each
library's rebalancing, side by side.

Reads the measure cells' rank logs: every dispatch row carries `actual_valid_recv` (what
arrived after the library's own rebalancing) and, from backends that report it,
`pre_balance_recv` (the same routing's demand before rebalancing: the raw, home-placement
load that DeepEP, HybridEP or NCCL EP would have to hold). Per (model, backend) the section
shows the peak of each over N, like UltraEP's load profiler shows load before and after
reroute. Raw is not a backend run: it is the pre-balance demand of the same routing, so it
does not enter the timing capacity (docs/spec.md#pipeline).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from harness.errors import BadInput
from harness.io.boundary.logs import text_lines
from harness.io.bounds import parse_int
from harness.report.inputs import Context
from harness.results.layout import parse_cell_name
from harness.vocab import Purpose

TAG = "[MOE_DROP_DEBUG][dispatch]"
_KV = re.compile(r"(\w+)=(-?\d+)(?=\s|$)")
COLUMNS = ("model", "backend", "rows", "uniform_tokens", "peak_pre_balance_recv",
           "raw_required", "peak_actual_valid_recv", "rebalanced_required", "reduction")


def _cell_rows(cell_dir: Path) -> Iterator[dict[str, int]]:
    """The dispatch rows of one cell's rank logs as key -> int dicts, streamed (a cell of
    many iterations is never held: memory is one line's)."""
    for log in sorted(cell_dir.glob("rank*.log")):
        try:
            for _, line in text_lines(log):     # the one bounded log reader
                at = line.find(TAG)
                if at >= 0:
                    pairs = _KV.findall(line[at + len(TAG):])
                    values = {k: parse_int(v) for k, v in pairs}   # None past 30 digits
                    if None not in values.values():
                        yield values
        except BadInput:
            continue            # a FIFO, a device, a directory: not a log (as classify skips it)


BALANCE_KEYS = frozenset({"pre_balance_recv", "actual_valid_recv", "expected_recv"})


def balance_rows(campaign_dir: Path | str) -> list[dict[str, object]]:
    """One row per measured (model, backend) whose rows carry pre_balance_recv (the latest
    attempt wins); required values are peak / N as 6-decimal strings."""
    root = Path(campaign_dir) / "cells"
    cells = [parse_cell_name(p.name) for p in root.iterdir() if p.is_dir()] \
        if root.is_dir() else []
    measured = sorted((c for c in cells if c and c.purpose == Purpose.MEASURE),
                      key=lambda c: (c.model, c.backend, c.attempt, c.name))
    out: dict[tuple[str, str], dict[str, object]] = {}
    for cell in measured:
        count = n = pre = post = 0          # folded as the rows stream by
        for r in _cell_rows(root / cell.name):
            if BALANCE_KEYS <= r.keys():
                n = max(n, r["expected_recv"]) if count else r["expected_recv"]
                pre = max(pre, r["pre_balance_recv"]) if count else r["pre_balance_recv"]
                post = max(post, r["actual_valid_recv"]) if count else r["actual_valid_recv"]
                count += 1
        if not count:
            continue
        out[(cell.model, cell.backend)] = {
            "model": cell.model, "backend": cell.backend, "rows": count,
            "uniform_tokens": n, "peak_pre_balance_recv": pre,
            "raw_required": f"{pre / n:.6f}", "peak_actual_valid_recv": post,
            "rebalanced_required": f"{post / n:.6f}",
            "reduction": f"{pre / post:.6f}" if post else ""}
    return list(out.values())


def render(ctx: Context) -> list[str]:
    """The section as report lines ([] when no measured row carries pre_balance_recv)."""
    text = balance_section(ctx.results_dir)
    return text.splitlines() + [""] if text else []


def balance_section(campaign_dir: Path | str) -> str:
    """The markdown section (empty string when no measured row carries pre_balance_recv)."""
    rows = balance_rows(campaign_dir)
    if not rows:
        return ""
    lines = ["## Load before and after rebalancing", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    lines += ["", "Measure runs only. `raw_required` = max `pre_balance_recv` / N: the same "
              "routing's demand before the library's rebalancing (home placement, what "
              "DeepEP, HybridEP and NCCL EP hold); `rebalanced_required` = max "
              "`actual_valid_recv` / N after it; `reduction` = raw peak / rebalanced peak "
              "(derived). Raw is not a separate run and does not enter the timing "
              "capacity.", ""]
    return "\n".join(lines)
