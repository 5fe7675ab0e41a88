"""Bounded, lenient readers for untrusted uploads: nothing followed out of TARGET, every
file size-capped, nothing executed or unpickled, malformed input turned into a stated why.

Tables are parsed by the one results model (harness.results.tables.parse_table) in its lenient
mode, provenance by harness.results.provenance.parse_provenance, logs by harness.telemetry.summary: each
only after a bounded, link-checked read here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from harness.audit.model import LogFacts, Row, Table
from harness.errors import BadInput, EpcapError
from harness.io.boundary.hub import hub_link
from harness.io.boundary.logs import LINE_MAX_BYTES, open_log
from harness.io.bounds import json_strict
from harness.io.yamldoc import Doc
from harness.results import tables as results
from harness.results.layout import RUNBOOK_YAML
from harness.results.provenance import parse_provenance

TSV_CAP_BYTES = 64 << 20
SMALL_CAP_BYTES = 1 << 20
LOG_CAP_BYTES = 256 << 20           # one log file
LOG_FILES_CAP = 256                 # log files read per cell
LOG_SUFFIX = ".log"


# A Git LFS pointer (https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md): what a
# `git clone` without git-lfs leaves in place of a large file. Under 1024 bytes, first line
# `version https://git-lfs.github.com/spec/v1` (or the pre-release hawser URL).
LFS_POINTER_MAX_BYTES = 1024
LFS_VERSION = re.compile(rb"version https://(?:git-lfs|hawser)\.github\.com/spec/v\d+\r?\n")
LFS_PROBLEM = "is a Git LFS pointer, not the file (run `git lfs pull`)"


def lfs_pointer(path: Path, size: int | None = None) -> bool:
    """Whether a file is a Git LFS pointer: the one test of the audit, made wherever it opens
    an evidence file (safe_real), so that no rule reads a pointer as a log, table or JSON."""
    try:
        if size is None:
            info = os.stat(path)
            if not stat.S_ISREG(info.st_mode):      # a FIFO or device is never opened
                return False
            size = info.st_size
        if size >= LFS_POINTER_MAX_BYTES:
            return False
        with open(path, "rb") as handle:
            head = handle.read(LFS_POINTER_MAX_BYTES)
    except OSError:
        return False
    return bool(LFS_VERSION.match(head)) and b"\noid sha256:" in head


def withheld(problem: str | None) -> bool:
    """Whether a reader's why says the file is evidence the audit does not have (a Git LFS
    pointer, marked once in safe_real): a rule that needs it is UNKNOWN (`lfs-pointer` names
    the files), never INVALID."""
    return bool(problem) and LFS_PROBLEM in problem


def followed(root: Path, path: Path) -> Path | None:
    """The file a link of the upload is read as, or None when the audit does not follow it:
    the one rule for file links of every audit reader. A link is followed when it resolves
    inside TARGET (root), or when it is a Hub snapshot's link into its own repository's
    blobs (harness.io.boundary.hub.hub_link: the layout `huggingface-cli download` leaves)."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError, ValueError):
        return hub_link(path)
    return real if real.is_relative_to(root.resolve()) else hub_link(path)


def plain_file(root: Path, path: Path) -> bool:
    """A regular file of the upload as the readers read it: a regular file, or a link they
    follow to one (followed). What a rule counts as present."""
    try:
        if not stat.S_ISLNK(os.lstat(path).st_mode):
            return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
    real = followed(root, path)
    return real is not None and real.is_file()


def safe_real(root: Path, path: Path, cap: int) -> tuple[Path | None, str | None]:
    """The real path of a regular file inside root (or a Hub snapshot's blob: followed) of at
    most cap bytes; else None and why (a Git LFS pointer is no file of the upload: None and
    LFS_PROBLEM)."""
    name = path.name
    try:
        real = path
        if path.is_symlink():
            real = followed(root, path)
            if real is None:
                return None, f"{name} is a link out of TARGET (not followed)"
        info = os.stat(real)
    except (OSError, RuntimeError, ValueError) as exc:
        return None, f"{name} unreadable ({getattr(exc, 'strerror', None) or exc})"
    if not stat.S_ISREG(info.st_mode):
        return None, f"{name} is not a regular file"
    if info.st_size > cap:
        return None, f"{name} is {info.st_size} bytes, over the {cap}-byte cap"
    if info.st_size < LFS_POINTER_MAX_BYTES and lfs_pointer(real, info.st_size):
        return None, f"{name} {LFS_PROBLEM}"
    return real, None


def safe_read(root: Path, path: Path, cap: int) -> tuple[bytes | None, str | None]:
    """Bytes of a regular file inside root, at most cap; else None and why."""
    real, problem = safe_real(root, path, cap)
    if real is None:
        return None, problem
    try:
        with open(real, "rb") as handle:
            data = handle.read(cap + 1)
    except OSError as exc:
        return None, f"{path.name} unreadable ({exc.strerror or exc})"
    if len(data) > cap:
        return None, f"{path.name} is over the {cap}-byte cap"
    return data, None


