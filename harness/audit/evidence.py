"""The evidence map (issue 23): for every column of every TSV the harness writes, and every
cell.json and provenance key the rules use, where the value comes from and how the audit
re-derives it, or that it cannot, in which case it never helps an upload to VALID.

Kinds: `rederived` (recomputed from the cell with the harness's own function and compared),
`identity` (must agree with the cell's name, cell.json, argv and the runbook as run),
`checked` (compared with other evidence by a rule, not recomputed), `hashed` (a digest
compared with the bytes it names), `context` (not evidence: no rule reads it to reach VALID),
`not-rederived` (evidence the audit cannot re-derive yet: no rule passes on it).
tests/unit/test_audit_evidence.py fails when a column of harness/results/rows.py has no entry;
docs/audit.md#evidence-map prints this table.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from harness.audit.vocab import (
    CELL_IDENTITY,
    COMMIT_IMPOSSIBLE,
    EARLIER_NOT_REDERIVED,
    HARDWARE_MISMATCH,
    HELD_OUT_NOT_REDERIVED,
    INCOMPLETE,
    INCONSISTENT,
    MISSING_CELL,
    MISSING_PROVENANCE,
    MIXED_TIMING,
    NOT_REDERIVED,
    PREDATES,
    PROVENANCE_INCOMPLETE,
    ROUTING_NOT_FROM_SEED,
    RUNBOOK_ALTERED,
    SELECTION_NOT_REDERIVED,
    TIMING_CELL,
    TIMING_INCOMPLETE,
    TIMING_NOT_MAX,
    TIMING_NOT_REDERIVED,
    UNVALIDATED,
    VALIDATED_SATURATED,
)
from harness.loadmodel.trace_io import ROUTING_TRACE
from harness.results.layout import (
    ATTEMPTS_TSV,
    CAMPAIGN_JSON,
    CELL_JSON,
    COMPARISON_TSV,
    EVENTS_JSONL,
    FRONTIER_TSV,
    PROVENANCE_TXT,
    RUNBOOK_YAML,
    SELECTION_TSV,
    TIMING_LAUNCHES_TSV,
    TIMING_TRIALS_TSV,
    TIMING_TSV,
)
from harness.taxonomy.judge import LOG_SUFFIXES

CELL_JSON_KEYS = "cell.json"
PROVENANCE_KEYS = "provenance.txt"

REDERIVED, IDENTITY, CHECKED, HASHED, CONTEXT, NOT_YET = (
    "rederived", "identity", "checked", "hashed", "context", "not-rederived")
KINDS = (REDERIVED, IDENTITY, CHECKED, HASHED, CONTEXT, NOT_YET)
EVIDENCE_KINDS = (REDERIVED, IDENTITY, CHECKED, HASHED)     # a lie here must not be VALID


@dataclass(frozen=True)
class Evidence:
    """One column or key: its kind, where it comes from, and the rule code that checks it."""

    kind: str
    source: str
    code: str = ""


def _e(kind: str, source: str, code: str = "") -> Evidence:
    return Evidence(kind, source, code)


SUMMARY = "telemetry.summary.summarize over the cell's rank*.log (backend's expected shape)"
JUDGE = "taxonomy.judge.judge_run(cell.json launcher.exit_code/state, logs, backend patterns)"
REPLAY = ("rules.pipeline: harness/pipeline's own steps replayed with the upload's cells "
          "as the source (the next standing cell per request, pipeline.replay.next_standing; "
          "each outcome by pipeline.analysis.analyse)")
TIMED = REPLAY + ": the time step (timing.verdicts.arms/schedule, rotated launches)"
FRONTIER = REPLAY + ": the frontier step (pipeline.decisions.frontier_step, one launch per rung)"
AGG = (TIMED + "; timing.verdicts.aggregate of the launches' [EPCAP_TIMING] objects (medians "
       "and quantiles of the trial medians timing_trials.tsv lists)")
COMPARE = (TIMED + "; timing.verdicts.comparison_rows (the paired bootstrap, timing.stats "
           "with its fixed SEED) over each launch's per-trial medians")
WALK = (REPLAY + ": the validate step (step_up after drops, stop at the first accepted or at "
        "max_validate_steps)")
RISK = (WALK + "; grid.heldout.risk_columns (grid.risk.fit_risk, its fixed seed) over "
        "telemetry.steps.step_peaks of the last measure and the last validate")
SELECT = REPLAY + ": the measure and select steps"
NAME = "the cell's directory name (results.layout.parse_cell_name), cell.json cell.*, argv"

EVIDENCE: dict[str, dict[str, Evidence]] = {
    ATTEMPTS_TSV: {
        "campaign": _e(IDENTITY, "runbook as run: campaign; cell.json cell.campaign",
                       CELL_IDENTITY),
        "model": _e(IDENTITY, NAME + "; a runbook model as docs/spec.md#audit-rules compares names", CELL_IDENTITY),
        "backend": _e(IDENTITY, NAME + "; a runbook backend as docs/spec.md#audit-rules compares names", CELL_IDENTITY),
        "purpose": _e(IDENTITY, NAME, CELL_IDENTITY),
        "attempt": _e(IDENTITY, NAME, CELL_IDENTITY),
        "capacity": _e(IDENTITY, NAME + " (--capacity)", CELL_IDENTITY),
        "capacity_tag": _e(REDERIVED, "grid.capacity.capacity_tag(capacity)", NOT_REDERIVED),
        "uniform_tokens": _e(REDERIVED, "runbook shape x model topk (Shape.uniform_tokens)",
                             NOT_REDERIVED),
        "budget_tokens": _e(REDERIVED, "grid.capacity.budget_tokens(capacity, N)",
                            NOT_REDERIVED),
        "status": _e(REDERIVED, JUDGE + "; a time run without [EPCAP_TIMING] is crash",
                     NOT_REDERIVED),
        "rows": _e(REDERIVED, SUMMARY + ": rows", NOT_REDERIVED),
        "malformed_rows": _e(REDERIVED, SUMMARY + ": malformed_rows", NOT_REDERIVED),
        "saturated_rows": _e(REDERIVED, SUMMARY + ": saturated_rows", NOT_REDERIVED),
        "peak_actual_valid_recv": _e(REDERIVED, SUMMARY + ": peak (measured runs only)",
                                     NOT_REDERIVED),
        "required_capacity": _e(REDERIVED, SUMMARY + ": peak / expected_recv, at the "
                                "precision written", NOT_REDERIVED),
        "cell_dir": _e(IDENTITY, "one cell backs one row; every finished cell has a row",
                       CELL_IDENTITY),
        "started_utc": _e(CONTEXT, "the driver's clock; only its impossibilities are judged "
                          "(clock-impossible: after finished_utc)"),
        "finished_utc": _e(CONTEXT, "the driver's clock; only its impossibilities are judged "
                           "(clock-impossible: before started_utc)"),
        "wall_s": _e(CONTEXT, "the launcher's clock; only its impossibilities are judged "
                     "(clock-impossible: negative, or longer than the row's span)"),
        "backend_impl": _e(REDERIVED, "Backend.implementation(timing line of the logs)",
                           NOT_REDERIVED),
        "exit_code": _e(REDERIVED, "cell.json launcher.exit_code", NOT_REDERIVED),
        "failure_line": _e(CONTEXT, "judge_run's deciding line, for readers; status is "
                           "what the rules judge"),
    },
    SELECTION_TSV: {
        "campaign": _e(CONTEXT, "the campaign name; rows are matched by model/backend"),
        "model": _e(IDENTITY, "a runbook model as docs/spec.md#audit-rules compares names", CELL_IDENTITY),
        "backend": _e(IDENTITY, "a runbook backend as docs/spec.md#audit-rules compares names", CELL_IDENTITY),
        "required_capacity": _e(CHECKED, "peak / N of the row (cells.requirement_problem)",
                                INCONSISTENT),
        "peak_actual_valid_recv": _e(REDERIVED, SELECT + " (grid.selection.requirement of "
                                     "the last measure's summary)", SELECTION_NOT_REDERIVED),
        "uniform_tokens": _e(REDERIVED, SELECT + " (N of the runbook's shape)",
                             SELECTION_NOT_REDERIVED),
        "measured_at_capacity": _e(REDERIVED, SELECT + " (the last measure request's "
                                   "capacity)", SELECTION_NOT_REDERIVED),
        "selected_capacity": _e(REDERIVED, SELECT + " (grid.selection.select on the "
                                "runbook's grid), then the validate step's step-ups",
                                SELECTION_NOT_REDERIVED),
        "selected_budget_tokens": _e(REDERIVED, SELECT + " (grid.capacity.budget_tokens); "
                                     ">= peak", SELECTION_NOT_REDERIVED),
        "over_provision": _e(REDERIVED, SELECT + " (grid.capacity.over_provision)",
                             SELECTION_NOT_REDERIVED),
        "validated": _e(CHECKED, "an ok validate at the selected capacity",
                        VALIDATED_SATURATED),
        "validate_attempts": _e(REDERIVED, WALK + ": how many validate requests it made",
                                HELD_OUT_NOT_REDERIVED),
        "timing_capacity": _e(CHECKED, "grid.selection.timing_capacity of the pair's "
                              "selections", TIMING_NOT_MAX),
        "validate_seed": _e(REDERIVED, "harness.vocab.run_seed(runbook as run, validate); "
                            "each validate cell's argv --seed is the backend's own command's",
                            HELD_OUT_NOT_REDERIVED),
        "validate_steps": _e(REDERIVED, RISK + ": the steps of the last validate",
                             HELD_OUT_NOT_REDERIVED),
        "validate_peak": _e(CHECKED, "the accepted validate's peak", INCONSISTENT),
        "headroom": _e(CHECKED, "selected budget / validate_peak", INCONSISTENT),
        "drop_risk_95": _e(REDERIVED, "grid.risk.drop_risk_95(validate_steps)",
                           SELECTION_NOT_REDERIVED),
        "predicted_drop_risk": _e(REDERIVED, RISK, HELD_OUT_NOT_REDERIVED),
        "predicted_drop_risk_hi": _e(REDERIVED, RISK, HELD_OUT_NOT_REDERIVED),
        "held_out": _e(REDERIVED, "the runbook as run: validate.held_out and no routing "
                       "trace (Runbook.held_out_routing); false is stated as a note",
                       HELD_OUT_NOT_REDERIVED),
        "backend_impl": _e(REDERIVED, SELECT + " (the last measure run's backend_impl: "
                           "Backend.implementation)", SELECTION_NOT_REDERIVED),
    },
    TIMING_TSV: {
        "campaign": _e(CONTEXT, "the campaign name"),
        "model": _e(IDENTITY, "a runbook model as docs/spec.md#audit-rules compares names; the time cell's name",
                    CELL_IDENTITY),
        "backend": _e(IDENTITY, "a runbook backend as docs/spec.md#audit-rules compares names; the time cell's name",
                      CELL_IDENTITY),
        "timing_capacity": _e(IDENTITY, "the time cell's capacity; one per model",
                              MIXED_TIMING),
        "budget_tokens": _e(REDERIVED, TIMED + ": grid.capacity.budget_tokens(timing "
                            "capacity, N)", TIMING_NOT_REDERIVED),
        "status": _e(REDERIVED, TIMED + ": the first launch status that is not ok "
                     "(judge_run per launch)", TIMING_NOT_REDERIVED),
        "trials": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "iters": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "dispatch_ms_median": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "dispatch_ms_p90": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "combine_ms_median": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "combine_ms_p90": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "step_cv": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "noise_floor_pct": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "algbw_gbps": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "peak_mem_bytes": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "cell_dir": _e(IDENTITY, "a time cell of the row's model/backend at its capacity",
                       TIMING_CELL),
        "launches": _e(REDERIVED, AGG + "; every launch the runbook's timing.launches asks "
                       "for has its cell", TIMING_NOT_REDERIVED),
        "dispatch_ms_p10": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "combine_ms_p10": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "timer": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        "backend_impl": _e(REDERIVED, AGG, TIMING_NOT_REDERIVED),
        **{column: _e(REDERIVED, AGG + "; timing.links.physical (the declared link table)",
                      TIMING_NOT_REDERIVED)
           for column in ("peak_mem_source", "copies", "dispatch_bytes_per_rank",
                          "dispatch_local_bytes_per_rank", "combine_bytes_per_rank",
                          "dispatch_gbps", "combine_gbps", "gpu", "link_gbps", "link_nccl_gbps",
                          "dispatch_link_fraction", "combine_link_fraction", "link_note")},
        "dropped_slots": _e(REDERIVED, TIMED + ": the sum over its launches of the summary's "
                            "dropped_slots (sum expected_recv - sum actual_valid_recv per "
                            "iteration and layer)", TIMING_NOT_REDERIVED),
    },
    COMPARISON_TSV: {
        **{column: _e(REDERIVED, COMPARE + ": the row's key; one row per (model, arm other "
                      "than the baseline, phase), the A/A control arm included",
                      TIMING_NOT_REDERIVED)
           for column in ("model", "backend", "baseline", "phase")},
        "campaign": _e(REDERIVED, COMPARE + ": the runbook's campaign", TIMING_NOT_REDERIVED),
        **{column: _e(REDERIVED, COMPARE, TIMING_NOT_REDERIVED)
           for column in ("launches", "ratio_median", "ci_low", "ci_high", "cv_backend",
                          "cv_baseline", "verdict", "reason", "halfwidth", "mde",
                          "resolved", "stopped_by", "status", "dropped_slots",
                          "baseline_status", "baseline_dropped_slots", "bytes_ratio",
                          "backend_impl")},
        "resolution": _e(REDERIVED, COMPARE + ": the runbook as run's timing.resolution",
                         TIMING_NOT_REDERIVED),
    },
    TIMING_TRIALS_TSV: {
        "campaign": _e(CONTEXT, "the campaign name"),
        **{column: _e(REDERIVED, TIMED + ": the row's key; one row per trial of a usable "
                      "launch (launch = its rotation round + 1) and phase; "
                      "timing.verdicts.trial_records", TIMING_NOT_REDERIVED)
           for column in ("model", "backend", "launch", "phase", "trial")},
        **{column: _e(REDERIVED, TIMED + ": that launch's [EPCAP_TIMING] per_trial entry "
                      "(Backend.parse_timing over its logs), and its cell",
                      TIMING_NOT_REDERIVED)
           for column in ("ms", "cell_dir", "backend_impl")},
    },
    FRONTIER_TSV: {
        "campaign": _e(CONTEXT, "the campaign name"),
        **{column: _e(REDERIVED, FRONTIER + ": the row's key, one per rung the replayed "
                      "frontier step asks for (grid.capacity.rungs_around)", TIMING_NOT_REDERIVED)
           for column in ("model", "backend", "rung", "capacity", "budget_tokens", "selected",
                          "over_provision")},
        **{column: _e(REDERIVED, FRONTIER + ": that launch's status and [EPCAP_TIMING] object "
                      "(timing.verdicts.launch_figures of the one launch), its cell",
                      TIMING_NOT_REDERIVED)
           for column in ("status", "dropped_slots", "dispatch_ms_median", "dispatch_ms_p10",
                          "dispatch_ms_p90", "combine_ms_median", "combine_ms_p10",
                          "combine_ms_p90", "trials", "noise_floor_pct", "timer",
                          "peak_mem_bytes", "peak_mem_source", "cell_dir", "backend_impl")},
        **{column: _e(REDERIVED, FRONTIER + ": grid.heldout.rung_risk of the pair's measure "
                      "and accepted validate steps at the rung's budget", TIMING_NOT_REDERIVED)
           for column in ("heldout_steps", "heldout_dropped_steps", "drop_risk_95",
                          "predicted_drop_risk", "predicted_drop_risk_hi")},
    },
    TIMING_LAUNCHES_TSV: {
        "campaign": _e(CONTEXT, "the campaign name"),
        **{column: _e(REDERIVED, "the row's key: a time cell of the model/arm (attempt order, "
                      "invalidated cells left out) whose run measured timing",
                      TIMING_NOT_REDERIVED)
           for column in ("model", "backend", "launch", "phase")},
        **{column: _e(REDERIVED, "that launch's [EPCAP_TIMING] object (Backend.parse_timing "
                      "over its logs); the figures timing.verdicts.launch_stats of its "
                      "per_trial medians", TIMING_NOT_REDERIVED)
           for column in ("median_ms", "p10_ms", "p90_ms", "trials", "cell_dir",
                          "backend_impl")},
    },
    CELL_JSON_KEYS: {
        "name": _e(IDENTITY, "the directory name", CELL_IDENTITY),
        "cell": _e(IDENTITY, "campaign/model/backend/purpose/capacity/attempt of the name",
                   CELL_IDENTITY),
        "argv": _e(IDENTITY, "--model and --capacity of the name; the whole argv is the "
                   "backend's own command for the cell's request under the runbook as run "
                   "(launch-not-runbook)", CELL_IDENTITY),
        "status": _e(REDERIVED, JUDGE, NOT_REDERIVED),
        "launcher": _e(CHECKED, "exit_code and state feed judge_run; OOM/assert signatures "
                       "must be in the logs", NOT_REDERIVED),
        "summary": _e(CHECKED, "capacity, N, budget, rows, peak, saturation vs the row",
                      INCONSISTENT),
        "shape": _e(CHECKED, "seq x micro_batch x topk = N, with the logs' own grid, status "
                    "and peak: the earlier layout's evidence (audit/rules/legacy.py)",
                    EARLIER_NOT_REDERIVED),

        "ntasks": _e(CHECKED, "divides the world the ranks' [EPCAP_RANK] lines state",
                     HARDWARE_MISMATCH),
        "nodes": _e(CHECKED, "at least the distinct hosts the ranks' [EPCAP_RANK] lines state",
                    HARDWARE_MISMATCH),
    },
    PROVENANCE_KEYS: {
        "runbook.sha256": _e(HASHED, "sha256 of runbook.yaml; also events.jsonl "
                             "campaign_start and every cell's provenance", RUNBOOK_ALTERED),
        "repo.<name>": _e(CHECKED, "commit order against the errata registry",
                          PREDATES + ":<id>"),
        "(file present)": _e(CHECKED, "a provenance.txt covers every table and cell",
                             MISSING_PROVENANCE),
        "cell_dir of a row": _e(CHECKED, "the named cell exists", MISSING_CELL),
        "telemetry": _e(REDERIVED, SUMMARY + "; every rank x layer x iteration",
                        INCOMPLETE),
        "validate at selection": _e(CHECKED, "a validate attempt at the selected capacity",
                                    UNVALIDATED),
        "(provenance keys present)": _e(CHECKED, "a harness-written provenance.txt carries every "
                                    "docs/spec.md#provenance key, once", PROVENANCE_INCOMPLETE),
        "utc_start": _e(CHECKED, "the run's start: every repo.<name> commit of the same file "
                        "is dated before it (and, with --git-repo, is the clone's)",
                        COMMIT_IMPOSSIBLE),
        "analysis_version": _e(CHECKED, "one per harness.commit across the campaign's and "
                               "every cell's provenance.txt; with --git-repo epcap, the "
                               "recorded commit's own ANALYSIS_VERSION (version-mismatch); "
                               "it says which version's definitions judge the version-bound "
                               "rules (harness/audit/versions.py)", PROVENANCE_INCOMPLETE),
        "(provenance values)": _e(CONTEXT, "command_line, hostnames, gpu.*, torch, "
                              "cuda, nccl, nvshmem, python, harness.*: facts of the machine "
                              "and the invocation, recorded once; nothing in an upload "
                              "re-derives them (a cell's own hostnames, gpu.model and "
                              "gpu.count are held to its ranks: the next entry)"),
        "(a cell's hostnames, gpu.model, gpu.count)": _e(
            CHECKED, "against the cell's ranks' [EPCAP_RANK] lines: every host one of "
            "hostnames under the local launcher; on that host each GPU device_name one of "
            "gpu.model's and at most gpu.count GPU devices", HARDWARE_MISMATCH),
        "(a reference cell's dispatch rows)": _e(
            CHECKED, "actual_valid_recv, pre_balance_recv, redundant_experts against the "
            "routing Backend.expected_dispatch regenerates from cell.json argv (seed, model "
            "seed, workload, shape, personality; in a bigger cell a sample of 64 (iteration, "
            "layer) groups drawn from the audit's sample seed, always holding each rank's top "
            "row and every saturated row), and a recorded routing_trace.jsonl in the cell against "
            "those rows and the seed's counts", ROUTING_NOT_FROM_SEED),
        "events.jsonl cell_finish": _e(CHECKED, "results.events.read_events: every cell the "
                                       "run recorded as finished (canaries too) is in the "
                                       "upload", MISSING_CELL),
        "timed arms and launches": _e(CHECKED, "a time cell and rows for every arm (the A/A "
                                      "control included) and launch the runbook as run asks "
                                      "for (timing.verdicts.arms/schedule)", TIMING_INCOMPLETE),
    },
}


def rederived_columns(table: str) -> tuple[str, ...]:
    """The columns of a table the harness's code recomputes from the cell."""
    return tuple(c for c, e in EVIDENCE.get(table, {}).items() if e.kind == REDERIVED)


