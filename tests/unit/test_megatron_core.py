"""megatron-core's router and all-to-all dispatcher against the reference, on the same routing.

runbooks/local-megatron.yaml runs the reference without rebalancing and the `megatron-core`
backend; both read the same seeded routing (or the same trace). Their dispatch rows must be
equal row for row, peak and saturation included, on two shapes; one changed routing id in the
trace megatron-core replays must break the equality.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from backends.megatron_core.adapter import NO_REBALANCING
from harness.api.backend import RunRequest
from harness.api.registry import load_backend
from harness.results.layout import Cell
from harness.runbook.load import load_runbook
from harness.telemetry.summary import iter_rows, summarize

needs_mcore = pytest.mark.skipif(importlib.util.find_spec("megatron") is None,
                                 reason="the [megatron] extra (megatron-core) is not installed")

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "runbooks" / "local-megatron.yaml"
# (name, experts, topk, seq, layers, capacity): at capacity 1.00 the budget is N, so any
# imbalance saturates a row; at 2.00 none does.
SHAPES = [("e16-saturated", 16, 4, 64, 2, "1.00"), ("e128", 128, 8, 64, 2, "2.00")]


def run_backend(rb, name: str, cell_dir: Path, options: dict | None = None) -> Path:
    """Run one measure cell of `name` with the runbook's command; its merged log."""
    cfg = rb.backend(name)
    if options:
        cfg = replace(cfg, options=replace(cfg.options, **options))
    cell = Cell(rb.campaign, rb.models[0].name, name, "measure", rb.capacity.measure)
    spec = load_backend(cfg).command(RunRequest.for_cell(rb, cell, cell_dir))
    cell_dir.mkdir(parents=True, exist_ok=True)
    log = cell_dir / f"{name}.log"
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.run(spec.argv, env={**spec.env, "PATH": "/usr/bin:/bin",
                                              "PYTHONPATH": str(ROOT)},
                              cwd=spec.cwd, stdout=fh, stderr=subprocess.STDOUT, timeout=300)
    assert proc.returncode == 0, log.read_text(encoding="utf-8")[-3000:]
    return log


def rows(log: Path) -> list[tuple]:
    out = sorted((r.iter, r.layer, r.rank, r.expected_recv, r.actual_valid_recv, r.budget,
                  r.actual_valid_recv >= r.budget) for r in iter_rows(log))
    assert out
    return out


def shaped(rb, experts: int, topk: int, seq: int, layers: int, capacity: str):
    model = replace(rb.models[0], experts=experts, topk=topk, layers=layers)
    return replace(rb, models=(model,), shape=replace(rb.shape, seq=seq),
                   capacity=replace(rb.capacity, measure=capacity),
                   measure=replace(rb.measure, warmup=0, iters=2))


def test_runbook_runs_both_on_the_same_routing():
    rb = load_runbook(RUNBOOK)
    assert [(b.name, b.kind) for b in rb.backends] == [("raw", "reference"),
                                                       ("megatron-core", "megatron-core")]
    # The reference side must not rebalance: personality `raw` once the reference has it
    # (update runbooks/local-megatron.yaml then), `echo` before (it did not rebalance).
    assert rb.backend("raw").module == NO_REBALANCING
    cell = Cell(rb.campaign, rb.models[0].name, "megatron-core", "measure", "2.00")
    argv = load_backend(rb.backend("megatron-core")).command(
        RunRequest.for_cell(rb, cell, Path("/c"))).argv
    assert argv[1:3] == ["-m", "backends.megatron_core.worker"]
    assert argv[argv.index("--personality") + 1] == NO_REBALANCING