def parse_table(name: str, data: bytes) -> Table:
    """A TSV through the one results reader in its lenient mode (problems recorded, never
    raised); malformed lines are kept aside with their line numbers."""
    parsed = results.parse_table(name, data, strict=False)
    return Table(name, columns=parsed.columns, unreadable=parsed.unreadable,
                 malformed=parsed.malformed,
                 rows=[Row(n, r) for n, r in zip(parsed.lines, parsed.rows, strict=True)])


def read_table(root: Path, path: Path) -> Table:
    """Read one TSV of an upload (size-capped, links checked)."""
    data, problem = safe_read(root, path, TSV_CAP_BYTES)
    return parse_table(path.name, data) if data is not None else Table(path.name,
                                                                       unreadable=problem)


def read_fields(root: Path, path: Path) -> tuple[dict[str, str] | None, str | None]:
    """A provenance.txt as fields, or None and why (absent, unreadable, empty)."""
    if not os.path.lexists(path):
        return None, "no provenance.txt"
    data, problem = safe_read(root, path, SMALL_CAP_BYTES)
    if data is None:
        return None, problem
    fields = dict(parse_provenance(data.decode("utf-8", errors="replace")))   # lenient
    return (fields, None) if fields else (None, "provenance.txt has no key: value lines")


def read_json(root: Path, path: Path) -> tuple[dict | None, str | None]:
    """A small JSON object (cell.json), or None and why (None, None when absent)."""
    if not os.path.lexists(path):
        return None, None
    data, problem = safe_read(root, path, SMALL_CAP_BYTES)
    if data is None:
        return None, problem
    try:
        value = json_strict(data.decode("utf-8"))    # duplicated keys, NaN, 1e9999 refused
    except (ValueError, RecursionError) as exc:
        return None, f"{path.name} is not JSON ({str(exc)[:80]})"
    return (value, None) if isinstance(value, dict) else (None, f"{path.name} is not an object")


def read_runbook(root: Path, folder: Path) -> dict:
    """The upload's runbook.yaml (the bounded YAML reader, nothing quoted from it), {} when
    absent or unreadable."""
    data, _ = safe_read(root, folder / RUNBOOK_YAML, SMALL_CAP_BYTES)
    try:
        book = Doc(folder / RUNBOOK_YAML, data.decode("utf-8"), quote=False).data \
            if data is not None else None
    except (BadInput, UnicodeDecodeError):
        return {}
    return book if isinstance(book, dict) else {}


def runbook_pad_multiple(book: dict) -> object:
    """capacity.pad_multiple as the upload's runbook writes it (reported, never used)."""
    capacity = book.get("capacity")
    return capacity.get("pad_multiple") if isinstance(capacity, dict) else None


def log_files(root: Path, cell: Path) -> tuple[list[Path], str | None]:
    """The `*.log` files at the top of a cell directory (capped, links checked)."""
    found, problems = [], []
    try:
        entries = sorted(os.scandir(cell), key=lambda e: e.name)
    except OSError as exc:
        return [], f"cell directory unreadable ({exc.strerror or exc})"
    names = [e for e in entries if e.name.endswith(LOG_SUFFIX)]
    if len(names) > LOG_FILES_CAP:
        return [], f"{len(names)} log files, over the {LOG_FILES_CAP}-file cap"
    for entry in names:
        real, problem = safe_real(root, Path(entry.path), LOG_CAP_BYTES)
        if real is None:
            problems.append(problem)
        else:
            found.append(real)
    return found, (problems[0] if problems else None)


def stated_warmup(cell_json: dict | None) -> int:
    """The warmup a cell says it ran with (`warmup`, or `--warmup N` in its argv), else 0."""
    if not cell_json:
        return 0
    value = cell_json.get("warmup")
    argv = cell_json.get("argv")
    if value is None and isinstance(argv, list) and "--warmup" in argv:
        index = argv.index("--warmup") + 1
        value = argv[index] if index < len(argv) else None
    try:
        warmup = int(value)
    except (TypeError, ValueError):
        return 0
    return warmup if warmup > 0 else 0


_FACTS: dict[tuple, LogFacts] = {}       # small logs by content: identical logs, same facts
SMALL_LOGS_BYTES = 1 << 20
FACTS_KEPT = 4096


def content_key(files: list[Path], warmup: int, tags: dict[str, str] | None) -> tuple | None:
    """A key for logs small enough to hash (their bytes, the warmup, the tags), else None."""
    try:
        if sum(os.stat(f).st_size for f in files) > SMALL_LOGS_BYTES:
            return None
        digests = tuple(hashlib.sha256(f.read_bytes()).digest() for f in files)
    except OSError:
        return None
    return digests, warmup, tuple(sorted((tags or {}).items()))


