"""`epcap run` and `epcap status`: load and check the runbook, then run, resume or plan the
campaign; preflight gates; the closing summary. See docs/campaign.md."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from harness.api.launcher import Launcher
from harness.campaign import store
from harness.campaign.decisions import Context, model_pipeline
from harness.campaign.driver import Campaign, Replay
from harness.campaign.dryrun import Selection, print_dry_run
from harness.campaign.preflight import (
    check_backend_commands,
    check_launcher_setup,
    provenance_fields,
)
from harness.campaign.progress import ProgressView, fmt_s
from harness.errors import BadInput, Findings, os_hint
from harness.grid import capacity as cap
from harness.health import probe
from harness.io.lock import CampaignLock
from harness.io.redact import redact_text
from harness.launch import make_launcher
from harness.launch.container import container_facts
from harness.results.events import (
    CampaignDone,
    CampaignStart,
    Checkpoint,
    EventLog,
    Health,
    ReportBuilt,
    RunStart,
    StageDone,
    campaign_stats,
)
from harness.results.facts import write_facts
from harness.results.layout import EVENTS_JSONL, PROVENANCE_TXT
from harness.results.provenance import capture_provenance, write_provenance
from harness.runbook.load import load_runbook
from harness.runbook.model import Runbook
from harness.vocab import Stage, StageMode

DEFAULT_RUNBOOK = "runbooks/local-cpu.yaml"


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived; the campaign checkpoints and exits 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _install_signals() -> dict:
    def handler(signum, _frame):
        raise Interrupted(signum)
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_signals(old: dict) -> None:
    for sig, h in old.items():
        signal.signal(sig, h)


def default_runbook() -> Path:
    """runbooks/local-cpu.yaml here, else the one shipped next to the harness package."""
    here = Path(DEFAULT_RUNBOOK)
    return here if here.is_file() else Path(__file__).resolve().parents[2] / DEFAULT_RUNBOOK


def check_planned_capacities(rb: Runbook) -> None:
    """Preflight gate: the measurement capacity is executable for every model's N."""
    for model in rb.models:
        n = rb.shape.uniform_tokens(model.topk)
        try:
            cap.check_executable(rb.capacity.measure, n, rb.capacity.pad_multiple)
        except BadInput as exc:
            raise BadInput(f"{model.name}: {exc}", path=str(rb.path),
                           field="capacity.measure") from exc


def health_gate(view: ProgressView, log: EventLog) -> None:
    """Preflight gate: the machine's health probe (no-gpu passes on a CPU machine)."""
    report = probe()
    log.write(Health(ok=report.ok, status=report.status, failures=list(report.failures)))
    if not report.ok:
        raise Findings("preflight: health probe failed: " + "; ".join(report.failures))
    view.line(f"preflight: health {report.status}")


def cli_run(runbook: str | None = None, results: str | None = None,
            launcher: str | None = None, dry_run: bool = False, fresh: bool = False,
            stages: tuple[str, ...] = (), until: str | None = None) -> int:
    """`epcap run`: load and check the runbook, then run or resume the campaign."""
    rb = load_runbook(runbook or default_runbook())
    check_planned_capacities(rb)
    check_backend_commands(rb)
    launcher_name = launcher or rb.launcher
    if not dry_run:
        check_launcher_setup(rb, launcher_name)
    root_dir = Path(results or "results")
    stages = tuple(stages or ())
    if until is not None and stages:
        raise BadInput("use --stage or --until, not both", field="--until")
    if dry_run:
        return print_dry_run(rb, store.choose_dir(root_dir, rb.campaign, fresh), launcher_name,
                             Selection(stages=stages, until=until))
    launch = make_launcher(launcher_name, rb)
    root = store.choose_dir(root_dir, rb.campaign, fresh)
    store.check_event_log(root, rb.campaign)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"cannot create the campaign directory: {os_hint(exc)}",
                       path=str(root)) from None
    # Held until this process ends (the OS drops it if the process dies): a second run on the
    # same directory exits 2 naming this one's pid and host.
    with CampaignLock(root):
        store.check_event_log(root, rb.campaign)    # again, now that no one else writes
        store.check_fingerprint(root, rb)
        command_line = ["epcap", *sys.argv[1:]]
        old = _install_signals()
        try:
            return run_campaign(rb, root, launch, stages, until, command_line)
        finally:
            _restore_signals(old)


def run_campaign(rb: Runbook, root: Path, launch: Launcher, stages: tuple[str, ...],
                 until: str | None, command_line: list[str]) -> int:
    """Create or resume `root` and drive the pipelines to the end (or the stop stage)."""
    view = ProgressView()
    new = not (root / EVENTS_JSONL).exists()
    ctx = Context(rb, stages, until)
    camp = Campaign(rb, root, launch, ctx, view, command_line)
    store.check_replay_inputs(rb, camp.ctx, root, camp.finished)   # before anything is written
    store.check_cells_present(root, camp.finished)
    root.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    if new:
        store.freeze_runbook(root, rb)
        camp.log.write(CampaignStart(campaign=rb.campaign, runbook=str(rb.path),
                                     **store.runbook_fingerprint(rb), command_line=command_line,
                                     launcher=launch.name, stage=Stage.PREFLIGHT))
    try:
        camp.log.write(RunStart(resume=not new, command_line=command_line,
                                stages=list(stages), until=until))
        camp.reap_stale()
        camp.write_tables(derived=False)
        return drive(camp, rb, root, view, new, t_start)
    except Interrupted as exc:
        for sig in (signal.SIGINT, signal.SIGTERM):     # a second signal must not cut cleanup
            signal.signal(sig, signal.SIG_IGN)
        camp.cancel_active(f"interrupted by {exc}")
        camp.reap_stale()                   # a cell caught between submit and its record
        camp.log.write(Checkpoint(reason=str(exc), runs_done=camp.done_runs))
        camp.write_tables()
        view.stop()
        view.line(f"interrupted ({exc}); checkpoint written; rerun the same command to resume")
        return 128 + exc.signum
    except Replay as exc:
        view.stop()
        raise BadInput(str(exc), field="--stage") from exc
    finally:
        view.stop()


