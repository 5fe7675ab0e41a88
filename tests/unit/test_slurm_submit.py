"""sbatch submission without Slurm: transient failures retried with backoff, permanent ones
refused with the cluster's own message and the runbook field; `--test-only` once per shape.

The failure texts are Slurm's (SchedMD/slurm @284c3b95 src/common/slurm_errno.c,
src/sbatch/sbatch.c), as harness/launch/slurm.py records them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.api.backend import LaunchSpec
from harness.launch import slurm as S
from harness.runbook.model import SlurmConfig

FAIL = "sbatch: error: Batch job submission failed: "


def fake_sbatch(tmp_path: Path, answers: list[tuple[int, str]]) -> Path:
    """An `sbatch` on PATH that gives these (exit, stderr) answers in turn, then job 4242;
    each call appends its argv to calls.txt."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for i, (code, err) in enumerate(answers):
        (bin_dir / f"answer{i}").write_text(f"{code}\n{err}\n")
    (bin_dir / "sbatch").write_text(
        "#!/bin/bash\n"
        f'calls="{tmp_path}/calls.txt"; echo "$*" >> "$calls"\n'
        f'n=$(($(wc -l < "$calls") - 1)); f="{bin_dir}/answer$n"\n'
        'if [ -f "$f" ]; then code=$(head -n 1 "$f"); tail -n +2 "$f" >&2; exit "$code"; fi\n'
        'case "$*" in *--test-only*) echo "sbatch: Job 4242 to start at now" >&2 ;; '
        '*) echo 4242 ;; esac\n')
    (bin_dir / "sbatch").chmod(0o755)
    return bin_dir


@pytest.fixture
def path_with(monkeypatch):
    def put(bin_dir: Path) -> None:
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return put


class Rb:
    def __init__(self, **slurm):
        self.campaign, self.slurm, self.path = "camp", SlurmConfig(**slurm), Path("rb.yaml")


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls.txt").read_text().splitlines()


@pytest.mark.parametrize("transient", ["Socket timed out on send/recv operation",
                                       "Slurm temporarily unable to accept job, sleeping and "
                                       "retrying", "Unable to contact slurm controller "
                                       "(connect failure)"])
def test_a_transient_failure_is_retried_and_the_job_submitted(tmp_path, path_with, transient):
    path_with(fake_sbatch(tmp_path, [(1, FAIL + transient)]))
    launcher = S.SlurmLauncher(Rb())
    heard, slept = [], []
    launcher.say, launcher.sleep = heard.append, slept.append    # the backoff, no wait
    handle = launcher.submit("c", LaunchSpec(argv=["true"], ntasks=1), tmp_path / "c", 60)
    assert handle.job_id == "4242" and len(calls(tmp_path)) == 2
    assert slept == [S.SUBMIT_BACKOFF_S[0]] and transient.split(",")[0] in heard[0]


@pytest.mark.parametrize("message, field", [
    ("Invalid partition name specified", "slurm.partition"),
    ("Invalid account or account/partition combination specified", "slurm.account"),
    ("Invalid qos specification", "slurm.extra_sbatch"),
    ("Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)",
     "slurm")])
def test_a_permanent_refusal_stops_at_once_with_the_clusters_message(tmp_path, path_with,
                                                                      message, field):
    path_with(fake_sbatch(tmp_path, [(1, FAIL + message)]))
    with pytest.raises(S.SubmitRefused) as err:
        S.SlurmLauncher(Rb()).submit("c", LaunchSpec(argv=["true"], ntasks=1),
                                     tmp_path / "c", 60)
    assert message in str(err.value) and err.value.field == field
    assert str(err.value).startswith("rb.yaml: ") and err.value.exit_code == 2
    assert len(calls(tmp_path)) == 1                            # never retried


def test_retries_are_bounded(tmp_path, path_with):
    busy = (1, FAIL + "Socket timed out on send/recv operation")
    path_with(fake_sbatch(tmp_path, [busy] * 20))
    with pytest.raises(S.SubmitRefused) as err:
        S.sbatch_retrying(["sbatch", "x"], sleep=lambda s: None)
    assert f"after {len(S.SUBMIT_BACKOFF_S)} retries" in str(err.value)
    assert len(calls(tmp_path)) == len(S.SUBMIT_BACKOFF_S) + 1


def test_a_timed_out_reply_that_submitted_the_job_is_not_submitted_twice(tmp_path, path_with):
    path_with(fake_sbatch(tmp_path, [(1, FAIL + "Socket timed out on send/recv operation")]))
    proc = S.sbatch_retrying(["sbatch", "x"], sleep=lambda s: None, submitted=lambda: "77")
    assert proc.stdout.strip() == "77" and len(calls(tmp_path)) == 1


def test_test_only_once_per_resource_shape(tmp_path, path_with):
    path_with(fake_sbatch(tmp_path, []))
    launcher = S.SlurmLauncher(Rb(partition="gpu"))
    cells = [(f"c{i}", LaunchSpec(argv=["true"], ntasks=n), tmp_path / f"c{i}")
             for i, n in enumerate((1, 1, 2))]
    said = launcher.check_submission(cells)
    assert len(calls(tmp_path)) == 2 and all("--test-only" in c for c in calls(tmp_path))
    assert len(said) == 2 and "to start at" in said[0]


