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
from harness.vocab import CONTROL_SUFFIX, TIMED_OK, Status, Verdict

PHASES = ("dispatch", "combine")
ROW_KEYS = ("campaign", "model", "backend", "baseline", "phase", "launches", "ratio_median",
            "ci_low", "ci_high", "cv_backend", "cv_baseline", "verdict", "reason", "halfwidth",
            "mde", "resolution", "resolved", "stopped_by", "status", "dropped_slots",
            "baseline_status", "baseline_dropped_slots", "bytes_ratio", "backend_impl")
# why an arm's launches stopped (comparison.tsv stopped_by)
STOP_LAUNCHES, STOP_RESOLUTION, STOP_MAX = "launches", "resolution", "max_launches"

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
    """A launch's trial medians of one phase (ms): its `per_trial` entries; a timing object
    without them counts as one trial, its own median (docs/timing-verdicts.md#definitions)."""
    per_trial = timing.get("per_trial") or []
    if per_trial:
        return [float(t[f"{phase}_ms_median"]) for t in per_trial]
    own = timing.get(f"{phase}_ms_median")
    return [] if own is None else [float(own)]


def launch_median(timing: dict, phase: str) -> float | None:
    """The launch median: the median of one launch's trial medians (None without any)."""
    values = trial_medians(timing, phase)
    return statistics.median(values) if values else None


def launch_stats(timing: dict, phase: str) -> dict[str, float | None]:
    """timing_launches.tsv's figures of one launch and phase: the launch median and the
    linear p10/p90 of its trial medians (ms); None without trial medians."""
    values = trial_medians(timing, phase)
    if not values:
        return {"median_ms": None, "p10_ms": None, "p90_ms": None}
    return {"median_ms": statistics.median(values), "p10_ms": stats.arm_quantile([values], 0.1),
            "p90_ms": stats.arm_quantile([values], 0.9)}


def whole_arm(launches: Launches, phase: str) -> list[list[float]]:
    """An arm's trial medians per usable launch (rounds without timing left out)."""
    return [v for t in launches if t is not None and (v := trial_medians(t, phase))]


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


def unequal_work(work: dict | None) -> str | None:
    """Why an arm's launches did not do its contract's whole work, or None when they did:
    its timing status is drops, or its dispatch rows dropped slots (docs/timing-verdicts.md
    #equal-work). `work`: the arm's timing.tsv status and dropped_slots."""
    if not work:
        return None
    dropped = work.get("dropped_slots") or 0
    if work.get("status") == Status.DROPS or dropped > 0:
        return f"status {work.get('status')}, {dropped} slots dropped"
    return None


def bytes_per_rank(launches: Launches, phase: str) -> float | None:
    """The median over an arm's usable launches of its `<phase>_bytes_per_rank`."""
    return _median([t.get(f"{phase}_bytes_per_rank") for t in launches if t is not None])


def bytes_ratio(backend: Launches, baseline: Launches, phase: str) -> float | None:
    """The arm's bytes per rank over the baseline's in one phase (None without both)."""
    b, a = bytes_per_rank(backend, phase), bytes_per_rank(baseline, phase)
    return None if b is None or not a else b / a


