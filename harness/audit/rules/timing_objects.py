"""An invariant of the raw evidence that no honest run can break, whatever its tables say: a
forger who edits the rank logs and re-states every table consistently still breaks it.

Timing objects (`timing-implausible`; an upload with its runbook as run: each time
cell's `[EPCAP_TIMING]` object as the backend's own `parse_timing` reads it, the one the
timing rules derive): every figure finite and >= 0; `p10 <= median <= p90` per phase;
`trials` = the number of `per_trial` entries; where the object states equal trials
(`samples_per_trial`), each phase's median lies between the smallest and the largest
per-trial median (the median of equal-sized groups always does); `algbw_gbps` = the
bytes its own `algbw_formula` states / `dispatch_ms_median` (backends/reference/timing.py);
no two launches carry the same object (no two timed processes measure identical floats).
"""

from __future__ import annotations

import json
import re

from harness.audit.model import NOT_APPLICABLE, Check, Rule, Source, Table, Upload, verdict_of
from harness.audit.rules.clocks import number
from harness.audit.rules.rederive import as_run, timing_objects
from harness.audit.vocab import TIMING_IMPLAUSIBLE
from harness.results.layout import ATTEMPTS_TSV

PHASES = ("dispatch", "combine")
FIGURES = ("step_cv", "noise_floor_pct", "algbw_gbps", "peak_mem_bytes",
           *(f"{ph}_ms_{q}" for ph in PHASES for q in ("median", "p10", "p90")))
REL = 1e-9                    # float slack of a recomputed figure
BYTES = re.compile(r"=\s*([0-9*\s]+?)\s*bytes")


def close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b), 1e-300)


def object_problems(obj: dict) -> list[str]:
    """What one [EPCAP_TIMING] object says that no measurement can (module docstring)."""
    out = []
    for name in FIGURES:
        if name in obj and obj[name] is not None:
            value = number(obj[name])
            if value is None or value < 0:
                out.append(f"{name} {obj[name]!r} is not a finite number >= 0")
    trials = obj.get("per_trial")
    trials = trials if isinstance(trials, list) else None
    if trials is not None and isinstance(obj.get("trials"), int) \
            and obj["trials"] != len(trials):
        out.append(f"trials {obj['trials']} but {len(trials)} per_trial entries")
    for ph in PHASES:
        med, p10, p90 = (number(obj.get(f"{ph}_ms_{q}")) for q in ("median", "p10", "p90"))
        if None not in (med, p10, p90) and not (p10 <= med <= p90):
            out.append(f"{ph}: p10 {p10} <= median {med} <= p90 {p90} does not hold")
        meds = [number(t.get(f"{ph}_ms_median")) for t in trials or []
                if isinstance(t, dict)]
        if med is not None and meds and None not in meds and "samples_per_trial" in obj \
                and not (min(meds) * (1 - REL) <= med <= max(meds) * (1 + REL)):
            out.append(f"{ph}: median {med} outside its trials' medians "
                       f"[{min(meds)}, {max(meds)}]")
    formula = obj.get("algbw_formula")
    stated, med = number(obj.get("algbw_gbps")), number(obj.get("dispatch_ms_median"))
    found = BYTES.search(formula) if isinstance(formula, str) else None
    if found and stated is not None and med:
        product = 1
        for factor in found.group(1).split("*"):
            product *= int(factor) if factor.strip().isdigit() else 0
        if product and not close(stated, product / (med * 1e-3) / 1e9):
            out.append(f"algbw_gbps {stated} is not its formula's {product} bytes / "
                       f"dispatch_ms_median {med}")
    return out


def check_timing_objects(table: Table, upload: Upload) -> Check:
    """Every time cell's [EPCAP_TIMING] object on its own, and no object twice."""
    if not as_run(upload):
        return Check(TIMING_IMPLAUSIBLE, NOT_APPLICABLE, ["no runbook as run (the earlier layout)"])
    bad, seen, count = [], {}, 0
    for key, _cell, obj in timing_objects(upload):
        count += 1
        bad += [f"{key}: [EPCAP_TIMING] {p}" for p in object_problems(obj)]
        text = json.dumps(obj, sort_keys=True)
        if text in seen:
            bad.append(f"{key}: its [EPCAP_TIMING] object is a copy of {seen[text]}'s")
        seen.setdefault(text, key)
    return verdict_of(bad, [f"{count} timing objects plausible"] if count else [],
                      TIMING_IMPLAUSIBLE, [])


__all__ = ["check_timing_objects", "object_problems"]

# This family's rules, as data (docs/audit.md#rules): code, what it catches, the tables and
# columns it reads, whether it must be decided, its check, and the earlier failure it stands for.
RULES: tuple[Rule, ...] = (
    Rule(TIMING_IMPLAUSIBLE, "a time cell's [EPCAP_TIMING] object states what no measurement "
         "can: a negative figure, p10 > median or median > p90, a median outside its trials' "
         "medians, algbw_gbps not its own formula, trials != per_trial entries, or another "
         "launch's object copied",
         (Source(ATTEMPTS_TSV, ()),), False, check_timing_objects,
         "timing figures edited in the logs (or one launch's log copied over another's) and "
         "the timing tables re-derived from them"),
)