def test_test_only_refusal_names_the_field(tmp_path, path_with):
    path_with(fake_sbatch(tmp_path, [(1, FAIL + "Invalid partition name specified")]))
    with pytest.raises(S.SubmitRefused) as err:
        S.SlurmLauncher(Rb(partition="nope")).check_submission(
            [("c", LaunchSpec(argv=["true"], ntasks=1), tmp_path / "c")])
    assert err.value.field == "slurm.partition" and "Invalid partition name" in str(err.value)
    assert err.value.line is None                      # rb.yaml is not there: file and field


@pytest.mark.parametrize("text, line", [
    ("campaign: c\nslurm:\n  nodes: 1\n  partition: nope\n", 4),
    ("campaign: c\n\nslurm: {nodes: 1, partition: nope}\n", 3),
    ("campaign: c\nslurm:\n  nodes: 1\n", 2),          # not written: its parent's line
])
def test_a_refusal_names_the_runbook_line_of_its_field(tmp_path, path_with, text, line):
    path_with(fake_sbatch(tmp_path, [(1, FAIL + "Invalid partition name specified")]))
    rb = Rb(partition="nope")
    rb.path = tmp_path / "rb.yaml"
    rb.path.write_text(text)
    with pytest.raises(S.SubmitRefused) as err:
        S.SlurmLauncher(rb).check_submission(
            [("c", LaunchSpec(argv=["true"], ntasks=1), tmp_path / "c")])
    assert err.value.line == line
    assert str(err.value).startswith(f"{rb.path}:{line}: slurm.partition: sbatch refused ")


# ---- containers: mounts and the plugin ------------------------------------------------------

def test_a_results_root_outside_every_mount_is_refused(tmp_path):
    from harness.campaign.preflight import check_container_mounts
    from harness.errors import BadInput
    from harness.launch.container import mount_covers
    from harness.runbook.model import ContainerConfig

    class Book:
        path = Path("rb.yaml")
        container = ContainerConfig(engine="pyxis", image="i.sqsh", mounts=("/lustre:/lustre",))

    with pytest.raises(BadInput) as err:
        check_container_mounts(Book(), tmp_path / "results")
    assert err.value.field == "container.mounts" and str(tmp_path) in str(err.value)
    Book.container = ContainerConfig(engine="pyxis", image="i", mounts=(f"{tmp_path}:{tmp_path}",))
    check_container_mounts(Book(), tmp_path / "results")          # covered: no error
    from pathlib import PurePosixPath as P
    assert mount_covers("/a:/a:ro", P("/a/b")) and not mount_covers("/a:/b", P("/b/c"))
    assert not mount_covers("/lustre:/lustre", P("/lustre2/x"))


def test_doctor_fails_without_the_gpus_or_the_plugin_a_runbook_needs(monkeypatch, capsys):
    from harness import health
    from harness.campaign.preflight import node_requirements
    from harness.runbook.load import load_runbook

    def no_gpu(indices=None):
        raise health.NoGpu("no GPU on this node")
    monkeypatch.setattr(health, "read_gpus", no_gpu)
    monkeypatch.setenv("PATH", "/nonexistent")                      # no srun: no pyxis
    gpus, problems = node_requirements(load_runbook(Path(__file__).resolve().parents[2]
                                                    / "runbooks" / "tierb-b200-gbs8.yaml"))
    assert gpus == 8 and problems and "pyxis" in problems[0]
    assert health.cli_doctor(as_json=True) == 0                     # a CPU node, asked nothing
    assert health.cli_doctor(as_json=True, require_gpus=gpus, problems=tuple(problems)) == 1
    out = capsys.readouterr().out.splitlines()[-1]
    assert "8 GPU(s) required, none visible" in out and "pyxis" in out


# ---- epcap run's exit status ----------------------------------------------------------------

class View:
    def __init__(self):
        self.lines = []

    def line(self, text):
        self.lines.append(text)


def finish(cell: str, status: str, purpose: str = "measure") -> dict:
    model, backend = cell.split("__")[:2]
    return {"ev": "cell_finish", "t": 1.0, "cell": cell, "model": model, "backend": backend,
            "purpose": purpose, "status": status, "attempt": 1}


@pytest.mark.parametrize("statuses, code", [
    (["ok", "lower_bound", "drops", "does_not_fit"], 0),     # does_not_fit is data
    (["ok", "timeout"], 1), (["ok", "cancelled"], 1), (["crash"], 1)])
def test_run_exits_1_when_a_cell_failed(tmp_path, statuses, code):
    from harness.campaign.cli import exit_status
    lines = [finish(f"M{i}__echo__measure__cap2p00__a1", s) for i, s in enumerate(statuses)]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    view = View()
    assert exit_status(tmp_path, view) == code
    if code:
        assert "failed" in view.lines[-1] and statuses[-1] in view.lines[-1]


