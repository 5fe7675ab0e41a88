"""The one-way layering: the import-linter contracts (pyproject.toml) hold, every harness
module sits in a layer (a new room cannot slip past them), and a backend may import only the
contract and the core."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
# What a backend may import from the harness: the contract and the core (docs/architecture.md).
BACKEND_MAY_IMPORT = ("harness.api.backend", "harness.api.launcher", "harness.runbook.model",
                      "harness.results.layout", "harness.vocab", "harness.errors",
                      "harness.grid", "harness.timing", "harness.telemetry", "harness.loadmodel",
                      "harness.io")


def contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["importlinter"]["contracts"]


def harness_modules() -> set[str]:
    mods = {".".join(p.relative_to(ROOT).with_suffix("").parts)
            for p in (ROOT / "harness").rglob("*.py")}
    return {m.removesuffix(".__init__") for m in mods} - {"harness"}


def covered(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_import_linter_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(contracts())} kept, 0 broken." in done.stdout


def test_every_harness_module_sits_in_one_layer():
    layers = next(c for c in contracts() if c["type"] == "layers")["layers"]
    rooms = [r.strip() for line in layers for r in line.split("|")]
    loose = {m for m in harness_modules()
             if not covered(m, rooms) and m not in ("harness.runbook",)}
    assert not loose, f"modules in no layer of the layers contract: {sorted(loose)}"
    twice = {m for m in harness_modules() if sum(covered(m, [r]) for r in rooms) > 1}
    assert not twice, sorted(twice)


def test_backend_contract_forbids_every_other_harness_module():
    forbidden = next(c for c in contracts() if c.get("source_modules") == ["backends"])
    forbidden = forbidden["forbidden_modules"]
    for module in harness_modules():
        allowed = covered(module, BACKEND_MAY_IMPORT) or module in ("harness.api",
                                                                    "harness.results",
                                                                    "harness.runbook")
        assert allowed != covered(module, forbidden), (
            f"{module}: {'allowed yet forbidden' if allowed else 'neither allowed nor forbidden'}")
