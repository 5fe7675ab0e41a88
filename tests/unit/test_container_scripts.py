"""Container batch scripts (pyxis, apptainer, none): shellcheck clean, accepted by the CI
Slurm's `sbatch --test-only`, the container flags where they belong; and the capture that
writes redacted rank<R>.log by global rank."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.api.backend import LaunchSpec
from harness.launch import slurm as S
from harness.launch.capture import Capture
from harness.launch.container import container_facts, container_launch, image_digest
from harness.runbook.model import ContainerConfig, SlurmConfig

ENGINES = {
    "none": ContainerConfig(),
    "pyxis": ContainerConfig(engine="pyxis", image="/lustre/c/megatron b200.sqsh",
                             mounts=("/lustre/fsw:/lustre/fsw", "/data:/data:ro"),
                             workdir="/workspace"),
    "apptainer": ContainerConfig(engine="apptainer", image="/lustre/c/megatron.sif",
                                 mounts=("/lustre/fsw:/lustre/fsw",), workdir="/workspace"),
}


class FakeRunbook:
    def __init__(self, container: ContainerConfig, gpus: int = 0):
        self.slurm = SlurmConfig(gpus_per_node=gpus, nodes=1)
        self.container, self.campaign, self.path = container, "camp", Path("rb.yaml")


def torchrun_spec() -> LaunchSpec:
    return LaunchSpec(argv=["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node",
                            "8", "/m/pretrain_gpt.py", "--hf-token", "hf_" + "a" * 30],
                      env={"NCCL_DEBUG": "WARN"}, ntasks=1, nodes=1, gpus_per_node=8)


def script(tmp_path: Path, engine: str, gpus: int = 8) -> str:
    launcher = S.SlurmLauncher(FakeRunbook(ENGINES[engine], gpus))
    spec = torchrun_spec() if gpus else LaunchSpec(argv=["python", "-c", "print(1)"], ntasks=2)
    return launcher.write_script(f"M__echo__measure__cap2p00__a1{engine}", spec,
                                 tmp_path / engine, 60.0).read_text()


def test_pyxis_flags_on_the_ranks_srun_only(tmp_path):
    text = script(tmp_path, "pyxis")
    ranks = next(ln for ln in text.splitlines() if "--label" in ln)
    assert "'--container-image=/lustre/c/megatron b200.sqsh'" in ranks
    assert "--container-mounts=/lustre/fsw:/lustre/fsw,/data:/data:ro" in ranks
    assert "--container-workdir=/workspace" in ranks
    health = next(ln for ln in text.splitlines() if "harness.health" in ln)
    assert "container" not in health                       # the probe runs on the host
    assert "#SBATCH --container" not in text               # sbatch without pyxis accepts it
    assert "| " in ranks and "harness.launch.capture" in ranks and "--ranks-per-task 8" in ranks


def test_apptainer_exec_prefix(tmp_path):
    ranks = next(ln for ln in script(tmp_path, "apptainer").splitlines() if "--label" in ln)
    assert ("apptainer exec --nv --bind /lustre/fsw:/lustre/fsw --pwd /workspace "
            "/lustre/c/megatron.sif bash -c") in ranks


def test_no_container_runs_on_host(tmp_path):
    ranks = next(ln for ln in script(tmp_path, "none", gpus=0).splitlines() if "--label" in ln)
    assert "--container" not in ranks and "apptainer" not in ranks
    assert "--ranks-per-task 1" in ranks


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck not installed (scripts/ci-slurm.sh installs it)")
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_scripts_pass_shellcheck(tmp_path, engine):
    path = tmp_path / f"{engine}.sbatch"
    path.write_text(script(tmp_path, engine, gpus=0 if engine == "none" else 8))
    proc = subprocess.run(["shellcheck", "-s", "bash", str(path)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout


def test_shellcheck_is_not_vacuous(tmp_path):
    """The guard: an unquoted expansion in a script is caught."""
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/bash\nrm -rf $1/x\n")
    assert subprocess.run(["shellcheck", str(bad)], capture_output=True,
                          check=False).returncode != 0


@pytest.mark.slurm
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_sbatch_test_only_accepts(tmp_path, engine):
    ok, why = S.slurm_available()
    if not ok:
        pytest.skip(f"no Slurm: {why}")
    path = tmp_path / f"{engine}.sbatch"
    path.write_text(script(tmp_path, engine, gpus=0))
    proc = subprocess.run(["sbatch", "--test-only", str(path)], capture_output=True,
                          text=True, check=False, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0 and "to start at" in proc.stderr, proc.stderr


def test_image_digest(tmp_path):
    img = tmp_path / "x.sqsh"
    img.write_bytes(b"abc")
    assert image_digest(str(img)) == ("sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9c"
                                      "b410ff61f20015ad")
    assert image_digest("nvcr.io/nvidia/pytorch@sha256:" + "f" * 64) == "sha256:" + "f" * 64
    assert image_digest("nvcr.io#nvidia/pytorch:25.01-py3").startswith("unresolved")
    facts = container_facts(ContainerConfig(engine="pyxis", image=str(img)))
    assert facts["container.digest"].startswith("sha256:ba7816bf")
    assert container_launch(ContainerConfig(), 8).srun_options == ()


# ---- capture: redaction and the split by global rank -----------------------------------------

SECRET = "s3cr3t-VALUE-1234567"


def capture(tmp_path: Path, lines: list[bytes], ranks_per_task: int) -> bytes:
    cap, out = Capture(tmp_path, ranks_per_task, [SECRET]), io.BytesIO()
    for raw in lines:
        cap.line(raw, out)
    cap.close()
    return out.getvalue()


def test_capture_splits_torchrun_by_global_rank(tmp_path):
    lines = [f"{n}: [rank{8 * n + r}]:[MOE_DROP_DEBUG][dispatch] iter=0 rank={8 * n + r}\n"
             .encode() for n in range(2) for r in range(8)]
    lines += [b"0: agent line without rank\n", b"srun: error: task 1 exited\n"]
    out = capture(tmp_path, lines, 8)
    assert sorted(p.name for p in tmp_path.glob("rank*.log")) == sorted(
        f"rank{r}.log" for r in range(16))
    assert (tmp_path / "rank13.log").read_bytes() == \
        b"[rank13]:[MOE_DROP_DEBUG][dispatch] iter=0 rank=13\n"
    assert (tmp_path / "node0.log").read_bytes() == b"agent line without rank\n"
    assert not (tmp_path / "node1.log").exists()           # every line of node 1 had a rank
    assert out == b"srun: error: task 1 exited\n"


def test_capture_one_rank_per_task(tmp_path):
    capture(tmp_path, [b"0: a\n", b"1: b\n", b" 2: c"], 1)
    assert [(tmp_path / f"rank{r}.log").read_bytes() for r in range(3)] == [b"a\n", b"b\n", b"c"]
    assert not list(tmp_path.glob("node*.log"))


def test_capture_redacts_before_writing(tmp_path):
    token = "hf_" + "Q" * 30
    capture(tmp_path, [f"0: [rank0]: --hf-token {token} value {SECRET} API_KEY=abcdefghij\n"
                       .encode()], 8)
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert token.encode() not in data and SECRET.encode() not in data
    assert b"abcdefghij" not in data and b"REDACTED" in data


def test_capture_without_redaction_would_leak(tmp_path, monkeypatch):
    """The guard: with the redaction pass disabled the token reaches the file."""
    monkeypatch.setattr(Capture, "redact", lambda self, line: line)
    capture(tmp_path, [f"0: {SECRET}\n".encode()], 1)
    assert SECRET.encode() in (tmp_path / "rank0.log").read_bytes()


def test_secret_argv_is_referenced_not_written(tmp_path):
    text = script(tmp_path, "pyxis")
    assert "hf_" + "a" * 30 not in text
    assert '--hf-token "${EPCAP_HIDDEN_ARG_8}"' in text
    assert S.hidden_values(torchrun_spec()) == {"EPCAP_HIDDEN_ARG_8": "hf_" + "a" * 30}


# generated input: every line lands in exactly one place, and no secret anywhere
LINE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
               max_size=40)


@settings(max_examples=150, deadline=None)
@given(items=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 3)),
                                st.one_of(st.none(), st.integers(0, 31)), LINE, st.booleans()),
                      max_size=25),
       per_task=st.sampled_from([1, 8]))
def test_capture_conserves_lines_and_hides_secrets(tmp_path_factory, items, per_task):
    folder = tmp_path_factory.mktemp("cap")
    lines = []
    for task, rank, text, secret in items:
        body = (f"[rank{rank}]:" if rank is not None else "") + text \
            + (f" {SECRET}" if secret else "")
        lines.append(((f"{task}: " if task is not None else "") + body + "\n").encode())
    out = capture(folder, lines, per_task)
    written = out + b"".join(p.read_bytes() for p in folder.iterdir())
    assert SECRET.encode() not in written
    assert written.count(b"\n") == len(lines)
