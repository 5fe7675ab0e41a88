"""A YAML document with the line of every node, and the checks that turn its values into
typed fields with file:line: field errors (bounded: docs/reliability.md)."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
import unicodedata
from pathlib import Path

import yaml

from harness.errors import BadInput
from harness.io import bounds
from harness.io.boundary.text import text_problem
from harness.io.safeio import RUNBOOK_MAX_BYTES, read_text
from harness.io.safeyaml import compose

# the tags PyYAML's composer gives an untagged mapping and list (yaml.resolver.BaseResolver
# DEFAULT_MAPPING_TAG / DEFAULT_SEQUENCE_TAG: yaml/pyyaml lib/yaml/resolver.py, read at
# commit 3979f292d0529756281cd0bc5e2243fc2a9e9b35, 'tag:yaml.org,2002:map' / ':seq'); any other
# tag on a collection (`!!set`, `!!omap`, `!!python/...`) would be built as if absent
PLAIN_TAGS = {yaml.MappingNode: yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
              yaml.SequenceNode: yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG}
COLLECTION = {yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}
# the characters YAML's reader refuses (yaml/pyyaml lib/yaml/reader.py Reader.NON_PRINTABLE:
# C0 controls but tab, LF, CR; DEL; C1 but NEL; surrogates; U+FFFE, U+FFFF) and its line breaks
REFUSED_CHAR = yaml.reader.Reader.NON_PRINTABLE
_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")
_CHAR_KIND = {"Cc": "a control character", "Cs": "a lone surrogate", "Cn": "a non-character"}


def refused_char(text: str, path: str | Path) -> BadInput | None:
    """BadInput at the line and column of the first character YAML's reader refuses (a raw
    BEL, ESC, NUL, DEL), naming it by code point; None when there is none. The reader's own
    error (ReaderError) carries no line, so it is found here first."""
    found = REFUSED_CHAR.search(text)
    if found is None:
        return None
    at = found.start()
    breaks = list(_LINE_BREAK.finditer(text, 0, at))     # counted as YAML counts lines
    column = at - (breaks[-1].end() if breaks else 0) + 1
    ch = found.group()
    kind = _CHAR_KIND.get(unicodedata.category(ch), "a character")
    return BadInput(f"{kind} (U+{ord(ch):04X}) at column {column} is not allowed in YAML: "
                    "delete it (tab, newline and printable characters are)",
                    path=str(path), line=len(breaks) + 1)


class Doc:
    """A YAML document as plain Python values plus the line of every node (1-based)."""

    def __init__(self, path: Path, text: str, quote: bool = True) -> None:
        self.path = path
        self.quote = quote          # False: a file not known to be ours; never echo its text
        self.lines: dict[tuple, int] = {}
        refused = refused_char(text, path)
        if refused is not None:
            raise refused
        node = compose(text, path, quote=quote)  # bounded: depth, aliases, recursion
        self.raw: dict[tuple, str] = {}
        self._scalars = yaml.SafeLoader("")    # one constructor per document, not per scalar
        self.data = self._build(node, ()) if node is not None else None

    def _build(self, node, where: tuple):
        self.lines[where] = node.start_mark.line + 1
        plain = PLAIN_TAGS.get(type(node))
        if plain is not None and node.tag != plain:     # !!set, !!omap, !custom: never dropped
            raise BadInput(f"a YAML tag on a {COLLECTION[type(node)]} is not accepted "
                           f"({node.tag if self.quote else 'a tag'}): write a plain "
                           f"{COLLECTION[type(node)]}", path=str(self.path),
                           line=node.start_mark.line + 1,
                           field=fmt_where(where) if self.quote and where else None)
        if isinstance(node, yaml.MappingNode):
            out = {}
            for knode, vnode in node.value:
                key = self._construct(knode, where)
                if key in out:
                    raise BadInput("duplicate key", path=str(self.path),
                                   line=knode.start_mark.line + 1,
                                   field=fmt_where(where + (key,)) if self.quote else None)
                self.lines[where + (key,)] = knode.start_mark.line + 1
                out[key] = self._build(vnode, where + (key,))
                self.lines[where + (key,)] = knode.start_mark.line + 1
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self._build(v, where + (i,)) for i, v in enumerate(node.value)]
        if isinstance(node, yaml.ScalarNode):
            self.raw[where] = node.value
        return self._construct(node, where)

    def _construct(self, node, where: tuple):
        """One scalar (or key) as a Python value; BadInput at its line when it has none."""
        try:
            key = self._scalars.construct_object(node, deep=True)
            self._scalars.constructed_objects.clear()
            hash(key)
        except (ValueError, TypeError, yaml.YAMLError):  # a 4300+ digit integer, a !tag
            raise BadInput("YAML cannot construct this value (an unknown !tag, a number of "
                           "over 4300 digits, a list as a key?)",
                           path=str(self.path), line=node.start_mark.line + 1,
                           field=fmt_where(where) if self.quote else None) from None
        why = text_problem(key) if isinstance(key, str) else None
        if why is not None:             # NUL, a lone surrogate: no OS call may see it
            raise BadInput(why, path=str(self.path), line=node.start_mark.line + 1,
                           field=fmt_where(where) if self.quote else None)
        return key

    def error(self, where: tuple, message: str) -> BadInput:
        """BadInput at the line of `where` (or its nearest parent that has one)."""
        probe = where
        while probe and probe not in self.lines:
            probe = probe[:-1]
        return BadInput(message, path=str(self.path), line=self.lines.get(probe),
                        field=fmt_where(where) or None)


def fmt_where(where: tuple) -> str:
    """('backends', 1, 'kind') -> 'backends[1].kind'."""
    out = ""
    for part in where:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def read_doc(path: Path, where_from: str | None = None, quote: bool = True) -> Doc:
    """A bounded read (regular file, 1 MiB) of a runbook or models file."""
    return Doc(path, read_text(path, max_bytes=RUNBOOK_MAX_BYTES, field=where_from), quote)


def line_of(path: str | Path | None, field: str) -> int | None:
    """The line of a dotted field (`slurm.partition`) in a YAML file, or of its nearest
    parent that is written; None when the file or the field cannot be read (a message still
    names the file and field)."""
    if path is None:
        return None
    try:
        doc = read_doc(Path(path))
    except (OSError, BadInput, yaml.YAMLError):
        return None
    where = tuple(field.split("."))
    while where and where not in doc.lines:
        where = where[:-1]
    return doc.lines.get(where) if where else None


def mapping(doc: Doc, value, where: tuple, allowed: tuple[str, ...] | None) -> dict:
    """Check `value` is a mapping with string keys, all of them in `allowed` (None = any)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise doc.error(where, f"must be a mapping, got {typename(value)}")
    for key in value:
        if not isinstance(key, str):
            raise doc.error(where, f"keys must be strings, got {key!r}")
        if allowed is not None and key not in allowed:
            raise doc.error(where + (key,),
                            f"unknown key; allowed: {', '.join(allowed)}")
    return value


