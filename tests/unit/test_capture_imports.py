"""The rank capture is a new interpreter for every rank of every local run (4 per run, about
190 runs in the curves runbook): what it imports is its start-up cost. It starts as the local
launcher starts it (`python -S -m harness.launch.capture`, harness/ on PYTHONPATH) and must
not pull in the launcher registry, the error types or typing/pathlib (22 + 8 ms of a 50 ms
start, measured with `-X importtime`, 6 Dec 2026). Seen red: with harness/launch/__init__.py
importing the registry at the top, harness.api.registry, harness.errors and typing load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("harness.api.registry", "harness.errors", "harness.runbook", "typing", "pathlib",
         "numpy", "torch", "yaml")


def loaded_by_capture(tmp_path: Path) -> set[str]:
    """The modules a capture started as the local launcher starts it has loaded once it has
    copied its input to the end."""
    probe = ("import runpy, sys, json, atexit\n"
             "atexit.register(lambda: sys.__stderr__.write(json.dumps(sorted(sys.modules))))\n"
             "sys.argv = ['capture', sys.argv[1], '--rank', '0']\n"
             "runpy.run_module('harness.launch.capture', run_name='__main__')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-S", "-c", probe, str(tmp_path)], env=env,
                          input=b"one line\n", capture_output=True, timeout=60, cwd=ROOT)
    assert (tmp_path / "rank0.log").read_bytes() == b"one line\n", proc.stderr
    return set(json.loads(proc.stderr.decode().strip().splitlines()[-1]))


def test_the_capture_loads_no_heavy_module(tmp_path):
    loaded = loaded_by_capture(tmp_path)
    assert "harness.io.redact" in loaded            # it did run the capture
    assert not [m for m in loaded if m in HEAVY or m.startswith(tuple(h + "." for h in HEAVY))]


@pytest.mark.parametrize("heavy", ["harness.errors", "typing"])
def test_the_check_sees_a_heavy_import(tmp_path, heavy):
    """The probe itself: a module imported by the capture's package shows in its list."""
    pkg = tmp_path / "shadow"            # harness/ as it is, but launch/__init__.py
    (pkg / "harness" / "launch").mkdir(parents=True)
    for src in (ROOT / "harness").iterdir():
        if src.name not in ("launch", "__pycache__"):
            (pkg / "harness" / src.name).symlink_to(src)
    for src in (ROOT / "harness" / "launch").iterdir():
        if src.name not in ("__init__.py", "__pycache__"):
            (pkg / "harness" / "launch" / src.name).symlink_to(src)
    (pkg / "harness" / "launch" / "__init__.py").write_text(f"import {heavy}\n")
    probe = ("import runpy, sys, json\n"
             "runpy.run_module('harness.launch.capture', run_name='x')\n"
             "print(json.dumps(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-S", "-c", probe],
                          env={**os.environ, "PYTHONPATH": str(pkg)}, capture_output=True,
                          timeout=60, cwd=pkg)
    assert heavy in json.loads(proc.stdout.decode().strip().splitlines()[-1]), proc.stderr
