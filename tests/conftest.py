"""Shared test setup: keep child processes single-threaded on small CI machines."""

from __future__ import annotations

import os

import docrun
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def readme_first_session(tmp_path_factory):
    """README's first session run once, as written, in a fresh sandbox: (its example, the
    finished bash, the sandbox). The doc test checks it; the default-campaign tests read the
    campaign it ran (results/local-cpu), so the suite runs the default campaign once."""
    example = docrun.first_session()
    box = docrun.sandbox(tmp_path_factory.mktemp("readme"))
    return example, docrun.run_shell(example[3], box), box