def evidence_columns(table: str) -> tuple[str, ...]:
    """The columns whose change must leave an upload not VALID (what the fuzzer mutates)."""
    return tuple(c for c, e in EVIDENCE.get(table, {}).items() if e.kind in EVIDENCE_KINDS)


def markdown() -> str:
    """The map as the Markdown table docs/audit.md#evidence-map carries."""
    lines = ["| file | column / key | kind | source, and how the audit re-derives it | rule |",
             "| --- | --- | --- | --- | --- |"]
    for table, entries in EVIDENCE.items():
        for column, e in entries.items():
            lines.append(f"| {table} | `{column}` | {e.kind} | {e.source} | "
                         f"{('`' + e.code + '`') if e.code else '—'} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- the evidence files

# Every file the audit opens, as a glob over its path inside the dataset repository (matched
# as huggingface_hub's allow_patterns match: fnmatch, `*` crosses `/`, so `*cell.json` is
# every cell's). One list: `epcap audit hf://...` fetches exactly these (engine.fetch_hf),
# `epcap publish` counts them, docs/audit.md#evidence-files prints them. A file the audit
# reads that is not here would be missing from every audit of a hub target, and an honest
# upload could never be VALID there.
EVIDENCE_FILES: dict[str, str] = {
    **{f"*{name}": "a results table (audit.load, read by every rule)"
       for name in (ATTEMPTS_TSV, SELECTION_TSV, TIMING_TSV, COMPARISON_TSV,
                    TIMING_LAUNCHES_TSV, TIMING_TRIALS_TSV, FRONTIER_TSV)},
    f"*{PROVENANCE_TXT}": "the campaign's and every cell's provenance (missing-provenance, "
                          "predates-fix, provenance-incomplete, runbook-altered)",
    f"*{RUNBOOK_YAML}": "the runbook as run: the re-derivation's runbook (runbook-altered)",
    "*.yaml": "the model zoo the runbook as run names (models_file, default models.yaml), "
              "loaded with it",
    f"*{EVENTS_JSONL}": "the campaign's event log: finished and abandoned cells, the "
                        "runbook's sha256, campaign_done (missing-cell, runbook-altered, "
                        "timing-incomplete)",
    f"*{CAMPAIGN_JSON}": "marks a harness-written upload (runbook-altered)",
    f"*{CELL_JSON}": "each cell's identity, launcher record and summary",
    **{f"*{suffix}": "cell logs as taxonomy.judge.cell_logs reads them (rank<R>.log, "
                     "node<N>.log, health<N>.log, slurm-<job>.out, .err): telemetry, "
                     "[EPCAP_TIMING], [EPCAP_RANK], failure signatures"
       for suffix in LOG_SUFFIXES},
}


def evidence_patterns() -> list[str]:
    """EVIDENCE_FILES' globs, as huggingface_hub's allow_patterns."""
    return list(EVIDENCE_FILES)


# Files an hf:// audit fetches beside the evidence list: each reference measure cell's recorded
# routing (routing-not-from-seed compares it when present) and, where `epcap publish` left a
# trace out as too large, the stand-in holding its sha256 (`sha256sum` format), which makes
# that comparison UNKNOWN, never "ran and found nothing". Not on the evidence list: a trace
# grows to gigabytes, and the evidence digest stays what it was.
TRACE_WITHHELD_SUFFIX = ".sha256"
HUB_EXTRA_FILES: dict[str, str] = {
    f"*{ROUTING_TRACE}": "a measure cell's recorded routing (routing-not-from-seed)",
    f"*{ROUTING_TRACE}{TRACE_WITHHELD_SUFFIX}": "the sha256 of a trace too large to publish: "
                                               "its comparison is UNKNOWN",
    "*attestation.dsse.json": "the signed in-toto statement of the evidence list "
                              "(`epcap publish --sign-key`; statement-unverified)",
}


def hub_patterns() -> list[str]:
    """What `epcap audit hf://...` fetches: the evidence list and HUB_EXTRA_FILES."""
    return [*EVIDENCE_FILES, *HUB_EXTRA_FILES]


def is_evidence(path: str) -> bool:
    """Whether a path inside an upload (posix) is one the audit reads: the hub's own
    matching (fnmatchcase over the whole path)."""
    from fnmatch import fnmatchcase
    return any(fnmatchcase(path, pattern) for pattern in EVIDENCE_FILES)


def files_markdown() -> str:
    """EVIDENCE_FILES as the Markdown table docs/audit.md#evidence-files carries."""
    lines = ["| glob | what the audit reads it for |", "| --- | --- |"]
    lines += [f"| `{pattern}` | {why} |" for pattern, why in EVIDENCE_FILES.items()]
    return "\n".join(lines)


# ---------------------------------------------------------------- the evidence digest

def evidence_manifest(root: Path) -> list[str]:
    """The evidence files of a results directory (posix paths inside it): regular files, not
    links, under no hidden folder and not hidden, matching EVIDENCE_FILES; in the order
    `LC_ALL=C sort` gives their `./`-prefixed paths (what digest_command lists)."""
    found = []
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")
                       and not os.path.islink(os.path.join(folder, d))]
        rel = Path(folder).relative_to(root)
        for name in filenames:
            full = os.path.join(folder, name)
            path = (rel / name).as_posix()
            if name.startswith(".") or os.path.islink(full) or not os.path.isfile(full):
                continue
            if is_evidence(path):
                found.append(path)
    return sorted(found, key=lambda p: ("./" + p).encode("utf-8", "surrogateescape"))


