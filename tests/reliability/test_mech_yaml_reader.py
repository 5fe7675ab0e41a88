"""Mechanism: a character YAML's reader refuses (a C0 control but tab, newline and carriage
return; DEL; a C1 control but NEL; U+FFFE, U+FFFF) anywhere in a runbook or models file is
`FILE:LINE: a control character (U+0007) at column C is not allowed in YAML ...`, exit 2,
whatever the file and wherever the character (a comment, a key, a value, a quoted string).

Seen failing on the code before (28ad19d): `b9.yaml: YAML syntax error: ReaderError`, with
no line (safeyaml read `problem_mark`, which a ReaderError lacks) and a class name for why."""

from __future__ import annotations

import shutil
import unicodedata

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .conftest import FIXTURES, assert_bad_input, run_cli

REFUSED = ([chr(c) for c in range(0x20) if chr(c) not in "\t\n\r"] + ["\x7f"]
           + [chr(c) for c in range(0x80, 0xA0) if c != 0x85] + ["\ufffe", "\uffff"])
KIND = {"Cc": "a control character", "Cn": "a non-character"}


def with_char(text: str, line: int, where: str, ch: str) -> tuple[str, int, int]:
    """`text` with `ch` put at `where` on its 1-based `line`: the text, the line, the column."""
    lines = text.split("\n")
    if where == "new comment":
        lines.insert(line - 1, f"# a{ch}b")
        return "\n".join(lines), line, 4
    old = lines[line - 1]
    if where == "end comment":
        lines[line - 1] = old + f"  # x{ch}"
        return "\n".join(lines), line, len(old) + 6
    at = min(old.index(":") + 3, len(old)) if where == "value" else 1   # in the value / key
    lines[line - 1] = old[:at] + ch + old[at:]
    return "\n".join(lines), line, at + 1


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ch=st.sampled_from(REFUSED), in_models=st.booleans(), line=st.integers(2, 9),
       where=st.sampled_from(["new comment", "end comment", "value", "key"]))
@example(ch="\x07", in_models=False, line=9, where="new comment")     # the probe
@example(ch="\x1b", in_models=False, line=2, where="value")
@example(ch="\x00", in_models=True, line=4, where="end comment")
def test_a_refused_character_is_named_at_its_line_and_column(tmp_path_factory, ch, in_models,
                                                              line, where):
    book = tmp_path_factory.mktemp("book")
    shutil.copy(FIXTURES / "tiny.yaml", book / "tiny.yaml")
    shutil.copy(FIXTURES / "models.yaml", book / "models.yaml")
    target = book / ("models.yaml" if in_models else "tiny.yaml")
    text, line, column = with_char(target.read_text(), line, where, ch)
    target.write_text(text, encoding="utf-8")
    res = run_cli("run", book / "tiny.yaml", "--results", book / "res", "--dry-run")
    kind = KIND[unicodedata.category(ch)]
    assert_bad_input(res, f"{target}:{line}: {kind} (U+{ord(ch):04X}) at column {column} "
                          "is not allowed in YAML")
    assert "ReaderError" not in res.err and "\n" not in res.err.rstrip("\n"), res.err
