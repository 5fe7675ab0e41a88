"""A campaign's state for `epcap status` (docs/spec.md, command line): running (pid, host,
since), interrupted (signal, when), stopped_after a stage, or done; read from the lock and
events.jsonl, never from a running driver. Runs left, the stage and the ETA of a campaign no
driver runs are the plan minus what stands: the frozen runbook's plan with the standing runs
replayed (read only, as `epcap run --dry-run` and a resume see it), whatever selectors,
stage limits, signal or kill ended the last invocation. Also the campaigns under a results
root."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from harness.errors import BadInput
from harness.io.boundary.campaigns import campaign_record
from harness.io.lock import LOCK_NAME
from harness.pipeline.stages import STAGE_OF_PURPOSE
from harness.results.events import campaign_stats, read_events
from harness.results.layout import EVENTS_JSONL, REPORT_DIR, REPORT_FILE, RUNBOOK_YAML
from harness.vocab import Event, Stage

RUNNING, INTERRUPTED, STOPPED_AFTER, DONE = "running", "interrupted", "stopped_after", "done"
_HOLDER_MAX = 4096
REPORT_MD = Path(REPORT_DIR) / REPORT_FILE     # where `epcap run` builds a campaign's report


def lock_holder(root: Path) -> dict | None:
    """{pid, host, since, holder_unknown} of the driver holding the campaign lock (holder_note),
    or None when no one holds it. A shared, non-blocking probe of the lock the driver takes (harness/io/lock.py: the
    campaign directory, or the lock file where a directory cannot be locked); it never
    creates the lock file nor waits."""
    try:
        dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fd = os.open(root / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO
    except OSError:
        fd = None
    try:
        held = False
        for probe in (dir_fd, fd):
            if probe is None:
                continue
            try:
                fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                held = True
                break
            except OSError:
                continue
            fcntl.flock(probe, fcntl.LOCK_UN)
        if not held:
            return None
        return holder_note(fd)
    finally:
        os.close(dir_fd)
        if fd is not None:
            os.close(fd)


def holder_note(fd: int | None) -> dict[str, Any]:
    """{pid, host, since, holder_unknown} from the lock file's note (harness/io/lock.py
    writes it): each value only when it has its type; `holder_unknown` says in words why the
    holder cannot be named (the note missing, empty or damaged: it was deleted or replaced
    while the run holds the lock), None when it can."""
    def unknown(why: str) -> dict[str, Any]:
        return {"pid": None, "host": None, "since": None, "holder_unknown": why}
    if fd is None:
        return unknown(f"{LOCK_NAME} is missing")
    try:
        raw = os.pread(fd, _HOLDER_MAX, 0)
    except OSError as exc:
        return unknown(f"{LOCK_NAME} cannot be read ({exc.strerror})")
    if not raw.strip():
        return unknown(f"{LOCK_NAME} is empty")
    try:
        record = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        record = None
    pid = record.get("pid") if isinstance(record, dict) else None
    host = record.get("host") if isinstance(record, dict) else None
    since = record.get("since_utc") if isinstance(record, dict) else None
    if isinstance(pid, bool) or not isinstance(pid, int) or not isinstance(host, str) \
            or not isinstance(since, str):
        return unknown(f"{LOCK_NAME} does not hold a holder note (pid, host, since)")
    return {"pid": pid, "host": host[:255], "since": since[:64], "holder_unknown": None}


def utc(t: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC."""
    import time
    return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def campaign_state(root: Path, probe_lock: bool = True) -> dict[str, Any]:
    """The `status --json` document of one campaign directory (docs/spec.md#command-line keys, plus
    `signal`, `when`, `stopped` and `report_path`); `probe_lock=False` for the driver that holds
    the lock itself."""
    events = read_events(root / EVENTS_JSONL)
    stats = campaign_stats(root)
    start = next((e for e in events if e["ev"] == Event.CAMPAIGN_START), {})
    last_run = max((i for i, e in enumerate(events) if e["ev"] == Event.RUN_START), default=0)
    tail = events[last_run:]
    doc: dict[str, Any] = {
        "campaign": start.get("campaign") or root.name, "path": str(root), "state": None,
        "pid": None, "host": None, "since": None, "stage": stats["stage"],
        "runs_done": stats["runs_done"], "runs_left": stats["runs_left"],
        "eta_s": stats["eta_s"], "failures": stats["failures_by_class"],
        "signal": None, "when": None, "stopped": None, "report_path": None,
    }
    if any(e["ev"] == Event.REPORT for e in events):
        # the run builds the report in its own campaign directory: name this one's, not the
        # path recorded where the campaign ran (a copy or a moved campaign names its own)
        doc["report_path"] = str(root / REPORT_MD)
    holder = lock_holder(root) if probe_lock else None
    if holder is not None:
        return {**doc, "state": RUNNING, **holder, "pending": queued_now(tail)}
    plan = plan_left(root)
    if plan is not None:
        doc.update(plan)
    run = tail[0] if tail and tail[0]["ev"] == Event.RUN_START else {}
    doc.update(pid=run.get("pid"), host=run.get("host") or None, since=utc(run.get("t")))
    end = next((e for e in reversed(tail) if e["ev"] in (
        Event.CAMPAIGN_DONE, Event.CHECKPOINT, Event.CAMPAIGN_STOPPED, Event.STAGE_DONE)), None)
    if end is None:
        # no lock and no closing event: the driver died (SIGKILL, a lost node)
        return {**doc, "state": INTERRUPTED, "signal": "unknown (the driver died)",
                "when": utc(events[-1]["t"]) if events else None}
    if end["ev"] == Event.CAMPAIGN_DONE:
        return {**doc, "state": DONE, "when": utc(end["t"]), "runs_left": 0, "eta_s": 0.0,
                "stage": "done"}
    if end["ev"] == Event.CHECKPOINT:
        return {**doc, "state": INTERRUPTED, "signal": end.get("reason"),
                "when": utc(end["t"])}
    if end["ev"] == Event.CAMPAIGN_STOPPED:
        return {**doc, "state": STOPPED_AFTER, "stage": end.get("stage"),
                "when": utc(end["t"]), "stopped": {k: end.get(k) for k in (
                    "cell", "status", "log", "line_no", "line", "hint")}}
    if end.get("selection"):
        return {**doc, "state": STOPPED_AFTER, "stopped_after": "selection",
                "when": utc(end["t"])}
    return {**doc, "state": STOPPED_AFTER, "stopped_after": end.get("stage"),
            "stage": doc["stage"] if plan is not None else end.get("stage"),
            "when": utc(end["t"])}


