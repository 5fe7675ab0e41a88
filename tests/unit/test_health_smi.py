"""The GPU probe's nvidia-smi fallback (a fake nvidia-smi on PATH, no nvidia-ml-py), and the
preflight refusal of a GPU runbook on a machine with no probe at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import health
from harness.campaign.preflight import check_gpu_probe
from harness.errors import BadInput
from harness.runbook.load import load_runbook

ROOT = Path(__file__).resolve().parents[2]

EIGHT = "\n".join(f"{i}, NVIDIA B200, GPU-{i}, 3, 0, 0, 570.86" for i in range(8))


def fake_smi(folder: Path, gpus: str, apps: str = "", rc: int = 0) -> Path:
    """An `nvidia-smi` that answers --query-gpu with `gpus` and --query-compute-apps with `apps`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gpus.csv").write_text(gpus + "\n")
    (folder / "apps.csv").write_text(apps + ("\n" if apps else ""))
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\n"
                      f"case \"$1\" in --query-gpu=*) cat '{folder}/gpus.csv';;\n"
                      f"  --query-compute-apps=*) cat '{folder}/apps.csv';; esac\n"
                      f"exit {rc}\n")
    script.chmod(0o755)
    return folder


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)


def on_path(monkeypatch, folder: Path) -> None:
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}/usr/bin:/bin")


def test_fallback_reads_eight_gpus(tmp_path, monkeypatch, no_nvml):
    on_path(monkeypatch, fake_smi(tmp_path / "bin", EIGHT))
    report = health.probe(require_gpus=8)
    assert report.ok and report.status == "ok" and report.source == "nvidia-smi"
    assert report.driver == "570.86" and len(report.gpus) == 8


def test_fallback_finds_busy_and_ecc(tmp_path, monkeypatch, no_nvml):
    gpus = ("0, NVIDIA B200, GPU-0, 3, [N/A], [Not Supported], 570.86\n"
            "1, NVIDIA B200, GPU-1, 40000, 0, 2, 570.86")
    on_path(monkeypatch, fake_smi(tmp_path / "bin", gpus, apps="GPU-1, 4242"))
    report = health.probe()
    assert report.failures == [
        "gpu1 (GPU-1): idle: 1 compute process(es) running (pids 4242)",
        "gpu1 (GPU-1): idle: 40000 MiB memory used (threshold 1024 MiB)",
        "gpu1 (GPU-1): ecc: 2 uncorrected aggregate ECC error(s)"]
    assert report.gpus[0]["ecc_volatile_uncorrected"] is None


def test_fallback_honours_job_indices(tmp_path, monkeypatch, no_nvml):
    gpus = ("0, B200, GPU-0, 3, 0, 0, 570\n1, B200, GPU-1, 3, 0, 0, 570")
    on_path(monkeypatch, fake_smi(tmp_path / "bin", gpus, apps="GPU-0, 9"))
    assert health.probe(indices=[1]).ok
    assert not health.probe(indices=[0]).ok


@pytest.mark.parametrize("gpus, rc", [("", 0), ("garbage", 0), (EIGHT, 9)])
def test_broken_smi_is_no_gpu_naming_both(tmp_path, monkeypatch, no_nvml, gpus, rc):
    on_path(monkeypatch, fake_smi(tmp_path / "bin", gpus, rc=rc))
    report = health.probe(require_gpus=8)
    assert not report.ok and "nvidia-ml-py" in report.reason and "nvidia-smi" in report.reason


def test_pre_cell_on_a_node_without_the_extra_passes(tmp_path):
    """The issue's first-day failure: `--pre-cell --require-gpus 8` in a Python without
    nvidia-ml-py said 'none visible'; with nvidia-smi on PATH it now sees the 8 GPUs."""
    pytest.importorskip("harness")
    env = {**os.environ, "PATH": f"{fake_smi(tmp_path / 'bin', EIGHT)}{os.pathsep}/usr/bin:/bin",
           "PYTHONPATH": str(ROOT), "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7"}
    code = "import sys; sys.modules['pynvml'] = None; from harness.health import main; " \
           "sys.exit(main(['--pre-cell', '--require-gpus', '8']))"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "ok (8 GPU(s))" in proc.stdout


def test_without_the_fallback_the_check_fails(tmp_path, monkeypatch, no_nvml):
    """The guard: with read_smi disabled the same node is 'none visible' -- what the test above
    rejects."""
    on_path(monkeypatch, fake_smi(tmp_path / "bin", EIGHT))

    def gone(indices=None):
        raise health.NoGpu("disabled")
    monkeypatch.setattr(health, "read_smi", gone)
    report = health.probe(require_gpus=8)
    assert not report.ok and report.failures == ["driver: 8 GPU(s) required, none visible"]


def gpu_runbook(tmp_path: Path) -> Path:
    text = (ROOT / "runbooks" / "tierb-b200-gbs8.yaml").read_text()
    path = tmp_path / "tierb.yaml"
    path.write_text(text)
    (tmp_path / "models.yaml").write_text((ROOT / "runbooks" / "models.yaml").read_text())
    return path


def test_preflight_refuses_gpu_runbook_without_any_probe(tmp_path):
    rb = load_runbook(gpu_runbook(tmp_path))
    with pytest.raises(BadInput) as err:
        check_gpu_probe(rb, "slurm", tools=[])
    text = str(err.value)
    assert "8 GPU(s)" in text and "make cluster" in text and "nvidia-smi" in text
    assert err.value.field == "slurm.gpus_per_node" and err.value.exit_code == 2
    check_gpu_probe(rb, "slurm", tools=["nvidia-smi"])         # a probe: no error
    check_gpu_probe(rb, "local", tools=[])                     # no GPUs asked for locally


def test_preflight_with_no_probe_on_path(tmp_path, monkeypatch, no_nvml):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert health.probe_tools() == []
    with pytest.raises(BadInput):
        check_gpu_probe(load_runbook(gpu_runbook(tmp_path)), "slurm")
    on_path(monkeypatch, fake_smi(tmp_path / "bin", EIGHT))
    assert health.probe_tools() == ["nvidia-smi"]


def test_container_with_the_local_launcher_is_refused(tmp_path):
    from harness.campaign.preflight import check_launcher_setup
    rb = load_runbook(gpu_runbook(tmp_path))
    assert rb.container.engine == "pyxis"
    with pytest.raises(BadInput) as err:
        check_launcher_setup(rb, "local")
    assert err.value.field == "container.engine"


CELL = st.one_of(st.sampled_from(["0", "7", "-1", "3.5", "[N/A]", "[Not Supported]", "", "GPU-0",
                                  "NVIDIA B200", "570.86", "99999999999999999999"]),
                 st.text(max_size=8))


@settings(max_examples=200, deadline=None)
@given(gpus=st.lists(st.lists(CELL, min_size=5, max_size=8), max_size=4),
       apps=st.lists(st.lists(CELL, min_size=1, max_size=3), max_size=3))
def test_any_smi_answer_is_readings_or_no_gpu(gpus, apps):
    """Generated nvidia-smi answers: readings or NoGpu, never another exception; a GPU whose
    memory cannot be read is a failed reading, never a silently clean one."""
    answers = {"--query-gpu": gpus, "--query-compute-apps": apps}
    real = health._smi
    health._smi = lambda args: answers[args[0].split("=")[0]]
    try:
        _, readings = health.read_smi()
    except health.NoGpu:
        return
    finally:
        health._smi = real
    for reading in readings:
        report = health.evaluate("x", [reading])
        if reading.error:
            assert not report.ok
