"""Failure taxonomy of one run (docs/spec.md#pipeline): exit status + logs -> class and why.

Pure: takes the launcher's view, a stream of (path, line_no, text) and the signatures
(harness/taxonomy/signatures.yaml plus a backend's and the runbook's regexes) and returns an
`Outcome`: the class, the deciding line, the rank that failed first, the signatures the run
survived (warnings) and any receive demand an overflow report stated. The rule and its
order are in docs/taxonomy.md; in short:

1. a signature followed by iteration progress was survived: a warning, never the class;
2. per rank, the fatal signature is the first of RUN_ORDER after its last progress
   (non-fallout before fallout, then the earliest);
3. the run's class is the first of RUN_ORDER among the ranks' fatal signatures (an
   overflow report makes it `drops`); launcher `node_fail` -> infra and `oom` ->
   does_not_fit first; launcher `timeout` -> timeout unless a rank shows a non-fallout
   fatal signature (an assert on one rank while the others hang is that assert);
4. a clean end (completed, exit 0, telemetry rows) -> None (ok / drops / lower_bound from
   the telemetry), or `drops` when an overflow report was seen;
5. no fatal signature: `cancelled` (a scancel the harness did not make) -> cancelled,
   otherwise crash; launcher `cancelled` ignores fallout (the cancel's own signal lines).
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import BadInput
from harness.io.boundary.logs import open_log, text_lines
from harness.io.bounds import clip_line, parse_int
from harness.io.safeio import read_json
from harness.results.layout import CELL_JSON
from harness.taxonomy import timeline
from harness.taxonomy.prefilter import Anchors, anchors_of
from harness.taxonomy.signatures import (
    NO_LAYOUT,
    OVERFLOW,
    SRUN_LABEL,
    TORCHRUN,
    Layout,
    Matcher,
    RecordSpec,
    Signature,
    Table,
    attribute,
    clean,
    from_patterns,
    groupless,
    iteration_of,
    layout_of,
    load_table,
    timestamp_of,
)
from harness.telemetry import summary as telemetry
from harness.telemetry.lines import DISPATCH_TAG, SETUP_TAG, line_rows
from harness.telemetry.summary import LogSummary, sifter, summarize
from harness.vocab import BUG_CLASSES, FAILURE_CLASSES, LauncherState, Purpose, Status

# The run's class: the first of these among the ranks' fatal signatures (docs/taxonomy.md).
RUN_ORDER = (OVERFLOW, Status.BADFLAG, Status.ASSERT, Status.DOES_NOT_FIT, Status.CRASH,
             Status.INFRA, Status.TIMEOUT)
CLASS_ORDER = RUN_ORDER
STATUSES = FAILURE_CLASSES
LAUNCHER_STATES = LauncherState.values()
STATE_CLASSES = {LauncherState.NODE_FAIL: Status.INFRA}
# The scheduler's memory enforcement (launcher state `oom`: sacct OUT_OF_MEMORY, slurmstepd's
# "exceeded memory limit", a cgroup OOM kill in the job) killed the job at the limit the
# runbook asked for: a configuration failure (class badflag: it stops the campaign), never
# a memory finding. The reason starts with CONFIG_FAILURE; the driver quotes it.
CONFIG_FAILURE = "configuration failure:"
MEMORY_LIMIT_FIELD = "slurm.mem_per_task"
MEMORY_KILL_SOURCE = "slurm-step-messages"    # signatures.yaml: its badflag members
UNCLASSIFIED = Status.UNCLASSIFIED
MAX_PENDING = 2000          # fatal candidates kept per file (the cause comes first)
MAX_WARNINGS = 50           # survived signatures kept (the count is always exact)
MAX_RANK_CHARS = 32         # a rank label copied from a log line ("3", "0:7")

@dataclass
class Hit:
    """One signature line and where it stood in its log."""

    sig: Signature
    path: str
    line_no: int
    text: str
    rank: str | None
    context: dict           # progress kind -> highest iteration its rank had shown before it
    file_index: int
    ts: tuple | None = None
    demand: int | None = None
    rule: str = ""          # how the rank was attributed (signatures.attribute)

    def key(self) -> tuple:
        """Time order: timestamp when present, else file order then line."""
        return (self.ts is None, self.ts or (), self.file_index, self.line_no)

    def to_dict(self) -> dict:
        return {"path": self.path, "line_no": self.line_no, "text": self.text,
                "class": self.sig.cls, "rank": self.rank, "attributed_by": self.rule,
                "source": self.sig.source, "member": self.sig.member,
                "fallout": self.sig.fallout, "truncated": self.sig.truncated}

    def event(self, kind: str = "signature") -> timeline.Event:
        """This hit as a timeline event (`survived`: a warning)."""
        secs = timeline.seconds(self.ts)
        return timeline.Event(self.path, self.line_no, self.file_index, self.text,
                              kind, "rank" if self.rank is not None else "node",
                              self.rank, None, secs, _exact(self.ts), self.sig.cls,
                              self.sig.fallout, rule=self.sig.source)


def _exact(ts: tuple | None) -> bool:
    """Whether a stamp carries sub-second digits."""
    return ts is not None and not float(ts[2]).is_integer()


@dataclass(frozen=True)
class Outcome:
    """How a run ended: status None means clean with telemetry; else a class or `drops`."""

    status: str | None
    path: str | None = None         # log file of the deciding signature line
    line_no: int | None = None      # 1-based line number in that file
    line: str | None = None         # the deciding line (colour and CR removed)
    reason: str = ""                # one sentence saying why (reports, events)
    first_failed_rank: str | None = None
    warnings: tuple = ()            # survived signatures (dicts like Hit.to_dict)
    warnings_total: int = 0
    stated_demand: int | None = None    # tokens per rank an overflow report named
    ranks: dict = field(default_factory=dict)  # rank -> its fatal signature (dict)
    deciding: dict | None = None    # the deciding line's Hit.to_dict (rank, rule, source)
    first_by: str = ""              # the evidence that ordered the first failed rank
    explain: tuple = ()             # the timeline around the decision (classify --explain)
    quoted: tuple = ()              # the lines an unclassified verdict quotes

    def to_dict(self) -> dict:
        return {"status": self.status, "path": self.path, "line_no": self.line_no,
                "line": self.line, "reason": self.reason, "deciding": self.deciding,
                "first_failed_rank": self.first_failed_rank,
                "warnings": list(self.warnings), "warnings_total": self.warnings_total,
                "stated_demand": self.stated_demand, "ranks": dict(self.ranks),
                "first_by": self.first_by, "quoted": list(self.quoted)}


def compile_patterns(patterns: dict[str, Iterable[str]] | None) -> tuple[Signature, ...]:
    """A backend's / runbook's regexes as signatures; unknown class or bad regex: BadInput."""
    return from_patterns(patterns)


def run_signatures(patterns: dict | None, library: str | None = None,
                   table: Table | None = None) -> tuple[Signature, ...]:
    """The upstream table (for this library), then the backend's and runbook's regexes."""
    table = table or load_table()
    return table.for_library(library) + compile_patterns(patterns)


class _Scan:
    """One pass over the lines: survived signatures out, fatal candidates kept per rank.

    Every line is attributed to the rank that printed it (signatures.attribute). A signature
    is survived only when the SAME rank later shows progress of the same kind (Megatron's
    1-based iteration line, the 0-based dispatch rows, compared only like with like); rows
    of other ranks never rescue it. A physical line may carry telemetry rows and a
    signature (a traceback spliced with another rank's row): the rows are read by the
    telemetry parser's own rule (lines.line_rows) and the signature by the matcher."""

    def __init__(self, matcher: Matcher, progress, layout: Layout = NO_LAYOUT,
                 tags: dict | None = None, records: tuple[RecordSpec, ...] = (),
                 xid: dict | None = None) -> None:
        self.matcher, self.layout = matcher, layout
        self.record_specs = records
        self.record_any = re.compile("|".join(f"(?:{groupless(r.regex.pattern)})"
                                             for r in records)) \
            if records else None
        self.records: list[timeline.Event] = []
        self.xid = xid or {}
        self.seen: dict[str, int] = {}      # rank -> highest iteration seen (any reader)
        self.megatron = tuple(p for p in progress if p[0] != DISPATCH_TAG)
        self.row_kind = len(self.megatron)           # the dispatch rows' progress kind
        tags = tags or {}
        self.dispatch = tags.get("dispatch", DISPATCH_TAG)
        self.setup = tags.get("setup", SETUP_TAG)
        self.files: dict[str, int] = {}
        self.last_iter: dict[str, dict[int, int]] = {}
        self.pending: dict[str, list[Hit]] = {}
        self.warnings: list[Hit] = []
        self.warnings_total = 0
        self.malformed_rows = 0
        self.demand: Hit | None = None     # the overflow report that decides drops
        self.cuts: list[timeline.Event] = []   # logs that end mid-line (note_cut_tails)
        self.tails_read: set[str] = set()       # logs whose end note_cut_tails looked at

    def feed(self, path: str, line_no: int, raw: str) -> None:
        text = clean(raw)
        index = self.files.setdefault(path, len(self.files))
        rows = line_rows(text, self.dispatch, self.setup)
        found = self.matcher.match(text)
        if found:
            self._hit(found, text, rows, path, line_no, index)
        if self.record_any is not None and self.record_any.search(text):
            self._record(text, path, line_no, index)
        for row in rows:
            if row.setup:
                continue
            if row.values is None:
                self.malformed_rows += 1
                continue
            who = self._row_who(text, row, path)
            self._progress(who, self.row_kind, row.values[0], path)
            self._seen(str(row.values[2]), row.values[0])
        if not rows:
            step = iteration_of(text, self.megatron)
            if step is not None:
                who, _ = attribute(text, path, self.layout)
                self._progress(who if who is not None else f"file:{path}", *step, path)

    def _row_who(self, text: str, row, path: str) -> str:
        """A row's rank: the line's own prefixes when the row opens the line, else the
        torchrun prefix right before its tag, else its own rank= field."""
        if row.start <= 64 and not text[:row.start].count("[MOE_DROP_DEBUG]"):
            who, _ = attribute(text[:row.start] + text[row.start:row.end], path, self.layout)
            if who is not None:
                return who
        pre = list(TORCHRUN.finditer(text, max(0, row.start - 24), row.start))
        if pre and pre[-1].end() >= row.start - 1:
            who, _ = attribute(text[pre[-1].start():row.end], path, self.layout)
            if who is not None:
                return who
        return str(row.values[2])

    def _hit(self, found, text: str, rows, path: str, line_no: int, index: int) -> None:
        sig, match = found
        # the printer is the torchrun prefix nearest before the message: on a physical line
        # two processes wrote into, the line's first prefix may be the other one's
        label = SRUN_LABEL.match(text)
        head = TORCHRUN.search(text, 0, 64 + (label.end() if label else 0))
        pre = [m for m in TORCHRUN.finditer(text, 0, match.start())
               if head is None or m.start() > head.start()]
        if pre:
            lead = label.group(0) if label else ""
            who, rule = attribute(lead + text[pre[-1].start():], path, self.layout)
            rule = "spliced line: the prefix nearest before the message; " + rule
        else:
            who, rule = attribute(text, path, self.layout)
        key = who if who is not None else f"file:{path}"
        who = who if who is None or len(str(who)) <= MAX_RANK_CHARS else None  # bounded
        hit = Hit(sig, path, line_no, clip_line(text.strip()), who,
                  dict(self.last_iter.get(key, {})), index, timestamp_of(text), rule=rule)
        if sig.cls == OVERFLOW:
            if sig.demand and match.groupdict().get(sig.demand):
                hit.demand = parse_int(match.group(sig.demand))   # None past 30 digits
            if self.demand is None or (hit.demand or -1) > (self.demand.demand or -1):
                self.demand = hit           # the overflow report with the largest demand
        kept = self.pending.setdefault(key, [])
        if len(kept) < MAX_PENDING:
            kept.append(hit)

    def _record(self, text: str, path: str, line_no: int, index: int) -> None:
        """Keep a structural record line (signatures.yaml `records:`) as a timeline event."""
        if len(self.records) >= timeline.MAX_EVENTS:
            return
        for spec in self.record_specs:
            found = spec.regex.search(text)
            if found:
                who, _ = attribute(text, path, self.layout)
                ts = timestamp_of(text)
                self.records.append(timeline.record_event(
                    spec, found, path=path, line_no=line_no, file_index=index, text=text,
                    layout=self.layout, ts=ts, exact=_exact(ts), rank=who))
                return

    def note_cut(self, path: str, line_no: int, text: str) -> None:
        """A log whose last line is cut (no newline at its end) as a `cut` event of the rank
        that printed it, placed after its progress."""
        text = clean(text)
        who, _ = attribute(text, path, self.layout)
        index = self.files.setdefault(path, len(self.files))
        self.cuts.append(timeline.Event(path, line_no, index, clip_line(text.strip()), "cut",
                                        "rank" if who is not None else "node", who))

    def _progress(self, who: str, kind: int, n: int, path: str | None = None) -> None:
        seen = self.last_iter.setdefault(who, {})
        seen[kind] = max(n, seen.get(kind, -1))
        kept = self.pending.get(who)
        while kept:
            self._warn(kept.pop(0))
        if path is not None:       # a node's own line is survived by its node's progress
            kept = self.pending.get(f"file:{path}")
            while kept and kept[0].sig.cls != OVERFLOW and self._node_line(kept[0]):
                self._warn(kept.pop(0))

    def _node_line(self, hit: Hit) -> bool:
        """A line no rank printed (a launcher's or node's own): survivable by its file's
        progress. An unprefixed line of a rank file is the rank's own, not the node's."""
        return hit.rank is None and (self.layout.files == "node"
                                     or not Path(hit.path).name.startswith("rank"))

    def feed_rows(self, path: str, stretch: bytes) -> None:
        """A stretch of canonical dispatch rows (ROW_LINE, read by `iter_log_events`):
        well-formed progress, so only a rank with a pending signature needs looking for
        (its `rank=` field, confirmed by the line reader's own attribution); ranks are
        rescued in the order their rows appear, as the line reader would."""
        found = []
        self._tail_progress(stretch)
        own = self.pending.get(f"file:{path}")
        if own:
            first = ROW_ANY.search(stretch)
            if first:
                self._progress(first.group(2).decode(), self.row_kind, int(first.group(1)), path)
        for who, kept in self.pending.items():
            if not kept or not who.isdigit():
                continue
            needle = f" rank={who} ".encode()
            at = stretch.find(needle)
            while at >= 0:
                start = stretch.rfind(b"\n", 0, at) + 1
                end = stretch.find(b"\n", at)
                text = clean(stretch[start:end if end >= 0 else len(stretch)].decode(
                    "utf-8", "replace"))
                rows = [r for r in line_rows(text, self.dispatch, self.setup)
                        if r.values is not None and self._row_who(text, r, path) == who]
                if rows:
                    found.append((start, who, max(r.values[0] for r in rows)))
                    break
                at = stretch.find(needle, at + 1)
        for _, who, n in sorted(found):
            self._progress(who, self.row_kind, n)

    def _tail_progress(self, stretch: bytes) -> None:
        """The canonical rows at the end of a stretch as progress seen (the timeline's
        progress counters; rescues nothing)."""
        for found in ROW_ANY.finditer(stretch[-8192:]):
            self._seen(found.group(2).decode(), int(found.group(1)))

    def _seen(self, rank: str, n: int) -> None:
        """A dispatch row's iteration as progress seen of the rank its `rank=` field names
        (the progress counters compare dispatch rows only, like with like)."""
        if n > self.seen.get(rank, -1):
            self.seen[rank] = n

    def event(self, event: tuple) -> None:
        """One reader event: (path, line_no, text) of iter_log_lines, or ("line" | "rows" |
        "quiet", ...) of the block readers."""
        if len(event) == 3:
            self.feed(str(event[0]), event[1], event[2])
        elif event[0] == "rows":
            self.feed_rows(event[1], event[3])
        elif event[0] == "quiet":
            self.feed_quiet(*event[1:])
        else:
            self.feed(event[1], event[2], event[3])

    def _rescuable(self, path: str) -> bool:
        """Whether a pending signature could be rescued by a line of this file (a
        `file:` key only by its own file's lines)."""
        own = f"file:{path}"
        return any(kept for who, kept in self.pending.items()
                   if kept and (who == own or not who.startswith("file:")))

    def feed_quiet(self, path: str, line_no: int, block: bytes | memoryview, start: int,
                   stop: int, others: memoryview) -> None:
        """block[start:stop]: lines the sifter found no tag, colour or signature anchor in
        (canonical rows, and the `others` spans: (index, start, end) triples, index counted
        from line_no + 1). They hold no signature, so they matter only as progress of a
        rank with a pending signature: skipped when none is, else read as the block
        reader reads them (stretches of rows, then each other line in full)."""
        if not self._rescuable(path):
            self._tail_progress(bytes(block[max(start, stop - 8192):stop]))
            return
        count = len(others) // 3
        j = bisect.bisect_left(range(count), start, key=lambda k: others[3 * k + 1])
        pos = start
        while j < count and others[3 * j + 1] < stop:
            index, begin, end = others[3 * j:3 * j + 3]
            if begin > pos:
                self.feed_rows(path, bytes(block[pos:begin]))
            if not self._rescuable(path):
                return                  # the rest is progress of no pending rank
            self.feed(path, line_no + index + 1,
                      bytes(block[begin:end]).decode("utf-8", "replace").rstrip("\r\n"))
            pos, j = end + 1, j + 1
        if stop > pos:
            self.feed_rows(path, bytes(block[pos:stop]))

    def _warn(self, hit: Hit) -> None:
        self.warnings_total += 1
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(hit)

    def finish(self) -> list[Hit]:
        """Fatal candidates: the signatures no later progress of their own rank followed."""
        return [hit for hits in self.pending.values() for hit in hits]


def per_rank(fatal: list[Hit]) -> dict[str, Hit]:
    """Each rank's fatal signature: the first of RUN_ORDER among the signatures after its
    last progress, a non-fallout one before a fallout one, then the earliest."""
    out: dict[str, Hit] = {}
    for hit in sorted(fatal, key=lambda h: (h.file_index, h.line_no)):
        who = hit.rank if hit.rank is not None else f"file:{hit.path}"
        best = out.get(who)
        if best is None or rank_key(hit) < rank_key(best):
            out[who] = hit
    return out


def rank_key(hit: Hit) -> tuple:
    return (RUN_ORDER.index(hit.sig.cls), hit.sig.fallout)


def decide(ranks: dict[str, Hit], allow_fallout: bool = True) -> tuple[Hit | None, str | None]:
    """(deciding hit, first failed rank) over the ranks' fatal signatures."""
    chosen = [h for h in ranks.values() if allow_fallout or not h.sig.fallout]
    if not chosen:
        return None, None
    top = min(RUN_ORDER.index(h.sig.cls) for h in chosen)
    deciding = min((h for h in chosen if RUN_ORDER.index(h.sig.cls) == top),
                   key=lambda h: (h.sig.fallout, h.key()))
    primary = [h for h in chosen if not h.sig.fallout] or chosen
    ordered = (all(h.ts for h in primary)
               or len({h.path for h in primary}) == 1)
    first = min(primary, key=Hit.key) if ordered else deciding
    return deciding, first.rank


def check_state(launcher_state: str) -> None:
    """A launcher state the taxonomy knows, else BadInput."""
    if launcher_state not in LAUNCHER_STATES:
        raise BadInput(f"unknown launcher state {launcher_state!r}", field="launcher_state")


def new_scan(patterns: dict[str, Iterable[str]] | None, library: str | None = None,
             table: Table | None = None, layout: Layout = NO_LAYOUT,
             tags: dict | None = None) -> tuple[_Scan, tuple[Signature, ...]]:
    """An empty scan of one run and the signatures it matches."""
    table = table or load_table()
    signatures = run_signatures(patterns, library, table)
    scan = _Scan(Matcher(signatures), table.progress, layout, tags, table.records, table.xid)
    # the records' regexes join the anchors: the sifter must hand their lines over too
    anchors = tuple(Signature(Status.INFRA, r.regex, r.id) for r in table.records)
    return scan, signatures + anchors


def classify(exit_code: int | None, launcher_state: str, lines: Iterable[tuple],
             patterns: dict[str, Iterable[str]] | None, rows: int, *,
             library: str | None = None, table: Table | None = None,
             layout: Layout = NO_LAYOUT, tags: dict | None = None) -> Outcome:
    """The taxonomy class of one run (see the module docstring and docs/taxonomy.md)."""
    check_state(launcher_state)
    scan, _ = new_scan(patterns, library, table, layout, tags)
    for event in lines:           # (path, line_no, text) or the readers' events
        scan.event(event)
    note_cut_tails(scan, [Path(p) for p in scan.files])   # the files read, where they exist
    return verdict(scan, exit_code, launcher_state, rows)


def verdict(scan: _Scan, exit_code: int | None, launcher_state: str, rows: int) -> Outcome:
    """The outcome of a scan that has read all of a run's lines (steps 2-5 above)."""
    fatal = scan.finish()
    limited = timeline.fallout_after_limit((h.event() for h in fatal),
                                           timed_out=launcher_state == LauncherState.TIMEOUT)
    limited |= timeline.fallout_of_a_faulted_peer((h.event() for h in fatal), scan.records)
    for hit in fatal:               # after the time limit, or a faulted peer's: fallout
        if (hit.file_index, hit.line_no) in limited:
            hit.sig = dataclasses.replace(hit.sig, fallout=True)
    ranks = per_rank(fatal)
    demand = scan.demand.demand if scan.demand else None
    common = {"warnings": tuple(h.to_dict() for h in scan.warnings),
              "warnings_total": scan.warnings_total, "stated_demand": demand,
              "ranks": {k: v.to_dict() for k, v in ranks.items()}}
    said = f"exit {exit_code}, state {launcher_state}"
    if launcher_state == LauncherState.OOM or any(_memory_kill(h) for h in fatal):
        return _memory_limit(ranks, exit_code, launcher_state, common)
    if launcher_state in STATE_CLASSES:
        return Outcome(STATE_CLASSES[launcher_state],
                       reason=f"launcher state {launcher_state} (exit {exit_code})", **common)
    if launcher_state == LauncherState.COMPLETED and exit_code == 0 and rows > 0:
        survived = {"warnings": tuple(h.to_dict() for h in scan.warnings + fatal)[:MAX_WARNINGS],
                    "warnings_total": scan.warnings_total + len(fatal)}
        common.update(survived, ranks={})
        if scan.demand is not None:
            hit = scan.demand
            common["warnings"] = tuple(w for w in common["warnings"]
                                       if (w["path"], w["line_no"]) != (hit.path, hit.line_no))
            common["warnings_total"] -= 1
            return Outcome(Status.DROPS, hit.path, hit.line_no, hit.text, deciding=hit.to_dict(),
                           reason=f"clean exit, but an overflow report ({hit.sig.source}) at "
                                  f"{hit.path}:{hit.line_no} stated a receive demand of "
                                  f"{demand}", first_failed_rank=hit.rank, **common)
        return Outcome(None, reason=f"clean exit with {rows} telemetry rows", **common)
    cancelled = launcher_state == LauncherState.CANCELLED
    outside = timeline.outside_signal(scan.records) if not any(
        h.rank is not None and not h.sig.fallout for h in fatal) else None
    if outside is not None and launcher_state in (LauncherState.FAILED,
                                                  LauncherState.CANCELLED):
        common["explain"] = tuple(timeline.explain(
            [h.event() for h in fatal] + scan.records, outside))
        # one task stopped from outside made srun kill the rest: that task is the first
        # (the others' ends are srun's own); a stop of every task at once names none
        stopped = outside.rank if outside in timeline.srun_trigger(scan.records) else None
        return Outcome(Status.CANCELLED, outside.path, outside.line_no, outside.text,
                       deciding=_record_dict(outside, timeline.First(stopped, outside, "")),
                       first_failed_rank=stopped,
                       reason=f"ended by a signal from outside the job "
                              f"({outside.facts.get('signal')} on every task that ended, "
                              f"{outside.rule} at {outside.where()}; a scancel --signal or "
                              f"a preemption) and no rank shows a failure of its own; "
                              f"{said}; not retried", **common)
    deciding, first = decide(ranks, allow_fallout=launcher_state not in (
        LauncherState.TIMEOUT, LauncherState.CANCELLED))
    hung = launcher_state == LauncherState.TIMEOUT
    events = [h.event() for h in fatal]
    hang = timeline.communication_hang(events, scan.records, scan.seen, scan.cuts) if (
        launcher_state == LauncherState.FAILED) else None
    if hang is not None:
        return _communication_hang(hang, [*events, *scan.records], said, common)
    ff = timeline.first_failure(events, scan.records, scan.seen, hung=hung)
    common["first_by"] = ff.evidence
    shown = events + scan.records + [w.event("survived") for w in scan.warnings]
    node_hit = min((h for h in fatal if h.rank is None and not h.sig.fallout
                    and h.sig.cls != OVERFLOW), key=Hit.key, default=None)
    bug = deciding is not None and not deciding.sig.fallout and deciding.sig.cls in (
        OVERFLOW, Status.BADFLAG, Status.ASSERT)
    if not bug and not cancelled:   # a scancel is the scheduler's own record: it decides
        own = ranks.get(ff.rank) if ff.rank is not None else None
        made = timeline.decide(ff, own.event() if own else None, scan.records,
                               layout=scan.layout, xid=scan.xid,
                               node_failure=node_hit.event() if node_hit else None,
                               hung=hung)
        if made.cls == timeline.UNCLASSIFIED and hung:
            made = timeline.Decision(None, None, made.rule)
        if made.cls is not None:
            return _decided(made, own, ff, shown, said, common)
    cut = timeline.cut_first(events, scan.cuts) if not hung and not cancelled else None
    if cut is not None and node_hit is None:
        common["first_by"] = "the only rank whose log ends in a line of its own (cut)"
        common["explain"] = tuple(timeline.explain(shown + [cut], cut))
        return Outcome(UNCLASSIFIED, cut.path, cut.line_no, cut.text,
                       first_failed_rank=cut.rank, quoted=(_record_dict(cut, ff),),
                       reason=f"rank {cut.rank}'s log ends in a cut line ({cut.where()}) that "
                              f"no signature's stable prefix matches, and every other rank "
                              f"shows only fallout: it failed first, and nothing says why; "
                              f"{said}", **common)
    common["explain"] = tuple(timeline.explain(shown, deciding.event() if deciding else None))
    if deciding is not None:
        cls_name = Status.DROPS if deciding.sig.cls == OVERFLOW else Status(deciding.sig.cls)
        where = f"{deciding.path}:{deciding.line_no}"
        if (cls_name == Status.DOES_NOT_FIT and ff.rank is not None
                and deciding.rank != ff.rank):
            # harm first: out of memory decides only from the first failed rank
            return Outcome(UNCLASSIFIED, deciding.path, deciding.line_no, deciding.text,
                           deciding=deciding.to_dict(), first_failed_rank=ff.rank,
                           reason=f"an out-of-memory signature at {where} is rank "
                                  f"{deciding.rank}'s, but rank {ff.rank} failed first "
                                  f"({ff.evidence}) with no signature of its own; {said}",
                           quoted=(deciding.to_dict(),), **common)
        rank = None if deciding.rank is None and cls_name != Status.TIMEOUT else (
            ff.rank if ff.rank is not None else first)
        return Outcome(cls_name, deciding.path, deciding.line_no, deciding.text,
                       deciding=deciding.to_dict(), reason=f"{deciding.sig.cls} signature "
                       f"({deciding.sig.source}) at {where}, rank {deciding.rank}; {said}",
                       first_failed_rank=rank, **common)
    if hung:
        return Outcome(Status.TIMEOUT, reason=f"no progress within the limit ({said}); no "
                                         f"rank shows a failure signature",
                       first_failed_rank=ff.rank, **common)
    if launcher_state == LauncherState.CANCELLED:
        return Outcome(Status.CANCELLED, reason=f"cancelled by scancel (a user or an admin; the "
                                          f"harness records its own cancels otherwise) without a "
                                          f"failure signature (exit {exit_code}); not retried",
                       **common)
    if exit_code not in (0, None) or launcher_state == LauncherState.FAILED:
        if rows == 0:       # reader-independent: the summary's count, not lines seen
            return Outcome(Status.CRASH, reason=f"{said}: died before iteration 0 without a "
                                                f"failure signature", **common)
        quoted = tuple(_record_dict(e, ff) for e in scan.records if e.kind == "exit")[:5]
        return Outcome(UNCLASSIFIED, reason=f"{said} after progress ({rows} telemetry rows): "
                                            f"no signature and no structural evidence says "
                                            f"why", first_failed_rank=ff.rank,
                       quoted=quoted, **common)
    return Outcome(Status.CRASH, reason="exited cleanly but wrote no dispatch telemetry rows "
                                   "(setup_metadata rows alone are not telemetry)", **common)


# a frame of torch.distributed's collective API in a traceback: the collective that waited
# (pytorch/pytorch torch/distributed/distributed_c10d.py, e.g. `in all_to_all_single`)
C10D_FRAME = re.compile(r'File "[^"]*distributed_c10d\.py", line \d+, in (\w+)')
FRAME_LOOKBACK = 80         # lines before a timeout searched for the collective's frame


def collective_of(ev: timeline.Event) -> str | None:
    """The collective a timeout line names (NCCL's `OpType=`) or, for gloo, the c10d frame of
    the traceback just before it in the same log (read back at most FRAME_LOOKBACK lines)."""
    found = timeline.OP_TYPE.search(ev.text)
    if found:
        return found.group(1)
    try:
        recent: list[str] = []
        for line_no, text in text_lines(ev.path):
            if line_no >= ev.line_no:
                break
            recent = (recent + [text])[-FRAME_LOOKBACK:]
    except (OSError, BadInput):
        return None
    frames = [m.group(1) for t in recent if (m := C10D_FRAME.search(t))]
    return frames[-1] if frames else None


def _communication_hang(hang: timeline.Hang, shown: list[timeline.Event], said: str,
                        common: dict) -> Outcome:
    """No rank has a cause of its own and some never reported: a communication hang (infra)
    naming the collective the others timed out in and the ranks that never reported."""
    ev = hang.timeouts[0]
    op = next((c for c in map(collective_of, hang.timeouts) if c), None)
    silent = ", ".join(hang.silent)
    common["first_by"] = (f"the only rank{'s' if len(hang.silent) > 1 else ''} that never "
                          f"reported ({silent}): every other rank timed out waiting for a peer")
    common["explain"] = tuple(timeline.explain(shown, ev))
    reported = sorted({e.rank for e in hang.timeouts if e.rank is not None},
                      key=timeline.rank_key)
    return Outcome(Status.INFRA, ev.path, ev.line_no, ev.text,
                   deciding={**_record_dict(ev, timeline.First(hang.silent[0], ev, "")),
                             "fallout": True},
                   first_failed_rank=hang.silent[0],
                   reason=f"communication hang: rank{'s' if len(reported) > 1 else ''} "
                          f"{', '.join(reported)} timed out in "
                          f"{op or 'a collective'} ({ev.rule} at {ev.where()}) and rank"
                          f"{'s' if len(hang.silent) > 1 else ''} {silent} never reported; "
                          f"no rank shows a cause of its own; {said}", **common)


def _memory_kill(hit: Hit) -> bool:
    """A line of the scheduler's memory enforcement (slurm-step-messages, class badflag)."""
    return hit.sig.cls == Status.BADFLAG and hit.sig.source == MEMORY_KILL_SOURCE


def _memory_limit(ranks: dict[str, Hit], exit_code: int | None, state: str,
                  common: dict) -> Outcome:
    """The scheduler's memory enforcement killed the job: a configuration failure naming the
    runbook field, before any rank's string (the kill decides, not what the ranks printed
    while dying), deciding on the enforcement's own line when a log shows it."""
    hit = min((h for h in ranks.values() if _memory_kill(h)), key=Hit.key, default=None)
    where = f" ({hit.path}:{hit.line_no}: {hit.text})" if hit is not None else ""
    reason = (f"{CONFIG_FAILURE} the scheduler's memory limit killed the job (launcher state "
              f"{state}, exit {exit_code}){where}; the limit is the runbook's, not the backend's "
              f"memory: raise {MEMORY_LIMIT_FIELD} (or slurm.mem_per_gpu) and rerun")
    if hit is None:
        return Outcome(Status.BADFLAG, reason=reason, **common)
    return Outcome(Status.BADFLAG, hit.path, hit.line_no, hit.text, deciding=hit.to_dict(),
                   first_failed_rank=hit.rank, reason=reason, **common)


def _record_dict(ev: timeline.Event, ff: timeline.First) -> dict:
    """A timeline event in the shape of Hit.to_dict (a record, or a signature)."""
    return {"path": ev.path, "line_no": ev.line_no, "text": ev.text,
            "class": ev.cls or ev.kind, "rank": ev.rank, "attributed_by": ff.evidence,
            "source": ev.rule, "member": None, "fallout": ev.fallout, "truncated": False}


def _decided(made: timeline.Decision, own: Hit | None, ff: timeline.First,
             events: list[timeline.Event], said: str, common: dict) -> Outcome:
    """The outcome of a timeline decision (timeline.decide)."""
    ev = made.event
    hit = own if own is not None and ev is not None and ev.kind == "signature" else None
    deciding = hit.to_dict() if hit is not None else (_record_dict(ev, ff) if ev else None)
    common["explain"] = tuple(timeline.explain(events, ev))
    quoted = tuple(_record_dict(e, ff) for e in made.quoted)
    status = Status.DROPS if made.cls == OVERFLOW else Status(made.cls)
    where = f" at {ev.where()}" if ev is not None else ""
    return Outcome(status, ev.path if ev else None, ev.line_no if ev else None,
                   ev.text if ev else None, deciding=deciding, first_failed_rank=ff.rank,
                   reason=f"{made.rule}{where}; first failed rank {ff.rank} by {ff.evidence}; "
                          f"{said}", quoted=quoted, **common)


def iter_log_lines(paths: Iterable[Path]) -> Iterator[tuple[str, int, str]]:
    """(path, 1-based line number, text without line ending) of every line, streamed."""
    for path in paths:
        for line_no, text in text_lines(path):    # split on \n only, like `wc -l`; bounded
            yield str(path), line_no, text


_PREFIX = rb"(?:\d+: )?(?:\[(?:rank|default)\d+\]: ?)?"
# a dispatch row's iteration and rank, in canonical field order (progress counters)
ROW_ANY = re.compile(rb"\[MOE_DROP_DEBUG\]\[dispatch\] iter=(\d{1,18}) layer=\d+ rank=(\d{1,9}) ")


def row_line(dispatch: str = DISPATCH_TAG) -> re.Pattern:
    """A canonical dispatch-row line: launcher prefixes, the tag, the six fields in order
    with well-formed values, then only numeric key=value tokens. Such a line is progress
    and nothing else (no signature can hide in it); any other line is read in full."""
    ints = rb" iter=\d{1,18} layer=\d{1,18} rank=\d{1,18} expected_recv=[1-9]\d{0,17}" \
           rb" actual_valid_recv=\d{1,18} budget=\d{1,18}"
    dup = rb"(?:iter|layer|rank|expected_recv|actual_valid_recv|budget)="
    tail = rb"(?: (?!" + dup + rb")[A-Za-z_]\w*=-?\d+(?:\.\d+)?)*[ \t]*\r?$"
    return re.compile(rb"(?m)^" + _PREFIX + re.escape(dispatch.encode()) + ints + tail)


def row_runs(dispatch: str = DISPATCH_TAG) -> re.Pattern:
    """One or more consecutive ROW_LINEs with their newlines: one match per stretch."""
    body = row_line(dispatch).pattern[len(rb"(?m)^"):]
    return re.compile(rb"(?m)(?:^" + body + rb"\n)+")


def _whole_line_blocks(path: Path) -> Iterator[tuple[bytes, int]]:
    """(block, lines before it) of one log, cut where the telemetry summary cuts its blocks
    (harness.telemetry.summary: BLOCK_BYTES reads, whole lines; a last line without newline
    given one; an over-long line read by its first MAX_LINE bytes, the rest skipped), so
    reading with the summary or alone yields the same lines."""
    line_no = 0
    with open_log(path) as handle:            # the one bounded, non-blocking log reader
        carry = b""
        while data := handle.read(telemetry.BLOCK_BYTES):
            block = carry + data
            cut = block.rfind(b"\n") + 1
            if cut:
                carry = block[cut:]
                yield block[:cut], line_no
                line_no += block.count(b"\n", 0, cut)
            elif len(block) > telemetry.MAX_LINE:
                yield block[:telemetry.MAX_LINE] + b"\n", line_no
                data = handle.read(telemetry.BLOCK_BYTES)      # past its end, as the summary
                while data and b"\n" not in data:
                    data = handle.read(telemetry.BLOCK_BYTES)
                handle.seek(-len(data.partition(b"\n")[2]), os.SEEK_CUR)
                carry, line_no = b"", line_no + 1
            else:
                carry = block
        if carry:                   # a last line without newline
            yield carry + b"\n", line_no


def iter_log_events(paths: Iterable[Path], dispatch: str = DISPATCH_TAG
                    ) -> Iterator[tuple[str, str, int, object]]:
    """The logs as ("line", path, line_no, text) for every line that is not a canonical
    dispatch row, and ("rows", path, 0, bytes) for each stretch of canonical rows between
    them, in file order; read in blocks of whole lines, so memory stays bounded and the
    bulk of a large log (its rows) is never split into Python strings. The pure reader."""
    rows_re = row_runs(dispatch)
    for path in paths:
        for block, line_no in _whole_line_blocks(path):
            yield from _block_events(str(path), block, line_no, rows_re)


def sift_log_events(paths: Iterable[Path], anchors: Anchors | None,
                    dispatch: str = DISPATCH_TAG, setup: str = SETUP_TAG
                    ) -> Iterator[tuple]:
    """The compiled reader's events (`_sifted_events`) over whole files."""
    sift = sifter()
    for path in paths:
        for block, line_no in _whole_line_blocks(path):
            yield from _sifted_events(sift, anchors, (dispatch.encode(), setup.encode()),
                                      str(path), block, line_no)


def _sift_with(anchors: Anchors | None) -> tuple:
    """The anchors as `_scan.sift` takes them (exact None: every line a candidate)."""
    return (None, ()) if anchors is None else (anchors.exact, anchors.folded)


def _sifted_events(sift, anchors: Anchors | None, tags: tuple[bytes, bytes], name: str,
                   block: bytes | memoryview, line_no: int, sifted: tuple | None = None
                   ) -> Iterator[tuple]:
    """One block sifted in C (`_scan.sift`, or `sifted`, its result from the summary's
    pass): ("line", path, line_no, text) for each line that may hold a signature or a row
    (not a canonical row, and holding a tag, colour or one of the signatures' anchors),
    ("quiet", path, line_no, block, start, stop, others) for the stretch between two of
    them (see `_Scan.feed_quiet`). Decides as iter_log_events does (property-tested)."""
    found, others, _lines = sifted or sift(block, len(block), *tags, *_sift_with(anchors))
    cand, others = memoryview(found).cast("q"), memoryview(others).cast("q")
    pos = 0
    for k in range(0, len(cand), 3):
        index, begin, end = cand[k:k + 3]
        if begin > pos:
            yield "quiet", name, line_no, block, pos, begin, others
        yield "line", name, line_no + index + 1, \
            bytes(block[begin:end]).decode("utf-8", "replace").rstrip("\r\n")
        pos = end + 1
    if pos < len(block):
        yield "quiet", name, line_no, block, pos, len(block), others


class LineReader:
    """Feeds each block of whole lines to a scan: sifted in C when the compiled scanner is
    built and takes the tags (non-empty, one line each), else by the pure block reader.
    An observer of `summarize` (one pass for rows and signatures) or of `read_logs`."""

    def __init__(self, scan: _Scan, signatures: Iterable[Signature],
                 tags: dict | None = None) -> None:
        tags = tags or {}
        self.scan = scan
        dispatch, setup = tags.get("dispatch", DISPATCH_TAG), tags.get("setup", SETUP_TAG)
        usable = all(t and "\n" not in t for t in (dispatch, setup))
        self.sift = sifter() if usable else None
        self.tags = dispatch.encode(), setup.encode()
        self.anchors = anchors_of(signatures) if self.sift else None
        self.rows_re = None if self.sift else row_runs(dispatch)
        # asks `summarize` for each block's sift from its own pass (Folder.sift_feed)
        self.sift_with = _sift_with(self.anchors) if self.sift else None

    def __call__(self, path: str, lines: bytes | memoryview, first_line: int,
                 sifted: tuple | None = None) -> None:
        """Read one block (`first_line`: the 1-based number of its first line; `sifted`:
        the summary's sift of it, when it made one)."""
        if self.sift is not None:
            events = _sifted_events(self.sift, self.anchors, self.tags, path, lines,
                                    first_line - 1, sifted)
        else:
            events = _block_events(path, bytes(lines), first_line - 1, self.rows_re)
        for event in events:
            self.scan.event(event)


def read_logs(paths: Iterable[Path], reader: LineReader) -> None:
    """Hand every block of the logs to the reader (no telemetry summary wanted)."""
    for path in paths:
        for block, line_no in _whole_line_blocks(path):
            reader(str(path), block, line_no + 1)


def _block_events(name: str, block: bytes, line_no: int, rows_re: re.Pattern):
    """The events of one block of whole lines (see iter_log_events)."""
    pos = 0
    for found in rows_re.finditer(block):
        start, end = found.span()
        for raw in block[pos:start].split(b"\n")[:-1]:   # lines that are not canonical rows
            line_no += 1
            yield "line", name, line_no, raw.decode("utf-8", "replace").rstrip("\r\n")
        yield "rows", name, 0, block[start:end]
        line_no += block.count(b"\n", start, end)
        pos = end
    for raw in block[pos:].split(b"\n")[:-1]:
        line_no += 1
        yield "line", name, line_no, raw.decode("utf-8", "replace").rstrip("\r\n")


LOG_SUFFIXES = (".log", ".out", ".err")
CELL_JSON_MAX = 1 << 20


def cell_logs(cell_dir: Path, launcher_logs: Iterable[Path] = ()) -> list[Path]:
    """The logs the taxonomy reads for one cell, the same for the campaign and `epcap
    classify`: every .log/.out/.err file of the cell directory (rank<R>.log, node<N>.log,
    Slurm's slurm-<job>.out, health<N>.log) plus any log the launcher named elsewhere, in
    natural name order (rank2 before rank10)."""
    def natural(p: Path):
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]
    cell_dir = Path(cell_dir)
    found = [p for p in cell_dir.iterdir() if p.is_file() and p.suffix in LOG_SUFFIXES] \
        if cell_dir.is_dir() else []
    extra = [Path(p) for p in launcher_logs
             if Path(p).is_file() and Path(p).resolve().parent != cell_dir.resolve()]
    return sorted(found, key=natural) + extra


