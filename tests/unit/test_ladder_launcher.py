"""An imbalance ladder's steps run on their parent's launcher (docs/ladder.md): the local
launcher's fork servers import torch and megatron-core once for the whole `epcap run`, and
the launcher `epcap run` made is closed (its fork servers reaped) when the command is done."""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from harness.campaign import cli
from harness.launch.local import LocalLauncher

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "runbooks" / "local-cpu-curves.yaml"


class Fake:
    """A launcher that records what `epcap run` did with it."""

    def __init__(self, name: str = "local", shared: bool = True) -> None:
        self.name, self.shared, self.closed = name, shared, 0

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def ran(monkeypatch):
    """Stub the campaign itself and the launcher factory: (launchers made, launchers run)."""
    made, used = [], []

    def make(name, rb):
        made.append(Fake(name))
        return made[-1]

    def run_with(rb, root_dir, launch, *args):
        used.append(launch)
        return 0

    monkeypatch.setattr(cli, "make_launcher", make)
    monkeypatch.setattr(cli, "run_with", run_with)
    return made, used


def test_a_step_runs_on_its_parents_launcher_and_only_the_maker_closes_it(ran, tmp_path):
    """Seen red: with `launch = make_launcher(...)` unconditional (the old code) the step
    made a launcher of its own (made == 1, used[0] is not parent)."""
    made, used = ran
    parent = Fake()
    assert cli.cli_run(str(RUNBOOK), results=str(tmp_path), reuse=parent) == 0
    assert made == [] and used == [parent] and parent.closed == 0


def test_a_launcher_epcap_run_made_is_closed_once_even_when_the_run_raises(ran, tmp_path,
                                                                          monkeypatch):
    """Seen red: without the `finally: launch.close()` the fork servers were never reaped
    (closed == 0)."""
    made, used = ran
    assert cli.cli_run(str(RUNBOOK), results=str(tmp_path)) == 0
    assert len(made) == 1 and used == made and made[0].closed == 1

    def boom(*args):
        raise RuntimeError("stopped")
    monkeypatch.setattr(cli, "run_with", boom)
    with pytest.raises(RuntimeError):
        cli.cli_run(str(RUNBOOK), results=str(tmp_path))
    assert len(made) == 2 and made[1].closed == 1


@pytest.mark.parametrize("other", [Fake(shared=False), Fake(name="slurm")])
def test_a_launcher_not_shared_or_of_another_name_is_not_reused(ran, tmp_path, other):
    """Seen red: reusing whatever was passed ran the step on `other` (used == [other])."""
    made, used = ran
    assert cli.cli_run(str(RUNBOOK), results=str(tmp_path), reuse=other) == 0
    assert len(made) == 1 and used == made and other.closed == 0


def test_local_close_reaps_its_fork_servers(tmp_path):
    """The forked runs' CPU reaches getrusage(RUSAGE_CHILDREN) only once the server is reaped
    (what bench_campaign reads). Seen red: a no-op close left the server running (poll None)."""
    launcher = LocalLauncher()
    assert launcher.shared
    server = launcher._server(["json"])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    time.sleep(0.2)
    launcher.close()
    assert server.proc.poll() is not None and launcher._servers == {}
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert (after.ru_utime + after.ru_stime) > (before.ru_utime + before.ru_stime)
