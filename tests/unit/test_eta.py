"""The ETA estimator: per backend, per model size, per purpose; not the first cell only."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from harness.campaign.progress import EtaEstimator, ProgressView, fmt_s, purpose_class

SIZES = {"small": 1.0, "mid": 2.0, "big": 4.0}


def test_no_data_no_number():
    est = EtaEstimator(SIZES)
    assert est.predict("a", "small", "measure") is None
    assert est.eta([("a", "small", "measure")]) is None
    assert fmt_s(None).startswith("unknown")


def test_backends_differ_and_are_learned_separately():
    """A first-cell-only estimator would predict 2 s for backend b: this one says ~6 s."""
    est = EtaEstimator(SIZES)
    for _ in range(3):
        est.add("a", "small", "measure", 2.0)
        est.add("b", "small", "measure", 6.0)
    assert est.predict("a", "small", "measure") == pytest.approx(2.0, rel=0.15)
    assert est.predict("b", "small", "measure") == pytest.approx(6.0, rel=0.15)
    # an unseen model of the same size class inherits each backend's own level
    assert est.predict("b", "other", "measure") > 2 * est.predict("a", "other", "measure")


def test_model_size_extrapolates_to_an_unseen_model():
    """Durations grow with size: the unseen big model is predicted longer than mid."""
    est = EtaEstimator(SIZES)
    for _ in range(2):
        est.add("a", "small", "measure", 2.0)
        est.add("a", "mid", "measure", 4.0)
    big = est.predict("a", "big", "measure")
    assert big == pytest.approx(8.0, rel=0.25)


def test_purpose_classes():
    assert purpose_class("measure") == purpose_class("validate") == "select"
    est = EtaEstimator(SIZES)
    for _ in range(3):
        est.add("a", "small", "measure", 2.0)
        est.add("a", "small", "time", 8.0)
    assert est.predict("a", "small", "validate") == pytest.approx(2.0, rel=0.2)
    assert est.predict("a", "small", "time") == pytest.approx(8.0, rel=0.2)


def test_eta_sums_and_divides_by_parallel():
    est = EtaEstimator(SIZES)
    for _ in range(4):
        est.add("a", "small", "measure", 3.0)
    left = [("a", "small", "measure")] * 4
    assert est.eta(left) == pytest.approx(12.0, rel=0.05)
    assert est.eta(left, parallel=2) == pytest.approx(6.0, rel=0.05)


def test_fmt_s():
    assert fmt_s(12.34) == "12.3 s" and fmt_s(125) == "2 min 05 s" and fmt_s(3720) == "1 h 02 min"


def test_view_without_tty_prints_lines_only():
    out = io.StringIO()
    view = ProgressView(stream=out)
    view.start(0, 3)
    view.update(1, 3, "measure", 1, 2, 5.0, "cell")
    view.line("banner")
    view.stop()
    assert out.getvalue() == "banner\n"


def test_unmeasured_purpose_scales_with_its_iterations():
    """canary (1 iter) 2 s, select (4 iters) 4 s: time (16 iters) predicted 8 s, not 4 s."""
    est = EtaEstimator(SIZES, {"canary": 1, "select": 4, "time": 16})
    for _ in range(3):
        est.add("a", "small", "canary", 2.0)
        est.add("a", "small", "measure", 4.0)
    assert est.predict("a", "small", "time") == pytest.approx(8.0, rel=0.2)
    assert EtaEstimator(SIZES).predict("a", "small", "time") is None


# -- the first line: what earlier campaigns of the same work measured ---------------------------

REDUCED = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "runbooks" / "reduced.yaml"


def _neighbour(root: Path, name: str, rb, spans: dict[tuple[str, str, str], float]) -> None:
    """A finished campaign directory `root/name` of runbook `rb` with these run spans."""
    from harness.campaign import store
    from harness.results.events import CampaignStart, CellFinish, CellSubmit, EventLog, RunStart
    (root / name).mkdir(parents=True)
    log = EventLog(root / name / "events.jsonl")
    log.write(CampaignStart(campaign=rb.campaign, result_fields=store.result_fields(rb)))
    log.write(RunStart())
    for i, ((model, backend, purpose), span) in enumerate(spans.items()):
        cell = f"{model}__{backend}__{purpose}__cap2p00__a{i + 1}"
        if i == 0:
            log.write(CellSubmit(cell=cell, model=model, backend=backend, purpose=purpose,
                                 attempt=i + 1))
        log.write(CellFinish(cell=cell, model=model, backend=backend, purpose=purpose,
                             attempt=i + 1, status="ok", span_s=span))


def test_history_of_the_same_work_gives_the_first_line_a_figure(tmp_path):
    """A campaign with nothing run yet estimates from a neighbour that ran the same work;
    a neighbour with another shape or another model definition teaches nothing."""
    import dataclasses

    from harness.campaign import store
    from harness.campaign.driver import Campaign
    from harness.launch.local import LocalLauncher
    from harness.pipeline.decisions import Context
    from harness.runbook.load import load_runbook
    rb = load_runbook(REDUCED)
    spans = {("QWEN3_30B", "echo", "measure"): 4.0, ("QWEN3_30B", "echo", "time"): 6.0,
             ("DEEPSEEK_V2_LITE", "ultraep", "validate"): 5.0}
    root = tmp_path / "res"
    other_shape = dataclasses.replace(rb, shape=dataclasses.replace(rb.shape, seq=256))
    _neighbour(root, "reduced-9", other_shape, {k: 100.0 for k in spans})
    camp_dir = root / "reduced"
    assert store.history(camp_dir, rb).runs == ()   # another shape: no history, no figure
    camp = Campaign(rb, camp_dir, LocalLauncher(), Context(rb, (), None), ProgressView(), [])
    assert camp.estimator.history == {}             # the first line is the cost model's
    assert camp.estimator.source() == "cost model (no run measured yet)"
    _neighbour(root, "reduced-2", rb, spans)
    past = store.history(camp_dir, rb)
    assert sorted(r[4] for r in past.runs) == sorted(spans.values()) and past.startup_s >= 0
    camp = Campaign(rb, camp_dir, LocalLauncher(), Context(rb, (), None), ProgressView(), [])
    left = camp.runs_left()
    eta = camp.eta(left)
    assert eta is not None and 4.0 * len(left) * 0.5 < eta < 6.0 * len(left) * 1.5
    # a model whose definition changed keeps the others' history but not its own
    edited = dataclasses.replace(rb, models=(dataclasses.replace(rb.models[0], hidden=64),
                                             *rb.models[1:]))
    assert {r[1] for r in store.history(camp_dir, edited).runs} == {"DEEPSEEK_V2_LITE"}


def test_eta_error_rates_this_invocation_only(tmp_path):
    """A resumed invocation is rated on its own banner estimate, not the first one's."""
    from harness.results.events import eta_error, eta_error_at
    events = [{"ev": "campaign_start", "t": 0.0}, {"ev": "run_start", "t": 0.0, "eta_s": 300},
              {"ev": "cell_finish", "t": 10.0, "eta_s": 290}, {"ev": "checkpoint", "t": 20.0},
              {"ev": "run_start", "t": 1000.0, "eta_s": 40.0},
              {"ev": "cell_finish", "t": 1010.0, "eta_s": 30.0},
              {"ev": "cell_finish", "t": 1020.0, "eta_s": 20.0},
              {"ev": "cell_finish", "t": 1030.0, "eta_s": 10.0},
              {"ev": "cell_finish", "t": 1040.0, "eta_s": 0.0},
              {"ev": "stage_done", "t": 1040.0, "runs_complete": True}]
    assert eta_error(events) == 1.0             # said 40 s at 1000; 40 s it took
    assert eta_error_at(events) == {"25%": 1.0, "50%": 1.0, "75%": 1.0}


