"""The failure-signature table (harness/taxonomy/signatures.yaml) and the reading of one log line.

Pure: loads the upstream message formats as data, and turns one raw log line into what the
taxonomy needs (text without colour or launcher prefixes, the rank that printed it, its
timestamp, the iteration it reports, the signature it matches). See docs/taxonomy.md.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BadInput
from harness.io.bounds import parse_int
from harness.io.yamldoc import read_doc
from harness.vocab import Status

TABLE_PATH = Path(__file__).with_name("signatures.yaml")
# A signature kind that is no failure class: a stated receive demand over the budget (the
# run's status is then drops, SPEC section 1). The other kinds are the taxonomy's classes.
OVERFLOW = "overflow"
SIGNATURE_CLASSES = (OVERFLOW, Status.BADFLAG, Status.ASSERT, Status.DOES_NOT_FIT,
                     Status.INFRA, Status.TIMEOUT)
# One line matching several signatures takes the first of these: the most specific statement
# wins (an allocation failure reported through an assertion macro is does_not_fit; a flag
# validation frame or an overflow trap beats the assert that carries it).
LINE_ORDER = (OVERFLOW, Status.DOES_NOT_FIT, Status.BADFLAG, Status.ASSERT, Status.INFRA,
              Status.TIMEOUT)

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
SRUN_LABEL = re.compile(r"^\s*(\d+):\s")
TORCHRUN = re.compile(r"\[(rank|default)(\d+)\]:")
ROW_RANK = re.compile(r"\[MOE_DROP_DEBUG\]\[\w+\].*?\brank=(\d+)")
FILE_RANK = re.compile(r"rank[_-]?(\d+)")
# glog (c10, torchrun: "E1201 07:31:50.123456") and ISO ("2026-12-01 07:31:50[.,]123").
GLOG_TIME = re.compile(r"\b[EWIF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?)\b")
ISO_TIME = re.compile(r"\b\d{4}-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d(?:[.,]\d+)?)")


@dataclass(frozen=True)
class Signature:
    """One upstream message format: its class, regex and where it was read from."""

    cls: str
    regex: re.Pattern
    source: str                     # source id in the table, or "backend" / "runbook"
    fallout: bool = False           # printed because another rank or the network failed
    demand: str | None = None       # overflow: the regex group holding the stated demand
    libraries: tuple[str, ...] = ()  # dispatch libraries that print it; () = every run


@dataclass(frozen=True)
class Table:
    """Signatures in table order plus the iteration-progress regexes."""

    signatures: tuple[Signature, ...]
    progress: tuple[tuple[str, re.Pattern], ...]   # (needle substring, regex)
    sources: tuple[dict, ...]       # repo, file, commit per source id (for docs and reports)

    def for_library(self, library: str | None) -> tuple[Signature, ...]:
        """The signatures a run of this library can print (all of them when None)."""
        return tuple(s for s in self.signatures
                     if library is None or not s.libraries or library in s.libraries)


def _compile(pattern: str, where: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise BadInput(f"bad regex {pattern!r}: {exc}", field=where) from exc


def parse_table(doc: dict, where: str = str(TABLE_PATH)) -> Table:
    """A Table from the YAML document; an unknown class or a bad regex is BadInput."""
    sigs, sources = [], []
    for src in doc.get("sources") or []:
        sources.append({k: src.get(k) for k in ("id", "repo", "file", "commit")})
        libs = tuple(src.get("libraries") or ())
        for i, entry in enumerate(src.get("signatures") or []):
            field = f"sources.{src.get('id')}.signatures[{i}]"
            if entry.get("class") not in SIGNATURE_CLASSES:
                raise BadInput(f"unknown signature class {entry.get('class')!r} in {where}",
                               field=field)
            sigs.append(Signature(entry["class"], _compile(entry["regex"], field),
                                  str(src.get("id")), bool(entry.get("fallout", False)),
                                  entry.get("demand"), libs))
    progress = tuple((str(p.get("needle") or ""), _compile(p["regex"], f"progress.{p.get('id')}"))
                     for p in doc.get("progress") or [])
    return Table(tuple(sigs), progress, tuple(sources))


@functools.lru_cache(maxsize=4)
def load_table(path: str = str(TABLE_PATH)) -> Table:
    """The signature table shipped with epcap (or another file of the same shape)."""
    return parse_table(read_doc(Path(path)).data or {}, path)


def from_patterns(patterns: dict[str, Iterable[str]] | None, source: str = "backend"
                  ) -> tuple[Signature, ...]:
    """Signatures from a backend's / runbook's `failure_patterns` (class -> regexes)."""
    out = []
    for cls_name, pats in (patterns or {}).items():
        if cls_name not in SIGNATURE_CLASSES:
            raise BadInput(f"unknown failure class {cls_name!r} (allowed: "
                           f"{', '.join(SIGNATURE_CLASSES)})", field="failure_patterns")
        for pat in pats:
            regex = _compile(pat, f"failure_patterns.{cls_name}")
            demand = "demand" if "demand" in regex.groupindex else None
            out.append(Signature(cls_name, regex, source, demand=demand))
    return tuple(out)


class Matcher:
    """Signatures of one run, with a single combined regex as a fast pre-filter."""

    def __init__(self, signatures: Iterable[Signature]) -> None:
        sigs = list(signatures)
        rank = {c: i for i, c in enumerate(LINE_ORDER)}
        # stable sort: within a class non-fallout first, then table order
        self.ordered = sorted(sigs, key=lambda s: (rank[s.cls], s.fallout))
        alts = "|".join(f"(?:{_groupless(s.regex.pattern)})" for s in sigs)
        self.any = re.compile(alts) if sigs else None

    def match(self, text: str) -> tuple[Signature, re.Match] | None:
        """The line's signature (first in LINE_ORDER, non-fallout first, table order)."""
        if self.any is None or not self.any.search(text):
            return None
        for sig in self.ordered:
            found = sig.regex.search(text)
            if found:
                return sig, found
        return None


