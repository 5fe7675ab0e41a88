"""Strings from any input (runbook values, TSV cells, event fields, command-line values):
refused when the OS or a terminal cannot take them (NUL, lone surrogates, control bytes);
and `shown`, the one renderer of evidence text for the terminal, report.md and JSON."""

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


# shown escaped: C0/C1 controls and DEL (Cc), format characters such as the bidi overrides
# and zero-width joiners (Cf), line/paragraph separators (Zl, Zp), lone surrogates (Cs)
_HIDDEN = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


def shown(value: str, *, newlines: bool = False) -> str:
    """The one renderer for text that came from evidence (a TSV cell, a log line, a file
    name) on its way to the terminal, report.md or JSON: every character a terminal would
    act on or hide (escape sequences, carriage return, bidi overrides) written as `\\xNN`,
    `\\uNNNN`; newlines kept only when `newlines` (multi-line blocks)."""
    if value.isascii() and value.isprintable():
        return value
    return "".join(ch if (newlines and ch == "\n") or
                   unicodedata.category(ch) not in _HIDDEN else _escape(ch) for ch in value)


def shown_obj(obj: object) -> object:
    """`shown` applied to every string of a JSON-able structure (keys included)."""
    if isinstance(obj, str):
        return shown(obj)
    if isinstance(obj, dict):
        return {shown_obj(k): shown_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [shown_obj(v) for v in obj]
    return obj
