"""A job's state and pending reason without Slurm: the controller (scontrol) is asked before
the accounting (sacct), a pending job's reason is kept until it leaves the queue, and
`limits.max_pending_s` is read and said. The reason words are Slurm's
(SchedMD/slurm src/common/job_state_reason.c @284c3b95f08a2dc2478499837b03355e1b9c5c75)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import BadInput
from harness.launch import slurm as S
from harness.runbook.load import load_runbook

REASONS = ("Priority", "Resources", "JobHeldAdmin", "JobHeldUser", "PartitionDown",
           "ReqNodeNotAvail,_UnavailableNodes:vm", "QOSMaxSubmitJobPerUserLimit",
           "AssocGrpSubmitJobsLimit", "Dependency", "BeginTime")


def fake_tool(bin_dir: Path, name: str, code: int, out: str) -> None:
    """A Slurm client on PATH that prints `out` and exits `code`."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(f"#!/bin/sh\nprintf '%s\\n' '{out}'\nexit {code}\n")
    (bin_dir / name).chmod(0o755)


def test_a_just_finished_job_is_read_from_scontrol_not_the_lagging_sacct(tmp_path,
                                                                         monkeypatch):
    """Catches sacct asked first: after slurmdbd returns, sacct can still say RUNNING for a
    job the controller knows COMPLETED (seen for 12 s and more); the reading must be the
    controller's."""
    bin_dir = tmp_path / "bin"
    fake_tool(bin_dir, "scontrol", 0, "JobId=9 JobState=COMPLETED Reason=None ExitCode=0:0 "
              "RunTime=00:00:07")
    fake_tool(bin_dir, "sacct", 0, "RUNNING|0:0|00:00:05")
    fake_tool(bin_dir, "squeue", 0, "RUNNING|None")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    reading = S.query_state("9")
    assert (reading.state, reading.source, reading.elapsed) == ("COMPLETED", "scontrol",
                                                               "00:00:07")


def test_a_purged_job_is_read_from_sacct(tmp_path, monkeypatch):
    """Catches a controller-only reading: past MinJobAge scontrol no longer knows the job
    (`Invalid job id specified`), and sacct's record must stand."""
    bin_dir = tmp_path / "bin"
    fake_tool(bin_dir, "scontrol", 1, "slurm_load_jobs error: Invalid job id specified")
    fake_tool(bin_dir, "sacct", 0, "FAILED|3:0|00:01:05")
    fake_tool(bin_dir, "squeue", 1, "slurm_load_jobs error: Invalid job id specified")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    reading = S.query_state("9")
    assert (reading.state, reading.exit_code, reading.source) == ("FAILED", "3:0", "sacct")


class FakeSlurm:
    """Answers of the three Slurm clients by name, for `_try` (no processes)."""

    def __init__(self) -> None:
        self.scontrol: str | None = None
        self.sacct: str | None = None
        self.squeue: str | None = None

    def __call__(self, argv: list[str]) -> str | None:
        return getattr(self, argv[0])


@pytest.fixture
def fake(monkeypatch) -> FakeSlurm:
    slurm = FakeSlurm()
    monkeypatch.setattr(S, "_try", slurm)
    monkeypatch.setattr(S, "MIN_POLL_S", 0.0)
    return slurm


@settings(max_examples=40, deadline=None)
@given(reasons=st.lists(st.sampled_from(REASONS), min_size=1, max_size=5),
       from_scontrol=st.booleans())
def test_the_pending_reason_is_each_polls_and_cleared_once_it_runs(reasons, from_scontrol,
                                                                   tmp_path_factory):
    """Catches a reason never read, read once and kept (a held job released into
    `Priority` must say `Priority`), or kept after the job started (a running job is not
    queued); whether Slurm's answer came from scontrol or, once purged there, from sacct
    and squeue."""
    slurm = FakeSlurm()
    real_try, real_poll = S._try, S.MIN_POLL_S
    S._try, S.MIN_POLL_S = slurm, 0.0
    try:
        launcher = S.SlurmLauncher()
        handle = launcher._handle("cell", tmp_path_factory.mktemp("q"), "77", 1, None)
        for reason in reasons:
            if from_scontrol:
                slurm.scontrol = f"JobId=77 JobState=PENDING Reason={reason} ExitCode=0:0"
            else:
                slurm.sacct, slurm.squeue = "PENDING|0:0|00:00:00", f"PENDING|{reason}"
            assert launcher.poll(handle) is None
            wait = launcher.queue_wait(handle)
            assert wait is not None and wait.reason == reason and wait.pending_s >= 0
        slurm.scontrol = "JobId=77 JobState=RUNNING Reason=None ExitCode=0:0 RunTime=00:00:01"
        slurm.sacct, slurm.squeue = "RUNNING|0:0|00:00:01", "RUNNING|None"
        assert launcher.poll(handle) is None
        assert launcher.queue_wait(handle) is None
    finally:
        S._try, S.MIN_POLL_S = real_try, real_poll


