"""The one reader of rank logs (and other line-oriented evidence), whichever command reads it.

`open_log` opens a regular file only, without blocking: a FIFO, a device (a link to
/dev/zero), a socket or a directory is BadInput, never a hang nor an endless read; `logs_in`
lists a directory's logs by the same rule. `lines`
yields bounded lines: a line longer than LINE_MAX_BYTES (a sparse file of NULs, a binary
dump) is cut to its first LINE_MAX_BYTES, the rest skipped without being held, so memory
stays bounded by the line cap whatever the file's size. `rank_record` reads one rank's
`[EPCAP_RANK]` line into typed values.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from harness.errors import BadInput
from harness.io.boundary.text import text_problem
from harness.io.bounds import json_loads
from harness.io.safeio import STREAM_MAX_BYTES, open_stream

LINE_MAX_BYTES = 16 << 20          # the telemetry scanner's cap on one line, for every reader
LOG_MAX_BYTES = STREAM_MAX_BYTES   # 16 GiB: far beyond a real rank log
_CHUNK = 1 << 20


def open_log(path: str | Path, field: str | None = "log") -> BinaryIO:
    """A binary stream on a regular log file within LOG_MAX_BYTES; BadInput otherwise."""
    return open_stream(path, max_bytes=LOG_MAX_BYTES, field=field)


def logs_in(directory: str | Path, suffixes: tuple[str, ...]) -> list[Path]:
    """Every entry of `directory` whose suffix is one of `suffixes`, each checked by `open_log`
    (a FIFO, a link to /dev/zero, a socket, a directory: BadInput naming it): a listing that
    kept regular files only would read a cell as if that rank had said nothing."""
    found = sorted(p for p in Path(directory).iterdir() if p.suffix in suffixes)
    for path in found:
        with open_log(path, field=None):   # `PATH: must be a regular file`, as report says
            pass
    return found


def lines(path: str | Path, max_line: int = LINE_MAX_BYTES) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, the line without its ending, at most `max_line` bytes) of a
    log, streamed; split on \\n only (like `wc -l`), a last line without newline included."""
    with open_log(path) as fh:
        yield from _lines_of(fh, max_line)


def _lines_of(fh: BinaryIO, max_line: int) -> Iterator[tuple[int, bytes]]:
    line_no = 0
    while True:
        raw = fh.readline(max_line + 1)
        if not raw:
            return
        line_no += 1
        if len(raw) > max_line and not raw.endswith(b"\n"):
            raw = raw[:max_line]
            while (rest := fh.readline(_CHUNK)) and not rest.endswith(b"\n"):
                pass                    # the over-long line's tail, never held
        yield line_no, raw.rstrip(b"\n")


def _read_lines(fh: BinaryIO, max_line: int) -> Iterator[tuple[int, str]]:
    for line_no, raw in _lines_of(fh, max_line):
        yield line_no, raw.decode("utf-8", "replace").rstrip("\r")


def first_line_holding(fh: BinaryIO, needle: bytes) -> int | None:
    """The byte offset of the start of the first line of an open log (read from its start)
    holding `needle`, else None: a bytes search block by block (bounded memory), no line
    decoded."""
    base, tail = 0, b""                 # tail: the block's last len(needle) - 1 bytes
    while data := fh.read(_CHUNK * 4):
        block = tail + data
        at = block.find(needle)
        if at >= 0:
            at += base - len(tail)
            break
        tail = block[-(len(needle) - 1):] if len(needle) > 1 else b""
        base += len(data)
    else:
        return None
    start = at
    while start > 0:                    # back to the start of its line, a chunk at a time
        fh.seek(max(start - _CHUNK, 0))
        chunk = fh.read(start - max(start - _CHUNK, 0))
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            return start - len(chunk) + nl + 1
        start -= len(chunk)
    return 0


def lines_from(paths: list[Path], needle: bytes, max_line: int = LINE_MAX_BYTES
               ) -> Iterator[str]:
    """The logs' text lines (as `text_lines` yields them, in file order) from the first line
    that holds `needle` on: a reader that looks for `needle` first gives the same answer over
    these as over every line, without decoding the lines before (a few hundred MB of
    dispatch rows). The first line is the one `lines` reads from its start, so a line cut
    at `max_line` is cut the same way."""
    it = iter(paths)
    for path in it:
        with open_log(path) as fh:      # one open: searched, then read from the line on
            offset = first_line_holding(fh, needle)
            if offset is None:
                continue
            fh.seek(offset)
            yield from (t for _, t in _read_lines(fh, max_line))
        for rest in it:
            yield from (t for _, t in text_lines(rest, max_line))
        return


def text_lines(path: str | Path, max_line: int = LINE_MAX_BYTES) -> Iterator[tuple[int, str]]:
    """`lines` decoded as UTF-8 (undecodable bytes replaced), a trailing \\r dropped."""
    with open_log(path) as fh:
        yield from _read_lines(fh, max_line)


@dataclass(frozen=True)
class RankRecord:
    """One rank's `[EPCAP_RANK]` line (docs/spec.md#telemetry): who, where, on what."""

    rank: int
    world: int
    local_rank: int
    host: str
    device: str
    device_name: str


_RANK_INTS = ("rank", "world", "local_rank")
_RANK_TEXTS = ("host", "device", "device_name")
RANK_MAX = 1 << 20                 # a rank or world beyond this is not a run's


def rank_record(payload: str, *, path: str, line: int) -> RankRecord:
    """The JSON after an `[EPCAP_RANK]` tag as a RankRecord; BadInput naming file, line and
    field otherwise (0 <= rank < world <= RANK_MAX, non-empty bounded text)."""
    try:
        obj = json_loads(payload)
    except ValueError:
        raise BadInput("[EPCAP_RANK] is not one JSON object", path=path, line=line) from None
    if not isinstance(obj, dict):
        raise BadInput("[EPCAP_RANK] is not one JSON object", path=path, line=line)
    for key in _RANK_INTS:
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < RANK_MAX:
            raise BadInput(f"not an integer in [0, {RANK_MAX}): {str(value)[:40]!r}",
                           path=path, line=line, field=key)
    for key in _RANK_TEXTS:
        value = obj.get(key)
        if not isinstance(value, str) or not value.strip() or len(value) > 256 \
                or text_problem(value):
            raise BadInput(f"not a name: {str(value)[:40]!r}", path=path, line=line, field=key)
    if obj["world"] < 1:
        raise BadInput(f"world {obj['world']} < 1", path=path, line=line, field="world")
    return RankRecord(**{k: obj[k] for k in _RANK_INTS + _RANK_TEXTS})
