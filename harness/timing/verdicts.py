"""Timing over several launches: arms, rotation, the timing.tsv aggregate and comparison.tsv.

Pure (no I/O). An *arm* is a timed backend, or the baseline timed a second time as the A/A
control (`<baseline>~control`). Round i launches every arm once, in the arm order rotated by
i (A B C, B C A, C A B), so drift falls on every arm alike; launch i of two arms is one pair
for harness.timing.stats. See docs/timing-verdicts.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from harness.timing import links, stats
from harness.vocab import CONTROL_SUFFIX, TIMED_OK, Status

PHASES = ("dispatch", "combine")
ROW_KEYS = ("campaign", "model", "backend", "baseline", "phase", "launches", "ratio_median",
            "ci_low", "ci_high", "cv_backend", "cv_baseline", "verdict", "reason")

Launches = Sequence[dict | None]     # per round: the launch's timing object, None if unusable


def control_name(baseline: str) -> str:
    """The A/A control arm of a baseline: `<baseline>~control`."""
    return baseline + CONTROL_SUFFIX


def is_control(arm: str) -> bool:
    return arm.endswith(CONTROL_SUFFIX)


def backend_of(arm: str) -> str:
    """The runbook backend an arm runs (the control arm runs its baseline)."""
    return arm[:-len(CONTROL_SUFFIX)] if is_control(arm) else arm


def arms(timed: Sequence[str], baseline: str | None, control: bool) -> tuple[str, list[str]]:
    """(baseline, arm names): the baseline defaults to the first timed backend."""
    if not timed:
        raise ValueError("no timed backends")
    base = baseline if baseline is not None else timed[0]
    if base not in timed:
        raise ValueError(f"timing.baseline {base!r} is not a timed backend {list(timed)}")
    return base, list(timed) + ([control_name(base)] if control else [])


def rotation(names: Sequence[str], round_index: int) -> list[str]:
    """The launch order of round `round_index`: names rotated left by that many places."""
    k = round_index % len(names) if names else 0
    return list(names[k:]) + list(names[:k])


def schedule(names: Sequence[str], launches: int) -> list[tuple[int, str]]:
    """Every (round, arm) in launch order."""
    return [(i, name) for i in range(launches) for name in rotation(names, i)]


def trial_medians(timing: dict, phase: str) -> list[float]:
    """A launch's per-trial medians of one phase (ms)."""
    return [float(t[f"{phase}_ms_median"]) for t in timing.get("per_trial") or []]


def paired(backend: Launches, baseline: Launches, phase: str) -> tuple[list, list]:
    """The two arms' trial medians over the rounds where both have a usable launch."""
    b_out, a_out = [], []
    for b, a in zip(backend, baseline, strict=False):
        if b is None or a is None:
            continue
        tb, ta = trial_medians(b, phase), trial_medians(a, phase)
        if tb and ta:
            b_out.append(tb)
            a_out.append(ta)
    return b_out, a_out


def comparison_rows(campaign: str, model: str, by_arm: dict[str, Launches], baseline: str,
                    max_cv: float = stats.MAX_CV, why_missing: dict[str, str] | None = None,
                    ) -> list[dict]:
    """One comparison.tsv row per (arm other than the baseline, phase).

    An arm without paired launches gets a row with empty figures and verdict, and the
    reason (from `why_missing`, e.g. its timing status) in `reason`.
    """
    rows = []
    for arm, launches in by_arm.items():
        if arm == baseline:
            continue
        for phase in PHASES:
            row = dict.fromkeys(ROW_KEYS)
            row.update(campaign=campaign, model=model, backend=arm, baseline=baseline,
                       phase=phase)
            b, a = paired(launches, by_arm.get(baseline, []), phase)
            if not b:
                row.update(launches=0, reason=(why_missing or {}).get(arm)
                           or (why_missing or {}).get(baseline) or "no paired launches")
                rows.append(row)
                continue
            c = stats.compare(b, a, max_cv=max_cv)
            row.update(launches=c.launches, ratio_median=c.ratio_median, ci_low=c.ci_low,
                       ci_high=c.ci_high, cv_backend=c.cv_backend, cv_baseline=c.cv_baseline,
                       verdict=c.verdict, reason=c.reason)
            rows.append(row)
    return rows


def control_check(rows: Sequence[dict]) -> tuple[bool, list[str]]:
    """(reliable, problems): the timing table is reliable when every control row says
    indistinguishable (a missing control is not a problem: the runbook did not ask for one)."""
    problems = [f"{r['model']} {r['backend']} {r['phase']}: {r.get('verdict') or 'no verdict'}"
                f" ({r.get('reason')})"
                for r in rows if is_control(str(r["backend"]))
                and r.get("verdict") != stats.INDISTINGUISHABLE]
    return not problems, problems


def _median(values: list) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.median(vals) if vals else None


def row_status(statuses: Sequence[str]) -> str:
    """An arm's timing.tsv status over its launches in run order: the first that is not ok
    (the time step's rule, and the audit's)."""
    return next((s for s in statuses if s != Status.OK), str(Status.OK))


def stops_launches(status: str) -> bool:
    """Whether a launch with this status ends its arm's launches: out of memory is not a
    fluke, the next launch would not fit either (the time step's rule, and the audit's)."""
    return status == Status.DOES_NOT_FIT