def read_cell_json(cell_dir: Path) -> dict:
    """cell.json of a cell directory ({} when absent); malformed is BadInput. Read through the
    bounded reader: a regular file, at most 1 MiB, integers bounded in digits."""
    path = Path(cell_dir) / CELL_JSON
    if not os.path.lexists(path):
        return {}
    doc = read_json(path, max_bytes=CELL_JSON_MAX)
    if not isinstance(doc, dict):
        raise BadInput("not a JSON object", path=str(path), line=1)
    return doc


def cell_layout(cell_dir: Path) -> Layout:
    """The log layout the cell's cell.json states (signatures.layout_of)."""
    return layout_of(read_cell_json(cell_dir))


TAIL_BYTES = 4096


def note_cut_tails(scan: _Scan, paths: Iterable[Path]) -> None:
    """Hand the scan each log's last line when the log ends without a newline (a write cut
    by the process's death): read from the file's tail, its line number counted only then.
    Each file once; a name that is no file (lines handed over in memory) is skipped."""
    for path in paths:
        if str(path) in scan.tails_read or not Path(path).is_file():
            continue
        scan.tails_read.add(str(path))
        with open_log(path) as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                continue
            handle.seek(max(0, size - TAIL_BYTES))
            tail = handle.read(TAIL_BYTES)
            if tail.endswith(b"\n"):
                continue
            handle.seek(0)
            line_no = 1 + sum(block.count(b"\n") for block in iter(
                lambda: handle.read(telemetry.BLOCK_BYTES), b""))
        scan.note_cut(str(path), line_no,
                      tail[tail.rfind(b"\n") + 1:].decode("utf-8", "replace"))


