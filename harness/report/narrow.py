"""Keep report.md readable in `less`: every line at most REPORT_WIDTH characters.

A table too wide for the width is split into narrower tables that repeat its key columns
(model, backend); one that no split can fit (a single cell wider than the width) becomes a
list, one item per row. Prose is wrapped at spaces (a Markdown soft break renders as a
space, so the rendered report is unchanged); a word longer than the width is cut.
"""

from __future__ import annotations

import re
import textwrap

REPORT_WIDTH = 100              # characters per line of report.md (README: read it in `less`)
KEY_COLUMNS = ("model", "backend")      # repeated in every part of a split table
_SEPARATOR = re.compile(r"\|(\s*:?-+:?\s*\|)+")
# a cell up to a pipe no backslash precedes: GitHub's own rule (cmark-gfm
# extensions/ext_scanners.re: table_cell = (escaped_char|[^|\r\n])+ with the longest match,
# so in `\\|` the pipe is content); an escape-pair reading would end the cell there
_CELL = re.compile(r"((?:\\\||[^|])*)\|")
_LIST = re.compile(r"(\s*(?:[-*+]|\d+\.)\s+|\s*>\s?|\s+)")   # a list item, quote or indent


def _row(cells: list[str], widths: list[int]) -> str:
    return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"


def _render(headers: list[str], rows: list[list[str]]) -> list[str]:
    """One Markdown table padded to column width (cells already escaped)."""
    table = [headers, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
    lines = [_row(r, widths) for r in table]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return lines


def _table_width(widths: list[int]) -> int:
    return sum(widths) + 3 * len(widths) + 1


def fit_table(headers: list[str], rows: list[list[str]], width: int = REPORT_WIDTH,
              keys: int | None = None) -> list[str]:
    """The table as Markdown lines of at most `width` characters: as is when it fits, else
    split by columns into as few parts as fit, each repeating the `keys` leading columns
    (default: the leading model/backend columns, else the first), else a list of records."""
    rows = [list(r) for r in rows]
    if not headers:
        return []
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    if _table_width(widths) <= width:
        return _render(headers, rows)
    if keys is None:
        keys = 0
        while keys < len(headers) - 1 and headers[keys] in KEY_COLUMNS:
            keys += 1
    keys = min(max(keys, 1), len(headers) - 1) if len(headers) > 1 else 1
    groups = _partition(widths, keys, width)
    if groups is None:
        return records(headers, rows, keys, width)
    out: list[str] = []
    for g in groups:
        cols = [*range(keys), *g]
        out += _render([headers[c] for c in cols], [[r[c] for c in cols] for r in rows]) + [""]
    return out[:-1]


def _partition(widths: list[int], keys: int, width: int) -> list[list[int]] | None:
    """The columns after the keys in order, cut into the fewest parts that fit `width` with
    the keys repeated, the widest part as narrow as can be; None when one column cannot fit."""
    rest = list(range(keys, len(widths)))
    fits = {(a, b): _table_width([widths[k] for k in [*range(keys), *rest[a:b]]])
            for a in range(len(rest)) for b in range(a + 1, len(rest) + 1)}
    if not rest or any(fits[(a, a + 1)] > width for a in range(len(rest))):
        return None
    # best[n][b]: (widest part, cuts) over the first b columns in n parts that all fit
    best: dict[tuple[int, int], tuple[int, list[int]]] = {(0, 0): (0, [])}
    for n in range(1, len(rest) + 1):
        for b in range(1, len(rest) + 1):
            options = [(max(best[(n - 1, a)][0], fits[(a, b)]), [*best[(n - 1, a)][1], b])
                       for a in range(b) if (n - 1, a) in best and fits[(a, b)] <= width]
            if options:
                best[(n, b)] = min(options)
        if (n, len(rest)) in best:
            cuts = [0, *best[(n, len(rest))][1]]
            return [rest[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    return None


def records(headers: list[str], rows: list[list[str]], keys: int,
            width: int = REPORT_WIDTH) -> list[str]:
    """A table as a list, one item per row: '- **key · key** · column: value · ...' wrapped
    to `width` (empty cells left out)."""
    out: list[str] = []
    for r in rows:
        head = " · ".join(c for c in r[:keys] if c) or "-"
        if len(headers) == keys + 1:                    # key | value: '- **key**: value'
            out += wrap(f"- **{head}**: {r[keys]}", width)
            continue
        rest = [f"{h}: {c}" for h, c in zip(headers[keys:], r[keys:], strict=True) if c.strip()]
        out += wrap(" · ".join([f"- **{head}**", *rest]), width)
    return out


def wrap(line: str, width: int = REPORT_WIDTH) -> list[str]:
    """One prose line as lines of at most `width`, continuation indented like a list item
    or quote; the line itself when it fits."""
    if len(line) <= width:
        return [line]
    lead = _LIST.match(line)
    first = lead.group(0) if lead else ""
    indent = ">" + " " * (len(first) - 1) if first.lstrip().startswith(">") \
        else " " * len(first)
    if len(first) >= width // 2:                       # a silly indent: do not keep it
        first, indent = "", ""
    return textwrap.wrap(line[len(first):], width=width, initial_indent=first,
                         subsequent_indent=indent, break_long_words=True,
                         break_on_hyphens=False) or [line[:width]]


def _cells(line: str) -> list[str] | None:
    """The cells of one Markdown table row (escaped pipes kept), None if not a row."""
    text = line.strip()
    if not (text.startswith("|") and text.endswith("|")) or len(text) < 2:
        return None
    return [c.strip() for c in _CELL.findall(text[1:])]


def narrow_lines(lines: list[str], width: int = REPORT_WIDTH) -> list[str]:
    """Every table refitted (fit_table) and every prose line wrapped (wrap), so no line of
    the result is longer than `width`; fenced code, headings (a heading cannot wrap: one
    naming a model of near 100 characters stays longer) and lines that fit are left as
    they are."""
    out: list[str] = []
    i, fenced = 0, False
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
        head = None if fenced else _cells(line)
        sep = lines[i + 1] if i + 1 < len(lines) else ""
        if head is not None and _SEPARATOR.fullmatch(sep.strip()):
            rows, j = [], i + 2
            while j < len(lines) and (cells := _cells(lines[j])) is not None:
                rows.append((cells + [""] * len(head))[:len(head)])
                j += 1
            block = lines[i:j]
            out += block if max(map(len, block)) <= width else fit_table(head, rows, width)
            i = j
            continue
        heading = line.startswith("#")     # a heading is one line: a 100-character name
        out += [line] if fenced or heading or len(line) <= width else wrap(line, width)
        i += 1
    return out


def read_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every Markdown table of `text` as (headers, rows), cells stripped (still escaped), the
    parts of a table that fit_table split joined again: the inverse of the split, for a
    script that reads report.md (and the tests)."""
    lines = text.splitlines() + [""]
    tables: list[tuple[list[str], list[list[str]]]] = []
    gap = True                          # only blank lines since the previous table
    i = 0
    while i < len(lines):
        head = _cells(lines[i])
        if head is None or i + 1 >= len(lines) or not _SEPARATOR.fullmatch(lines[i + 1].strip()):
            gap = gap and not lines[i].strip()
            i += 1
            continue
        rows, i = [], i + 2
        while (cells := _cells(lines[i])) is not None:
            rows.append((cells + [""] * len(head))[:len(head)])
            i += 1
        if gap and tables and _continues(tables[-1], head, rows):
            prev_head, prev_rows = tables[-1]
            keys = _shared_keys(prev_head, head)
            tables[-1] = (prev_head + head[keys:],
                          [p + r[keys:] for p, r in zip(prev_rows, rows, strict=True)])
        else:
            tables.append((head, rows))
        gap = True
    return tables


def _shared_keys(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _continues(prev: tuple[list[str], list[list[str]]], head: list[str],
               rows: list[list[str]]) -> bool:
    """Whether a table is the next part of `prev`: same rows, the same leading key columns."""
    keys = _shared_keys(prev[0], head)
    return (0 < keys < len(head) and len(rows) == len(prev[1])
            and all(p[:keys] == r[:keys] for p, r in zip(prev[1], rows, strict=True))
            and not set(head[keys:]) & set(prev[0]))
