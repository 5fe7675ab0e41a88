"""The driver hands the launcher the commands of the canaries still to run before the first
one starts (Campaign.warm_launcher), so the local launcher's fork servers import side by side;
a canary whose result stands (replayed) is not warmed, a backend outside --backend neither."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.api.backend import RunRequest
from harness.campaign.driver import Campaign
from harness.campaign.progress import ProgressView
from harness.grid.capacity import format_capacity
from harness.launch.local import LocalLauncher
from harness.pipeline.decisions import Context
from harness.results.layout import Cell, canary_model, cell_dir
from harness.runbook.load import load_runbook
from harness.vocab import Purpose

REDUCED = Path(__file__).resolve().parents[1] / "fixtures" / "runbooks" / "reduced.yaml"
RB = load_runbook(REDUCED)
NAMES = [b.name for b in RB.backends]


class Recorder(LocalLauncher):
    """The local launcher, recording what it is asked to warm and starting nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.warmed: list[list[str]] = []

    def warm(self, specs) -> None:
        self.warmed.append([s.argv for s in specs])


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(done=st.sets(st.sampled_from(NAMES)), statuses=st.data(),
       only=st.one_of(st.none(), st.sets(st.sampled_from(NAMES), min_size=1)))
def test_the_canaries_still_to_run_are_warmed(tmp_path_factory, done, statuses, only):
    root = tmp_path_factory.mktemp("warm")
    model = canary_model(RB)
    events = [{"ev": "campaign_start", "t": 0.0, "campaign": RB.campaign},
              {"ev": "run_start", "t": 0.0}]
    stood = set()
    for i, name in enumerate(sorted(done)):
        status = statuses.draw(st.sampled_from(["ok", "does_not_fit", "infra"]))
        stood |= {name} if status != "infra" else set()     # an infra failure reruns
        events.append({"ev": "cell_finish", "t": 1.0 + i, "campaign": RB.campaign,
                       "cell": f"{model}__{name}__canary__cap2p00__a1", "model": model,
                       "backend": name, "purpose": "canary", "capacity": "2.00",
                       "attempt": 1, "status": status, "wall_s": 1.0, "span_s": 1.0})
    (root / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    launcher = Recorder()
    ctx = Context(RB, (), None) if only is None else Context(RB, (), None, backends=only)
    camp = Campaign(RB, root, launcher, ctx, ProgressView(), [])
    camp.warm_launcher(model)
    assert camp.cursor == {}, "warming only looks: the replay is the canaries' own"
    (argvs,) = launcher.warmed
    expected = [n for n in NAMES if n not in stood and (only is None or n in only)]
    assert argvs == [command(camp, root, model, n) for n in expected]
    assert not list(root.glob("cells/*")), "warming writes no cell"


def command(camp: Campaign, root: Path, model: str, name: str) -> list[str]:
    """The argv of `name`'s first canary, as launch() would build it."""
    cell = Cell(RB.campaign, model, name, Purpose.CANARY,
                format_capacity(RB.capacity.measure), 1)
    return camp.backend(name).command(RunRequest.for_cell(RB, cell, cell_dir(root, cell))).argv


def test_the_preflight_warms_before_its_first_canary(tmp_path):
    """run_canaries asks for the warming (here every canary stands: nothing to warm, nothing
    launched); a stage that is replayed only (not run) warms nothing."""
    model = canary_model(RB)
    events = [{"ev": "campaign_start", "t": 0.0, "campaign": RB.campaign},
              {"ev": "run_start", "t": 0.0}]
    events += [{"ev": "cell_finish", "t": 1.0, "campaign": RB.campaign,
                "cell": f"{model}__{n}__canary__cap2p00__a1", "model": model, "backend": n,
                "purpose": "canary", "capacity": "2.00", "attempt": 1, "status": "ok",
                "wall_s": 1.0, "span_s": 1.0} for n in NAMES]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    launcher = Recorder()
    camp = Campaign(RB, tmp_path, launcher, Context(RB, (), None), ProgressView(), [])
    camp.run_canaries()
    assert launcher.warmed == [[]]
    assert not (tmp_path / "cells").exists(), "a standing canary was run again"
    assert camp.cursor == {(model, n, "canary"): 1 for n in NAMES}   # each replayed once
