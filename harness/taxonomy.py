"""Failure taxonomy of one run (SPEC section 3): exit status + log lines -> failure class.

Pure: takes the launcher's view, a stream of (path, line_no, text) and a backend's regexes,
and returns an `Outcome`. The log is streamed line by line, never loaded whole.

Order of decision:
1. launcher state `timeout` -> timeout; `oom` -> does_not_fit; `node_fail` -> infra;
2. a clean end (state completed, exit 0) with telemetry rows -> status None (the campaign
   then decides ok / drops / lower_bound from the telemetry summary);
3. otherwise the first log line matching a signature, classes tried in the order
   assert, badflag, does_not_fit, infra (a bug signature anywhere beats an OOM line earlier);
4. otherwise `cancelled` -> infra, and anything else (non-zero exit, or no telemetry rows)
   -> crash.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BadInput
from harness.vocab import BUG_CLASSES, FAILURE_CLASSES, PATTERN_CLASSES, LauncherState, Status

CLASS_ORDER = PATTERN_CLASSES
STATUSES = FAILURE_CLASSES
LAUNCHER_STATES = LauncherState.values()
STATE_CLASSES = {LauncherState.TIMEOUT: Status.TIMEOUT, LauncherState.OOM: Status.DOES_NOT_FIT,
                 LauncherState.NODE_FAIL: Status.INFRA}


@dataclass(frozen=True)
class Outcome:
    """How a run ended: status None means clean with telemetry; else a taxonomy class."""

    status: str | None
    path: str | None = None         # log file of the signature line, when one decided it
    line_no: int | None = None      # 1-based line number in that file
    line: str | None = None         # the signature line (stripped)
    reason: str = ""                # one sentence saying why (for reports and events)

    def to_dict(self) -> dict:
        return {"status": self.status, "path": self.path, "line_no": self.line_no,
                "line": self.line, "reason": self.reason}


def compile_patterns(patterns: dict[str, Iterable[str]]) -> dict[str, re.Pattern]:
    """One alternation regex per class; an unknown class or a bad regex is BadInput."""
    compiled = {}
    for cls_name, pats in patterns.items():
        if cls_name not in CLASS_ORDER:
            raise BadInput(f"unknown failure class {cls_name!r} (allowed: "
                           f"{', '.join(CLASS_ORDER)})", field="failure_patterns")
        pats = tuple(pats)
        for pat in pats:
            try:
                re.compile(pat)
            except re.error as exc:
                raise BadInput(f"bad regex {pat!r}: {exc}",
                               field=f"failure_patterns.{cls_name}") from exc
        if pats:
            compiled[cls_name] = re.compile("|".join(scoped(p) for p in pats))
    return compiled


def scoped(pattern: str) -> str:
    """A pattern as one alternation branch; a leading `(?i)` becomes a scoped `(?i:...)`."""
    flags = re.match(r"\(\?([aiLmsux]+)\)", pattern)
    if flags:
        return f"(?{flags.group(1)}:{pattern[flags.end():]})"
    return f"(?:{pattern})"


def find_signature(lines: Iterable[tuple], patterns: dict[str, Iterable[str]]
                   ) -> tuple[str, str, int, str] | None:
    """(class, path, line_no, text) of the first line of the highest-priority class, or None.

    Streams: stops as soon as a line of the top class (assert) is found.
    """
    compiled = compile_patterns(patterns)
    order = [c for c in CLASS_ORDER if c in compiled]
    best: tuple[int, str, str, int, str] | None = None
    for path, line_no, text in lines:
        limit = best[0] if best else len(order)
        for rank in range(limit):
            if compiled[order[rank]].search(text):
                best = (rank, order[rank], str(path), line_no, text.strip())
                break
        if best and best[0] == 0:
            break
    return best[1:] if best else None


def classify(exit_code: int | None, launcher_state: str, lines: Iterable[tuple],
             patterns: dict[str, Iterable[str]], rows: int) -> Outcome:
    """The taxonomy class of one run (see the module docstring for the order)."""
    if launcher_state not in LAUNCHER_STATES:
        raise BadInput(f"unknown launcher state {launcher_state!r}", field="launcher_state")
    if launcher_state in STATE_CLASSES:
        reason = f"launcher state {launcher_state} (exit {exit_code})"
        found = find_signature(lines, {k: v for k, v in patterns.items() if k in BUG_CLASSES})
        if found:
            reason += f"; the log also shows {found[0]} at {found[1]}:{found[2]}"
        return Outcome(STATE_CLASSES[launcher_state], reason=reason)
    if launcher_state == LauncherState.COMPLETED and exit_code == 0 and rows > 0:
        return Outcome(None, reason=f"clean exit with {rows} telemetry rows")
    found = find_signature(lines, patterns)
    if found:
        cls_name, path, line_no, text = found
        return Outcome(cls_name, path, line_no, text,
                       reason=f"{cls_name} signature at {path}:{line_no}")
    if launcher_state == LauncherState.CANCELLED:
        return Outcome(Status.INFRA, reason=f"cancelled without a failure signature (exit {exit_code})")
    if exit_code not in (0, None) or launcher_state == LauncherState.FAILED:
        return Outcome(Status.CRASH, reason=f"exit {exit_code}, state {launcher_state}, no failure "
                                       f"signature ({rows} telemetry rows)")
    return Outcome(Status.CRASH, reason="exited cleanly but wrote no dispatch telemetry rows "
                                   "(setup_metadata rows alone are not telemetry)")


def iter_log_lines(paths: Iterable[Path]) -> Iterator[tuple[str, int, str]]:
    """(path, 1-based line number, text without line ending) of every line, streamed."""
    for path in paths:
        with open(path, "rb") as handle:          # split on \n only, like `wc -l`
            for line_no, raw in enumerate(handle, start=1):
                yield str(path), line_no, raw.decode("utf-8", "replace").rstrip("\r\n")


def classify_logs(exit_code: int | None, launcher_state: str, log_paths: Iterable[Path],
                  patterns: dict[str, Iterable[str]], rows: int) -> Outcome:
    """`classify` over log files (missing files are skipped: a run may die before writing)."""
    existing = [Path(p) for p in log_paths if Path(p).is_file()]
    return classify(exit_code, launcher_state, iter_log_lines(existing), patterns, rows)


def is_bug(outcome: Outcome) -> bool:
    """True when the campaign must stop (assert, badflag)."""
    return outcome.status in BUG_CLASSES
