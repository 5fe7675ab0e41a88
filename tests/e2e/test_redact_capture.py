"""Redaction at capture (docs/spec.md: provenance, secrets): a token planted in a flag the
backend rejects, in the environment and in a file name never reaches a file under the results
directory or a printed line, though the cell really ran and failed on that flag."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "runbooks" / "models.yaml"
FLAG_TOKEN = "hf_" + "F1ag" * 8                   # in a flag the reference worker rejects
ENV_TOKEN = "env-secret-" + "E" * 16              # in HF_TOKEN (a secret-named variable)
NAME_TOKEN = "hf_" + "N4me" * 8                   # in the runbook's file name

RUNBOOK = f"""campaign: leak
models_file: {ZOO}
models:
  - {{name: QWEN3_30B, layers: 2, hidden: 32, expert_ffn: 16}}
shape: {{seq: 128, micro_batch: 1, global_batch: 2, ep: 2}}
backends:
  - {{name: echo, kind: reference, module: echo, flags: ["--no-such-flag={FLAG_TOKEN}"],
     options: {{launch: single}}}}
capacity: {{measure: "2.00"}}
measure: {{warmup: 0, iters: 2}}
timing: {{warmup: 1, iters: 2, trials: 2}}
limits: {{run_timeout_s: 60, infra_retries: 0}}
"""


@pytest.mark.slow
def test_planted_tokens_reach_no_file_and_no_printed_line(tmp_path):
    runbook = tmp_path / f"rb-{NAME_TOKEN}.yaml"
    runbook.write_text(RUNBOOK)
    results = tmp_path / "results"
    env = {**os.environ, "HF_TOKEN": ENV_TOKEN, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(runbook),
                           "--results", str(results), "--until", "preflight"],
                          cwd=ROOT, env=env, capture_output=True, timeout=300, check=False)
    # rank<R>.log and node<T>.log: a task that starts its own ranks (launch: single) and
    # rejects the flag before starting them says so in its node log
    logs = sorted(results.glob("leak/cells/*/*.log"))
    assert logs, proc.stdout.decode() + proc.stderr.decode()        # the cell ran ...
    text = b"".join(p.read_bytes() for p in logs)
    assert b"no-such-flag" in text and b"REDACTED" in text          # ... and failed on the flag
    files = [p for p in results.rglob("*") if p.is_file()]
    assert len(files) > 5
    for token in (FLAG_TOKEN, ENV_TOKEN, NAME_TOKEN):
        leaks = [str(p) for p in files if token.encode() in p.read_bytes()]
        assert leaks == [], (token, leaks)
        assert token.encode() not in proc.stdout + proc.stderr, token