def sha256sum_line(name: str, digest: str) -> str:
    """One line as GNU `sha256sum` prints it (a name with a backslash or newline escaped,
    the line then led by a backslash)."""
    if "\\" in name or "\n" in name:
        return "\\" + digest + "  " + name.replace("\\", "\\\\").replace("\n", "\\n") + "\n"
    return f"{digest}  {name}\n"


def evidence_digest(root: Path) -> str:
    """sha256 of the `sha256sum` listing of the evidence files (`./<path>`, in
    evidence_manifest's order): the fingerprint of what the audit read, which
    digest_command recomputes with coreutils alone."""
    listing = hashlib.sha256()
    for rel in evidence_manifest(root):
        file_digest = hashlib.sha256()
        with open(root / rel, "rb") as handle:
            for block in iter(lambda h=handle: h.read(1 << 20), b""):
                file_digest.update(block)
        line = sha256sum_line("./" + rel, file_digest.hexdigest())
        listing.update(line.encode("utf-8", "surrogateescape"))
    return listing.hexdigest()


def digest_command() -> list[str]:
    """The shell command, run in the results directory, that prints evidence_digest (find,
    sort, xargs, sha256sum: coreutils and findutils), as lines of at most 80 characters."""
    tests = [f"-path './{pattern}'" for pattern in EVIDENCE_FILES]
    lines = ["find . -type f ! -path '*/.*' \\( \\"]
    for i in range(0, len(tests), 2):
        lines.append("    " + " -o ".join(tests[i:i + 2])
                     + (" -o \\" if i + 2 < len(tests) else " \\"))
    lines += ["    \\) -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum"]
    return lines
