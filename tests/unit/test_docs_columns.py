"""docs/spec.md's TSV column lists are the typed rows' columns (harness/results/rows.py and
forecast's COLUMNS, the report's demand.tsv), in order, appended ones included: a column
added in code and not in the spec (or the reverse) fails here; timing_launches.tsv and
demand.tsv were missing from the spec (failed before)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.forecast.core import COLUMNS as FORECAST_COLUMNS
from harness.report.inputs import DEMAND_COLUMNS
from harness.results.rows import ROW_TYPES

SPEC = Path(__file__).resolve().parents[2] / "docs" / "spec.md"
CODE = {**{name: row.columns() for name, row in ROW_TYPES.items()},
        "forecast.tsv": tuple(FORECAST_COLUMNS), "demand.tsv": tuple(DEMAND_COLUMNS)}


def spec_columns(text: str) -> dict[str, tuple[str, ...]]:
    """{file: columns} from the bullets of docs/spec.md's 'TSV columns' section: the names
    in order, `(appended: a, b)` included, other parentheticals (`(dispatch | combine)`) not."""
    section = text.split("## TSV columns", 1)[1].split("\n## ", 1)[0]
    out = {}
    for bullet in re.split(r"\n- ", "\n" + section)[1:]:
        head, _, body = bullet.partition(":")
        name = head.split()[0]
        body = " ".join(body.split("\n\n", 1)[0].split())
        body = re.sub(r"\(appended: ([^)]*)\)", r", \1", body)
        body = re.sub(r"\([^)]*\)", "", body)
        out[name] = tuple(c.strip() for c in body.split(",") if c.strip())
    return out


def test_the_parser_reads_what_it_is_given():
    text = ("## TSV columns\n\n- a.tsv: x, y (one | two), z\n  (appended: w)\n"
            "- b.tsv: p\n\nprose\n## Next\n")
    assert spec_columns(text) == {"a.tsv": ("x", "y", "z", "w"), "b.tsv": ("p",)}


@pytest.mark.parametrize("name", sorted(CODE))
def test_spec_lists_every_column_in_order(name):
    documented = spec_columns(SPEC.read_text(encoding="utf-8"))
    assert name in documented, f"docs/spec.md lists no columns for {name}"
    assert documented[name] == CODE[name], (
        f"{name}: docs/spec.md {documented[name]} != code {CODE[name]}")