def comparison_rows(campaign: str, model: str, by_arm: dict[str, Launches], baseline: str,
                    max_cv: float = stats.MAX_CV, why_missing: dict[str, str] | None = None,
                    resolution: float | None = None,
                    work: dict[str, dict] | None = None) -> list[dict]:
    """One comparison.tsv row per (arm other than the baseline, phase).

    The ratio and CVs are the arms' over every usable launch (the medians timing.tsv
    shows); the interval's se comes from the paired rounds. An arm without paired launches
    gets a row with empty figures and verdict, and the reason (from `why_missing`, e.g. its
    timing status) in `reason`. `resolution`: the runbook's timing.resolution, for
    `resolved` (halfwidth <= resolution). `work`: per arm its timing.tsv status,
    dropped_slots and backend_impl; an arm or baseline that dropped slots gets the verdict
    unequal_work instead of a speed verdict (the ratio and interval stay, for reading only).
    """
    work = work or {}
    rows = []
    for arm, launches in by_arm.items():
        if arm == baseline:
            continue
        mine, theirs = work.get(arm) or {}, work.get(baseline) or {}
        unequal = [f"{who} {why}" for who, w in ((arm, mine), (baseline, theirs))
                   if (why := unequal_work(w))]
        for phase in PHASES:
            row = dict.fromkeys(ROW_KEYS)
            row.update(campaign=campaign, model=model, backend=arm, baseline=baseline,
                       phase=phase, status=mine.get("status"),
                       dropped_slots=mine.get("dropped_slots"),
                       baseline_status=theirs.get("status"),
                       baseline_dropped_slots=theirs.get("dropped_slots"),
                       backend_impl=mine.get("backend_impl"),
                       bytes_ratio=bytes_ratio(launches, by_arm.get(baseline, []), phase))
            b, a = paired(launches, by_arm.get(baseline, []), phase)
            if not b:
                row.update(launches=0, reason=(why_missing or {}).get(arm)
                           or (why_missing or {}).get(baseline) or "no paired launches")
                rows.append(row)
                continue
            whole = (whole_arm(launches, phase), whole_arm(by_arm.get(baseline, []), phase))
            c = stats.compare(b, a, max_cv=max_cv, whole=whole)
            row.update(launches=c.launches, ratio_median=c.ratio_median, ci_low=c.ci_low,
                       ci_high=c.ci_high, cv_backend=c.cv_backend, cv_baseline=c.cv_baseline,
                       verdict=c.verdict, reason=c.reason, halfwidth=c.halfwidth, mde=c.mde,
                       resolution=resolution,
                       resolved=None if resolution is None else resolved(c.halfwidth,
                                                                         resolution))
            if unequal:
                row.update(verdict=Verdict.UNEQUAL_WORK, reason="; ".join(unequal))
            rows.append(row)
    return rows


def resolved(halfwidth: float | None, resolution: float) -> bool:
    """Whether an interval is as narrow as the runbook's timing.resolution asks."""
    return halfwidth is not None and halfwidth <= resolution