def test_closing_words(tmp_path):
    """`stopped after STAGE` under --until, `1 run`, no Python reprs in the closing lines."""
    from harness.campaign.cli import plural, print_summary
    from harness.results.events import EventLog, RunStart, StageDone
    log = EventLog(tmp_path / "events.jsonl")
    log.write(RunStart())
    log.append("cell_finish", cell="c1", status="does_not_fit", wall_s=1.0, eta_s=None)
    log.write(StageDone(stage="measure"))
    out = io.StringIO()
    print_summary(tmp_path, ProgressView(stream=out), 1.0, stopped_after="measure")
    text = out.getvalue()
    assert text.startswith("stopped after measure: 1 run;") and "done" not in text
    assert "failures by class: does_not_fit 1" in text and "at 25/50/75% n/a/n/a/n/a" in text
    assert "{" not in text and "None" not in text
    assert plural(1, "run") == "1 run" and plural(0, "run") == "0 runs"


def test_history_predicts_itself_scaled_by_the_load_now():
    """The same work measured before predicts each run; this campaign's runs twice as slow
    as their history make the rest predicted twice as slow (the drift), bounded."""
    est = EtaEstimator(SIZES)
    for attempt, seconds in ((1, 2.0), (2, 1.0), (3, 1.0)):
        est.add_history("a", "small", "time", seconds, attempt)
        est.add_history("a", "mid", "time", seconds * 3, attempt)
    assert est.predict("a", "small", "time", 1) == pytest.approx(2.0)
    assert est.eta([("a", "small", "time", 1), ("a", "mid", "time", 2)]) == pytest.approx(5.0)
    est.add("a", "small", "time", 4.0, 1)
    est.add("a", "small", "time", 2.0, 2)
    assert est.drift() == pytest.approx(2.0)
    assert est.predict("a", "mid", "time", 3) == pytest.approx(6.0)
    for _ in range(100):
        est.add("a", "small", "time", 100.0, 3)
    assert est.drift() == 4.0                     # bounded: a stall is not the new normal