def queued_now(events: list[dict]) -> list[dict[str, Any]]:
    """The cells whose job the running driver last saw waiting in the scheduler's queue:
    [{cell, job_id, reason, since, max_pending_s}] from the newest `cell_queued` of each cell that no later
    event ended (finished, abandoned, or left the queue)."""
    waiting: dict[str, dict[str, Any]] = {}
    for ev in events:
        cell = ev.get("cell")
        if ev["ev"] == Event.CELL_QUEUED and ev.get("reason"):
            waiting[cell] = {"cell": cell, "job_id": ev.get("job_id"), "reason": ev["reason"],
                             "since": utc(ev.get("t")),
                             "max_pending_s": ev.get("max_pending_s") or 0}
        elif ev["ev"] in (Event.CELL_QUEUED, Event.CELL_FINISH, Event.CELL_ABANDONED):
            waiting.pop(cell, None)
    return list(waiting.values())


def plan_left(root: Path) -> dict[str, Any] | None:
    """{runs_left, stage, eta_s} of the frozen runbook's plan minus the standing runs (None
    when the frozen runbook cannot be read: the events' own figures stand)."""
    from harness.campaign.dryrun import PlanFilter, standing_plan  # the dry run's replay
    from harness.runbook.load import load_runbook
    try:
        rb = load_runbook(root / RUNBOOK_YAML)
        camp = standing_plan(rb, root, PlanFilter())
        left = camp.runs_left()
    except (BadInput, OSError, ValueError, KeyError):
        return None
    stage = STAGE_OF_PURPOSE[left[0][2]].value if left else Stage.REPORT.value
    eta = camp.eta(left) if left else 0.0
    return {"runs_left": len(left), "stage": stage,
            "eta_s": None if eta is None else round(eta, 3)}


def campaigns_under(root: Path, depth: int = 2) -> list[Path]:
    """Campaign directories (harness/io/boundary/campaigns.py: a marker naming the
    directory, or an event log opening with campaign_start) at most `depth` levels under a results
    root, sorted by path."""
    found: list[Path] = []
    level = [root]
    for _ in range(depth):
        nxt = []
        for d in level:
            try:
                children = sorted(p for p in d.iterdir() if p.is_dir() and not p.is_symlink())
            except OSError:
                continue
            for child in children:          # recognised by the record epcap wrote there
                recorded = campaign_record(child, EVENTS_JSONL) is not None
                (found if recorded else nxt).append(child)
        level = nxt
    return sorted(found)
