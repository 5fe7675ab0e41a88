"""Health probe: the pure verdict over fake GPU readings, and NVML reading through a fake."""

from __future__ import annotations

import json
import sys
import types

import pytest

from harness import health
from harness.health import GpuReading, evaluate, gpu_failures, job_gpu_indices


def clean(index: int = 0, **kw) -> GpuReading:
    base = dict(index=index, name="H200", uuid=f"GPU-{index}", memory_used_mib=500.0,
                compute_pids=(), ecc_volatile_uncorrected=0, ecc_aggregate_uncorrected=0)
    base.update(kw)
    return GpuReading(**base)


def test_clean_gpus_are_ok():
    report = evaluate("550.1", [clean(0), clean(1)])
    assert report.ok and report.status == "ok" and report.failures == []
    assert [g["index"] for g in report.gpus] == [0, 1]


def test_busy_gpu_names_gpu_and_check():
    report = evaluate("550.1", [clean(0), clean(1, compute_pids=(4242,))])
    assert not report.ok and report.status == "unhealthy"
    assert report.failures == ["gpu1 (GPU-1): idle: 1 compute process(es) running (pids 4242)"]


@pytest.mark.parametrize("used, ok", [(1023.9, True), (1024.0, False), (5000.0, False)])
def test_memory_threshold_boundary(used, ok):
    report = evaluate("550.1", [clean(3, memory_used_mib=used)], max_used_mib=1024)
    assert report.ok is ok
    if not ok:
        assert report.failures[0].startswith("gpu3 (GPU-3): idle:")
        assert "threshold 1024 MiB" in report.failures[0]


@pytest.mark.parametrize("field, word", [("ecc_volatile_uncorrected", "volatile"),
                                         ("ecc_aggregate_uncorrected", "aggregate")])
def test_uncorrected_ecc_fails(field, word):
    report = evaluate("550.1", [clean(2, **{field: 1})])
    assert not report.ok
    assert report.failures == [f"gpu2 (GPU-2): ecc: 1 uncorrected {word} ECC error(s)"]


def test_ecc_unsupported_is_not_a_failure():
    reading = clean(0, ecc_volatile_uncorrected=None, ecc_aggregate_uncorrected=None)
    assert gpu_failures(reading, 1024) == []


def test_several_failures_on_one_gpu_all_reported():
    reading = clean(5, compute_pids=(1, 2), memory_used_mib=9000, ecc_volatile_uncorrected=3)
    fails = gpu_failures(reading, 1024)
    assert len(fails) == 3 and all(f.startswith("gpu5") for f in fails)


def test_unreadable_gpu_fails():
    report = evaluate("550.1", [clean(0), GpuReading(index=1, error="GPU is lost")])
    assert not report.ok and report.failures == ["gpu1: readable: GPU is lost"]


def test_no_gpu_is_ok_unless_required():
    assert evaluate(None, []).status == "no-gpu" and evaluate(None, []).ok
    required = evaluate(None, [], require_gpus=4)
    assert not required.ok and "4 GPU(s) required" in required.failures[0]


def test_fewer_gpus_than_required_fails():
    assert evaluate("550.1", [clean(0), clean(1)], require_gpus=2).ok
    report = evaluate("550.1", [clean(0)], require_gpus=2)
    assert not report.ok and report.failures == ["driver: 2 GPU(s) required, 1 visible"]


def test_job_gpu_indices():
    assert job_gpu_indices({"SLURM_JOB_GPUS": "0,2"}) == [0, 2]
    assert job_gpu_indices({}) is None
    assert job_gpu_indices({"SLURM_JOB_GPUS": "(null)"}) is None


# ---- NVML through a fake module -----------------------------------------------------------

class FakeNVMLError(Exception):
    pass


def fake_nvml(devices: list[dict], init_error: bool = False) -> types.ModuleType:
    """A pynvml stand-in; each device: used (bytes), pids, vol, agg (None = unsupported)."""
    mod = types.ModuleType("pynvml")
    mod.NVMLError = FakeNVMLError
    mod.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, mod.NVML_VOLATILE_ECC, mod.NVML_AGGREGATE_ECC = 1, 0, 1

    def init():
        if init_error:
            raise FakeNVMLError("Driver Not Loaded")

    def ecc(handle, _kind, counter):
        value = devices[handle]["vol" if counter == 0 else "agg"]
        if value is None:
            raise FakeNVMLError("Not Supported")
        return value

    mod.nvmlInit, mod.nvmlShutdown = init, lambda: None
    mod.nvmlSystemGetDriverVersion = lambda: b"550.54"
    mod.nvmlDeviceGetCount = lambda: len(devices)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetName = lambda h: "NVIDIA H200"
    mod.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=devices[h]["used"])
    mod.nvmlDeviceGetComputeRunningProcesses = lambda h: [
        types.SimpleNamespace(pid=p) for p in devices[h]["pids"]]
    mod.nvmlDeviceGetTotalEccErrors = ecc
    return mod


def dev(used_mib=100, pids=(), vol=0, agg=0) -> dict:
    return {"used": used_mib * 2**20, "pids": pids, "vol": vol, "agg": agg}


def test_probe_without_pynvml_says_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)       # import fails
    report = health.probe()
    assert report.ok and report.status == "no-gpu" and "nvidia-ml-py" in report.reason


def test_probe_driver_not_loaded_says_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([dev()], init_error=True))
    report = health.probe()
    assert report.status == "no-gpu" and "Driver Not Loaded" in report.reason


def test_probe_reads_every_gpu(monkeypatch):
    devices = [dev(), dev(pids=(77,)), dev(vol=None, agg=None), dev(agg=4)]
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(devices))
    report = health.probe()
    assert report.driver == "550.54" and len(report.gpus) == 4
    assert report.failures == ["gpu1 (GPU-1): idle: 1 compute process(es) running (pids 77)",
                               "gpu3 (GPU-3): ecc: 4 uncorrected aggregate ECC error(s)"]
    assert report.gpus[2]["ecc_volatile_uncorrected"] is None


def test_probe_only_job_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([dev(pids=(1,)), dev()]))
    assert health.probe(indices=[1]).ok
    assert not health.probe(indices=[0]).ok


def test_cli_doctor_json_is_one_document(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([dev(), dev(used_mib=4096)]))
    assert health.cli_doctor(as_json=True) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "unhealthy" and doc["ok"] is False
    assert doc["failures"][0].startswith("gpu1 (GPU-1): idle: 4096 MiB")


def test_cli_doctor_table_no_gpu(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert health.cli_doctor(as_json=False) == 0
    assert "no-gpu" in capsys.readouterr().out


def test_cli_doctor_table_lists_failures(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([dev(vol=2)]))
    assert health.cli_doctor(as_json=False) == 1
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "FAIL gpu0 (GPU-0): ecc: 2 uncorrected volatile" in out


def test_pre_cell_fails_naming_gpu_and_check(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([dev(), dev(pids=(9,))]))
    monkeypatch.setenv("SLURM_JOB_GPUS", "0,1")
    assert health.main(["--pre-cell", "--require-gpus", "2"]) == health.PRE_CELL_FAIL_EXIT
    err = capsys.readouterr().err
    assert "[EPCAP_HEALTH] FAIL" in err and "gpu1 (GPU-1): idle" in err


def test_pre_cell_no_gpu_passes_for_cpu_cells(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert health.main(["--pre-cell"]) == 0
    assert "no-gpu" in capsys.readouterr().out
    assert health.main(["--pre-cell", "--require-gpus", "1"]) == health.PRE_CELL_FAIL_EXIT