def _groupless(pattern: str) -> str:
    """A pattern without named groups or inline global flags, for the combined pre-filter."""
    pattern = re.sub(r"\(\?P<\w+>", "(?:", pattern)
    flags = re.match(r"\(\?([aiLmsux]+)\)", pattern)
    if flags:
        return f"(?{flags.group(1)}:{pattern[flags.end():]})"
    return pattern


def clean(text: str) -> str:
    """The line without ANSI colour codes or a trailing CR."""
    if "\x1b" in text:
        text = ANSI.sub("", text)
    return text.rstrip("\r\n")


def rank_of(text: str, path: str) -> str | None:
    """Who printed the line: torchrun `[rankN]:` (global), `[defaultN]:` (local; with an
    `srun --label` task T it is `T:N`), an srun label alone, a telemetry row's `rank=`, or
    the log file's name (`rank3.log`)."""
    label = SRUN_LABEL.match(text)
    tr = TORCHRUN.search(text, 0, 64 + (label.end() if label else 0))
    if tr and tr.group(1) == "rank":
        return tr.group(2)
    if tr:
        return f"{label.group(1)}:{tr.group(2)}" if label else tr.group(2)
    if label:
        return label.group(1)
    row = ROW_RANK.search(text)
    if row:
        return row.group(1)
    named = FILE_RANK.search(Path(path).name)
    return named.group(1) if named else None


def timestamp_of(text: str) -> tuple | None:
    """(month, day, seconds) of the line's glog or ISO timestamp, else None (no year: the
    runs compared are one job's ranks)."""
    found = GLOG_TIME.search(text) or ISO_TIME.search(text)
    if not found:
        return None
    month, day, hour, minute, sec = found.groups()
    return (int(month), int(day),
            int(hour) * 3600 + int(minute) * 60 + float(sec.replace(",", ".")))


def iteration_of(text: str, progress: tuple[tuple[str, re.Pattern], ...]
                 ) -> tuple[int, int] | None:
    """(kind, iteration) of a progress line: kind is the index of the progress regex
    (Megatron training log, dispatch row), since their numberings differ (1- vs 0-based)."""
    for kind, (needle, regex) in enumerate(progress):
        found = needle in text and regex.search(text)
        number = parse_int(found.group(1)) if found else None    # None past 30 digits
        if number is not None:
            return kind, number
    return None