def launches_done(rows: Sequence[dict], rounds: int, launches: int, resolution: float | None,
                  max_launches: int) -> str | None:
    """After `rounds` rounds, why the launches stop (STOP_*), or None to launch another
    round: `launches` rounds always run; with a resolution, rounds go on until every
    comparison with figures is resolved, or `max_launches` rounds ran."""
    if rounds < launches:
        return None
    if resolution is None:
        return STOP_LAUNCHES
    judged = [r for r in rows if r.get("ratio_median") is not None]
    if all(resolved(r.get("halfwidth"), resolution) for r in judged):
        return STOP_RESOLUTION
    return STOP_MAX if rounds >= max_launches else None


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

    Per phase (docs/timing-verdicts.md#definitions): `<phase>_ms_median` the arm median
    (median of all trial medians, pooled over launches), `_p10`/`_p90` the linear quantiles
    of the same values. step_cv and algbw: the median over launches of each launch's own
    value; bytes per rank: the median over launches; the physical columns from the arm
    medians (harness.timing.links.physical, on the device the first launch names);
    peak_mem_bytes: the maximum, peak_mem_source how it was obtained; noise_floor_pct: with
    two or more launches the run-to-run spread, 100 * (max - min) / median of the launches'
    (dispatch + combine) launch medians, with one launch that launch's own trial-to-trial
    value; launches: how many were usable.
    """
    if not timings:
        return {"launches": 0}
    out: dict = {}
    for phase in PHASES:
        arm = whole_arm(timings, phase)
        have = bool(arm)
        out[f"{phase}_ms_median"] = stats.arm_median(arm) if have else None
        out[f"{phase}_ms_p10"] = stats.arm_quantile(arm, 0.1) if have else None
        out[f"{phase}_ms_p90"] = stats.arm_quantile(arm, 0.9) if have else None
    out.update({k: _median([t.get(k) for t in timings]) for k in ("step_cv", "algbw_gbps")})
    mems = [t.get("peak_mem_bytes") for t in timings if t.get("peak_mem_bytes") is not None]
    out["peak_mem_bytes"] = max(mems) if mems else None
    steps = [d + c for t in timings
             if (d := launch_median(t, "dispatch")) is not None
             and (c := launch_median(t, "combine")) is not None]
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
    """Per round, the launch median of one phase (None where unusable): figure 4's dots."""
    return [None if t is None else launch_median(t, phase) for t in timings]


def trial_records(by_arm: dict[str, Launches], cell_dirs: dict[str, list[str | None]]
                  ) -> list[dict]:
    """timing_trials.tsv's rows (without campaign/model): per arm, usable launch (`launch` =
    its round + 1, the pairing key), phase and trial (1-based), the trial median in ms."""
    out = []
    for arm, launches in by_arm.items():
        for i, t in enumerate(launches):
            if t is None:
                continue
            for phase in PHASES:
                for j, ms in enumerate(trial_medians(t, phase), 1):
                    out.append({"backend": arm, "launch": i + 1, "phase": phase, "trial": j,
                                "ms": ms, "cell_dir": cell_dirs.get(arm, [None] * (i + 1))[i]})
    return out


def verdict_text(row: dict) -> str:
    """One report cell: 'slower ×1.234 (95% CI 1.102–1.380)', or why there is no verdict."""
    verdict = row.get("verdict")
    if not verdict:
        return f"n/a: {row.get('reason') or 'not compared'}"
    fig = _num(row.get("ratio_median"))
    lo, hi = _num(row.get("ci_low")), _num(row.get("ci_high"))
    text = verdict if fig is None else f"{verdict} ×{fig:.3f}"
    if lo is not None and hi is not None:
        text += f" (95% CI {lo:.3f}–{hi:.3f}"
        mde = _num(row.get("mde"))
        text += ")" if mde is None else f"; detectable ≥{100 * mde:.1f}%)"
    if verdict in (stats.TOO_NOISY, Verdict.UNEQUAL_WORK) and row.get("reason"):
        text += f"; {row['reason']}"
    return text + bytes_note(row)


def bytes_note(row: dict) -> str:
    """'; moves ×0.512 the baseline's bytes' when the two arms move different bytes per rank
    in this phase (more than 1% apart), else ''."""
    ratio = _num(row.get("bytes_ratio"))
    if ratio is None or abs(ratio - 1.0) <= BYTES_TOLERANCE:
        return ""
    return f"; moves ×{ratio:.3f} the baseline's bytes"


BYTES_TOLERANCE = 0.01        # bytes ratios within 1% of 1 count as the same work


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
    stops = sorted({str(r.get("stopped_by")) for r in rows if r.get("stopped_by")})
    if any(s == STOP_MAX for s in stops):
        out += ["", "**Resolution not reached:** the launches hit timing.max_launches before "
                "every interval was as narrow as timing.resolution asks (`resolved` false "
                "in comparison.tsv)."]
    out += ["", "Ratio = backend median / baseline median over all launches and trials, the "
            "medians timing.tsv shows (above 1 = slower); 95% CI from a paired bootstrap over "
            "launches and trials (20,000 "
            "resamples, fixed seed, Student-t on launches − 1 degrees of freedom). `faster`/"
            f"`slower` only when the CI excludes 1 and both CVs are within the limit{limit}; "
            "`too_noisy` when a CV is over it or fewer than two launches ran. `detectable`: "
            "the minimum detectable effect at these launches and spread (about 90% power); "
            "an `indistinguishable` row rules out only differences larger than it. "
            "`unequal_work`: the arm or the baseline dropped slots (timing status `drops`), "
            "so the two did not do the same work and no speed verdict is given; `moves ×r "
            "the baseline's bytes`: the arms move different bytes per rank in that phase, "
            "so the ratio compares different work. "
            "Method: docs/timing-verdicts.md.", ""]
    return out
