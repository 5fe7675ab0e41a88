"""The timeline of one cell: its failure events placed by time and source, and the first one.

Pure. The judge (harness/taxonomy/judge.py) reads every line once; what it keeps of them
becomes events here: each rank's fatal signatures, the node's and the launcher's own lines,
the structural records of signatures.yaml `records:` (a launcher's exit record, the kernel's
OOM killer, a driver Xid, a message naming the failed rank) and each rank's progress. This
module orders them by the most exact evidence there is and says which it used, then decides
the run by its first abnormal event (docs/taxonomy.md#the-timeline-decides):

1. the first failed rank: the rank a message names; else sub-second timestamps; else the
   launcher's first exit record; else line order of one merged log; else the rank that
   stopped progressing first; else 1-second timestamps (ties by file order);
2. its own signature decides; a hardware or driver Xid on its node makes it infra; with no
   signature, its exit record decides by structure (signalled: crash; killed with the OOM
   killer naming its pid: does_not_fit); nothing known: `unclassified`, lines quoted;
3. communication and teardown symptoms of the other ranks after it are fallout by place;
   so are those of every rank after the launcher's time-limit record (`fallout_after_limit`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.taxonomy.signatures import Layout, RecordSpec
from harness.vocab import Status

UNCLASSIFIED = Status.UNCLASSIFIED
NODE_FILE = re.compile(r"^(node|health|rank)[_-]?(\d+)\.")
# strsignal() texts srun prints, and the negative exit codes torchrun's agent reports
SHELL_SIGNAL_BASE = 128   # a shell reports a child ended by signal n as exit 128 + n
SIGNALS = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
           "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL",
           "Killed": "SIGKILL", "Terminated": "SIGTERM", "User defined signal 1": "SIGUSR1",
           "User defined signal 2": "SIGUSR2", "Interrupt": "SIGINT", "Hangup": "SIGHUP"}
SIGNAL_NUMBERS = {11: "SIGSEGV", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 4: "SIGILL",
                  9: "SIGKILL", 15: "SIGTERM", 10: "SIGUSR1", 12: "SIGUSR2", 2: "SIGINT",
                  1: "SIGHUP"}
# a program that dies of one of these crashed by itself (a kernel fault, an abort)
CRASH_SIGNALS = frozenset({"SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL"})
# signals a program never sends itself: a task ended by one of these was stopped from outside
# (scancel --signal, a preemption's warning signal, a user's ^C). SIGKILL is not among them:
# launchers kill a failed job's survivors with it (srun --kill-on-bad-exit).
OUTSIDE_SIGNALS = frozenset({"SIGTERM", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGHUP"})
# a communication error that says the other end went away ("Connection reset by peer",
# gloo's "Connection closed by peer"): the consequence of a peer's end, never a cause
PEER_WENT_AWAY = re.compile(r"\b(?:reset|closed) by (?:remote )?peer\b", re.IGNORECASE)
# a kernel fault a process takes by itself; SIGABRT is not among them (std::terminate after
# a peer's communication error aborts the survivor too)
KERNEL_FAULTS = CRASH_SIGNALS - {"SIGABRT"}
HARDWARE_XID = frozenset({"hardware", "driver"})
MAX_EVENTS = 4000           # records kept per cell (the cause comes first)
# a rank's communication and teardown symptoms: fallout when they follow the time limit
TEARDOWN_CLASSES = frozenset({Status.INFRA, Status.TIMEOUT})
SCHEDULER_MESSAGES = "slurm-step-messages"     # signatures.yaml: slurmstepd's own lines


@dataclass(frozen=True)
class Event:
    """One placed line: where it stood, who printed it, what it says."""

    path: str
    line_no: int
    file_index: int
    text: str
    kind: str                   # signature | exit | oom_kill | xid | names_rank | launcher_kill
    source: str                 # rank | node | launcher
    rank: str | None = None
    node: int | None = None
    ts: float | None = None     # seconds of the day (month and day folded in)
    exact: bool = False         # the stamp has sub-second digits
    cls: str | None = None      # a signature's class
    fallout: bool = False
    facts: dict = field(default_factory=dict)  # a record's named groups (code, signal, pid ...)
    rule: str = ""              # the record or signature source id

    def order(self) -> tuple:
        """File order: which file was read first, then the line."""
        return (self.file_index, self.line_no)

    def where(self) -> str:
        """path:line of the event."""
        return f"{self.path}:{self.line_no}"


def seconds(ts: tuple | None) -> float | None:
    """A (month, day, seconds) stamp as one comparable number."""
    if ts is None:
        return None
    month, day, sec = ts
    return ((month * 31) + day) * 86400.0 + sec


def node_of_file(path: str, layout: Layout) -> int | None:
    """The node a file belongs to: node<N>.log, health<N>.log, or rank<N>.log of node files."""
    found = NODE_FILE.match(Path(path).name)
    if not found:
        return None
    if found.group(1) == "rank" and layout.files != "node":
        return None
    return int(found.group(2))


def node_of_rank(rank: str | None, layout: Layout) -> int | None:
    """The node of a global rank when the cell states the GPUs per node."""
    if rank is None or not rank.isdigit():
        return None
    if layout.gpus_per_node > 0:
        return int(rank) // layout.gpus_per_node
    return 0 if layout.nodes == 1 else None


def record_event(spec: RecordSpec, found: re.Match, *, path: str, line_no: int,
                 file_index: int, text: str, layout: Layout, ts: tuple | None,
                 exact: bool, rank: str | None) -> Event:
    """The event of a structural record line (its rank from the record's own facts)."""
    facts = {k: v for k, v in found.groupdict().items() if v is not None}
    node = node_of_file(path, layout)
    who = rank
    if spec.kind == "exit":
        if "task" in facts:         # srun: one task per rank, or a node's task
            task = int(facts["task"])
            who = str(task) if layout.files != "node" else None
            node = task if layout.files == "node" else node
        elif "local" in facts:      # torchrun's agent: local rank of this file's node
            local = int(facts["local"])
            per = layout.gpus_per_node or layout.per_file
            if node is None and layout.nodes == 1:
                node = 0
            # the global rank only where the node and its ranks are known
            who = str(node * per + local) if node is not None and per else None
        signal = SIGNALS.get(facts.get("signal", ""))
        code = int(facts["code"]) if facts.get("code", "").lstrip("-").isdigit() else None
        if signal is None and code is not None and code < 0:
            signal = SIGNAL_NUMBERS.get(-code, f"signal {-code}")
        if signal is None and code is not None and code > SHELL_SIGNAL_BASE:
            signal = SIGNAL_NUMBERS.get(code - SHELL_SIGNAL_BASE)
            facts["by_code"] = "128+n"
        facts.update(signal=signal, code=code)
    elif spec.kind in ("oom_kill", "xid"):
        who = None
    source = "launcher" if spec.kind == "exit" else ("node" if who is None else "rank")
    return Event(path, line_no, file_index, text, spec.kind, source, who, node,
                 seconds(ts), exact, facts=facts, rule=spec.id)


@dataclass(frozen=True)
class First:
    """The first failed rank and the evidence that ordered it."""

    rank: str | None
    event: Event | None
    evidence: str


def _primary(candidates: Iterable[Event]) -> dict[str, Event]:
    """Each rank's earliest failure of its own (non-fallout signature)."""
    out: dict[str, Event] = {}
    for ev in sorted(candidates, key=Event.order):
        if ev.rank is not None and not ev.fallout and ev.rank not in out:
            out[ev.rank] = ev
    return out


def first_failure(signatures: Iterable[Event], records: Iterable[Event],
                  progress: dict[str, int], *, hung: bool = False) -> First:
    """The first failed rank by the most exact evidence (module docstring, step 1)."""
    records = list(records)
    named = [e for e in records if e.kind == "names_rank"]
    if named:
        ranks = sorted({int(r) for e in named for r in e.facts["ranks"].split(",")})
        return First(str(ranks[0]), named[0],
                     f"the rank the message names ({named[0].rule} at {named[0].where()})")
    primary = _primary(signatures)
    firsts = list(primary.values())
    if len(firsts) == 1:
        return First(firsts[0].rank, firsts[0], "the only rank with a failure of its own")
    if firsts and all(e.exact for e in firsts):
        ev = min(firsts, key=lambda e: (e.ts, e.order()))
        return First(ev.rank, ev, "sub-second timestamps")
    exits = [e for e in records if e.kind == "exit" and e.rank is not None
             and (e.facts.get("signal") or e.facts.get("code") not in (0, None))]
    if exits:
        ev = min(exits, key=Event.order)
        return First(ev.rank, ev, f"the launcher's first exit record ({ev.where()})")
    if firsts and len({e.path for e in firsts}) == 1:
        ev = min(firsts, key=Event.order)
        return First(ev.rank, ev, "line order of one merged log")
    if (hung or not firsts) and len(progress) > 1:
        low = min(progress.values())
        slow = [r for r, n in progress.items() if n == low]
        if len(slow) == 1 and low < max(progress.values()) - 1:   # one step: in-flight skew
            return First(slow[0], None, f"stopped progressing first (iteration {low}; the "
                                        f"others reached {max(progress.values())})")
    if firsts and all(e.ts is not None for e in firsts):
        ev = min(firsts, key=lambda e: (e.ts, e.order()))
        return First(ev.rank, ev, "1-second timestamps (ties by file order)")
    return First(None, None, "no exact evidence orders the ranks")


@dataclass(frozen=True)
class Decision:
    """What the timeline decided: a class (or None: leave it to the signature rules), the
    deciding event, the rule that said so, and the lines an unclassified verdict quotes."""

    cls: str | None
    event: Event | None
    rule: str
    quoted: tuple[Event, ...] = ()


def _xid_on(first: First, records: list[Event], layout: Layout, xid: dict) -> Event | None:
    """A hardware or driver Xid on the first failed rank's node (any node when unknown)."""
    node = node_of_rank(first.rank, layout)
    for ev in records:
        if ev.kind != "xid":
            continue
        meaning = (xid.get(int(ev.facts.get("xid", -1))) or {}).get("meaning")
        if meaning in HARDWARE_XID and (ev.node is None or node is None or ev.node == node):
            return ev
    return None


def decide(first: First, own: Event | None, records: Iterable[Event], *, layout: Layout,
           xid: dict, node_failure: Event | None, hung: bool = False) -> Decision:
    """The class of the run from its first failed rank (module docstring, step 2). `own`:
    that rank's fatal signature; `node_failure`: a launcher's or node's own fatal signature
    (it decides instead: the failure was no rank's); `hung`: the launcher ended the run at
    its own timeout (its kills are then no outside signal)."""
    records = list(records)
    if first.rank is None:
        return Decision(None, None, "no first failed rank")
    hw = _xid_on(first, records, layout, xid)
    if hw is not None:
        meaning = xid[int(hw.facts["xid"])]
        return Decision(Status.INFRA, hw, f"Xid {hw.facts['xid']} ({meaning['text']}: "
                                     f"{meaning['meaning']}, NVIDIA Xid catalogue) on the "
                                     f"node of the first failed rank {first.rank}")
    if own is not None and not own.fallout:
        return Decision(own.cls, own, f"the first failed rank's own signature ({own.rule})")
    if node_failure is not None:
        return Decision(None, None, "a launcher's or node's own failure came first")
    exits = [e for e in records if e.kind == "exit" and e.rank == first.rank]
    ex = min(exits, key=Event.order) if exits else None
    signal = ex.facts.get("signal") if ex else None
    if signal in CRASH_SIGNALS:
        return Decision(Status.CRASH, ex, f"signalled first: {signal} (launcher record)")
    if signal in OUTSIDE_SIGNALS and not hung and ex is first_exit(records):
        # the first rank the launcher saw end was stopped by a signal a program never sends
        # itself, before any failure of its own: a stop from outside, never a crash
        return Decision(Status.CANCELLED, ex, f"stopped from outside: {signal} ended rank "
                                              f"{first.rank} first (launcher record), before "
                                              f"any failure of its own")
    if signal == "SIGKILL":
        pid = ex.facts.get("pid")
        kills = [e for e in records if e.kind == "oom_kill"
                 and (pid is None or e.facts.get("pid") == pid)]
        if kills and pid is not None:
            return Decision(Status.DOES_NOT_FIT, kills[0], f"the kernel's OOM killer killed pid "
                                                      f"{pid}, the first failed rank's process")
    if ex is None and own is None:
        return Decision(None, None, "the first failed rank shows neither signature nor exit")
    quoted = tuple(e for e in (ex, own) if e is not None)
    return Decision(UNCLASSIFIED, ex or own, "no signature and no structural evidence says "
                                             f"why rank {first.rank} failed", quoted)


def outside_signal(records: Iterable[Event]) -> Event | None:
    """The first exit record when every task that ended abnormally was ended by an outside
    signal (OUTSIDE_SIGNALS): no task exited with a code of its own or crashed, so the job
    was stopped from outside (a scancel --signal, a preemption), not by a failure. None
    when no record shows such a signal or any abnormal end has another cause."""
    ended = [e for e in records if e.kind == "exit"
             and (e.facts.get("signal") or e.facts.get("code") not in (0, None))]
    if not ended or any(e.facts.get("signal") not in OUTSIDE_SIGNALS for e in ended):
        return None
    return min(ended, key=Event.order)


def after(first: Event, later: Event) -> bool:
    """Whether `later` stands after `first` in the timeline: by line order within one file,
    else by both stamps (a tie is not after); False where nothing orders them."""
    if first.path == later.path:
        return later.order() > first.order()
    return first.ts is not None and later.ts is not None and later.ts > first.ts


def fallout_after_limit(events: Iterable[Event], timed_out: bool = False
                        ) -> set[tuple[int, int]]:
    """The orders (Event.order) of the ranks' own communication and teardown signatures
    (infra, timeout) that are fallout of the scheduler's time limit: its record is a timeout
    signature no rank printed, or Slurm's own step message wherever it was copied (e.g.
    slurmstepd's `DUE TO TIME LIMIT` inside a rank's log). What ranks print after it is
    fallout by place; when the launcher itself says `timeout` (`timed_out`), the scheduler
    ended the job and every rank's teardown lines (InfiniBand flush errors, NCCL aborts) are
    its fallout unless they stand provably before its record (same file, earlier line; or
    earlier stamps): who ended it decides, not the unordered noise of the teardown."""
    events = list(events)
    limits = [e for e in events if e.kind == "signature" and e.cls == Status.TIMEOUT
              and not e.fallout and (e.rank is None or e.rule == SCHEDULER_MESSAGES)]
    marks = {e.order() for e in limits}
    return {e.order() for e in events if e.kind == "signature" and e.rank is not None
            and e.cls in TEARDOWN_CLASSES and not e.fallout and e.order() not in marks
            and limits and (any(after(limit, e) for limit in limits) or (
                timed_out and not any(after(e, limit) for limit in limits)))}


def _abnormal(ev: Event) -> bool:
    """Whether an exit record says the task ended abnormally (a signal or a non-zero code)."""
    return ev.kind == "exit" and bool(ev.facts.get("signal") or
                                      ev.facts.get("code") not in (0, None))


# launchers whose exit records stand in the order the ends were seen: epcap's local launcher
# (harness/launch/local.py record_exits) and torchrun's agent (it logs one record, the
# failure with the smallest timestamp: pytorch/pytorch
# torch/distributed/elastic/multiprocessing/api.py `_poll`, `first_failure = min(...,
# key=lambda f: f.timestamp)`, read in the installed 2.13.0+cpu, git cf30153c4c131c81).
# srun's task lines are grouped (one line per exit message, tasks that ended alike), so
# its first line alone is not the first death; but srun prints a message's line and then, on
# the first abnormal exit, kills the step (`Terminating StepId=`, record srun-step-terminate;
# SchedMD/slurm src/srun/launch.c _task_finish -> _step_signal, under one lock): the task
# line right before that kill is the end that made srun act, and every end after it is
# srun's own kill (SRUN_EXIT, srun_trigger).
ORDERED_EXITS = frozenset({"local-launcher-exit", "elastic-agent-exit"})
SRUN_EXIT = "srun-task-exit"
LAUNCHER_KILL = "launcher_kill"


def srun_trigger(records: Iterable[Event]) -> list[Event]:
    """Per file, the srun task record right before srun's first kill of the step (its
    `Terminating StepId=` line) when it is abnormal and names one task: the first rank srun
    saw end abnormally (the lines after the kill are srun's own doing)."""
    records = list(records)
    out = []
    for path in {e.path for e in records if e.kind == LAUNCHER_KILL}:
        kill = min((e for e in records if e.kind == LAUNCHER_KILL and e.path == path),
                   key=Event.order)
        before = [e for e in records if e.rule == SRUN_EXIT and e.path == path
                  and e.order() < kill.order()]
        last = max(before, key=Event.order, default=None)
        if last is not None and _abnormal(last) and last.rank is not None \
                and "more" not in last.facts:
            out.append(last)
    return out


def first_exit(records: Iterable[Event]) -> Event | None:
    """The first record of a rank that ended abnormally, from a launcher that records ends
    in the order it saw them (ORDERED_EXITS), or srun's end that made it kill the step
    (srun_trigger): the first rank the launcher saw die."""
    records = list(records)
    return min([*(e for e in records if e.rank is not None and _abnormal(e)
                  and e.rule in ORDERED_EXITS), *srun_trigger(records)],
               key=Event.order, default=None)


def fallout_of_a_faulted_peer(events: Iterable[Event], records: Iterable[Event]
                              ) -> set[tuple[int, int]]:
    """The orders of the ranks' communication signatures (infra: a connection reset, a
    closed pair) that a peer's death explains: the launcher recorded another rank killed by
    a kernel fault (KERNEL_FAULTS), or the first rank it saw end died of a signal (any: a
    SIGKILL or SIGTERM from outside, an abort), and that rank shows no communication
    failure of its own. A survivor's `Connection reset by peer` is then the consequence, not
    the cause: the relation (who the launcher saw die first, by what), not the pattern's
    place in a list, makes it fallout."""
    events, records = list(events), list(records)
    faulted = {e.rank for e in records if e.kind == "exit" and e.rank is not None
               and e.facts.get("signal") in KERNEL_FAULTS}
    first = first_exit(records)
    if first is not None and first.facts.get("signal"):
        faulted.add(first.rank)
    # a rank with a failure of its own that no peer explains (an allocation failure, an
    # assert, a crash): a line that says its peer went away is that failure's consequence
    caused = {e.rank for e in events if e.kind == "signature" and e.rank is not None
              and not e.fallout and e.cls not in TEARDOWN_CLASSES}
    by_peer = {e.order() for e in events if e.kind == "signature" and e.rank is not None
               and e.cls == Status.INFRA and not e.fallout and caused - {e.rank}
               and PEER_WENT_AWAY.search(e.text)}
    own_comm = {e.rank for e in events if e.kind == "signature" and e.cls == Status.INFRA
                and not e.fallout}
    causes = faulted - own_comm
    return by_peer | {e.order() for e in events if e.kind == "signature" and e.rank is not None
                      and e.cls == Status.INFRA and not e.fallout and e.rank not in faulted
                      and causes - {e.rank}}


# a rank that waited for a peer in a collective and gave up: gloo's unbound buffer timeout,
# NCCL's watchdog (signatures.yaml; both are fallout of whoever stopped first)
HANG_SOURCES = frozenset({"gloo-unbound-buffer-timeout", "pytorch-processgroupnccl-watchdog"})
OP_TYPE = re.compile(r"OpType=(\w+)")


@dataclass(frozen=True)
class Hang:
    """A communication hang: the ranks that never reported, and the timeouts of the rest."""

    silent: tuple[str, ...]
    timeouts: tuple[Event, ...]


def rank_key(rank: str) -> tuple:
    """Sort key of a rank label: numeric ranks by number, others ("0:7") after them."""
    return (0, int(rank), "") if rank.isdigit() else (1, 0, rank)


def communication_hang(events: Iterable[Event], records: Iterable[Event],
                       progress: dict[str, int], cuts: Iterable[Event] = ()) -> Hang | None:
    """When every signature any rank printed is a collective timeout (HANG_SOURCES) and some
    ranks the launcher ran printed none, no rank has a cause of its own: the ranks that never
    reported hung the collective (first failed: the lowest of them). None otherwise, when a
    silent rank ended abnormally before any reporting rank (its death, not a hang), or when
    a silent rank's log ends in a cut line (it was saying something: `cut_first` decides)."""
    sigs = [e for e in events if e.kind == "signature"]
    if not sigs or any(e.rule not in HANG_SOURCES or e.rank is None for e in sigs):
        return None
    records = list(records)
    reported = {e.rank for e in sigs}
    known = {e.rank for e in records if e.kind == "exit" and e.rank is not None} | set(progress)
    silent = sorted(known - reported, key=rank_key)
    if not silent or {c.rank for c in cuts} & set(silent):
        return None
    ended = [e for e in records if e.rank is not None and _abnormal(e)]
    first_reported = min((e.order() for e in ended if e.rank in reported), default=None)
    for ev in ended:
        if ev.rank in silent and (first_reported is None or ev.order() < first_reported):
            return None
    return Hang(tuple(silent), tuple(sorted(sigs, key=Event.order)))


def cut_first(events: Iterable[Event], cuts: Iterable[Event]) -> Event | None:
    """A rank's cut last line (kind `cut`: its log ends mid-line, before any signature's
    stable prefix) when it is the only abnormal event of its own: every signature a rank
    printed is fallout (so another rank failed first), none is a node's or launcher's own,
    and the cut rank printed none. That rank failed first, and nothing says why."""
    events = [e for e in events if e.kind == "signature"]
    if not events or any(not e.fallout for e in events):
        return None
    signed = {e.rank for e in events}
    silent = [c for c in cuts if c.rank is not None and c.rank not in signed]
    return silent[0] if len(silent) == 1 else None


def explain(events: Iterable[Event], decided: Event | None, *, before: int = 5,
            after: int = 8) -> list[str]:
    """The timeline around the deciding event, one line each (for `classify --explain`)."""
    ordered = sorted(events, key=lambda e: (e.ts is None, e.ts or 0.0, e.order()))
    if decided is None:
        window = ordered[:before + after]
    else:
        at = next((i for i, e in enumerate(ordered) if e.order() == decided.order()), 0)
        window = ordered[max(0, at - before):at + after]
    out = []
    for ev in window:
        mark = ">>" if decided is not None and ev.order() == decided.order() else "  "
        who = f"rank {ev.rank}" if ev.rank is not None else (
            f"node {ev.node}" if ev.node is not None else ev.source)
        what = ev.cls or ev.kind
        if ev.kind == "survived":
            what += " (survived: its rank or node went on)"
        elif ev.fallout:
            what += " (fallout)"
        out.append(f"{mark} {ev.where()} [{who}] {what}: {ev.text[:160]}")
    return out
