"""Failure taxonomy of one run (SPEC section 3): exit status + logs -> class and why.

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
5. no fatal signature: `cancelled` -> infra, otherwise crash.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import BadInput
from harness.io.bounds import clip_line, parse_int
from harness.taxonomy.signatures import (
    OVERFLOW,
    Matcher,
    Signature,
    Table,
    clean,
    from_patterns,
    iteration_of,
    load_table,
    rank_of,
    timestamp_of,
)
from harness.telemetry.summary import LogSummary, summarize
from harness.vocab import BUG_CLASSES, FAILURE_CLASSES, LauncherState, Purpose, Status

# The run's class: the first of these among the ranks' fatal signatures (docs/taxonomy.md).
RUN_ORDER = (OVERFLOW, Status.BADFLAG, Status.ASSERT, Status.DOES_NOT_FIT, Status.INFRA,
             Status.TIMEOUT)
CLASS_ORDER = RUN_ORDER
STATUSES = FAILURE_CLASSES
LAUNCHER_STATES = LauncherState.values()
STATE_CLASSES = {LauncherState.OOM: Status.DOES_NOT_FIT, LauncherState.NODE_FAIL: Status.INFRA}
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
    context: dict           # progress kind -> highest iteration in this file before the line
    file_index: int
    ts: tuple | None = None
    demand: int | None = None

    def key(self) -> tuple:
        """Time order: timestamp when present, else file order then line."""
        return (self.ts is None, self.ts or (), self.file_index, self.line_no)

    def to_dict(self) -> dict:
        return {"path": self.path, "line_no": self.line_no, "text": self.text,
                "class": self.sig.cls, "rank": self.rank, "source": self.sig.source,
                "fallout": self.sig.fallout}


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

    def to_dict(self) -> dict:
        return {"status": self.status, "path": self.path, "line_no": self.line_no,
                "line": self.line, "reason": self.reason,
                "first_failed_rank": self.first_failed_rank,
                "warnings": list(self.warnings), "warnings_total": self.warnings_total,
                "stated_demand": self.stated_demand, "ranks": dict(self.ranks)}


def compile_patterns(patterns: dict[str, Iterable[str]] | None) -> tuple[Signature, ...]:
    """A backend's / runbook's regexes as signatures; unknown class or bad regex: BadInput."""
    return from_patterns(patterns)


def run_signatures(patterns: dict | None, library: str | None = None,
                   table: Table | None = None) -> tuple[Signature, ...]:
    """The upstream table (for this library), then the backend's and runbook's regexes."""
    table = table or load_table()
    return table.for_library(library) + compile_patterns(patterns)


class _Scan:
    """One pass over the lines: survived signatures out, fatal candidates kept per file.

    Progress is counted per kind (Megatron's 1-based iteration line, the 0-based dispatch
    rows) and compared only like with like, so numbering never fakes an iteration."""

    def __init__(self, matcher: Matcher, progress) -> None:
        self.matcher, self.progress = matcher, progress
        self.files: dict[str, int] = {}
        self.last_iter: dict[str, dict[int, int]] = {}
        self.max_iter: dict[int, int] = {}
        self.pending: dict[str, list[Hit]] = {}
        self.warnings: list[Hit] = []
        self.warnings_total = 0
        self.demand: Hit | None = None     # the overflow report that decides drops

    def feed(self, path: str, line_no: int, raw: str) -> None:
        text = clean(raw)
        index = self.files.setdefault(path, len(self.files))
        step = iteration_of(text, self.progress)
        if step is not None:
            kind, n = step
            seen = self.last_iter.setdefault(path, {})
            if n > seen.get(kind, -1):
                seen[kind] = n
                self.max_iter[kind] = max(self.max_iter.get(kind, -1), n)
                self._survive(path, kind, n)
            return
        found = self.matcher.match(text)
        if not found:
            return
        sig, match = found
        rank = rank_of(text, path)
        rank = rank if rank is None or len(rank) <= MAX_RANK_CHARS else None   # bounded copy
        hit = Hit(sig, path, line_no, clip_line(text.strip()), rank,
                  dict(self.last_iter.get(path, {})), index, timestamp_of(text))
        if sig.cls == OVERFLOW:
            if sig.demand and match.groupdict().get(sig.demand):
                hit.demand = parse_int(match.group(sig.demand))   # None past 30 digits
            if self.demand is None or (hit.demand or -1) > (self.demand.demand or -1):
                self.demand = hit           # the overflow report with the largest demand
        kept = self.pending.setdefault(path, [])
        if len(kept) < MAX_PENDING:
            kept.append(hit)

    def _survive(self, path: str, kind: int, n: int) -> None:
        kept = self.pending.get(path)
        while kept and kept[0].context.get(kind, -1) < n:
            self._warn(kept.pop(0))

    def _warn(self, hit: Hit) -> None:
        self.warnings_total += 1
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(hit)

    def finish(self) -> list[Hit]:
        """Fatal candidates; a file with progress lines survived what the run outran in a
        kind of progress that file reports too."""
        fatal = []
        for path, hits in self.pending.items():
            kinds = self.last_iter.get(path, {})
            for hit in hits:
                if any(self.max_iter[k] > hit.context.get(k, -1) for k in kinds):
                    self._warn(hit)
                else:
                    fatal.append(hit)
        return fatal


def per_rank(fatal: list[Hit]) -> dict[str, Hit]:
    """Each rank's fatal signature: the first of RUN_ORDER among the signatures after its
    last progress, a non-fallout one before a fallout one, then the earliest."""
    out: dict[str, Hit] = {}
    for hit in sorted(fatal, key=lambda h: (h.file_index, h.line_no)):
        who = hit.rank if hit.rank is not None else hit.path
        best = out.get(who)
        if best is None or _rank_key(hit) < _rank_key(best):
            out[who] = hit
    return out


def _rank_key(hit: Hit) -> tuple:
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


def classify(exit_code: int | None, launcher_state: str, lines: Iterable[tuple],
             patterns: dict[str, Iterable[str]] | None, rows: int, *,
             library: str | None = None, table: Table | None = None) -> Outcome:
    """The taxonomy class of one run (see the module docstring and docs/taxonomy.md)."""
    if launcher_state not in LAUNCHER_STATES:
        raise BadInput(f"unknown launcher state {launcher_state!r}", field="launcher_state")
    table = table or load_table()
    scan = _Scan(Matcher(run_signatures(patterns, library, table)), table.progress)
    for path, line_no, text in lines:
        scan.feed(str(path), line_no, text)
    fatal = scan.finish()
    ranks = per_rank(fatal)
    demand = scan.demand.demand if scan.demand else None
    common = {"warnings": tuple(h.to_dict() for h in scan.warnings),
              "warnings_total": scan.warnings_total, "stated_demand": demand,
              "ranks": {k: v.to_dict() for k, v in ranks.items()}}
    said = f"exit {exit_code}, state {launcher_state}"
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
            return Outcome(Status.DROPS, hit.path, hit.line_no, hit.text,
                           reason=f"clean exit, but an overflow report ({hit.sig.source}) at "
                                  f"{hit.path}:{hit.line_no} stated a receive demand of "
                                  f"{demand}", first_failed_rank=hit.rank, **common)
        return Outcome(None, reason=f"clean exit with {rows} telemetry rows", **common)
    deciding, first = decide(ranks, allow_fallout=launcher_state != LauncherState.TIMEOUT)
    if deciding is not None:
        cls_name = Status.DROPS if deciding.sig.cls == OVERFLOW else Status(deciding.sig.cls)
        where = f"{deciding.path}:{deciding.line_no}"
        return Outcome(cls_name, deciding.path, deciding.line_no, deciding.text,
                       reason=f"{deciding.sig.cls} signature ({deciding.sig.source}) at "
                              f"{where}, rank {deciding.rank}; {said}",
                       first_failed_rank=first, **common)
    if launcher_state == LauncherState.TIMEOUT:
        return Outcome(Status.TIMEOUT, reason=f"no progress within the limit ({said}); no "
                                         f"rank shows a failure signature", **common)
    if launcher_state == LauncherState.CANCELLED:
        return Outcome(Status.INFRA, reason=f"cancelled without a failure signature (exit "
                                       f"{exit_code})", **common)
    if exit_code not in (0, None) or launcher_state == LauncherState.FAILED:
        return Outcome(Status.CRASH, reason=f"{said}, no fatal failure signature ({rows} "
                                       f"telemetry rows)", **common)
    return Outcome(Status.CRASH, reason="exited cleanly but wrote no dispatch telemetry rows "
                                   "(setup_metadata rows alone are not telemetry)", **common)


def iter_log_lines(paths: Iterable[Path]) -> Iterator[tuple[str, int, str]]:
    """(path, 1-based line number, text without line ending) of every line, streamed."""
    for path in paths:
        with open(path, "rb") as handle:          # split on \n only, like `wc -l`
            for line_no, raw in enumerate(handle, start=1):
                yield str(path), line_no, raw.decode("utf-8", "replace").rstrip("\r\n")


def classify_logs(exit_code: int | None, launcher_state: str, log_paths: Iterable[Path],
                  patterns: dict[str, Iterable[str]] | None, rows: int, **kw) -> Outcome:
    """`classify` over log files (missing files are skipped: a run may die before writing)."""
    existing = [Path(p) for p in log_paths if Path(p).is_file()]
    return classify(exit_code, launcher_state, iter_log_lines(existing), patterns, rows, **kw)


@dataclass(frozen=True)
class Verdict:
    """A run's status (a taxonomy class, or ok | drops | lower_bound), the taxonomy's
    outcome (why) and the telemetry summary it was judged with."""

    status: str
    outcome: Outcome
    summary: LogSummary | None


def judge_run(exit_code: int | None, state: str, logs: Iterable[Path], patterns: dict | None,
              purpose: str | None = None, library: str | None = None,
              tags: dict | None = None, summary: LogSummary | None = None) -> Verdict:
    """The status of one finished run, as the campaign and `epcap classify` both judge it:
    the taxonomy, then for a clean end the telemetry (saturated rows: lower_bound for a
    measure, drops otherwise). A measure whose overflow report said drops is a lower bound
    too: the demand it states is what the re-measure must cover."""
    logs = [Path(p) for p in logs if Path(p).is_file()]
    if summary is None and logs:
        summary = summarize(logs, tags=tags)
    rows = summary.rows if summary else 0
    out = classify_logs(exit_code, state, logs, patterns, rows, library=library)
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
