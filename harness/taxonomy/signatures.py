"""The failure-signature table (harness/taxonomy/signatures.yaml) and the reading of one log line.

Pure: loads the upstream message formats as data, and turns one raw log line into what the
taxonomy needs (text without colour or launcher prefixes, the rank that printed it, its
timestamp, the iteration it reports, the signature it matches). See docs/taxonomy.md.
"""

from __future__ import annotations

import dataclasses
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
# run's status is then drops, docs/spec.md#telemetry). The other kinds are the taxonomy's classes.
OVERFLOW = "overflow"
SIGNATURE_CLASSES = (OVERFLOW, Status.BADFLAG, Status.ASSERT, Status.DOES_NOT_FIT,
                     Status.CRASH, Status.INFRA, Status.TIMEOUT,
                     Status.CANCELLED)     # a Slurm job state only (no log line says it)
# A family member that is no signature of its own (a wrapper whose carried message decides).
NO_CLASS = "none"
# One line matching several signatures takes the first of these: the most specific statement
# wins (an allocation failure reported through an assertion macro is does_not_fit; a flag
# validation frame or an overflow trap beats the assert that carries it).
# A kernel fault (crash) named inside a network wrapper beats the wrapper (infra).
LINE_ORDER = (OVERFLOW, Status.DOES_NOT_FIT, Status.BADFLAG, Status.ASSERT, Status.CRASH,
              Status.INFRA, Status.TIMEOUT)

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
SRUN_LABEL = re.compile(r"^\s*(\d+):\s")
TORCHRUN = re.compile(r"\[(rank|default)(\d+)\]:")
# slurmstepd's log prefix (`slurmstepd-<node>: error: ...`, `slurmstepd: ...`): the
# scheduler's step daemon printed the line, no rank did, whatever rank stream srun copied it to
SLURMSTEPD = re.compile(r"\s*slurmstepd(?:-[\w.-]+)?: ")
ROW_RANK = re.compile(r"\[MOE_DROP_DEBUG\]\[\w+\].*?\brank=(\d+)")
FILE_RANK = re.compile(r"rank[_-]?(\d+)")
FILE_INDEX = re.compile(r"^(rank|node)[_-]?(\d+)\.")
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
    table: bool = False             # from signatures.yaml (not a backend's / runbook's regex)
    member: str | None = None       # family member it was built from (e.g. cudaErrorIllegalAddress)
    gate: re.Pattern | None = None  # a family's cheap pre-filter every member's line matches
    truncated: bool = False         # matches the stable prefix of a message cut after it


@dataclass(frozen=True)
class RecordSpec:
    """A structural record: a line that is no failure but says what happened to a process
    or a node (a launcher's exit record, the OOM killer, a driver Xid, a named rank)."""

    id: str
    kind: str                       # exit | oom_kill | xid | names_rank | launcher_kill
    regex: re.Pattern
    source: dict                    # repo, file, commit


@dataclass(frozen=True)
class Table:
    """Signatures in table order plus the iteration-progress regexes."""

    signatures: tuple[Signature, ...]
    progress: tuple[tuple[str, re.Pattern], ...]   # (needle substring, regex)
    sources: tuple[dict, ...]       # repo, file, commit per source id (for docs and reports)
    records: tuple[RecordSpec, ...] = ()   # structural records (timeline evidence)
    xid: dict = dataclasses.field(default_factory=dict)  # Xid -> documented meaning
    xid_source: dict = dataclasses.field(default_factory=dict)

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
                                  entry.get("demand"), libs, table=True))
            if entry.get("prefix"):
                sigs.append(Signature(entry["class"], _compile(entry["prefix"], field),
                                      str(src.get("id")), bool(entry.get("fallout", False)),
                                      None, libs, table=True, truncated=True))
    for fam in doc.get("families") or []:
        fam_sigs, fam_src = family_signatures(fam, where)
        sigs.extend(fam_sigs)
        sources.append(fam_src)
    progress = tuple((str(p.get("needle") or ""), _compile(p["regex"], f"progress.{p.get('id')}"))
                     for p in doc.get("progress") or [])
    records = tuple(RecordSpec(str(r["id"]), str(r["kind"]),
                               _compile(r["regex"], f"records.{r.get('id')}"),
                               {k: r.get(k) for k in ("id", "repo", "file", "commit")})
                    for r in doc.get("records") or [])
    xid_doc = doc.get("xid") or {}
    xid = {int(k): dict(v) for k, v in (xid_doc.get("codes") or {}).items()}
    xid_source = {k: xid_doc.get(k) for k in ("source", "version")}
    return Table(tuple(sigs), progress, tuple(sources), records, xid, xid_source)


