"""`epcap run` and `epcap status`: load and check the runbook, then run, resume or plan the
campaign; preflight gates; the closing summary. See docs/campaign.md."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from harness.api.launcher import Launcher
from harness.campaign import store
from harness.campaign.driver import Campaign, Replay
from harness.campaign.dryrun import PlanFilter, estimate_band, estimate_source, print_dry_run
from harness.campaign.ladder import run_ladder
from harness.campaign.preflight import (
    check_backend_commands,
    check_container_mounts,
    check_launcher_setup,
    check_submission,
    provenance_fields,
)
from harness.campaign.progress import ProgressView, fmt_s
from harness.campaign.state import campaign_state, campaigns_under
from harness.errors import BadInput, EpcapError, Findings, harness_failure, os_hint
from harness.grid import capacity as cap
from harness.health import probe
from harness.io.atomic import sweep_temps
from harness.io.boundary.campaigns import records_under
from harness.io.lock import CampaignLock
from harness.io.redact import redact_text
from harness.launch import make_launcher
from harness.launch.container import container_facts
from harness.pipeline.decisions import Context, model_pipeline
from harness.pipeline.version import ANALYSIS_VERSION
from harness.results.events import (
    CampaignDone,
    CampaignStart,
    Checkpoint,
    EventLog,
    Health,
    ReportBuilt,
    RunbookRevised,
    RunStart,
    StageDone,
    campaign_stats,
    read_events,
    standing_finishes,
)
from harness.results.facts import write_facts
from harness.results.layout import EVENTS_JSONL, PROVENANCE_TXT
from harness.results.provenance import capture_provenance, write_provenance
from harness.runbook.load import default_runbook, load_runbook
from harness.runbook.model import Runbook
from harness.vocab import FAILURE_CLASSES, Purpose, Stage, StageMode, Status

DRIVER_LOG = "driver.log"       # the driver's lines once its stdout's reader is gone
DRIVER_ERROR = "harness-error.txt"  # the traceback of the driver's own failure (issue 41)


class Interrupted(BaseException):
    """SIGINT/SIGTERM arrived; the campaign checkpoints and exits 128 + signum. A
    BaseException, like KeyboardInterrupt: no `except Exception` (a harness failure's
    net, a probe's fallback) may take a user's interrupt for a failure and carry on."""

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


LiveFactory = Callable[[Path, str, Callable[[str], None]], Callable[[str], None]]


def cli_run(runbook: str | None = None, results: str | None = None,
            launcher: str | None = None, dry_run: bool = False, fresh: bool = False,
            stages: tuple[str, ...] = (), until: str | None = None,
            models: tuple[str, ...] = (), backends: tuple[str, ...] = (),
            retry: str | None = None, test_only: bool = True,
            history: tuple[str, ...] = (), publish: str | None = None,
            live_publisher: LiveFactory | None = None, reuse: Launcher | None = None) -> int:
    """`epcap run`: load and check the runbook, then run or resume the campaign
    (`test_only=False`: a dry run does not ask Slurm whether it accepts the jobs). With
    `publish` (else the runbook's `publish.repo` under `publish.live: true`) each finished
    stage is committed as it completes through `live_publisher(root, repo, say)` (made by
    harness.cli: the campaign does not import the publisher), which returns the hook.
    `reuse`: a launcher of the same name that may serve this campaign too (`shared`: a
    ladder step runs on its parent's, so the fork servers import torch and megatron-core once
    for the whole command); a launcher made here is closed when the command is done."""
    roots = tuple(Path(h) for h in history)
    for h in roots:
        if not h.is_dir():
            raise BadInput("not a directory (a results root, or a campaign directory)",
                           path=str(h), field="--history")
    rb = load_runbook(runbook or default_runbook())
    live_repo = publish or (rb.publish.repo if rb.publish.live else None)
    select = Selectors(tuple(models), tuple(backends), parse_retry(retry))
    check_selection(rb, select)
    check_planned_capacities(rb)
    check_backend_commands(rb)
    launcher_name = launcher or rb.launcher
    if not dry_run:                 # the dry run warns instead (it shows the plan as is)
        check_container_mounts(rb, Path(results or "results"))
        check_launcher_setup(rb, launcher_name)
    root_dir = Path(results or "results")
    stages = tuple(stages or ())
    if until is not None and stages:
        raise BadInput("use --stage or --until, not both", field="--until")
    if dry_run:
        return print_dry_run(rb, store.choose_dir(root_dir, rb.campaign, fresh), launcher_name,
                             PlanFilter(stages=stages, until=until, models=select.models,
                                        backends=select.backends), roots,
                             test_only=test_only)
    shared = reuse is not None and reuse.shared and reuse.name == launcher_name
    launch = reuse if shared else make_launcher(launcher_name, rb)
    try:
        return run_with(rb, root_dir, launch, fresh, stages, until, select, roots, live_repo,
                        live_publisher, test_only)
    finally:
        if launch is not reuse:
            launch.close()


def run_with(rb: Runbook, root_dir: Path, launch: Launcher, fresh: bool,
             stages: tuple[str, ...], until: str | None, select: Selectors,
             roots: tuple[Path, ...], live_repo: str | None,
             live_publisher: LiveFactory | None, test_only: bool) -> int:
    """`epcap run` past its checks, on `launch`: the campaign, then its ladder's steps (on
    the same launcher when it is `shared`)."""
    root = store.choose_dir(root_dir, rb.campaign, fresh)
    store.check_event_log(root, rb.campaign)
    check_submission(rb, launch, root.resolve())
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"cannot create the campaign directory: {os_hint(exc)}",
                       path=str(root)) from None
    # Held until this process ends (the OS drops it if the process dies): a second run on the
    # same directory exits 2 naming this one's pid and host.
    with CampaignLock(root):
        store.check_event_log(root, rb.campaign)    # again, now that no one else writes
        store.mark_campaign(root, rb.campaign)      # how the next run recognises it
        sweep_temps(root)           # temp files of a rewrite killed mid-way (no writer now)
        command_line = ["epcap", *sys.argv[1:]]
        old = _install_signals()
        try:
            try:
                code = run_campaign(rb, root, launch, stages, until, command_line, select,
                                    roots, live_repo, live_publisher)
            finally:
                _restore_signals(old)
        except Interrupted as exc:      # before the campaign's own handler was reached
            print(f"interrupted ({exc}) before the campaign started; rerun the same "
                  "command to resume", flush=True)
            return 128 + exc.signum
    if code != 0 or not rb.ladder_sigmas:
        return code
    if stages or until or select.models or select.backends:
        print("ladder: not run (a --stage/--until/--model/--backend run; run the whole "
              "campaign for it)")
        return code
    return run_ladder(rb, root_dir, lambda path: cli_run(
        runbook=str(path), results=str(root_dir), launcher=launch.name, fresh=fresh,
        test_only=test_only, reuse=launch),
        lambda results, name: store.choose_dir(results, name, False))


def run_campaign(rb: Runbook, root: Path, launch: Launcher, stages: tuple[str, ...],
                 until: str | None, command_line: list[str],
                 select: Selectors | None = None, history: tuple[Path, ...] = (),
                 live_repo: str | None = None, live_publisher: LiveFactory | None = None) -> int:
    """Create or resume `root` and drive the pipelines to the end (or the stop stage); with
    `live_repo` each finished stage is published as it completes (`live_publisher`)."""
    select = select or Selectors()
    view = ProgressView()
    view.fallback = root / DRIVER_LOG       # where lines go if stdout's reader leaves
    new = not (root / EVENTS_JSONL).exists()
    ctx = Context(rb, stages, until, select.models, select.backends)
    camp = Campaign(rb, root, launch, ctx, view, command_line, history)
    if live_repo and live_publisher is not None:
        camp.on_publish = live_publisher(root, live_repo, view.line)
    rev = None if new else store.revision(root, rb)     # BadInput before anything is written
    if not new and finished_already(camp, root, rev, select, view):
        return exit_status(root, view)
    if rev is None or not rev[1]:
        store.check_replay_inputs(rb, camp.ctx, root, camp.finished)
        store.check_cells_present(root, camp.finished)
    root.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    if new:
        store.freeze_runbook(root, rb)
        camp.log.write(CampaignStart(campaign=rb.campaign, runbook=str(rb.path),
                                     **store.runbook_fingerprint(rb), command_line=command_line,
                                     launcher=launch.name, stage=Stage.PREFLIGHT,
                                     result_fields=store.result_fields(rb)))
    try:
        camp.invocation = apply_revision_and_retry(camp, rb, root, view, rev, select)
        left = camp.runs_left()
        eta = camp.eta(left)
        camp.first_eta = None if eta is None else eta + camp.startup_s
        camp.log.write(RunStart(resume=not new, command_line=command_line,
                                stages=list(stages), until=until, models=list(select.models),
                                backends=list(select.backends), retry=list(select.retry),
                                pid=os.getpid(), host=socket.gethostname(),
                                eta_s=None if camp.first_eta is None
                                else round(camp.first_eta, 3), runs_left=len(left),
                                eta_report_s=None if eta is None else
                                round(camp.report_eta(camp.done_runs + len(left)), 3),
                                infra_retries=rb.limits.infra_retries,
                                unclassified_retries=rb.limits.unclassified.retries))
        camp.reap_stale()
        camp.write_tables(derived=False)
        return drive(camp, rb, root, view, new, t_start)
    except Interrupted as exc:
        for sig in (signal.SIGINT, signal.SIGTERM):     # a second signal must not cut cleanup
            signal.signal(sig, signal.SIG_IGN)
        camp.cancel_active(f"interrupted by {exc}")
        camp.reap_stale(adopt=False)        # asked to stop: earlier drivers' jobs too
        camp.log.write(Checkpoint(reason=str(exc), runs_done=camp.done_runs))
        camp.write_tables()
        view.stop()
        view.line(f"interrupted ({exc}); checkpoint written; rerun the same command to resume")
        return 128 + exc.signum
    except Replay as exc:
        view.stop()
        raise BadInput(str(exc), field="--stage") from exc
    except (EpcapError, OSError, UnicodeError, RecursionError, OverflowError, MemoryError):
        raise                           # harness.cli maps these to one line (a full disk...)
    except Exception as exc:            # noqa: BLE001 - the driver's own failure: never a traceback
        view.stop()
        try:                            # nothing of a run in flight outlives the driver
            camp.cancel_active(f"harness failure: {type(exc).__name__}")
        except Exception:               # noqa: BLE001, S110 - the first failure is the one to name
            pass
        raise harness_failure(exc, root, DRIVER_ERROR, "; the results recorded so far are "
                              "intact: fix it, then rerun the same command to resume") from exc
    finally:
        camp.close_groups()     # per-stage allocations end after their running step
        view.stop()


@dataclasses.dataclass(frozen=True)
class Selectors:
    """`--model`, `--backend` and `--retry` of one invocation (empty: no restriction)."""

    models: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    retry: tuple[str, ...] = ()


def parse_retry(text: str | None) -> tuple[str, ...]:
    """`--retry crash,timeout` as classes of the failure taxonomy; BadInput otherwise."""
    if not text:
        return ()
    classes = tuple(dict.fromkeys(c.strip() for c in text.split(",") if c.strip()))
    bad = [c for c in classes if c not in FAILURE_CLASSES]
    if bad or not classes:
        raise BadInput(f"unknown failure class {', '.join(bad) or repr(text)}; one or more "
                       f"of {', '.join(FAILURE_CLASSES)}, comma-separated", field="--retry")
    return classes


def check_selection(rb: Runbook, select: Selectors) -> None:
    """--model/--backend must name the runbook's models and backends."""
    for option, names, known in (("--model", select.models, [m.name for m in rb.models]),
                                 ("--backend", select.backends, [b.name for b in rb.backends])):
        for name in names:
            if name not in known:
                raise BadInput(f"{name!r} is not in the runbook; one of {', '.join(known)}",
                               path=str(rb.path), field=option)


def apply_revision_and_retry(camp: Campaign, rb: Runbook, root: Path, view: ProgressView,
                             rev: tuple[dict, list[str]] | None, select: Selectors
                             ) -> dict[str, str]:
    """A changed runbook: record it, invalidate exactly the cells its result-bearing edits
    affect, refreeze runbook.yaml; `--retry`: invalidate the failed cells of those classes.
    Says which on the terminal; returns the provenance lines of this invocation."""
    lines: dict[str, str] = {}
    if rev is not None:
        fingerprint, changed = rev
        camp.log.write(RunbookRevised(**fingerprint, changed=changed))
        store.freeze_runbook(root, rb)
        cells = store.affected_cells(camp.finished, changed)
        if changed:
            camp.invalidate(cells, "runbook edit: " + ", ".join(changed))
            view.line(f"runbook changed ({', '.join(changed)}): {plural(len(cells), 'finished run')} "
                      "invalidated, rerun as new attempts" + (f": {', '.join(cells)}" if cells else ""))
        else:
            view.line("runbook changed, no result-bearing field (comments, paths, limits, "
                      "Slurm options): resuming")
        lines["runbook_sha256"] = fingerprint.get("runbook_sha256") or ""   # the audit's chain
        lines["runbook_changed"] = ", ".join(changed) or "no result-bearing field"
        lines["invalidated"] = " ".join(cells) if changed else ""
    if select.retry:
        cells = store.retry_cells(camp.finished, select.retry, camp.ctx.selected)
        camp.invalidate(cells, "--retry " + ",".join(select.retry))
        view.line(f"--retry {','.join(select.retry)}: {plural(len(cells), 'finished run')} to "
                  "rerun as new attempts" + (f": {', '.join(cells)}" if cells else ""))
        lines["retried"] = " ".join(cells)
    for key, value in (("model", select.models), ("backend", select.backends),
                       ("retry", select.retry)):
        if value:
            lines[key] = ",".join(value)
    return lines


def finished_already(camp: Campaign, root: Path, rev: tuple[dict, list[str]] | None,
                     select: Selectors, view: ProgressView) -> bool:
    """A done campaign that this invocation would not change (no result-bearing edit, no
    --retry match, no launch added by a timing edit): say so, with where the report is, and
    write nothing, so its statistics (wall span, busy share, ETA error) stay those of the
    runs."""
    doc = campaign_state(root, probe_lock=False)
    if doc["state"] != "done" or (rev is not None and rev[1]):
        return False
    if select.retry and store.retry_cells(camp.finished, select.retry, camp.ctx.selected):
        return False
    more_launches = any(purpose in (Purpose.TIME, Purpose.FRONTIER)
                        for _, _, purpose, _ in camp.runs_left())
    if rev is not None and (more_launches or camp.rb.timing.resolution is not None
                            or fewer_rungs(camp)):
        return False        # a timing or frontier edit added or took out launches, or asks
                            # a resolution to check
    if rev is not None:
        view.line("runbook changed, no result-bearing field (comments, paths, limits, Slurm "
                  "options)")
    view.line(f"epcap: campaign {camp.rb.campaign} in {root} is done "
              f"({plural(doc['runs_done'], 'run')}); nothing to run"
              + (f"; report: {doc['report_path']}" if doc["report_path"] else ""))
    return True


def fewer_rungs(camp: Campaign) -> bool:
    """Some pair has more standing frontier runs than 2k + 1 rungs of `frontier.rungs` k:
    the runbook now asks for fewer, and the run must take the outer ones out."""
    most = 2 * camp.rb.frontier_rungs + 1 if camp.rb.frontier_rungs else 0
    return any(key[2] == Purpose.FRONTIER and camp.standing(runs) > most
               for key, runs in camp.finished.items())


def plural(n: int, noun: str) -> str:
    """'1 run', '2 runs'."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def drive(camp: Campaign, rb: Runbook, root: Path, view: ProgressView, new: bool,
          t_start: float) -> int:
    """Preflight gates, canaries, the pipelines, the report; prints the banners."""
    if camp.ctx.stage_mode(Stage.PREFLIGHT) == StageMode.RUN:
        health_gate(view, camp.log)
    camp.provenance = capture_provenance(camp.command_line, dict(rb.repositories), rb.path,
                                         analysis_version=ANALYSIS_VERSION)
    camp.provenance.update(container_facts(rb.container))
    camp.provenance.update(provenance_fields(rb))
    if new or not (root / PROVENANCE_TXT).exists():
        write_provenance(root / PROVENANCE_TXT, camp.provenance)
    store.record_invocation(root, camp.command_line, camp.invocation)
    write_facts(root, store.campaign_facts(
        rb, {b.name: camp.backend(b.name).implementation() for b in rb.backends}))
    left = camp.runs_left()
    word = "resuming" if not new else "starting"
    basis = "" if camp.first_eta is None else f" ({estimate_words(camp, left)})"
    view.line(f"epcap: {word} campaign {rb.campaign} in {root}: {camp.done_runs} "
              f"{'run' if camp.done_runs == 1 else 'runs'} done, {plural(len(left), 'run')} "
              f"left (at least), ETA {fmt_s(camp.first_eta)}{basis}")
    view.start(camp.done_runs, camp.done_runs + len(left))
    camp.run_canaries()
    camp.run_pipelines([model_pipeline(camp.ctx, m.name) for m in rb.models])
    finished = camp.ctx.until is None and not camp.ctx.stages and not camp.ctx.deferred
    if finished:        # rungs beyond a lowered frontier.rungs: out of the results
        camp.invalidate(camp.unasked_rungs(), f"frontier.rungs {rb.frontier_rungs}: a rung "
                        "outside it")
    camp.write_tables()
    if finished:
        camp.release_orphans()      # an earlier driver's job the plan no longer asks for
    # The end of the runs is logged before the report (runs_complete: the report can show
    # the ETA error); campaign_done only once the report exists, so a crash in between
    # leaves a campaign that the next run finishes.
    last = camp.ctx.until or (camp.ctx.stages[-1] if camp.ctx.stages else Stage.TIME)
    camp.log.write(StageDone(runs_done=camp.done_runs, runs_left=len(camp.runs_left()),
                             runs_complete=finished, stage=Stage.TIME if finished else last,
                             selection=bool(camp.ctx.deferred)))
    if camp.ctx.stage_mode(Stage.REPORT) == StageMode.RUN:
        build_report(root, view, camp.log)
    if finished:
        camp.log.write(CampaignDone(runs_done=camp.done_runs, runs_left=0, stage="done"))
    if camp.on_publish is not None:
        camp.on_publish("campaign done" if finished else f"stopped after {last}")
    view.stop()
    stopped = None
    if camp.ctx.deferred:
        pairs = ", ".join(f"{m}/{b}" for m, b in sorted(camp.ctx.deferred))
        view.line(f"left for another run (outside --model/--backend): {pairs}")
        stopped = "the --model/--backend selection"
    elif not finished:
        stopped = str(last)
    print_summary(root, view, time.monotonic() - t_start, stopped)
    return exit_status(root, view)


def exit_status(root: Path, view: ProgressView) -> int:
    """0 when every standing cell stands as a result (ok, drops, lower_bound, or
    does_not_fit, which is data); 1 when some failed (crash, timeout, infra past its
    retries, cancelled), naming them. A stop on a bug class exits 3 before this."""
    failed = [e for e in standing_finishes(read_events(root / EVENTS_JSONL))
              if e.get("status") in FAILURE_CLASSES and e.get("status") != Status.DOES_NOT_FIT]
    if not failed:
        return 0
    shown = ", ".join(f"{e['cell']} ({e['status']})" for e in failed[:8])
    more = f" and {len(failed) - 8} more" if len(failed) > 8 else ""
    view.line(f"exit 1: {plural(len(failed), 'cell')} failed: {shown}{more} "
              "(`epcap run --retry CLASS` reruns them)")
    return 1


def estimate_words(camp: Campaign, left: list[tuple[str, str, str, int]]) -> str:
    """The banner's source and band of its ETA (the dry run's words, one estimator)."""
    band = estimate_band(camp, left)
    text = estimate_source(camp, left)
    if band is None:
        return text + "; no error band measured"
    return f"{text}; band x{band[0]:g}..x{band[1]:g}"


def build_report(root: Path, view: ProgressView, log: EventLog) -> None:
    from harness.report import build_report as build  # lazy: matplotlib is slow to import
    out = build(root)
    log.write(ReportBuilt(path=str(out)))
    view.line(f"report: {out}")


def print_summary(root: Path, view: ProgressView, this_run_s: float,
                  stopped_after: str | None = None) -> None:
    """The closing lines: runs, wall span, busy time, the ETA error, failures by class."""
    stats = campaign_stats(root)
    err = stats.get("eta_error")
    head = f"stopped after {stopped_after}" if stopped_after else "done"
    at = "/".join("n/a" if v is None else f"{v}" for v in stats["eta_error_at"].values())
    view.line(f"{head}: {plural(stats['runs_done'], 'run')}; wall span "
              f"{fmt_s(stats['wall_span_s'])} (this invocation {fmt_s(this_run_s)}), busy "
              f"{fmt_s(stats['busy_s'])}; ETA error (estimated/actual) "
              f"{err if err is not None else 'n/a'}; at 25/50/75% {at}")
    if stats["failures_by_class"]:
        view.line(f"failures by class: {failures_text(stats['failures_by_class'])}")
    view.line(f"results: {root}")


def failures_text(failures: dict[str, int]) -> str:
    """'crash 1, does_not_fit 2' (or 'none')."""
    return ", ".join(f"{k} {v}" for k, v in sorted(failures.items())) or "none"


def cli_status(results_dir: str, as_json: bool = False) -> int:
    """`epcap status`: the state (running, interrupted, stopped after a stage, done), runs
    done / left, failures by class and ETA; a results root lists its campaigns, each one it
    cannot read named with why (`damaged` in --json) and exit 1 then, the others listed."""
    root = Path(results_dir)
    if os.path.lexists(root / EVENTS_JSONL):    # a FIFO or a link there is named, not skipped
        doc = campaign_state(root)
        if as_json:
            print(json.dumps(doc))
        else:
            print_state(doc)
        return 0
    found = campaigns_under(root) if root.is_dir() else []
    ignored = ignored_under(root, found) if root.is_dir() else []
    if not found:
        raise BadInput(f"not a campaign directory (no {EVENTS_JSONL}) and no campaign "
                       "directory under it" + (f" ({len(ignored)} other entries ignored)"
                                               if ignored else ""), path=str(root))
    docs, damaged = [], []
    for path in found:
        try:
            docs.append(campaign_state(path))
        except BadInput as exc:         # one damaged campaign hides none of the others
            damaged.append({"path": str(path), "why": str(exc)})
        except OSError as exc:
            damaged.append({"path": str(path), "why": f"{exc.filename or path}: {os_hint(exc)}"})
    if as_json:
        print(json.dumps({"campaigns": docs, "damaged": damaged, "ignored": ignored}))
        return 1 if damaged else 0
    lines = [(doc["path"], f"{state_words(doc)}; {doc['runs_done']} done, "
              f"{'?' if doc['runs_left'] is None else doc['runs_left']} left") for doc in docs]
    lines += [(d["path"], f"cannot be read: {d['why']}") for d in damaged]
    for path, words in sorted(lines):
        print(f"{path}: {words}")
    if ignored:
        print(f"ignored (not a campaign epcap recorded): {', '.join(map(ascii, ignored))}")
    return 1 if damaged else 0


def ignored_under(root: Path, campaigns: list[Path]) -> list[str]:
    """Entries directly under a results root that are neither a campaign directory nor hold
    one: a stray folder, a file, a backup copy (its record names another directory)."""
    _, other = records_under(root, EVENTS_JSONL)
    holding = {p.relative_to(root).parts[0] for p in campaigns if root in p.parents}
    return [p.name for p in other if p.name not in holding]


def state_words(doc: dict) -> str:
    """'running (pid 12 on h since ...)', 'interrupted (SIGINT at ...)', 'stopped after
    validate', 'done'."""
    state = doc["state"]
    if state == "running":
        holder = (f"holder unknown: {doc['holder_unknown']}" if doc.get("holder_unknown")
                  else f"pid {doc['pid']} on {doc['host']} since {doc['since']}")
        return (f"running ({holder})"
                + "".join(f"; {queued_words(q)}" for q in doc.get("pending") or ()))
    if state == "interrupted":
        return (f"interrupted ({doc['signal'] or 'unknown signal'}"
                + (f" at {doc['when']})" if doc["when"] else ")"))
    if state == "stopped_after" and doc.get("stopped_after") == "selection":
        return "stopped after the --model/--backend selection (the other pairs are left)"
    if state == "stopped_after":
        return f"stopped after {doc.get('stopped_after') or doc['stage']}" + (
            f" ({doc['stopped']['status']} in {doc['stopped']['cell']})" if doc["stopped"] else "")
    return "done"


