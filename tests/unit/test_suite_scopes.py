"""The xdist scopes (tests/scopes.py) hold what they say: every test pytest collects as
`slurm` is in the Slurm scope (its module found by the text the scheduler reads, not by the
marker), and the modules that use readme_first_session share one scope. Catches a module
that marks tests slurm some other way (under `make test` its jobs would share the Slurm node
with the Slurm scope's) and a new user of README's session that would run it again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import scopes

ROOT = Path(__file__).resolve().parents[2]


def test_every_slurm_test_is_in_the_slurm_scope():
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slurm",
                          "-p", "no:cacheprovider", "tests"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300).stdout
    marked = [line for line in out.splitlines() if "::" in line]
    assert marked, out[-2000:]
    assert {n: scopes.scope_of(n, ROOT) for n in marked} == dict.fromkeys(marked, "slurm")


def test_the_readme_sessions_users_share_a_scope():
    users = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
             if p != Path(__file__) and "readme_first_session" in p.read_text(encoding="utf-8")}
    assert users == set(scopes.README_SCOPE)
    assert {scopes.scope_of(f"{u}::test_x", ROOT) for u in users} == {"readme"}


def test_any_other_module_is_its_own_scope():
    assert scopes.scope_of("tests/unit/test_capacity.py::test_x[1-2]", ROOT) == \
        "tests/unit/test_capacity.py"
    assert scopes.scope_of("tests/e2e/test_slurm.py::test_cancel_and_cancel_all", ROOT) == \
        "slurm"