def test_a_resume_takes_the_load_now_not_the_interrupted_invocations():
    """The interrupted invocation ran at twice its history's durations (a loaded machine);
    the resume starts from the history's level and learns its own load from its own runs."""
    est = EtaEstimator(SIZES)
    for i in range(1, 6):
        est.add_history("a", "small", "time", 1.0, i)
    for i in range(1, 3):
        est.add("a", "small", "time", 2.0, i)           # the interrupted invocation
    assert est.predict("a", "small", "time", 5) == pytest.approx(2.0)
    est.begin_invocation()                               # the resume
    assert est.predict("a", "small", "time", 5) == pytest.approx(1.0)
    est.add("a", "small", "time", 1.1, 3)                # its first run: start-up, not load
    est.add("a", "small", "time", 1.2, 4)
    assert est.predict("a", "small", "time", 5) == pytest.approx(1.2)


def test_an_invocations_first_run_is_not_load():
    """The first run pays the fork server's imports (6x its warm history): the drift stays 1
    until a second run says what the load is."""
    est = EtaEstimator(SIZES)
    for i in range(1, 4):
        est.add_history("a", "small", "time", 1.0, i)
    est.begin_invocation()
    est.add("a", "small", "time", 6.0, 1)
    assert est.drift() == 1.0
    est.add("a", "small", "time", 1.5, 2)
    assert est.drift() == pytest.approx(1.5)


def test_the_driver_begins_an_invocation_after_replaying_its_events(tmp_path, monkeypatch):
    """Campaign() indexes the earlier invocations' runs, then begins its own."""
    from harness.campaign import driver
    calls = []
    real = EtaEstimator.begin_invocation
    monkeypatch.setattr(EtaEstimator, "begin_invocation",
                        lambda self: calls.append(len(self.obs)) or real(self))
    from harness.launch.local import LocalLauncher
    from harness.pipeline.decisions import Context
    from harness.runbook.load import load_runbook
    rb = load_runbook(REDUCED)
    _neighbour(tmp_path, "c", rb, {("QWEN3_30B", "echo", "measure"): 4.0,
                                   ("QWEN3_30B", "echo", "time"): 6.0})
    camp = driver.Campaign(rb, tmp_path / "c", LocalLauncher(), Context(rb, (), None),
                           ProgressView(), [])
    assert calls == [2] and camp.estimator.drift() == 1.0


def test_the_drift_of_one_purpose_class_is_not_carried_to_another():
    """Measure runs 1.3x their history do not make the timed launches 1.3x: a class not yet
    run this invocation is predicted at its history's level, then at its own drift."""
    est = EtaEstimator(SIZES)
    for i in range(1, 4):
        est.add_history("a", "small", "measure", 2.0, i)
        est.add_history("a", "small", "time", 1.0, i)
    est.begin_invocation()
    for i in range(1, 4):
        est.add("a", "small", "measure", 2.6, i)         # the first is start-up, not load
    assert est.drift("measure") == pytest.approx(1.3)
    assert est.drift("validate") == pytest.approx(1.3)   # one class: select
    assert est.predict("a", "small", "time", 2) == pytest.approx(1.0)
    est.add("a", "small", "time", 0.8, 1)
    assert est.predict("a", "small", "time", 2) == pytest.approx(0.8)
    assert est.predict("a", "small", "measure", 2) == pytest.approx(2.6)


