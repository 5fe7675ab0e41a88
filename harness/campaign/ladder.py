"""The imbalance ladder (docs/ladder.md): the same campaign again at each `routing_sigma` step.

A runbook with `ladder: {routing_sigma: [s1, s2, ...]}` runs, after its own campaign, one
campaign per step: the same runbook (models, backends, seed: identical routing draws) with
every model's `routing_sigma` set to the step's and its own name `<campaign>-sigma<s>`, each
an ordinary campaign (its own pipeline, A/A control, verdicts and intervals; `epcap audit`
audits it like any other). Their runbooks and the gathered `ladder.tsv` (one row per step,
model and timed arm) go to `<results>/<campaign>-ladder/`, with fig7_ladder.png: required
capacity and dispatch time against the raw demand's max:mean, per library.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from harness.io.atomic import write_text_atomic
from harness.io.yamldoc import read_doc
from harness.report.inputs import read_tsv
from harness.report.sections.balance import balance_rows
from harness.results.layout import (
    ATTEMPTS_TSV,
    COMPARISON_TSV,
    SELECTION_TSV,
    TIMING_TSV,
)
from harness.results.rows import LADDER_COLUMNS, LadderRow
from harness.results.tables import write_table_atomic
from harness.runbook.model import Runbook
from harness.vocab import Purpose, Status

LADDER_DIR = "{campaign}-ladder"
FIGURE = "fig7_ladder.png"
DISPATCH = "dispatch"


def sigma_tag(sigma: float) -> str:
    """A sigma as a campaign-name part: 0.5 -> 0p5, 1.25 -> 1p25."""
    return f"{sigma:g}".replace(".", "p").replace("-", "m")


def step_campaign(campaign: str, sigma: float) -> str:
    """The campaign name of one ladder step."""
    return f"{campaign}-sigma{sigma_tag(sigma)}"


def step_runbook(rb: Runbook, sigma: float) -> dict:
    """The runbook of one step as YAML data: the runbook as written, its models (those
    `ladder.models` names, else all) with routing_sigma set to `sigma`, its backends (those
    `ladder.backends` names, else all), its own campaign name, no ladder or frontier, and the
    paths it names made absolute (it is written elsewhere)."""
    data = dict(read_doc(rb.path).data)
    data["campaign"] = step_campaign(rb.campaign, sigma)
    models = [{"name": m} if isinstance(m, str) else dict(m) for m in data["models"]]
    data["models"] = [{**m, "routing_sigma": sigma} for m in models
                      if not rb.ladder_models or m.get("name") in rb.ladder_models]
    if rb.ladder_backends:
        data["backends"] = [b for b in data["backends"]
                            if (b if isinstance(b, str) else b.get("name")) in rb.ladder_backends]
    data.pop("ladder", None)
    data.pop("frontier", None)
    if rb.models_path is not None:
        data["models_file"] = str(rb.models_path.resolve())
    if "repositories" in data:
        data["repositories"] = {k: str(v) for k, v in rb.repositories.items()}
    return data


def run_ladder(rb: Runbook, results: Path, run: Callable[[Path], int],
               choose: Callable[[Path, str], Path]) -> int:
    """Run every step (`run(runbook path) -> exit status`, the `epcap run` of that runbook
    into `results`), then write ladder.tsv and the figure; the first failing step's status
    stops the ladder. `choose(results, campaign)` finds a step's campaign directory."""
    folder = results / LADDER_DIR.format(campaign=rb.campaign)
    folder.mkdir(parents=True, exist_ok=True)
    steps = []
    for sigma in rb.ladder_sigmas:
        path = folder / f"{step_campaign(rb.campaign, sigma)}.yaml"
        write_text_atomic(path, yaml.safe_dump(step_runbook(rb, sigma), sort_keys=False))
        code = run(path)
        if code != 0:
            return code
        steps.append((sigma, choose(results, step_campaign(rb.campaign, sigma))))
    rows = ladder_rows(rb.campaign, steps)
    write_table_atomic(folder / "ladder.tsv", LADDER_COLUMNS, rows)
    from harness.report.ladder import plot_ladder
    plot_ladder(rows, folder / FIGURE)
    print(f"ladder: {folder / 'ladder.tsv'} ({len(rows)} rows), {folder / FIGURE}")
    return 0


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def ladder_rows(campaign: str, steps: list[tuple[float, Path]]) -> list[LadderRow]:
    """ladder.tsv's rows from each step's campaign directory: per model the raw demand's
    max:mean (peak pre_balance_recv / N over its measure cells: the same routing for every
    backend), per timed arm its timing.tsv row, the largest required_capacity of its time
    launches that dropped nothing, its capacity_selection.tsv selected capacity and
    drop_risk_95 (select backends), and its comparison.tsv dispatch row."""
    out = []
    for step, (sigma, root) in enumerate(steps, start=1):
        raw: dict[str, float] = {}
        for r in balance_rows(root):
            value = r["peak_pre_balance_recv"] / r["uniform_tokens"]
            raw[str(r["model"])] = max(raw.get(str(r["model"]), 0.0), value)
        timing, attempts = read_tsv(root / TIMING_TSV, ()), read_tsv(root / ATTEMPTS_TSV, ())
        comparison = read_tsv(root / COMPARISON_TSV, ())
        selection = read_tsv(root / SELECTION_TSV, ())
        picked = {(s["model"], s["backend"]): s for s in (selection.rows if selection else [])}
        for t in timing.rows if timing else []:
            model, arm = t["model"], t["backend"]
            clean = [_float(a["required_capacity"]) for a in (attempts.rows if attempts else [])
                     if (a["model"], a["backend"], a["purpose"], a["status"])
                     == (model, arm, Purpose.TIME, Status.OK) and a["required_capacity"]]
            cmp = next((c for c in (comparison.rows if comparison else [])
                        if (c["model"], c["backend"], c["phase"]) == (model, arm, DISPATCH)), {})
            out.append(LadderRow(
                campaign=campaign, step=step, routing_sigma=sigma, step_campaign=root.name,
                model=model, backend=arm, raw_imbalance=raw.get(model),
                required_capacity=f"{max(clean):.6f}" if clean else None,
                selected_capacity=picked.get((model, arm), {}).get("selected_capacity") or None,
                drop_risk_95=picked.get((model, arm), {}).get("drop_risk_95") or None,
                timing_capacity=t["timing_capacity"] or None, status=t["status"] or None,
                dropped_slots=int(t["dropped_slots"]) if t.get("dropped_slots") else None,
                **{k: _float(t.get(k)) for k in ("dispatch_ms_median", "dispatch_ms_p10",
                                                 "dispatch_ms_p90")},
                baseline=cmp.get("baseline") or None,
                ratio_median=_float(cmp.get("ratio_median")), ci_low=_float(cmp.get("ci_low")),
                ci_high=_float(cmp.get("ci_high")), verdict=cmp.get("verdict") or None,
                backend_impl=t.get("backend_impl") or None))
    return out
