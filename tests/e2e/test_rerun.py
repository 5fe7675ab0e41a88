"""Partial re-runs end to end (docs/campaign.md: partial re-runs): a planted crash re-run by
`--retry crash`, a comment edit that resumes without --fresh, a model field edit that
invalidates exactly that model's cells and a `--model` re-run of them; the audit judges the
result VALID. Runs with Slurm where `sinfo` answers (the cluster path), else with the local
launcher: the driver's re-run logic is the same, and the suite has 15 minutes on 2 cores."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.results.events import read_events
from harness.results.provenance import read_provenance
from harness.results.tables import read_rows

ROOT = Path(__file__).resolve().parents[2]
REDUCED = ROOT / "tests" / "fixtures" / "runbooks" / "reduced.yaml"
CORPUS_PY = ROOT / "tests" / "fixtures" / "uploads" / "corpus.py"
EPCAP = [sys.executable, "-m", "harness.cli"]
CRASH_CELL = "QWEN3_30B__echo__measure__cap2p00__a1"

# Imported by every Python process the cells start (PYTHONPATH): exits 1 before iteration 0
# in the ranks of CRASH_CELL while the marker file exists. A crash without a bug signature.
SITECUSTOMIZE = f"""
import os, sys
_cell = os.environ.get("EPCAP_CELL_DIR", "")
if _cell.endswith("{CRASH_CELL}") and os.path.exists(os.path.join(os.path.dirname(__file__), "armed")):
    sys.stderr.write("planted: process exits before iteration 0\\n")
    sys.stderr.flush()
    os._exit(1)
"""


def slurm_ok() -> bool:
    from harness.launch.slurm import slurm_available
    return slurm_available()[0]


def runbook_text() -> str:
    """The reduced runbook, two select backends timed once each (a short campaign)."""
    return load_corpus().short_runbook_text() + "max_parallel_cells: 2\n"   # the two models overlap


def load_corpus():
    spec = importlib.util.spec_from_file_location("upload_corpus_rerun", CORPUS_PY)
    corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(corpus)
    return corpus


def selection_of(camp: Path) -> list[dict]:
    """capacity_selection.tsv's rows without the columns that name a cell or a time."""
    rows = read_rows(camp / "capacity_selection.tsv")
    return [{k: v for k, v in r.items() if not ("wall" in k or k.endswith("_ms") or "utc" in k
                                                 or k == "cell_dir")} for r in rows]


