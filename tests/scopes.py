"""The suite's xdist scopes (tests/conftest.py's scheduler): a module's tests run on one worker
(its module fixtures made once); every module that marks tests `slurm` is one scope, run in
order (one CI Slurm node of 16 declared CPUs, and test_slurm.py's failing jobs submitted at
the first Slurm test); README's first session (the default campaign) is one scope, shared by
its two users."""

from __future__ import annotations

import functools
from pathlib import Path

README_SCOPE = ("tests/e2e/test_default_campaign.py", "tests/unit/test_doc_examples.py")


@functools.cache
def uses_slurm(module: Path) -> bool:
    """A module that marks tests `slurm` puts jobs on the CI Slurm node."""
    return "pytest.mark.slurm" in module.read_text(encoding="utf-8")


def scope_of(nodeid: str, root: Path) -> str:
    """The scope of a test by its node id (all the scheduler sees): readme, slurm or its
    module."""
    module = nodeid.split("::", 1)[0]
    if module in README_SCOPE:
        return "readme"
    return "slurm" if uses_slurm(root / module) else module
