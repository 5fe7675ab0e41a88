"""Strings from any input (runbook values, TSV cells, event fields, command-line values):
refused when the OS or a terminal cannot take them (NUL, lone surrogates, control bytes)."""

from __future__ import annotations

import unicodedata

from harness.errors import BadInput

# allowed control characters: tab, newline, carriage return (block scalars, free text)
_ALLOWED_CONTROLS = frozenset("\t\n\r")


def text_problem(value: str) -> str | None:
    """Why `value` cannot be taken as text (None when it can): a NUL byte, a lone surrogate
    (not encodable as UTF-8), or a control character other than tab and newline."""
    if "\0" in value:
        return f"holds a NUL byte at character {value.index(chr(0))}"
    for i, ch in enumerate(value):
        code = ord(ch)
        if 0xD800 <= code <= 0xDFFF:
            return f"holds a lone surrogate (U+{code:04X}) at character {i}: not UTF-8"
        if ch not in _ALLOWED_CONTROLS and unicodedata.category(ch) == "Cc":
            return f"holds a control character (U+{code:04X}) at character {i}"
    return None


def check_text(value: str, *, path: str | None = None, line: int | None = None,
               field: str | None = None) -> str:
    """`value` when it is acceptable text; BadInput naming file, line and field otherwise."""
    why = text_problem(value)
    if why is not None:
        raise BadInput(why, path=path, line=line, field=field)
    return value