def epcap(env: dict, *args) -> subprocess.CompletedProcess:
    return subprocess.run([*EPCAP, *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env=env)


def finishes(camp: Path) -> dict[str, dict]:
    return {e["cell"]: e for e in read_events(camp) if e["ev"] == "cell_finish"}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", [
    pytest.param("local", marks=pytest.mark.skipif(
        "slurm_ok()", reason="Slurm answers: these re-runs run with the Slurm launcher instead "
        "(one launcher per suite run: the suite's time on 2 cores)")),
    pytest.param("slurm", marks=[pytest.mark.slurm, pytest.mark.skipif(
        "not slurm_ok()", reason="no Slurm answers here (`sinfo`); the local run covers it")]),
])
def test_retry_comment_edit_and_model_rerun(tmp_path, tmp_path_factory, launcher):
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (plant / "armed").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plant), str(ROOT)])}
    rb = tmp_path / "rb.yaml"
    rb.write_text(runbook_text())
    results = tmp_path / "res"
    camp = results / "reduced"
    run = ("run", rb, "--results", results, "--launcher", launcher)

    # 1. the planted crash: the campaign goes on without echo's QWEN3_30B selection
    first = epcap(env, *run)
    assert first.returncode == 1, first.stdout + first.stderr        # a cell failed
    assert f"exit 1: 1 cell failed: {CRASH_CELL} (crash)" in first.stdout
    done1 = finishes(camp)
    assert done1[CRASH_CELL]["status"] == "crash"
    (plant / "armed").unlink()

    # 2. a comment edit resumes without --fresh and runs nothing (a crash is not retried
    #    unless asked)
    rb.write_text(rb.read_text() + "# a comment added after the first run\n")
    again = epcap(env, *run)
    assert again.returncode == 1, again.stdout + again.stderr        # the crash still stands
    assert "no result-bearing field" in again.stdout
    assert "--fresh" not in again.stdout + again.stderr
    assert finishes(camp) == done1

    # 3. --retry crash: a new attempt of the crashed cell, and the model's time cells it
    #    makes stale; DEEPSEEK_V2_LITE untouched
    retry = epcap(env, *run, "--retry", "crash")
    assert retry.returncode == 0, retry.stdout + retry.stderr
    done3 = finishes(camp)
    new3 = set(done3) - set(done1)
    assert "QWEN3_30B__echo__measure__cap2p00__a2" in new3
    assert done3["QWEN3_30B__echo__measure__cap2p00__a2"]["status"] == "ok"
    assert new3 and all(c.startswith("QWEN3_30B__") for c in new3), new3
    inval = [e for e in read_events(camp) if e["ev"] == "cells_invalidated"]
    assert inval[-1]["reason"] == "--retry crash" and CRASH_CELL in inval[-1]["cells"]
    assert not any(c.startswith("DEEPSEEK") for c in inval[-1]["cells"])
    # the whole selection now equals the session's local run of the same runbook (issue 42:
    # on Slurm, one job per cell -- the per-stage allocation's twin is in test_slurm.py)
    local = load_corpus().harness_campaign(tmp_path_factory.getbasetemp())
    assert selection_of(camp) == selection_of(local) != []

    # 4. a result-bearing edit of one model: exactly its finished cells are invalidated,
    #    and `--model` re-runs them
    text = rb.read_text()
    rb.write_text(text.replace("{name: DEEPSEEK_V2_LITE, layers: 2,",
                               "{name: DEEPSEEK_V2_LITE, routing_sigma: 0.3, layers: 2,"))
    deepseek = {c for c, e in done3.items() if e["model"] == "DEEPSEEK_V2_LITE"}
    model = epcap(env, *run, "--model", "DEEPSEEK_V2_LITE")
    assert model.returncode == 0, model.stdout + model.stderr
    assert "runbook changed (model:DEEPSEEK_V2_LITE)" in model.stdout
    inval = [e for e in read_events(camp) if e["ev"] == "cells_invalidated"][-1]
    assert set(inval["cells"]) == deepseek
    done4 = finishes(camp)
    new4 = set(done4) - set(done3)
    assert new4 and all(c.startswith("DEEPSEEK_V2_LITE__") for c in new4), new4
    assert {done4[c]["purpose"] for c in new4} >= {"measure", "validate", "time"}

    # recorded: events (run_start selectors) and provenance (resume.<n>.*)
    starts = [e for e in read_events(camp) if e["ev"] == "run_start"]
    assert [e["retry"] for e in starts] == [[], ["crash"], []]    # the comment edit ran nothing
    assert starts[2]["models"] == ["DEEPSEEK_V2_LITE"]
    prov = read_provenance(camp / "provenance.txt")
    assert any(k.endswith(".retried") and CRASH_CELL in v for k, v in prov.items())
    assert any(k.endswith(".runbook_changed") and v == "model:DEEPSEEK_V2_LITE"
               for k, v in prov.items())
    assert any(k.endswith(".model") and v == "DEEPSEEK_V2_LITE" for k, v in prov.items())
    assert "# a comment added" in (camp / "runbook.yaml").read_text()   # refrozen as run

    # every finished run keeps its row (history); the selection comes from the new ones
    rows = read_rows(camp / "capacity_attempts.tsv")
    assert {r["cell_dir"].split("/")[-1] for r in rows} == {
        c for c, e in done4.items() if e["purpose"] != "canary"}
    sel = {(r["model"], r["backend"]): r for r in read_rows(camp / "capacity_selection.tsv")}
    assert sel[("QWEN3_30B", "echo")]["validated"] == "true"
    status = json.loads(epcap(env, "status", camp, "--json").stdout)
    assert status["state"] == "done"
    # runs_done counts the runs whose results stand: an invalidated run and its rerun once
    gone = {c for e in read_events(camp) if e["ev"] == "cells_invalidated" for c in e["cells"]}
    assert gone and status["runs_done"] == len(set(done4) - gone)
    assert f"done: {len(set(done4) - gone)} runs;" in model.stdout

    audit = epcap(env, "audit", camp, "--json")
    verdicts = json.loads(audit.stdout)
    assert [u["verdict"] for u in verdicts["uploads"]] == ["VALID"], audit.stdout