def usable(status: str, timing: dict | None) -> dict | None:
    """A launch's [EPCAP_TIMING] object when the launch measured timing (status ok or drops,
    an object present), else None: what the verdicts and the figures are made of."""
    return timing if timing and status in TIMED_OK else None


def launch_figures(launches: Sequence[tuple[str, dict | None]]) -> dict:
    """An arm's timing.tsv figures from its launches' (status, [EPCAP_TIMING] object): the
    aggregate of the usable ones."""
    return aggregate([t for status, timing in launches if (t := usable(status, timing))])


def aggregate(timings: Sequence[dict]) -> dict:
    """The timing.tsv figures of an arm from its usable launches' timing objects.

    Medians, quantiles, step_cv and algbw: the median over launches of each launch's value;
    bytes per rank: the median over launches; the physical columns from them
    (harness.timing.links.physical, on the device the first launch names); peak_mem_bytes:
    the maximum, peak_mem_source how it was obtained; noise_floor_pct: with two or more launches the run-to-run
    spread, 100 * (max - min) / median of the launches' (dispatch + combine) medians, with
    one launch that launch's own trial-to-trial value; launches: how many were usable.
    """
    if not timings:
        return {"launches": 0}
    keys = ("dispatch_ms_median", "dispatch_ms_p90", "dispatch_ms_p10", "combine_ms_median",
            "combine_ms_p90", "combine_ms_p10", "step_cv", "algbw_gbps")
    out: dict = {k: _median([t.get(k) for t in timings]) for k in keys}
    mems = [t.get("peak_mem_bytes") for t in timings if t.get("peak_mem_bytes") is not None]
    out["peak_mem_bytes"] = max(mems) if mems else None
    steps = [t["dispatch_ms_median"] + t["combine_ms_median"] for t in timings
             if t.get("dispatch_ms_median") is not None and t.get("combine_ms_median") is not None]
    if len(timings) >= 2 and len(steps) >= 2:
        out["noise_floor_pct"] = 100.0 * (max(steps) - min(steps)) / statistics.median(steps)
    else:
        out["noise_floor_pct"] = timings[0].get("noise_floor_pct")
    first = timings[0]
    out.update(trials=first.get("trials"), iters=first.get("iters"), timer=first.get("timer"),
               backend_impl=first.get("backend_impl"), launches=len(timings))
    out.update({k: _median([t.get(k) for t in timings]) for k in links.BYTE_KEYS})
    out.update(peak_mem_source=first.get("peak_mem_source"), copies=first.get("copies"))
    out.update(links.physical(out, first.get("device_name")))
    return out


def launch_medians(timings: Launches, phase: str) -> list[float | None]:
    """Per round, the launch's median of one phase (None where unusable): figure 4's dots."""
    return [None if t is None else t.get(f"{phase}_ms_median") for t in timings]


def verdict_text(row: dict) -> str:
    """One report cell: 'slower ×1.234 (95% CI 1.102–1.380)', or why there is no verdict."""
    verdict = row.get("verdict")
    if not verdict:
        return f"n/a: {row.get('reason') or 'not compared'}"
    fig = _num(row.get("ratio_median"))
    lo, hi = _num(row.get("ci_low")), _num(row.get("ci_high"))
    text = verdict if fig is None else f"{verdict} ×{fig:.3f}"
    if lo is not None and hi is not None:
        text += f" (95% CI {lo:.3f}–{hi:.3f})"
    if verdict == stats.TOO_NOISY and row.get("reason"):
        text += f"; {row['reason']}"
    return text


def _num(value) -> float | None:
    if value is None or value == "":
        return None
    return float(value)


def report_lines(rows: Sequence[dict], max_cv: float | None) -> list[str]:
    """The comparison section of report.md: the control banner, the verdict table, the method."""
    if not rows:
        return ["No comparison.tsv rows (the time stage did not run, or one backend was timed).",
                ""]
    reliable, problems = control_check(rows)
    out = []
    if not reliable:
        out += ["**The whole timing table is unreliable:** the A/A control (the baseline timed "
                "a second time as its own arm) did not come out indistinguishable:", ""]
        out += [f"- {p}" for p in problems] + [""]
    elif any(is_control(str(r["backend"])) for r in rows):
        out += ["A/A control: indistinguishable for every model and phase.", ""]
    table = {}
    for r in rows:
        table.setdefault((r["model"], r["backend"], r["baseline"], r.get("launches")), {})[
            r["phase"]] = verdict_text(r)
    head = "| model | backend | baseline | launches | dispatch | combine |"
    out += [head, "|---|---|---|---|---|---|"]
    for (model, arm, base, launches), by_phase in table.items():
        out.append(f"| {model} | {arm} | {base} | {launches} | {by_phase.get('dispatch', '')} "
                   f"| {by_phase.get('combine', '')} |")
    limit = "" if max_cv is None else f" (max_cv {max_cv:g})"
    out += ["", "Ratio = backend median / baseline median over all launches and trials (above 1 "
            "= slower); 95% CI from a paired bootstrap over launches and trials (20,000 "
            "resamples, fixed seed, Student-t on launches − 1 degrees of freedom). `faster`/"
            f"`slower` only when the CI excludes 1 and both CVs are within the limit{limit}; "
            "`too_noisy` when a CV is over it or fewer than two launches ran. "
            "Method: docs/timing-verdicts.md.", ""]
    return out