def read_logs(root: Path, cell: Path, cell_json: dict | None,
              tags: dict[str, str] | None, shape: dict[str, int] | None = None
              ) -> tuple[LogFacts | None, str | None]:
    """Facts of a cell's logs, or None and why; (None, None) when the cell has no logs.
    `shape` (the runbook as run's expected ranks x layers x iterations) makes the one pass
    also the harness's own summary of the cell, kept in the facts for the re-derivation."""
    from harness.telemetry.summary import summarize  # lazy: uploads without logs skip numpy
    files, problem = log_files(root, cell)
    if problem:
        return None, problem
    if not files:
        return None, None
    warmup = 0 if shape is not None else stated_warmup(cell_json)
    key = content_key(files, warmup, tags) if shape is None else None
    if key in _FACTS:
        return dataclasses.replace(_FACTS[key], files=[f.name for f in files]), None
    try:
        summary = summarize(files, tags=tags, **(shape or {}))
        late = summarize(files, warmup=warmup, tags=tags).peak_actual_valid_recv if warmup \
            else summary.peak_actual_valid_recv
    except (EpcapError, OSError, ValueError, MemoryError) as exc:
        return None, f"logs unreadable ({exc})"
    facts = LogFacts([f.name for f in files], summary.rows, summary.saturated_rows,
                     summary.peak_actual_valid_recv, late, list(summary.budget_values),
                     list(summary.expected_recv_values), summary.malformed_rows,
                     summary if shape is not None else None,
                     summary if shape is None else None)
    if key is not None and len(_FACTS) < FACTS_KEPT:
        _FACTS[key] = facts
    return facts, None


TAG_BLOCK_BYTES = 4 << 20            # bytes read per block when looking for a tag


def tagged_lines(paths: list[Path], tag: str) -> Iterator[str]:
    """The lines of the logs that contain `tag`, in file order, decoded and stripped as
    harness.taxonomy.judge.iter_log_lines yields them; found with a bytes search, block by
    block (bounded memory). A function that reads only the lines holding its tag (the
    backend's parse_timing) gives the same answer over these as over every line, without
    turning a few hundred MB of dispatch rows into Python strings."""
    needle = tag.encode()
    for path in paths:
        with open_log(path) as handle:          # the one bounded, non-blocking log reader
            carry = b""
            while True:
                data = handle.read(TAG_BLOCK_BYTES)
                block = carry + data
                cut = len(block) if not data else block.rfind(b"\n") + 1
                carry, block = block[cut:], block[:cut]
                carry = carry[:LINE_MAX_BYTES]      # a line with no end (a sparse file)
                at = block.find(needle)
                while at >= 0:
                    start = block.rfind(b"\n", 0, at) + 1
                    end = block.find(b"\n", at)
                    end = len(block) if end < 0 else end
                    yield block[start:end].decode("utf-8", "replace").rstrip("\r\n")
                    at = block.find(needle, end)
                if not data:
                    break


def numbered_tagged_lines(path: Path, tags: tuple[str, ...], prefix: bytes = b"[EPCAP_"
                          ) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) of the log's lines holding one of `tags` (each starting
    with `prefix`), found as `tagged_lines` finds them: a bytes search, block by block."""
    needles = tuple(t.encode() for t in tags)
    with open_log(path) as handle:
        carry, line_no = b"", 1                 # the number of the block's first line
        while True:
            data = handle.read(TAG_BLOCK_BYTES)
            block = carry + data
            cut = len(block) if not data else block.rfind(b"\n") + 1
            carry, block = block[cut:][:LINE_MAX_BYTES], block[:cut]
            at, counted = block.find(prefix), 0
            while at >= 0:
                start = block.rfind(b"\n", 0, at) + 1
                end = block.find(b"\n", at)
                end = len(block) if end < 0 else end
                line = block[start:end]
                if any(n in line for n in needles):
                    line_no += block.count(b"\n", counted, start)
                    counted = start
                    yield line_no, line.decode("utf-8", "replace").rstrip("\r")
                at = block.find(prefix, end)
            line_no += block.count(b"\n", counted)
            if not data:
                break


def numbered_matches(path: Path, pattern: re.Pattern) -> Iterator[tuple[int, re.Match]]:
    """(1-based line number, match) of every match of a bytes `pattern` that stays within one
    line, read block by block as `numbered_tagged_lines` reads (bounded memory)."""
    with open_log(path) as handle:
        carry, line_no = b"", 1
        while True:
            data = handle.read(TAG_BLOCK_BYTES)
            block = carry + data
            cut = len(block) if not data else block.rfind(b"\n") + 1
            carry, block = block[cut:][:LINE_MAX_BYTES], block[:cut]
            counted = 0
            for match in pattern.finditer(block):
                line_no += block.count(b"\n", counted, match.start())
                counted = match.start()
                yield line_no, match
            line_no += block.count(b"\n", counted)
            if not data:
                break


MAX_UPLOAD_DEPTH = 32      # directory levels searched for uploads (os.walk recurses)


def find_uploads(root: Path, markers: tuple[str, ...]) -> list[Path]:
    """Directories holding a marker table, up to 32 levels deep; linked and dot directories
    skipped."""
    found = []
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames
                             if not d.startswith(".") and not os.path.islink(os.path.join(folder, d)))
        if len(Path(folder).relative_to(root).parts) >= MAX_UPLOAD_DEPTH:
            dirnames[:] = []            # an upload is never this deep
        if any(m in filenames for m in markers):
            found.append(Path(folder))
    return sorted(found)