def test_a_pending_job_with_no_reason_says_so(fake, tmp_path):
    """Catches an empty reason printed as `pending: ` (nothing to act on)."""
    fake.scontrol = "JobId=77 JobState=PENDING Reason=None"
    launcher = S.SlurmLauncher()
    handle = launcher._handle("cell", tmp_path, "77", 1, None)
    launcher.poll(handle)
    assert launcher.queue_wait(handle).reason.startswith("unknown")


MINIMAL = """campaign: minimal
models: [QWEN3_30B]
models_file: {models}
shape: {{seq: 128, micro_batch: 1, global_batch: 8, ep: 8}}
backends: [{{name: echo, kind: reference}}]
limits: {{max_pending_s: {value}}}
"""


@pytest.mark.parametrize("value, ok", [(0, True), (30, True), (-1, False)])
def test_max_pending_s_is_read_and_a_negative_one_refused(tmp_path, value, ok):
    """Catches the key ignored (it must reach Limits) or a negative bound accepted."""
    models = Path(__file__).resolve().parents[2] / "runbooks" / "models.yaml"
    path = tmp_path / "r.yaml"
    path.write_text(MINIMAL.format(models=models, value=value))
    if ok:
        assert load_runbook(path).limits.max_pending_s == value
        return
    with pytest.raises(BadInput) as err:
        load_runbook(path)
    assert "limits.max_pending_s" in str(err.value) and f"{path}:6" in str(err.value)


def test_the_dry_run_says_what_a_long_queue_wait_does():
    """Catches the dry run silent about the bound: 0 must read `waited on forever`."""
    from harness.campaign.dryrun import queue_wait_words
    assert "waited on forever" in queue_wait_words(0)
    assert "stops the campaign" in queue_wait_words(600) and "10 min" in queue_wait_words(600)


def test_who_cancelled_a_job_is_sacct_word_once_it_has_it(fake):
    """Catches the uid lost by asking scontrol first (`CANCELLED` has no `by <uid>`), and a
    lagging sacct (still RUNNING) overriding the controller's CANCELLED."""
    fake.scontrol = "JobId=77 JobState=CANCELLED Reason=None ExitCode=0:15 RunTime=00:00:03"
    fake.sacct = "CANCELLED by 1000|0:15|00:00:03"
    reading = S.query_state("77")
    assert (reading.state, reading.source) == ("CANCELLED by 1000", "scontrol")
    fake.sacct = "RUNNING|0:0|00:00:02"
    assert S.query_state("77").state == "CANCELLED"


def test_status_names_the_pending_job_and_what_its_wait_leads_to():
    """Catches a job still shown pending after it left the queue or ended, and a status
    silent about the bound (0 must read `waited on forever`)."""
    from harness.campaign.cli import queued_words
    from harness.campaign.state import queued_now
    evs = [{"ev": "cell_queued", "cell": "A", "job_id": "7", "reason": "Priority", "t": 0,
            "max_pending_s": 0},
           {"ev": "cell_queued", "cell": "B", "job_id": "8", "reason": "JobHeldAdmin", "t": 1,
            "max_pending_s": 600},
           {"ev": "cell_queued", "cell": "C", "job_id": "9", "reason": "Resources", "t": 2},
           {"ev": "cell_queued", "cell": "A", "job_id": "7", "reason": "Resources", "t": 3},
           {"ev": "cell_queued", "cell": "B", "job_id": "8", "reason": None, "t": 4},
           {"ev": "cell_finish", "cell": "C", "t": 5}]
    now = queued_now(evs)
    assert [(q["cell"], q["reason"]) for q in now] == [("A", "Resources")]
    assert "waited on forever" in queued_words(now[0]) and "job 7" in queued_words(now[0])
    bounded = queued_now(evs[:2])[1]
    assert "stops after 10 min 00 s queued" in queued_words(bounded)