def classify_logs(exit_code: int | None, launcher_state: str, log_paths: Iterable[Path],
                  patterns: dict[str, Iterable[str]] | None, rows: int, *,
                  library: str | None = None, table: Table | None = None,
                  layout: Layout = NO_LAYOUT, tags: dict | None = None) -> Outcome:
    """`classify` over log files (missing files are skipped: a run may die before writing)."""
    check_state(launcher_state)
    existing = [Path(p) for p in log_paths if Path(p).is_file()]
    scan, signatures = new_scan(patterns, library, table, layout, tags)
    read_logs(existing, LineReader(scan, signatures, tags))
    note_cut_tails(scan, existing)
    return verdict(scan, exit_code, launcher_state, rows)


@dataclass(frozen=True)
class Verdict:
    """A run's status (a taxonomy class, or ok | drops | lower_bound), the taxonomy's
    outcome (why) and the telemetry summary it was judged with."""

    status: str
    outcome: Outcome
    summary: LogSummary | None


def judge_run(exit_code: int | None, state: str, logs: Iterable[Path], patterns: dict | None,
              purpose: str | None = None, library: str | None = None,
              tags: dict | None = None, summary: LogSummary | None = None,
              layout: Layout = NO_LAYOUT) -> Verdict:
    """The status of one finished run, as the campaign and `epcap classify` both judge it:
    the taxonomy, then for a clean end the telemetry (saturated rows: lower_bound for a
    measure, drops otherwise). A measure whose overflow report said drops is a lower bound
    too: the demand it states is what the re-measure must cover."""
    logs = [Path(p) for p in logs if Path(p).is_file()]
    check_state(state)
    scan, signatures = new_scan(patterns, library, None, layout, tags)
    reader = LineReader(scan, signatures, tags)
    if summary is None and logs:       # one pass: the summary's blocks feed the scan too
        summary = summarize(logs, tags=tags, observe=reader)
    else:
        read_logs(logs, reader)
    note_cut_tails(scan, logs)
    rows = summary.rows if summary else 0
    out = verdict(scan, exit_code, state, rows)
    status = out.status
    if status is None:
        saturated = summary.saturated_rows > 0
        status = Status.DROPS if saturated else Status.OK
    if status == Status.DROPS and purpose == Purpose.MEASURE:
        status = Status.LOWER_BOUND
    return Verdict(status, out, summary)


def is_bug(outcome: Outcome) -> bool:
    """True when the campaign must stop (assert, badflag)."""
    return outcome.status in BUG_CLASSES