def family_signatures(fam: dict, where: str = str(TABLE_PATH)
                      ) -> tuple[list[Signature], dict]:
    """The signatures of one enumerated family: every member's text in each of the family's
    print formats (`{text}` is the member's message, `{name}` its enum name; with `printf:
    true` the text is a C format whose `%s`, `%u`/`%d`/`%ld`/`%zu`, `%ps` match what they
    print), classed
    by the member's row; a member without a class, or an unknown one, is BadInput. A family
    with `formats: []` (a state the launcher reads, printed in no log) yields no signature."""
    fid = str(fam.get("id"))
    # `formats: []`: a family the launcher reads (Slurm's job states), printed in no log
    formats = list(fam["formats"] if "formats" in fam else ["{text}"])
    printf = bool(fam.get("printf", False))
    gate = _compile(fam["gate"], f"families.{fid}.gate") if fam.get("gate") else None
    libs = tuple(fam.get("libraries") or ())
    out = []
    for i, member in enumerate(fam.get("members") or []):
        field = f"families.{fid}.members[{i}]"
        if member.get("class") == NO_CLASS:
            if not member.get("why"):
                raise BadInput("a member without a class must say why", field=field)
            continue
        if member.get("class") not in SIGNATURE_CLASSES:
            raise BadInput(f"unknown signature class {member.get('class')!r} in {where}",
                           field=field)
        texts = [member.get("text")] if isinstance(member.get("text"), str) else \
            list(member.get("text") or [])
        if not texts or not all(isinstance(t, str) and t for t in texts):
            raise BadInput("family member without text", field=field)
        if not formats:
            continue
        alts = []
        for fmt in formats:
            for text in texts:
                body = printf_regex(text) if printf else re.escape(text)
                alts.append(fmt.replace("{text}", body)
                            .replace("{name}", re.escape(str(member.get("name")))))
        regex = _compile("|".join(f"(?:{a})" for a in dict.fromkeys(alts)), field)
        out.append(Signature(member["class"], regex, fid, bool(member.get("fallout", False)),
                             None, libs, table=True, member=str(member.get("name")), gate=gate))
    src = {k: fam.get(k) for k in ("id", "repo", "file", "commit")}
    # a member read from another file or commit than the family's names its own
    src["members"] = {str(m.get("name")): {k: m[k] for k in ("repo", "file", "commit") if k in m}
                      for m in fam.get("members") or []
                      if any(k in m for k in ("repo", "file", "commit"))}
    return out, src


def member_source(src: dict, member: str | None) -> dict:
    """The repository, file and commit a signature was read from: its family member's own
    when the member names them, else its source's (id, repo, file, commit)."""
    own = (src.get("members") or {}).get(member or "", {})
    return {k: own.get(k, src.get(k)) for k in ("id", "repo", "file", "commit")}


PRINTF = re.compile(r"%(ps|s|u|d|ld|zu)")
PRINTF_REGEX = {"ps": r"\S+", "s": ".*?", "u": r"\d+", "d": r"-?\d+", "ld": r"-?\d+",
                "zu": r"\d+"}


def printf_regex(fmt: str) -> str:
    """A regex for the lines a C format prints: the literal parts escaped, `%s` any text,
    `%u`/`%d`/`%ld`/`%zu` a number, `%ps` (Slurm's step id) one word."""
    parts, pos = [], 0
    for found in PRINTF.finditer(fmt):
        parts.append(re.escape(fmt[pos:found.start()]))
        parts.append(PRINTF_REGEX[found.group(1)])
        pos = found.end()
    return "".join(parts) + re.escape(fmt[pos:])


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
        self.ordered = sorted(sigs, key=lambda s: (s.truncated, rank[s.cls], s.fallout,
                                                   not s.table))
        self.wrappers = [s for s in sigs if s.table and s.fallout]
        plain = [s for s in sigs if s.gate is None]
        alts = "|".join(f"(?:{groupless(s.regex.pattern)})" for s in plain)
        self.any = re.compile(alts) if plain else None
        self.gates = tuple(dict.fromkeys(s.gate for s in sigs if s.gate is not None))

    def match(self, text: str) -> tuple[Signature, re.Match] | None:
        """The line's signature (first in LINE_ORDER, non-fallout first, table first). A
        backend's or runbook's regex never strips the table's fallout mark: when it decides
        a line a fallout signature of the table also matches, the line stays fallout.
        Pre-filter: one combined regex of the plain signatures, and each family's gate."""
        open_gates = {g for g in self.gates if g.search(text)}
        if not open_gates and (self.any is None or not self.any.search(text)):
            return None
        for sig in self.ordered:
            if sig.gate is not None and sig.gate not in open_gates:
                continue
            found = sig.regex.search(text)
            if found:
                if not sig.table and not sig.fallout and any(
                        w.regex.search(text) for w in self.wrappers):
                    sig = dataclasses.replace(sig, fallout=True)
                return sig, found
        return None


