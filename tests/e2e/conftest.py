"""Fixtures shared by the end-to-end modules that need the CI Slurm."""

from __future__ import annotations

import os

import pytest
from slurm_jobs import submit_failure_jobs

from harness.launch import slurm as S


def require_slurm() -> None:
    """Skip (or fail, under EPCAP_REQUIRE_SLURM=1: .ci/run started Slurm) when no Slurm
    answers."""
    ok, why = S.slurm_available()
    if ok:
        return
    if os.environ.get("EPCAP_REQUIRE_SLURM") == "1":
        pytest.fail(f"EPCAP_REQUIRE_SLURM=1 but Slurm does not answer: {why}")
    pytest.skip(f"no Slurm answers here ({why}); start one with "
                "`sudo bash scripts/ci-slurm.sh start`")


@pytest.fixture(scope="module")
def slurm_up():
    """A module that needs Slurm says `pytest.mark.usefixtures("slurm_up")`."""
    require_slurm()


@pytest.fixture(scope="session")
def failure_jobs(tmp_path_factory):
    """test_slurm.py's failing jobs, submitted once a session: (handles, owners)."""
    require_slurm()
    handles, owners = submit_failure_jobs(tmp_path_factory.mktemp("slurm-fail"))
    yield handles, owners
    for key, h in handles.items():
        owners[key].cancel(h)


@pytest.fixture(autouse=True)
def failure_jobs_submitted_early(request):
    """At the session's first Slurm test, when the session will classify the failing jobs
    and Slurm answers, submit them: their one-minute time limits then run beside the Slurm
    modules before test_slurm.py (measured: the wait there was 67 s of the suite). Under
    xdist the Slurm modules run in order on one worker (tests/conftest.py), this one."""
    if request.node.get_closest_marker("slurm") is None:
        return
    wanted = any("failure_jobs" in getattr(item, "fixturenames", ())
                 for item in request.session.items)
    if wanted and S.slurm_available()[0]:
        try:
            request.getfixturevalue("failure_jobs")
        except Exception:       # noqa: BLE001 -- cached: said by the tests that use the jobs
            pass
