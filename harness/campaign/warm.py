"""Fork servers started before the driver is imported: for a plain `epcap run` of a new
campaign on the local launcher, the servers' imports (torch, megatron-core: seconds of
CPU) begin as soon as the runbook is read, beside the driver's own start-up (about 0.5 s
of module imports), instead of after it at the first canary (issue 44's overhead). The
local launcher the run makes adopts them (harness.launch.local.prestart); the command
releases what it did not adopt (`release_prestarted`).

Deliberately light: it imports the runbook loader, the backend registry and the local
launcher, never the driver (harness.campaign.cli), so the servers start first."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.api.backend import RunRequest
from harness.api.registry import load_backend
from harness.grid import capacity as cap
from harness.launch.local import prestart
from harness.results.layout import Cell, canary_model, cell_dir
from harness.runbook.load import default_runbook, load_runbook
from harness.vocab import Purpose

LOCAL = "local"
DRIVER = "harness.campaign.cli"      # the module whose import the servers overlap


def prestart_servers(runbook: str | None, results: str | None, launcher: str | None) -> bool:
    """Start the fork server of every backend's canary when `epcap run` will run a new
    campaign locally (its directory under `results` does not exist yet); whether it did.
    Nothing for a resumed or finished campaign (the driver warms what it still runs) or
    another launcher (no fork server). A runbook that fails to load or a backend
    that cannot build its command is left to the run, which says why. The caller calls
    `release_prestarted()` when the command ends. Nothing either when the driver is
    imported already (an in-process caller: no import left to overlap)."""
    if DRIVER in sys.modules:
        return False
    try:
        rb = load_runbook(runbook or default_runbook())
        root = Path(results or "results") / rb.campaign
        if (launcher or rb.launcher) != LOCAL or root.exists():
            return False
        model, capacity = canary_model(rb), cap.format_capacity(rb.capacity.measure)
        specs = []
        for b in rb.backends:
            cell = Cell(rb.campaign, model, b.name, Purpose.CANARY, capacity, 1)
            specs.append(load_backend(rb.backend(b.name)).command(
                RunRequest.for_cell(rb, cell, cell_dir(root, cell))))
    except Exception:           # noqa: BLE001 - a head start only: the run itself says what is wrong
        return False
    prestart(specs)
    return True