def groupless(pattern: str) -> str:
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


@dataclass(frozen=True)
class Layout:
    """How the launcher named the log files of one cell (from its cell.json): `rank` (one
    file per global rank, rank<R>.log), `node` (one file per node / srun task, rank<T>.log or
    node<N>.log, holding `per_file` local ranks each) or `unknown`; `rule` says where it
    came from."""

    files: str = "unknown"
    per_file: int = 0
    rule: str = "no cell.json launch facts"
    gpus_per_node: int = 0          # ranks per node, when the cell states it (0: unknown)
    nodes: int = 0                  # nodes of the job, when stated (0: unknown)


NO_LAYOUT = Layout()


def layout_of(doc: dict) -> Layout:
    """The log layout a cell.json states: `log_layout` (rank|node) when the launcher wrote
    one, else from ntasks / nodes / gpus_per_node (one task per node running several local
    ranks -> node files; one task per rank -> rank files)."""
    launcher = doc.get("launcher") if isinstance(doc.get("launcher"), dict) else {}
    stated = launcher.get("log_layout") or doc.get("log_layout")
    ints = {k: doc.get(k) for k in ("ntasks", "nodes", "gpus_per_node")}
    ok = {k: v for k, v in ints.items() if isinstance(v, int) and not isinstance(v, bool)}
    gpn = ok.get("gpus_per_node", 0)
    nodes = ok.get("nodes", 0)
    if stated in ("rank", "node"):
        return Layout(stated, gpn if stated == "node" else 1, f"cell.json log_layout={stated}",
                      gpn, nodes)
    ntasks = ok.get("ntasks")
    if ntasks is None:
        return Layout()
    if nodes and gpn > 1 and ntasks == nodes:
        return Layout("node", gpn, f"cell.json ntasks={ntasks} = nodes, {gpn} GPUs per node: "
                                   "rank<T>.log is node T's file", gpn, nodes)
    return Layout("rank", 1, f"cell.json ntasks={ntasks}: one task per rank, rank<R>.log "
                             "is global rank R", gpn, nodes)


def attribute(text: str, path: str, layout: Layout = NO_LAYOUT) -> tuple[str | None, str]:
    """(who printed the line, the rule that said so). Global rank from torchrun `[rankN]:`;
    torchrun `[defaultN]:` is local rank N of the node (an `srun --label` task T, a node
    file) -> node x ranks per node + N; a task label alone under one task per rank; a
    telemetry row's `rank=`; else the launcher's map of the file (rank<R>.log, node<N>.log).
    A line only a node is known for (a launcher's own line) has no rank: None."""
    label = SRUN_LABEL.match(text)
    if SLURMSTEPD.match(text, label.end() if label else 0):
        return None, "slurmstepd's own line (the scheduler's, whichever stream it was copied into)"
    tr = TORCHRUN.search(text, 0, 64 + (label.end() if label else 0))
    if tr and tr.group(1) == "rank":
        return tr.group(2), "torchrun [rankN]: prefix (global rank)"
    named = FILE_INDEX.match(Path(path).name)
    node = None
    if label:
        node, how = int(label.group(1)), "srun --label task"
    elif named and (named.group(1) == "node" or layout.files == "node"):
        node, how = int(named.group(2)), f"launcher map: {Path(path).name} is node {named.group(2)}"
    if tr:
        local = int(tr.group(2))
        if node == 0:
            return str(local), f"{how} 0: torchrun [defaultN]: local rank is the global rank"
        if node is not None and layout.files == "node" and layout.per_file:
            return (str(node * layout.per_file + local),
                    f"{how} x {layout.per_file} ranks per node + torchrun [defaultN]: local rank")
        if node is not None:
            return f"{node}:{local}", f"{how}:torchrun local rank (no ranks-per-node known)"
        return str(local), "torchrun [defaultN]: local rank (single node)"
    if label:
        if layout.files == "node":
            return None, f"srun --label task {node}: node {node}, no rank (one task per node)"
        return str(node), "srun --label task (one task per rank)"
    row = ROW_RANK.search(text)
    if row:
        return row.group(1), "telemetry row rank= field"
    if node is not None:
        return None, f"{how}, no rank prefix: a node-level line"
    if named and named.group(1) == "rank":
        if layout.files == "rank":
            return named.group(2), f"launcher map: {Path(path).name} is global rank {named.group(2)}"
        return named.group(2), "file name rank<R>.log (no launcher map)"
    found = FILE_RANK.search(Path(path).name)
    if found:
        return found.group(1), "file name (last fallback)"
    return None, "no rank: a job-level line"


def rank_of(text: str, path: str, layout: Layout = NO_LAYOUT) -> str | None:
    """Who printed the line (see `attribute`), without the rule."""
    return attribute(text, path, layout)[0]


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
