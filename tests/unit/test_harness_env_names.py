"""Names the harness owns are never secrets: every environment variable the harness sets for a
run (a backend's LaunchSpec env, the launchers' rank and marker variables, the batch script's
exports) is shown with its value in the dry run, and the generated scripts set it themselves
(docs/spec.md#provenance)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.api.backend import RunRequest
from harness.api.registry import load_backend
from harness.campaign.dryrun import repro_script
from harness.io.redact import HARNESS_ENV, is_secret_env, redact_text, secret_values
from harness.launch.slurm import SlurmLauncher
from harness.results.layout import Cell, cell_dir
from harness.runbook.load import load_runbook
from harness.vocab import Purpose

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = sorted(p for p in (ROOT / "runbooks").glob("*.yaml") if p.name != "models.yaml")
LAUNCHER_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "EPCAP_CELL_DIR")
EXPORT = re.compile(r"^export ([A-Za-z_][A-Za-z0-9_]*)=", re.M)


def harness_env(runbook: Path, tmp_path: Path) -> dict[str, tuple[str, str, str]]:
    """{name: (value, repro.sh text, slurm.sbatch text)} over every backend and purpose."""
    rb = load_runbook(runbook)
    out: dict[str, tuple[str, str, str]] = {}
    slurm = SlurmLauncher(rb)
    for b in rb.backends:
        backend = load_backend(b)
        for purpose in (Purpose.CANARY, Purpose.MEASURE, Purpose.VALIDATE, Purpose.TIME):
            cell = Cell(rb.campaign, rb.models[0].name, b.name, purpose, rb.capacity.measure, 1)
            cdir = cell_dir(tmp_path, cell)
            spec = backend.command(RunRequest.for_cell(rb, cell, cdir))
            repro = repro_script(cell.name, spec)
            sbatch = slurm.script_text(cell.name, spec, cdir, rb.limits.run_timeout_s)
            names = {*spec.env, *EXPORT.findall(sbatch)}
            for name in names:
                out[name] = (spec.env.get(name, ""), repro, sbatch)
    return out


@pytest.mark.parametrize("runbook", RUNBOOKS, ids=lambda p: p.stem)
def test_no_variable_the_harness_sets_is_redacted(runbook, tmp_path):
    seen = harness_env(runbook, tmp_path)
    assert seen, "no variable collected: the walk itself is broken"
    for name in (*seen, *LAUNCHER_ENV):
        assert not is_secret_env(name), name
    for name, (value, repro, sbatch) in seen.items():
        assert f":?set {name}" not in repro and f"{name}:?" not in sbatch, name
        if value:
            line = f"{name}={value}"
            assert redact_text(line, secret_values({name: value})) == line, name


def test_the_megatron_budget_variable_is_shown_and_set_by_the_scripts(tmp_path):
    """The case that was hidden: EPCAP_BUDGET_TOKENS (a slot count) holds TOKEN."""
    seen = harness_env(ROOT / "runbooks" / "tierb-b200-gbs8.yaml", tmp_path)
    value, repro, sbatch = seen["EPCAP_BUDGET_TOKENS"]
    assert value.isdigit()
    assert f"export EPCAP_BUDGET_TOKENS={value}" in repro
    assert f"export EPCAP_BUDGET_TOKENS={value}" in sbatch


def test_exemption_is_by_exact_name_only():
    """A user's secret under the harness's prefix stays secret; every exempt name is one of
    the harness's."""
    for name in ("EPCAP_HF_TOKEN", "EPCAP_API_KEY", "EPCAP_BUDGET_TOKENS_X", "HF_TOKEN"):
        assert is_secret_env(name), name
    assert all(n.startswith("EPCAP_") for n in HARNESS_ENV)