# -- which edits change results (no processes: the parsed runbook only) --------------------------

def _rb():
    from harness.runbook.load import load_runbook
    return load_runbook(REDUCED)


def test_every_runbook_field_is_classed():
    """A field added to Runbook must be declared result-bearing or not (else a resume would
    silently keep results an edit of it changed)."""
    from harness.campaign import store
    from harness.runbook.model import Runbook
    names = {f.name for f in dataclasses.fields(Runbook)}
    assert names == store.NON_RESULT_FIELDS | store.RESULT_FIELDS
    assert not store.NON_RESULT_FIELDS & store.RESULT_FIELDS


def _edit(rb, field, draw):
    """A changed copy of `rb` with one top-level field (or a part of it) edited."""
    from harness.runbook.model import Limits, SlurmConfig
    value = getattr(rb, field)
    if field == "models":
        i = draw(st.integers(0, len(value) - 1))
        sub = draw(st.sampled_from(["layers", "hidden", "routing_sigma", "expert_ffn", "arch"]))
        m = value[i]
        bump = (*m.arch, ("router", ("--x",))) if sub == "arch" \
            else getattr(m, sub) + draw(st.integers(1, 5))
        new = value[:i] + (dataclasses.replace(m, **{sub: bump}),) + value[i + 1:]
        return dataclasses.replace(rb, models=new), [f"model:{m.name}"]
    if field == "backends":
        i = draw(st.integers(0, len(value) - 1))
        b = value[i]
        new = value[:i] + (dataclasses.replace(b, flags=(*b.flags, "--x=1")),) + value[i + 1:]
        return dataclasses.replace(rb, backends=new), [f"backend:{b.name}"]
    if field == "timing":
        sub = draw(st.sampled_from(["iters", "trials", "launches", "warmup", "max_cv"]))
        bump = getattr(value, sub) + draw(st.integers(1, 3))
        new = dataclasses.replace(value, **{sub: bump})
        # max_cv changes only comparison rows; launches only how many rounds run (kept ones
        # replay): neither changes a cell's result
        return dataclasses.replace(rb, timing=new), [] if sub in ("max_cv", "launches") else ["timing"]
    simple = {"seed": lambda v: v + 1, "device_memory_bytes": lambda v: (v or 0) + 1024,
              "shape": lambda v: dataclasses.replace(v, seq=v.seq * 2),
              "capacity": lambda v: dataclasses.replace(v, max_remeasure=v.max_remeasure + 1),
              "measure": lambda v: dataclasses.replace(v, iters=v.iters + 1),
              "validate_config": lambda v: dataclasses.replace(
                  rb.validate, seed=rb.validate.seed + 7),
              "limits": lambda v: Limits(run_timeout_s=v.run_timeout_s + 5),
              "slurm": lambda v: SlurmConfig(partition="other", time_limit="01:00:00"),
              "launcher": lambda v: "slurm", "paths": lambda v: {"logs": "/elsewhere"},
              "max_parallel_cells": lambda v: v + 1, "cell_wall_hours": lambda v: 3.0,
              "repositories": lambda v: {"epcap": Path("/x")},
              "campaign": lambda v: v + "x", "path": lambda v: Path("/other.yaml"),
              "models_path": lambda v: Path("/z.yaml"),
              # where each model's flags were written (a comment above them moves the lines)
              "model_origins": lambda v: {k: (("arch.ffn", "zoo x.yaml:1"),) for k in v},
              "container": lambda v: dataclasses.replace(v, engine="pyxis",
                                                         image="nvcr.io/x/y:1"),
              # live publishing, the frontier's rungs and the ladder's steps change no cell
              "publish": lambda v: dataclasses.replace(v, live=True, repo="org/x"),
              "frontier_rungs": lambda v: v + 1, "ladder_sigmas": lambda v: (*v, 0.9),
              "ladder_models": lambda v: ("QWEN3_30B",),
              "ladder_backends": lambda v: ("echo", "ultraep")}
    part = {"seed": "seed", "device_memory_bytes": "device_memory", "shape": "shape",
            "capacity": "capacity", "measure": "measure_phase",
            "validate_config": "validate_routing", "container": "container"}
    # validate's defaults derive from the seed and the measure iterations (spec section 3)
    derived = ["validate_routing"] if field in ("seed", "measure") and rb.validate_config is None else []
    return dataclasses.replace(rb, **{field: simple[field](value)}), sorted(
        ([part[field]] if field in part else []) + derived)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_an_edit_changes_exactly_its_part(data):
    """Any one-field edit of the parsed runbook: a result-bearing one names its part (and
    nothing else), any other changes no result."""
    from harness.campaign import store
    from harness.runbook.model import Runbook
    rb = _rb()
    field = data.draw(st.sampled_from(sorted(f.name for f in dataclasses.fields(Runbook))))
    edited, want = _edit(rb, field, data.draw)
    assert store.changed_parts(store.result_fields(rb), store.result_fields(edited)) == want


