"""Mechanism: one renderer (harness.io.boundary.text.shown) for text that came from evidence:
escape sequences, carriage returns, bidi overrides and other controls from a TSV cell are
written escaped on the terminal (`epcap audit`), in `audit --out`, in `--json` and in
report.md, never passed to the reader's terminal or viewer."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.io.boundary.text import shown, shown_obj
from harness.results.rows import ATTEMPT_COLUMNS

from .conftest import run_cli

REPO = Path(__file__).resolve().parents[2]
HIDDEN = {"Cc", "Cf", "Zl", "Zp", "Cs"}
# what a terminal acts on: OSC title (BEL and ST ends), CSI clear/colour, cursor moves, CR,
# backspace, C1 CSI, bidi override, zero-width joiner, line separator, DEL
SEQUENCES = ["\x1b]0;PWNED\x07", "\x1b]8;;http://x\x1b\\", "\x1b[2J", "\x1b[31m", "\x1b[1A",
             "\r", "\b", "\x9b31m", "\u202e", "\u200d", "\u2028", "\x7f", "\x00", "\t"]
PAYLOADS = st.lists(st.one_of(st.sampled_from(SEQUENCES), st.text(max_size=6)),
                    min_size=1, max_size=6).map("".join).filter(
    lambda s: any(unicodedata.category(c) in HIDDEN for c in s))


def hidden_in(text: str, newlines: bool = True) -> list[str]:
    """Characters of `text` a terminal would act on or hide (newline allowed if asked)."""
    return [c for c in text if unicodedata.category(c) in HIDDEN and not (newlines and c == "\n")]


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), PAYLOADS))
@example("\x1b]0;PWNED\x07")
@example("\u202eevil")
def test_shown_leaves_no_character_a_terminal_acts_on(text):
    """Catches: a renderer that escapes C0 controls only (ESC caught, but the bidi override
    U+202E, C1 CSI U+009B and U+2028 pass); or one that drops them (the reader must see that
    the evidence held them). Mutant tried by hand: _HIDDEN = {"Cc"} -> fails on U+202E."""
    out = shown(text)
    assert hidden_in(out, newlines=False) == []
    if not hidden_in(text, newlines=False):
        assert out == text, "ordinary text must be shown unchanged"
    else:
        assert out != text and "\\" in out
    assert hidden_in(shown(text, newlines=True)) == []
    assert shown_obj({text: [text, 1, None]}) == {out: [out, 1, None]}


@pytest.fixture(scope="module")
def valid_upload(tmp_path_factory) -> Path:
    """The audit corpus's VALID campaign (built once)."""
    sys.path.insert(0, str(REPO / "tests" / "fixtures" / "uploads"))
    import corpus
    return corpus.write_valid(tmp_path_factory.mktemp("shown") / "campaign")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=PAYLOADS)
@example(payload="\x1b]0;PWNED\x07\x1b[2J")
def test_audit_shows_a_cells_escape_sequences_escaped(tmp_path, valid_upload, payload):
    """A generated payload of controls planted in a `cell_dir` cell (the audit quotes it in
    missing-cell's why): the table, `--out` and `--json` hold it escaped. Catches the probe
    of the fourth round (an OSC title sequence from a TSV cell reached the terminal); on the
    code before, the table printed the raw ESC."""
    up = Path(tempfile.mkdtemp(dir=tmp_path)) / "u"
    shutil.copytree(valid_upload, up)
    table = up / "capacity_attempts.tsv"
    text = table.read_text()
    at = text.index("\tcells/") + len("\tcells/")
    # tab/newline would split the row; the TSV reader decodes backslash escapes itself; a NUL
    # makes the table binary, refused whole (every rule UNKNOWN), so nothing is quoted; a
    # slash would make the payload a folder (tested below: that row names no cell either)
    planted = "".join(c for c in payload if c not in "\t\n\\\x00/") or "\x1b[2J"
    table.write_text(text[:at] + planted + text[at:])
    res = run_cli("audit", up, "--out", up / "audit.tsv")
    assert "missing-cell" in res.out
    assert hidden_in(res.out) == [], res.out
    assert hidden_in((up / "audit.tsv").read_text().replace("\t", " ")) == []   # separators
    doc = json.loads(run_cli("audit", up, "--json").out)
    assert "missing-cell" in doc["uploads"][0]["reasons"], doc["uploads"][0]

    def strings(o):
        if isinstance(o, str):
            yield o
        elif isinstance(o, dict):
            for k, v in o.items():
                yield k
                yield from strings(v)
        elif isinstance(o, list):
            for v in o:
                yield from strings(v)
    assert all(hidden_in(s) == [] for s in strings(doc))
    assert any(shown(planted) in s for s in strings(doc)), "the payload is shown, not dropped"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=PAYLOADS)
def test_report_md_shows_a_cells_escape_sequences_escaped(tmp_path, payload):
    """A generated payload in a crash row's failure_line (quoted by the failures section):
    report.md holds it escaped, the rest of the report unchanged. Catches a report that
    writes the cell raw (the fourth round's probe: escapes reached report.md); mutant tried
    by hand: build.py without the `shown` pass -> fails."""
    res = Path(tempfile.mkdtemp(dir=tmp_path))
    row = dict.fromkeys(ATTEMPT_COLUMNS, "")
    planted = payload.replace("\t", " ").replace("\n", " ").replace("\x00", "")  # NUL: refused
    row.update(campaign="c", model="QWEN3_30B", backend="echo", purpose="measure",
               attempt="1", capacity="2.00", capacity_tag="cap2p00", status="crash",
               cell_dir="cells/x", exit_code="1", failure_line=f"rank0.log:3: boom {planted}")
    (res / "capacity_attempts.tsv").write_text(
        "\t".join(ATTEMPT_COLUMNS) + "\n" + "\t".join(row[c] for c in ATTEMPT_COLUMNS) + "\n")
    assert run_cli("report", res).code == 0
    md = (res / "report" / "report.md").read_text()
    assert hidden_in(md) == []
    assert "boom" in md


FOLDERS = st.lists(st.one_of(st.sampled_from(SEQUENCES), st.text(min_size=1, max_size=6),
                             st.just("cells"), st.just("..")), min_size=1, max_size=3)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(folders=FOLDERS)
@example(folders=["\x1b[31m"])
@example(folders=["elsewhere", "cells"])
def test_a_cell_dir_with_a_folder_before_its_name_names_no_cell(tmp_path, valid_upload, folders):
    """A row's cell is found by its path in the upload only: generated folders (escape
    sequences, look-alike `cells`, `..`) put before a real cell's name leave the row without
    a cell (missing-cell, never VALID). Before, the row found its cell by the unique name
    after the last slash and the upload audited VALID (round 4's open probe)."""
    from harness.audit import audit_target
    up = Path(tempfile.mkdtemp(dir=tmp_path)) / "u"
    shutil.copytree(valid_upload, up)
    table = up / "capacity_attempts.tsv"
    text = table.read_text()
    at = text.index("\tcells/") + 1
    prefix = "/".join("".join(c for c in f if c not in "\t\n\\\x00/") or "x" for f in folders)
    table.write_text(text[:at] + prefix + "/" + text[at:])
    (u,) = audit_target(up).uploads
    assert u.verdict != "VALID" and "missing-cell" in u.reasons, (u.verdict, u.reasons)