def test_slurm_clients_go_through_the_tool_boundary(tmp_path, path_with):
    """A missing client and one that does not answer are SlurmError naming it; output that
    is not UTF-8 is decoded with replacements (io.boundary.tools), never a traceback."""
    with pytest.raises(S.SlurmError, match="no-such-sacct not found"):
        S.run_cmd(["no-such-sacct"])
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sacct").write_text("#!/bin/sh\nprintf '12|COMPLETED\\377\\n'\n")
    (bindir / "squeue").write_text("#!/bin/sh\nsleep 5\n")
    for name in ("sacct", "squeue"):
        (bindir / name).chmod(0o755)
    path_with(bindir)
    proc = S.run_cmd(["sacct", "-j", "12"])
    assert proc.returncode == 0 and proc.stdout.startswith("12|COMPLETED")
    with pytest.raises(S.SlurmError, match="squeue did not answer within 0.5 s"):
        S.run_cmd(["squeue"], timeout=0.5)


# ---- submit limits: the queue is full for now, not the job wrong ---------------------------

POLICY = "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"


def limit_refusal(word: str) -> tuple[int, str]:
    """sbatch's stderr for a submit limit: slurmctld's err_msg (the limit's reason word)
    logged first, then the policy error (src/common/slurm_protocol_pack.c
    _unpack_return_code2_msg; src/slurmctld/job_mgr.c _job_create; @284c3b95)."""
    return 1, f"sbatch: error: {word}\n{FAIL}{POLICY}"


@pytest.mark.parametrize("word", S.SUBMIT_LIMITS)
def test_a_submit_limit_is_waited_on_and_the_job_submitted(tmp_path, path_with, word):
    """Catches a QOS/association submit limit treated as permanent (the campaign ended with
    exit 2 although the limit clears as the user's other jobs end), and a wait with no
    message."""
    path_with(fake_sbatch(tmp_path, [limit_refusal(word)] * 8))
    launcher = S.SlurmLauncher(Rb())
    heard, slept = [], []
    launcher.say, launcher.sleep = heard.append, slept.append
    handle = launcher.submit("c", LaunchSpec(argv=["true"], ntasks=1), tmp_path / "c", 60)
    assert handle.job_id == "4242" and len(calls(tmp_path)) == 9
    # past the backoff it keeps asking at its last step (limits.max_pending_s 0: forever)
    assert slept == [*S.SUBMIT_BACKOFF_S, S.SUBMIT_BACKOFF_S[-1], S.SUBMIT_BACKOFF_S[-1]]
    assert len(heard) == 8 and all(word in line for line in heard)
    assert "until it clears (limits.max_pending_s 0)" in heard[0]


def test_a_submit_limit_is_waited_on_no_longer_than_max_pending_s(tmp_path, path_with):
    """Catches an unbounded wait where the runbook bounds it: with max_pending_s 10 the
    waits are 2 + 5 s (a third, 10 s more, would pass 10), then the refusal names the limit
    and the runbook field."""
    path_with(fake_sbatch(tmp_path, [limit_refusal("AssocMaxSubmitJobLimit")] * 20))
    rb = Rb()
    rb.limits = type("L", (), {"max_pending_s": 10.0})()
    launcher = S.SlurmLauncher(rb)
    slept = []
    launcher.say, launcher.sleep = (lambda line: None), slept.append
    with pytest.raises(S.SubmitLimit) as err:
        launcher.submit("c", LaunchSpec(argv=["true"], ntasks=1), tmp_path / "c", 60)
    assert slept == [2.0, 5.0] and len(calls(tmp_path)) == 3
    assert err.value.field == "limits.max_pending_s" and err.value.exit_code == 2
    assert "AssocMaxSubmitJobLimit did not clear in 7 s" in str(err.value)


def test_the_policy_message_alone_stays_permanent(tmp_path, path_with):
    """Catches every accounting-policy refusal made a wait: without a submit-limit word the
    same message also means a size or time limit the job can never meet."""
    path_with(fake_sbatch(tmp_path, [(1, FAIL + POLICY)] * 3))
    with pytest.raises(S.SubmitRefused) as err:
        S.sbatch_retrying(["sbatch", "x"], sleep=lambda s: None, limit_wait_s=0)
    assert not isinstance(err.value, S.SubmitLimit) and len(calls(tmp_path)) == 1


def test_a_word_inside_another_is_no_submit_limit():
    """Catches a substring match (a partition or account named after a limit word)."""
    assert S.submit_limit("Invalid account xAssocMaxSubmitJobLimitx") is None
    assert S.submit_limit("sbatch: error: QOSGrpSubmitJobsLimit\n") == "QOSGrpSubmitJobsLimit"


def test_test_only_reports_a_submit_limit_and_goes_on(tmp_path, path_with):
    """Catches a dry run stopped (or made to wait) by a queue that is full right now."""
    path_with(fake_sbatch(tmp_path, [limit_refusal("QOSMaxSubmitJobPerUserLimit")]))
    said = S.SlurmLauncher(Rb()).check_submission(
        [("c", LaunchSpec(argv=["true"], ntasks=1), tmp_path / "c")])
    assert len(calls(tmp_path)) == 1 and "QOSMaxSubmitJobPerUserLimit" in said[0]
    assert "a run waits for it" in said[0]
