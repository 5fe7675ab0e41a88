"""The one-way plugin layer: import-linter contracts (pyproject.toml) hold, and they cover
every harness module a backend may not import (a new module cannot slip past them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
# What a backend may import from the harness: the contract and the pure helpers.
BACKEND_MAY_IMPORT = {"harness", "harness.backend_api", "harness.errors", "harness.capacity",
                      "harness.telemetry", "harness.vocab", "harness._scan"}


def contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["importlinter"]["contracts"]


def test_import_linter_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(contracts())} kept, 0 broken." in done.stdout


def test_backend_contract_forbids_every_other_harness_module():
    forbidden = next(c for c in contracts() if c["source_modules"] == ["backends"]
                     and c.get("allow_indirect_imports"))["forbidden_modules"]
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts[:2])
               for p in (ROOT / "harness").rglob("*.py")}
    modules = {m.removesuffix(".__init__") for m in modules}
    assert modules - BACKEND_MAY_IMPORT == set(forbidden)
