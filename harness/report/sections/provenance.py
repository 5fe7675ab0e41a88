"""Section "Provenance": provenance.txt as a key/value table (values verbatim)."""

from __future__ import annotations

from harness.report.inputs import Context, md_table
from harness.results.layout import PROVENANCE_TXT
from harness.results.provenance import read_provenance_lines


def render(ctx: Context) -> list[str]:
    """provenance.txt as a key/value table (values verbatim)."""
    out = ["## Provenance", ""]
    path = ctx.results_dir / PROVENANCE_TXT
    if not path.is_file():
        return out + [ctx.missing("provenance", "provenance.txt not found"), ""]
    pairs = read_provenance_lines(path)
    return out + [md_table(["key", "value"], [[k, v] for k, v in pairs]), ""]