def _fin(model, backend, purpose, attempt=1, status="ok"):
    from harness.results.events import CellFinish
    cell = f"{model}__{backend}__{purpose}__cap2p00__a{attempt}"
    return CellFinish(cell=cell, model=model, backend=backend, purpose=purpose,
                      attempt=attempt, status=status)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["model:A", "model:B", "backend:echo", "backend:moonep", "timing",
                        "seed", "shape"]),
       st.sampled_from(["crash", "timeout", "infra", "does_not_fit"]))
def test_affected_cells_are_exactly_the_parts(part, cls):
    """Over a plan of two models x three backends: a model edit hits that model's cells and
    nothing else; a backend edit that backend's (control arm included); timing only time
    cells; a global part every cell. A measure/validate cell hit makes its model's time
    cells stale. --retry hits the failed class and the stale time cells only."""
    from harness.campaign import store
    finished: dict = {}
    for m in ("A", "B"):
        for b in ("echo", "ultraep"):
            for p in ("measure", "validate"):
                finished.setdefault((m, b, p), []).append(_fin(m, b, p))
        for b in ("echo", "ultraep", "moonep", "echo~control"):
            finished.setdefault((m, b, "time"), []).append(_fin(m, b, "time"))
    finished[("A", "echo", "canary")] = [_fin("A", "echo", "canary")]
    every = {e.cell for runs in finished.values() for e in runs}
    got = set(store.affected_cells(finished, [part]))
    kind, _, name = part.partition(":")
    if kind == "model":
        assert got == {c for c in every if c.startswith(name + "__")}
    elif kind == "backend":
        direct = {e.cell for r in finished.values() for e in r
                  if e.backend.split("~")[0] == name}
        models = {c.split("__")[0] for c in direct
                  if "__measure__" in c or "__validate__" in c}
        assert got == direct | {c for c in every if "__time__" in c and c.split("__")[0] in models}
    elif part == "timing":
        assert got == {c for c in every if "__time__" in c}
    else:
        assert got == every
    finished[("B", "ultraep", "measure")] = [_fin("B", "ultraep", "measure", 1, cls)]
    retried = set(store.retry_cells(finished, (cls,), lambda m, b: True))
    assert retried == {"B__ultraep__measure__cap2p00__a1"} | {
        c for c in every if c.startswith("B__") and "__time__" in c}
    assert store.retry_cells(finished, (cls,), lambda m, b: m == "A") == []


@settings(max_examples=20, deadline=None)
@given(st.one_of(st.integers(min_value=101, max_value=10**30), st.integers(max_value=0)))
def test_timing_launches_is_bounded(tmp_path_factory, launches):
    """`timing.launches: 10**12` (or 0) is refused at load, naming the file, line and
    field, before anything is planned or allocated."""
    from harness.errors import BadInput
    from harness.runbook.load import load_runbook
    rb = tmp_path_factory.mktemp("rb") / "rb.yaml"
    rb.write_text(runbook_text().replace("launches: 1}", f"launches: {launches}}}"))
    with pytest.raises(BadInput) as err:
        load_runbook(rb)
    assert "launches" in str(err.value) and "rb.yaml" in str(err.value)
