"""The capacity frontier's pure parts (docs/frontier.md): the rungs on the grid, the held-out
drop bound at each rung, the runbook key, and the frontier step on a scripted pipeline."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import beta

from harness.errors import BadInput
from harness.grid import capacity as cap
from harness.grid.heldout import risk_columns, rung_risk
from harness.grid.risk import drop_risk_95, drop_risk_upper
from harness.telemetry.steps import StepPeaks

PADS = st.sampled_from([1, 8, 64, 128])
GRIDS = st.sampled_from([None, 2, 3])


@settings(max_examples=60, deadline=None)
@given(n_units=st.integers(1, 64), pad=PADS, sel_units=st.integers(1, 40), k=st.integers(1, 4),
       decimals=GRIDS)
def test_rungs_are_consecutive_executable_grid_capacities(n_units, pad, sel_units, k, decimals):
    """Every rung is executable, budgets strictly rise, rung 0 is the selection as written,
    +i is step_up applied i times, and step_down undoes step_up (no grid rung is skipped)."""
    n = n_units * 16
    try:
        selected = cap.round_up_to_grid(sel_units * pad, n, pad, decimals)
    except BadInput:                         # a legacy grid with no rung near this budget
        return
    rungs = cap.rungs_around(selected, k, n, pad, decimals)
    offsets = [o for o, _ in rungs]
    assert offsets == list(range(offsets[0], k + 1)) and -k <= offsets[0] <= 0
    assert dict(rungs)[0] == selected
    budgets = [cap.budget_tokens(c, n) for _, c in rungs]
    assert budgets == sorted(set(budgets))
    assert all(cap.is_executable(c, n, pad) for _, c in rungs)
    for (_, low), (_, high) in zip(rungs, rungs[1:], strict=False):
        assert cap.step_up(low, n, pad, decimals) == high
        assert cap.budget_tokens(cap.step_down(high, n, pad, decimals), n) == \
            cap.budget_tokens(low, n)
    if offsets[0] > -k:                      # fewer below only when no positive budget is left
        assert cap.step_down(dict(rungs)[offsets[0]], n, pad, decimals) is None


def test_rungs_on_the_exact_grid_step_by_the_pad_multiple():
    rungs = cap.rungs_around("1.125", 2, 1024, 128)
    assert rungs == [(-2, "0.875"), (-1, "1.00"), (0, "1.125"), (1, "1.25"), (2, "1.375")]
    assert [cap.rung_text(o) for o, _ in rungs] == ["-2", "-1", "0", "+1", "+2"]


@settings(max_examples=80, deadline=None)
@given(steps=st.integers(1, 400), data=st.data())
def test_the_bound_is_clopper_pearson_and_rises_with_drops(steps, data):
    dropped = data.draw(st.integers(0, steps))
    bound = drop_risk_upper(dropped, steps)
    assert 0 < bound <= 1
    if dropped == 0:
        assert bound == drop_risk_95(steps)          # the selection's own figure
        assert math.isclose(bound, beta.ppf(0.95, 1, steps), rel_tol=1e-9)
    elif dropped < steps:
        assert math.isclose(bound, beta.ppf(0.95, dropped + 1, steps - dropped), rel_tol=1e-9)
        assert bound > drop_risk_upper(dropped - 1, steps)
    assert bound >= dropped / steps
    assert drop_risk_upper(steps + 1, steps) is None and drop_risk_upper(0, 0) is None


PEAKS = st.lists(st.integers(200, 1200), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(measure=PEAKS, held=PEAKS, budgets=st.lists(st.integers(128, 1536), min_size=2,
                                                      max_size=6, unique=True))
def test_rung_risk_is_monotone_in_budget_and_is_the_selections_at_its_budget(measure, held,
                                                                              budgets):
    m = StepPeaks(tuple(range(len(measure))), tuple(measure), (False,) * len(measure))
    v = StepPeaks(tuple(range(len(held))), tuple(held), (False,) * len(held))
    rows = [rung_risk(b, True, m, v, True) for b in sorted(budgets)]
    for low, high in zip(rows, rows[1:], strict=False):
        assert high["heldout_dropped_steps"] <= low["heldout_dropped_steps"]
        assert float(high["drop_risk_95"]) <= float(low["drop_risk_95"])
        if low["predicted_drop_risk"] is not None:
            assert float(high["predicted_drop_risk"]) <= float(low["predicted_drop_risk"])
            assert float(high["predicted_drop_risk_hi"]) <= float(low["predicted_drop_risk_hi"])
    for b, row in zip(sorted(budgets), rows, strict=True):
        assert row["heldout_dropped_steps"] == sum(p > b for p in held)
        if b >= max(held):                   # the validate run's own budget: equal figures
            sel = risk_columns(b, 7, True, m, v, True)
            assert {k: row[k] for k in ("drop_risk_95", "predicted_drop_risk",
                                        "predicted_drop_risk_hi")} == \
                {k: sel[k] for k in ("drop_risk_95", "predicted_drop_risk",
                                     "predicted_drop_risk_hi")}


def test_rung_risk_states_nothing_without_an_accepted_held_out_validation():
    v = StepPeaks((0, 1), (100, 120), (False, True))
    empty = rung_risk(128, True, None, v, True)
    assert set(empty.values()) == {None}
    assert set(rung_risk(128, True, None, StepPeaks((0,), (100,), (False,)), False).values()) \
        == {None}
    same_routing = rung_risk(128, False, None, StepPeaks((0,), (100,), (False,)), True)
    assert same_routing["drop_risk_95"] is None and same_routing["heldout_steps"] is None


MINIMAL = """campaign: f
models: [{name: QWEN3_30B, layers: 2, hidden: 32, expert_ffn: 16}]
shape: {seq: 128, micro_batch: 1, global_batch: 2, ep: 2}
backends: [{name: echo, kind: reference, module: echo}]
"""


@pytest.mark.parametrize("text, rungs", [("", 0), ("frontier: {}\n", 2),
                                         ("frontier: {rungs: 3}\n", 3)])
def test_the_runbook_key(tmp_path: Path, text: str, rungs: int):
    from harness.runbook.load import load_runbook
    (tmp_path / "models.yaml").write_text(
        (Path(__file__).resolve().parents[2] / "runbooks" / "models.yaml").read_text())
    (tmp_path / "r.yaml").write_text(MINIMAL + text)
    assert load_runbook(tmp_path / "r.yaml").frontier_rungs == rungs


@pytest.mark.parametrize("text", ["frontier: {rungs: 0}\n", "frontier: {rungs: 9}\n",
                                  "frontier: {steps: 2}\n", "frontier: {rungs: two}\n"])
def test_a_bad_frontier_key_is_refused(tmp_path: Path, text: str):
    from harness.runbook.load import load_runbook
    (tmp_path / "models.yaml").write_text(
        (Path(__file__).resolve().parents[2] / "runbooks" / "models.yaml").read_text())
    (tmp_path / "r.yaml").write_text(MINIMAL + text)
    with pytest.raises(BadInput, match="frontier"):
        load_runbook(tmp_path / "r.yaml")


LADDER_BOOK = MINIMAL.replace(
    "models: [{name: QWEN3_30B, layers: 2, hidden: 32, expert_ffn: 16}]",
    "models:\n  - {name: QWEN3_30B, layers: 2, hidden: 32, expert_ffn: 16, routing_sigma: 0.2}\n"
    "  - {name: DEEPSEEK_V2_LITE, layers: 2, first_dense_layers: 1, hidden: 32, expert_ffn: 22,"
    " shared_ffn: 44, dense_ffn: 64}").replace(
    "backends: [{name: echo, kind: reference, module: echo}]",
    "backends:\n  - {name: echo, kind: reference, module: echo}\n"
    "  - {name: ultraep, kind: reference, module: ultraep}\n"
    "  - {name: moonep, kind: reference, module: moonep, select: false}\n"
    "  - {name: mcore-deepep, kind: reference, module: deepep, select: false}") + \
    "frontier: {rungs: 1}\n"


@settings(max_examples=25, deadline=None)
@given(sigmas=st.lists(st.floats(0.01, 3.0, allow_nan=False).map(lambda x: round(x, 3)),
                       min_size=1, max_size=4, unique=True), only=st.booleans(),
       extra=st.none() | st.lists(st.sampled_from(["moonep", "mcore-deepep"]), unique=True))
def test_a_ladder_step_is_the_runbook_at_another_sigma(tmp_path_factory, sigmas, only, extra):
    """Each step's runbook loads, names its own campaign, keeps every setting but the models'
    routing_sigma (set to the step's), the models `ladder.models` leaves out and the backends
    `ladder.backends` leaves out (the select ones always kept), and asks for no ladder or
    frontier of its own."""
    import dataclasses

    import yaml

    from harness.campaign.ladder import step_campaign, step_runbook
    from harness.runbook.load import load_runbook
    tmp = tmp_path_factory.mktemp("ladder")
    (tmp / "models.yaml").write_text(
        (Path(__file__).resolve().parents[2] / "runbooks" / "models.yaml").read_text())
    models = ", models: [DEEPSEEK_V2_LITE]" if only else ""
    arms = None if extra is None else ["ultraep", *extra, "echo"]     # any order
    backends = "" if arms is None else f", backends: [{', '.join(arms)}]"
    (tmp / "r.yaml").write_text(LADDER_BOOK + f"ladder: {{routing_sigma: {sigmas}{models}"
                                f"{backends}}}\n")
    rb = load_runbook(tmp / "r.yaml")
    assert rb.ladder_sigmas == tuple(sigmas)
    assert len(rb.backends) == 4
    for i, sigma in enumerate(sigmas):
        (tmp / f"s{i}").mkdir()
        path = tmp / f"s{i}" / "step.yaml"            # elsewhere: its paths must hold there
        path.write_text(yaml.safe_dump(step_runbook(rb, sigma)))
        step = load_runbook(path)
        assert step.campaign == step_campaign(rb.campaign, sigma) != rb.campaign
        assert not step.ladder_sigmas and not step.frontier_rungs
        kept = [m for m in rb.models if not only or m.name == "DEEPSEEK_V2_LITE"]
        assert [m.name for m in step.models] == [m.name for m in kept]
        assert [dataclasses.replace(m, routing_sigma=sigma) for m in kept] == list(step.models)
        assert (step.seed, step.shape, step.timing, step.capacity) == \
            (rb.seed, rb.shape, rb.timing, rb.capacity)
        assert step.backends == tuple(b for b in rb.backends if arms is None or b.name in arms)


@pytest.mark.parametrize("text", ["ladder: {routing_sigma: []}\n",
                                  "ladder: {routing_sigma: [0.2, 0.2]}\n",
                                  "ladder: {routing_sigma: [-0.1]}\n",
                                  "ladder: {routing_sigma: [0.2], models: [NOPE]}\n",
                                  "ladder: {sigma: [0.2]}\n",
                                  "ladder: {routing_sigma: [0.2], backends: [echo, NOPE]}\n",
                                  "ladder: {routing_sigma: [0.2], backends: [echo, moonep]}\n",
                                  "ladder: {routing_sigma: [0.2], backends: [ultraep]}\n",
                                  "ladder: {routing_sigma: [0.2], backends: [echo, ultraep, "
                                  "echo]}\n"])
def test_a_bad_ladder_key_is_refused(tmp_path: Path, text: str):
    """Each refused naming `ladder` (a step without a select backend could not select its
    own timing capacity)."""
    from harness.runbook.load import load_runbook
    (tmp_path / "models.yaml").write_text(
        (Path(__file__).resolve().parents[2] / "runbooks" / "models.yaml").read_text())
    (tmp_path / "r.yaml").write_text(LADDER_BOOK + text)
    with pytest.raises(BadInput, match="ladder"):
        load_runbook(tmp_path / "r.yaml")