def test_the_cost_model_is_the_prior_and_the_canaries_replace_its_scale():
    """A first campaign (no history): every run is its cost-model prior; once runs of a
    purpose are measured their measured/prior ratio scales it, and an unmeasured purpose
    takes its nearest measured purpose's (time <- validate <- measure <- canary)."""
    from harness.campaign.estimate import CostModel, machine_kind
    from harness.campaign.progress import EtaEstimator, model_size
    from harness.campaign.store import iterations_per_purpose
    from harness.runbook.load import load_runbook
    rb = load_runbook(REDUCED.parents[3] / "runbooks" / "local-cpu.yaml")
    assert machine_kind(rb) == "cpu"
    cost = CostModel.of(rb, load=1.0)      # an idle machine: the rate as calibrated
    est = EtaEstimator({m.name: model_size(m) for m in rb.models}, iterations_per_purpose(rb),
                       cost.prior)
    m = rb.models[0].name
    prior = {p: cost.prior("echo", m, p) for p in ("canary", "measure", "validate", "time")}
    assert prior["canary"] < prior["measure"] == prior["validate"] <= prior["time"] * 1.5
    assert est.predict("echo", m, "time") == pytest.approx(prior["time"])
    assert est.source() == "cost model (no run measured yet)"
    for _ in range(3):
        est.add("echo", m, "canary", 2.0 * prior["canary"])
    assert est.predict("ultraep", m, "time") == pytest.approx(2.0 * prior["time"])
    est.add("echo", m, "validate", 1.5 * prior["validate"])
    assert est.predict("ultraep", m, "time") == pytest.approx(1.5 * prior["time"])
    assert est.predict("ultraep", m, "canary") == pytest.approx(2.0 * prior["canary"])
    assert est.source() == "cost model scaled by 4 measured runs"


def test_history_dir_elsewhere_teaches_the_estimate(tmp_path):
    """`--history DIR`: a campaign of the same work under another results root (or named as a
    campaign directory itself) is learnt from as a neighbour would be, and the dry run says
    so in its estimate's source."""
    from click.testing import CliRunner

    from harness.campaign import store
    from harness.cli import main
    from harness.runbook.load import load_runbook
    rb = load_runbook(REDUCED)
    spans = {("QWEN3_30B", "echo", "measure"): 4.0, ("QWEN3_30B", "echo", "time"): 6.0}
    other = tmp_path / "elsewhere"
    _neighbour(other, "reduced-7", rb, spans)
    mine = tmp_path / "mine" / "reduced"
    assert store.history(mine, rb).runs == ()
    for root in (other, other / "reduced-7"):
        past = store.history(mine, rb, (root,))
        assert sorted(r[4] for r in past.runs) == [4.0, 6.0] and past.campaigns == 1
    out = CliRunner().invoke(main, ["run", str(REDUCED), "--dry-run", "--results",
                                    str(tmp_path / "mine"), "--history", str(other)])
    assert out.exit_code == 0, out.output
    assert "from the history of 1 earlier campaign(s) of the same work under" in out.output
    bad = CliRunner().invoke(main, ["run", str(REDUCED), "--dry-run", "--history",
                                    str(tmp_path / "nowhere")])
    assert bad.exit_code == 2 and "--history" in bad.output


def test_megatron_core_is_a_cpu_machine_only_when_told_device_cpu():
    """The cpu cost model applies to megatron-core only with `device: cpu` (auto may take a
    GPU). Catches a machine kind that calls a megatron-core runbook cpu whatever its device."""
    import dataclasses

    from harness.campaign.estimate import machine_kind
    from harness.runbook.load import load_runbook
    rb = load_runbook(REDUCED.parents[3] / "runbooks" / "local-cpu.yaml")
    mc = next(b for b in rb.backends if b.kind == "megatron-core")
    auto = dataclasses.replace(mc, options=dataclasses.replace(mc.options, device="auto"))
    other = tuple(auto if b is mc else b for b in rb.backends)
    assert machine_kind(rb) == "cpu"
    assert machine_kind(dataclasses.replace(rb, backends=other)) is None
