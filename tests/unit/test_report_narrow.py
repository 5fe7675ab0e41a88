"""report.md fits in REPORT_WIDTH characters a line (harness.report.narrow): tables of any
shape are split into parts that repeat their key columns (and read back whole), or become a
list with every cell in it; prose is wrapped without losing a word. Generated inputs
(hypothesis), not only the report's own tables."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.report.inputs import md_escape
from harness.report.narrow import REPORT_WIDTH, fit_table, narrow_lines, read_tables

CELL = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")),
               max_size=40).map(lambda s: md_escape(s).strip())
WORD = st.text("abcdefghijklmnopqrstuvwxyz0123456789._/-×%()", min_size=1, max_size=30)


@st.composite
def tables(draw):
    cols = draw(st.integers(1, 16))
    headers = draw(st.lists(st.text("abcdefghij_ ", min_size=1, max_size=24)
                            .map(str.strip).filter(bool), min_size=cols, max_size=cols,
                            unique=True))
    if draw(st.booleans()) and cols > 2:
        headers[:2] = ["model", "backend"]
        headers = list(dict.fromkeys(headers))
        cols = len(headers)
    rows = draw(st.lists(st.lists(CELL, min_size=cols, max_size=cols), max_size=6))
    return headers, rows


def _norm(text: str) -> str:
    return " ".join(text.split())


@settings(max_examples=300, deadline=None)
@given(table=tables(), width=st.integers(60, 140))
# found by this test: a cell `\|` (md_escape of a backslash and a pipe) that GitHub reads as
# one cell (a pipe after a backslash is content) and an escape-pair reader split in two
@example(table=(["_", "a", "b", "c", "d", "e", "f", "g", "__", "_a", "___", "____", "_____"],
                [[""] * 13, [""] * 12 + [md_escape("\\|")]]), width=60)
def test_every_table_fits_and_keeps_every_cell(table, width):
    headers, rows = table
    lines = fit_table(headers, rows, width)
    # the pass over a finished report (a table some section wrote by hand) does the same
    raw = fit_table(headers, rows, 10**6)
    assert narrow_lines(raw, width) == (raw if max(map(len, raw)) <= width else lines)
    assert max(map(len, lines), default=0) <= width
    got = read_tables("\n".join(lines))
    if got:                                          # split (or whole): read back the same
        assert len(got) == 1, got
        head, back = got[0]
        assert head == headers
        assert back == [[c.strip() for c in r] for r in rows]
    else:                                            # records: every cell is in the text
        flat = _norm(" ".join(ln.strip() for ln in lines)).replace(" ", "")
        for r in rows:
            for c in r:
                assert _norm(c).replace(" ", "") in flat


@settings(max_examples=200, deadline=None)
@given(words=st.lists(WORD, min_size=1, max_size=80),
       lead=st.sampled_from(["", "- ", "> ", "  ", "1. "]), width=st.integers(40, 140))
def test_prose_is_wrapped_without_losing_a_word(words, lead, width):
    line = lead + " ".join(words)
    out = narrow_lines(["# title", "", line, "", "![alt](x.png)"], width)
    assert max(map(len, out)) <= width
    body = out[2:-2]
    def bare(text: str) -> str:                      # the words, without spaces or quote marks
        return "".join(text.split()).replace(">", "")

    assert bare(" ".join(body)) == bare(line)
    if lead.strip():
        assert body[0].startswith(lead)
        assert all(ln.startswith(">" if lead == "> " else " " * len(lead)) for ln in body[1:])


def test_a_heading_is_never_wrapped():
    heading = "### " + "M" * 100                     # a model name at the 100-character bound
    assert narrow_lines([heading, "", "x " * 80])[0] == heading


def test_a_wide_table_is_split_with_its_keys_repeated():
    headers = ["model", "backend", *(f"column_{i:02d}" for i in range(12))]
    rows = [["QWEN3_235B", "ultraep", *(f"{i * 1.234567:.6f}" for i in range(12))]]
    lines = fit_table(headers, rows)
    parts = [ln for ln in lines if ln.startswith("| model")]
    assert len(parts) >= 2 and all(p.split("|")[2].strip() == "backend" for p in parts)
    assert max(map(len, lines)) <= REPORT_WIDTH
    assert read_tables("\n".join(lines)) == [(headers, rows)]
    # the check can fail: without the split the table is over the width
    assert len("| " + " | ".join(headers) + " |") > REPORT_WIDTH


def test_a_table_no_split_can_fit_becomes_a_list():
    line = "torch.OutOfMemoryError: CUDA out of memory. " * 4
    lines = fit_table(["cell", "status", "matching log line"], [["cells/a", "oom", line]])
    assert lines[0].startswith("- **cells/a** · status: oom · matching log line: torch.")
    assert max(map(len, lines)) <= REPORT_WIDTH
    assert fit_table(["key", "value"], [["command_line", "x " * 80]])[0].startswith(
        "- **command_line**: x x")
