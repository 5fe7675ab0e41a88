"""Mechanism: a rank log whose lines end in a carriage return alone is read correctly when
its last line ends in a newline, and otherwise refused with its reason said
(telemetry.lines.unterminated, CR_ONLY) -- never called a truncated last line and never read
as zero rows without a word. CRLF and LF logs read as before."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.telemetry.lines import CR_ONLY
from harness.telemetry.summary import summarize

ROWS = [f"[rank{r}]:[MOE_DROP_DEBUG][dispatch] iter={i} layer={la} rank={r} expected_recv=1024 "
        f"actual_valid_recv={1000 + r} budget=1152 observed_loss={24 - r}"
        for i in range(2) for la in (1, 2) for r in range(2)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.sampled_from(ROWS), min_size=1, max_size=8, unique=True),
       sep=st.sampled_from(["\n", "\r\n", "\r"]), end=st.sampled_from(["sep", "", "\n"]))
@example(rows=ROWS[:1], sep="\r", end="sep")
@example(rows=ROWS[:3], sep="\r", end="")
@example(rows=ROWS[:3], sep="\r", end="\n")
def test_cr_only_logs_are_read_or_refused_with_their_reason(tmp_path, rows, sep, end):
    """Generated logs of LF, CRLF and CR-only lines, ending in their separator, nothing or a
    newline. Catches the fourth round's probe: a CR-only log read as rows=0 with every tag
    'truncated last line (no newline)' at line 1. Mutant tried by hand: the CR check in
    unterminated removed -> the reason is the truncated-line one."""
    text = sep.join(rows) + (sep if end == "sep" else end)
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "rank0.log"
    path.write_bytes(text.encode())
    got = summarize(path)
    ends_in_newline = text.endswith("\n")
    if ends_in_newline:
        assert (got.rows, got.malformed_rows) == (len(rows), 0), (got.rows, got.malformed)
    elif re.search("\r(?!\n)", text.rstrip("\r")):      # a CR alone between lines
        assert got.rows == 0 and got.malformed_rows == len(rows)
        assert all(CR_ONLY in m for m in got.malformed), got.malformed
    else:                              # LF or CRLF without a final newline: the last line
        assert got.rows == len(rows) - 1 and got.malformed_rows == 1
        assert not any(CR_ONLY in m for m in got.malformed), got.malformed