def queued_words(queued: dict) -> str:
    """'pending: JobHeldUser (job 12, cell X, since T; ...)': a job waiting in Slurm's queue,
    and what the driver does if it stays (limits.max_pending_s)."""
    limit = queued.get("max_pending_s") or 0
    bound = (f"the campaign stops after {fmt_s(limit)} queued (limits.max_pending_s)" if limit
             else "limits.max_pending_s 0: waited on forever")
    return (f"pending: {queued['reason']} (job {queued['job_id']}, cell {queued['cell']}, "
            f"since {queued['since']}; {bound})")


def print_state(doc: dict) -> None:
    print(f"campaign: {doc['path']}")
    print(f"state: {state_words(doc)}")
    print(f"stage: {doc['stage'] or 'unknown (no stage recorded)'}")
    left = doc["runs_left"]
    print(f"runs: {doc['runs_done']} done, {left if left is not None else 'unknown'} left")
    print(f"failures by class: {failures_text(doc['failures'])}")
    eta = fmt_s(doc['eta_s']) if doc['eta_s'] is not None else 'unknown'
    if doc.get("pending"):
        jobs = ", ".join(str(q["job_id"]) for q in doc["pending"])
        eta += f" of run time, plus the queue wait (job {jobs} pending: waiting on the queue)"
    print(f"ETA: {eta}")
    if doc["report_path"]:
        print(f"report: {doc['report_path']}")
    if doc["stopped"]:
        print(redact_text(stopped_line(doc["stopped"])))


def stopped_line(ev: dict) -> str:
    """'stopped: <status> in <cell> (<log>:<line>: <text>)', leaving out what was not
    recorded (a canary that crashed before writing a log has no log line)."""
    where = ":".join(str(ev[k]) for k in ("log", "line_no") if ev.get(k) is not None)
    detail = ": ".join(p for p in (where, str(ev.get("line") or "")) if p)
    return (f"stopped: {ev.get('status') or 'unknown status'} in {ev.get('cell') or 'unknown cell'}"
            + (f" ({detail})" if detail else "")
            + (f"; run `{ev['hint']}`" if ev.get("hint") else ""))
