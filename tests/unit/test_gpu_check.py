"""`make gpu-check` (scripts/gpu_check.py): without a GPU one clear line and exit 2, never a
traceback; a failing step is reported and makes the exit 1, the other steps still run."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
_spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)


@pytest.mark.slow
def test_without_a_gpu_it_says_so_and_exits_2():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith("gpu-check: no GPU here: ")
    assert "Traceback" not in done.stdout + done.stderr
    assert len(done.stdout.strip().splitlines()) == 1


def test_a_failing_step_is_reported_and_the_rest_run(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(gpu_check, "gpu_count", lambda: (1, ""))
    monkeypatch.setattr(gpu_check, "reference_nccl", lambda ranks, p: ran.append(p) or True)

    def boom():
        raise RuntimeError("CUDA error: no kernel image")
    monkeypatch.setattr(gpu_check, "timer_against_perf_counter", boom)
    monkeypatch.setattr(gpu_check, "doctor", lambda: ran.append("doctor") or True)
    monkeypatch.setattr(gpu_check, "memory_model_buffers", lambda: ran.append("mem") or True)
    assert gpu_check.main() == 1
    out = capsys.readouterr().out
    assert "FAILED: RuntimeError: CUDA error: no kernel image" in out
    assert ran == ["alltoall", "deepep", "doctor", "mem"] and "3/4 steps ok" in out