@pytest.mark.slow
@needs_mcore
@pytest.mark.parametrize("name,experts,topk,seq,layers,capacity", SHAPES)
def test_megatron_core_rows_equal_the_reference(tmp_path, name, experts, topk, seq, layers,
                                                capacity):
    rb = shaped(load_runbook(RUNBOOK), experts, topk, seq, layers, capacity)
    saturating = name.endswith("saturated")
    trace = tmp_path / "routing.jsonl"
    ref_log = run_backend(rb, "raw", tmp_path / "raw",
                          {"record_trace": str(trace)} if saturating else None)
    ref = rows(ref_log)
    if not saturating:                       # seeded routing on both sides
        mc_log = run_backend(rb, "megatron-core", tmp_path / "mc")
        assert rows(mc_log) == ref
        assert "backend_impl=megatron-core" in mc_log.read_text(encoding="utf-8")
        assert not any(r[-1] for r in ref)
        return
    # The saturated shape: megatron-core replays the reference's recorded trace ...
    assert any(r[-1] for r in ref), "this shape must saturate some rows"
    mc_log = run_backend(rb, "megatron-core", tmp_path / "mc", {"trace": str(trace)})
    assert rows(mc_log) == ref
    a, b = summarize(ref_log), summarize(mc_log)
    assert (a.peak_actual_valid_recv, a.saturated_rows) == \
        (b.peak_actual_valid_recv, b.saturated_rows)
    # ... and one changed id breaks the equality: a slot moved onto a rank whose buffer has
    # room in that step (on a full one the budget would hide the move).
    lines = trace.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if '"topk_ids"' in line)
    rec = json.loads(lines[at])
    ids = rec["topk_ids"][0]
    per_rank = experts // rb.shape.ep
    room = [r[2] for r in ref if r[:2] == (rec["iter"], rec["layer"]) and not r[-1]]
    ids[0] = next(e for e in range(experts) if e not in ids and e // per_rank in room
                  and e // per_rank != ids[0] // per_rank)
    lines[at] = json.dumps(rec)
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    changed = rows(run_backend(rb, "megatron-core", tmp_path / "mc2", {"trace": str(trace)}))
    assert changed != ref
    diff = [(x, y) for x, y in zip(changed, ref, strict=True) if x != y]
    assert len({x[:2] for x, _ in diff}) == 1                        # one step, one layer


def test_adapter_options_are_checked():
    rb = load_runbook(RUNBOOK)
    cell = Cell(rb.campaign, rb.models[0].name, "megatron-core", "measure", "2.00")
    base = rb.backend("megatron-core")
    per_rank = load_backend(replace(base, options={"device": "cpu"})).command(
        RunRequest.for_cell(rb, cell, Path("/c")))
    assert per_rank.ntasks == rb.shape.ep and "--ranks" not in per_rank.argv
    for bad, field in (({"record_trace": "/t.jsonl"}, "record_trace"),
                       ({"launch": "both"}, "launch")):
        with pytest.raises(ValueError) as err:
            load_backend(replace(base, options=bad))
        assert err.value.field == field


def test_forked_launch_preloads_megatron_core_in_the_fork_server():
    """`launch: forked` (the default campaign's mcore-alltoall): one task that starts the ep
    ranks, forked from the local launcher's server that imported megatron-core's dispatcher
    once. Catches a forked option that silently execs a fresh interpreter per launch (about
    4 s of CPU each on 2 cores, over the campaign's 120 s budget)."""
    from harness.launch.forkserver import uses_forkserver

    rb = load_runbook(RUNBOOK)
    cell = Cell(rb.campaign, rb.models[0].name, "megatron-core", "time", "2.00")
    spec = load_backend(replace(rb.backend("megatron-core"),
                                options={"device": "cpu", "launch": "forked"})).command(
        RunRequest.for_cell(rb, cell, Path("/c")))
    assert spec.ntasks == 1 and spec.ranks_per_task == rb.shape.ep
    assert spec.argv[spec.argv.index("--ranks") + 1] == str(rb.shape.ep)
    assert "megatron.core.transformer.moe.token_dispatcher" in uses_forkserver(spec.argv,
                                                                              spec.env)


def test_cpu_shims_stay_off_with_a_gpu_device():
    import torch

    from backends.megatron_core import shims as megatron_core_shims
    stream = torch.cuda.Stream
    assert megatron_core_shims.apply(torch.device("cuda", 0)) is False
    assert torch.cuda.Stream is stream