def typename(value) -> str:
    return "null" if value is None else type(value).__name__


def check_type(doc: Doc, value, want, where: tuple):
    """Coerce/check one scalar or list against a dataclass field annotation."""
    origin = typing.get_origin(want)
    args = typing.get_args(want)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return check_type(doc, value, inner[0], where)
    if want is bool:
        if not isinstance(value, bool):
            raise doc.error(where, f"must be true or false, got {shown(doc, value)}")
        return value
    if want is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise doc.error(where, f"must be an integer, got {shown(doc, value)}")
        return _in_range(doc, value, where)
    if want is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise doc.error(where, f"must be a number, got {shown(doc, value)}")
        return float(_in_range(doc, value, where))
    if want is str:
        if not isinstance(value, str):
            raise doc.error(where, f"must be a string, got {shown(doc, value)}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise doc.error(where, f"must be a list, got {typename(value)}")
        out = []
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                raise doc.error(where + (i,), f"must be a string, got {item!r}")
            out.append(str(item))
        return tuple(out)
    if want is dict or origin is dict:
        return dict(mapping(doc, value, where, None))
    return value


def _in_range(doc: Doc, value, where: tuple):
    """`value` when finite and within the documented range of its field (harness.io.bounds)."""
    name = next((p for p in reversed(where) if isinstance(p, str)), "")
    why = bounds.problem(name, value)
    if why is not None:
        raise doc.error(where, why)
    return value


def shown(doc: Doc, value) -> str:
    """A value for an error message: its repr (short) in a runbook, nothing from other files."""
    if not doc.quote:
        return f"a {typename(value)}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def type_hints(cls) -> dict:
    return typing.get_type_hints(cls)


def fields_from(doc: Doc, cls, value, where: tuple, skip: tuple[str, ...] = (),
                 rename: dict[str, str] | None = None) -> dict:
    """Validate a mapping against dataclass `cls` fields; returns constructor kwargs."""
    names = [f.name for f in dataclasses.fields(cls) if f.name not in skip]
    rename = rename or {}
    allowed = tuple(rename.get(n, n) for n in names)
    data = mapping(doc, value, where, allowed)
    hints = type_hints(cls)
    out = {}
    for name in names:
        key = rename.get(name, name)
        if key in data:
            out[name] = check_type(doc, data[key], hints[name], where + (key,))
    return out


def require(doc: Doc, data: dict, keys: tuple[str, ...], where: tuple) -> None:
    """BadInput at `where` for each of `keys` missing; an empty section (`shape:` with
    nothing under it, YAML null) names the keys it must give."""
    if not isinstance(data, dict):
        raise doc.error(where, f"is empty: give {', '.join(keys)}")
    for key in keys:
        if key not in data:
            raise doc.error(where, f"missing required key {key!r}")