def drive(camp: Campaign, rb: Runbook, root: Path, view: ProgressView, new: bool,
          t_start: float) -> int:
    """Preflight gates, canaries, the pipelines, the report; prints the banners."""
    if camp.ctx.stage_mode(Stage.PREFLIGHT) == StageMode.RUN:
        health_gate(view, camp.log)
    camp.provenance = capture_provenance(camp.command_line, dict(rb.repositories), rb.path)
    camp.provenance.update(container_facts(rb.container))
    camp.provenance.update(provenance_fields(rb))
    if new or not (root / PROVENANCE_TXT).exists():
        write_provenance(root / PROVENANCE_TXT, camp.provenance)
    write_facts(root, store.campaign_facts(
        rb, {b.name: camp.backend(b.name).implementation() for b in rb.backends}))
    left = camp.runs_left()
    word = "resuming" if not new else "starting"
    view.line(f"epcap: {word} campaign {rb.campaign} in {root}: {camp.done_runs} runs done, "
              f"{len(left)} runs left (at least), ETA {fmt_s(camp.eta(left))}")
    view.start(camp.done_runs, camp.done_runs + len(left))
    camp.run_canaries()
    camp.run_pipelines([model_pipeline(camp.ctx, m.name) for m in rb.models])
    camp.write_tables()
    finished = camp.ctx.until is None and not camp.ctx.stages
    # The end of the runs is logged before the report (runs_complete: the report can show
    # the ETA error); campaign_done only once the report exists, so a crash in between
    # leaves a campaign that the next run finishes.
    camp.log.write(StageDone(runs_done=camp.done_runs, runs_left=0, runs_complete=finished,
                             stage=Stage.TIME if finished else (camp.ctx.until
                                                                or camp.ctx.stages[-1])))
    if camp.ctx.stage_mode(Stage.REPORT) == StageMode.RUN:
        build_report(root, view, camp.log)
    if finished:
        camp.log.write(CampaignDone(runs_done=camp.done_runs, runs_left=0, stage="done"))
    view.stop()
    print_summary(root, view, time.monotonic() - t_start)
    return 0


def build_report(root: Path, view: ProgressView, log: EventLog) -> None:
    from harness.report import build_report as build  # lazy: matplotlib is slow to import
    out = build(root)
    log.write(ReportBuilt(path=str(out)))
    view.line(f"report: {out}")


def print_summary(root: Path, view: ProgressView, this_run_s: float) -> None:
    stats = campaign_stats(root)
    err = stats.get("eta_error")
    view.line(f"done: {stats['runs_done']} runs; wall span {fmt_s(stats['wall_span_s'])} "
              f"(this invocation {fmt_s(this_run_s)}), busy {fmt_s(stats['busy_s'])}; "
              f"ETA error (estimated/actual) {err if err is not None else 'n/a'}"
              f"; at 25/50/75% {stats['eta_error_at']}")
    if stats["failures_by_class"]:
        view.line(f"failures by class: {stats['failures_by_class']}")
    view.line(f"results: {root}")


def cli_status(results_dir: str) -> int:
    """`epcap status`: stage, runs done / left, failures by class, ETA."""
    root = Path(results_dir)
    if not (root / EVENTS_JSONL).is_file():
        raise BadInput(f"not a campaign directory (no {EVENTS_JSONL})", path=str(root))
    stats = campaign_stats(root)
    print(f"campaign: {root}")
    print(f"stage: {stats['stage']}")
    left = stats["runs_left"]
    print(f"runs: {stats['runs_done']} done, {left if left is not None else 'unknown'} left")
    print(f"failures by class: {stats['failures_by_class'] or 'none'}")
    print(f"ETA: {fmt_s(stats['eta_s']) if stats['eta_s'] is not None else 'unknown'}")
    print(f"wall span {fmt_s(stats['wall_span_s'])}, busy {fmt_s(stats['busy_s'])}")
    if stats["stopped"]:
        print(redact_text(stopped_line(stats["stopped"])))
    return 0


def stopped_line(ev: dict) -> str:
    """'stopped: <status> in <cell> (<log>:<line>: <text>)', leaving out what was not
    recorded (a canary that crashed before writing a log has no log line)."""
    where = ":".join(str(ev[k]) for k in ("log", "line_no") if ev.get(k) is not None)
    detail = ": ".join(p for p in (where, str(ev.get("line") or "")) if p)
    return (f"stopped: {ev.get('status') or 'unknown status'} in {ev.get('cell') or 'unknown cell'}"
            + (f" ({detail})" if detail else ""))
