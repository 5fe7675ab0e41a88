"""Fixtures shared by the end-to-end modules that need the CI Slurm."""

from __future__ import annotations

import os

import pytest

from harness.launch import slurm as S


@pytest.fixture(scope="module")
def slurm_up():
    """Skip (or fail, under EPCAP_REQUIRE_SLURM=1: .ci/run started Slurm) when no Slurm
    answers; a module that needs it says `pytest.mark.usefixtures("slurm_up")`."""
    ok, why = S.slurm_available()
    if ok:
        return
    if os.environ.get("EPCAP_REQUIRE_SLURM") == "1":
        pytest.fail(f"EPCAP_REQUIRE_SLURM=1 but Slurm does not answer: {why}")
    pytest.skip(f"no Slurm answers here ({why}); start one with "
                "`sudo bash scripts/ci-slurm.sh start`")
