"""`epcap run --dry-run`: every planned cell (stage table order) with its command, capacity,
budget and paths; nothing runs and nothing is written."""

from __future__ import annotations

import shlex
from pathlib import Path

from harness.api.backend import RunRequest
from harness.api.registry import load_backend
from harness.campaign.decisions import held_out_routing
from harness.campaign.gpuhours import describe_estimate
from harness.campaign.stages import plan_cells, timed_arms
from harness.grid import capacity as cap
from harness.results.layout import Cell, cell_dir
from harness.runbook.model import Runbook
from harness.vocab import Purpose


def validate_routing(rb: Runbook, backend: str) -> str:
    """The routing a validate cell runs on: seed, iterations, and whether it is held out."""
    v, warmup = rb.validate, rb.measure.warmup
    iters = f"{v.iters} iterations" + (f" after {warmup} warmup" if warmup else "")
    if not held_out_routing(rb, backend):
        why = ("a recorded routing trace is replayed" if v.held_out
               else "validate.seed = the campaign seed")
        return (f"seed {v.seed}, {iters}: the measured routing again ({why}; "
                "held_out=false)")
    plus = f" + {v.seed - rb.seed}" if 0 < v.seed - rb.seed < 1000 else ""
    how = f"campaign seed {rb.seed}{plus}" if plus else f"campaign seed {rb.seed} differs"
    return f"seed {v.seed} (held out: {how}), {iters}"


def print_dry_run(rb: Runbook, root: Path, launcher_name: str) -> int:
    """Print the plan; returns the exit code (0)."""
    cells = plan_cells(rb)
    print(f"campaign {rb.campaign}: runbook {rb.path}; results {root}; launcher {launcher_name}")
    print(f"shape: seq {rb.shape.seq} x micro_batch {rb.shape.micro_batch}, ep {rb.shape.ep}; "
          f"pad_multiple {rb.capacity.pad_multiple}; grid "
          f"{rb.capacity.grid}")
    backends = {b.name: load_backend(b) for b in rb.backends}
    attempts: dict[tuple, int] = {}
    for p in cells:
        key = (p.model, p.backend, p.purpose)
        attempts[key] = attempts.get(key, 0) + 1
        n = rb.shape.uniform_tokens(rb.model(p.model).topk)
        print(f"\n[{p.stage}] {p.model} {p.backend} {p.purpose}")
        if p.purpose == Purpose.VALIDATE:
            print(f"  routing: {validate_routing(rb, p.backend)}")
        if p.capacity is None:
            print("  capacity: unknown until measured (set by the select stage; timing uses "
                  "max over the select backends' selections)")
            print(f"  cells: {root}/cells/{p.model}__{p.backend}__{p.purpose}__cap<TAG>__a<N>/")
            continue
        cell = Cell(rb.campaign, p.model, p.backend, p.purpose, p.capacity, attempts[key])
        cdir = cell_dir(root, cell)
        budget = cap.budget_tokens(p.capacity, n)
        ok = cap.is_executable(p.capacity, n, rb.capacity.pad_multiple)
        spec = backends[p.backend].command(RunRequest.for_cell(rb, cell, cdir))
        print(f"  capacity {p.capacity}: N = {n}, budget = int({p.capacity} x {n}) = {budget}, "
              f"{'executable' if ok else 'NOT executable'} (pad {rb.capacity.pad_multiple})")
        print(f"  command ({spec.ntasks} task(s), {spec.nodes} node(s)): {shlex.join(spec.argv)}")
        if spec.env:
            print(f"  env keys: {' '.join(sorted(spec.env))}")
        print(f"  logs: {cdir}/rank<R>.log; provenance: {cdir}/provenance.txt")
    print(f"\nplanned runs: {len(cells)} (re-measures and validation step-ups add runs)")
    print(describe_estimate(rb, len(cells)))
    print(timing_cost(rb, sum(1 for p in cells if p.purpose == Purpose.TIME)))
    return 0


def timing_cost(rb: Runbook, timed_runs: int) -> str:
    """What the launches and the A/A control cost over one launch per (model, backend)."""
    baseline, arms = timed_arms(rb)
    once = len(rb.models) * sum(1 for b in rb.backends if b.time)
    added = timed_runs - once
    return (f"timing: {timed_runs} timed runs = {len(rb.models)} models x {len(arms)} arms "
            f"({', '.join(arms) or 'none'}) x {rb.timing.launches} launches; baseline "
            f"{baseline}, max_cv {rb.timing.max_cv:g}\n  the launches and the control add "
            f"{added} runs over one launch per (model, backend): "
            f"{describe_estimate(rb, added)}")
